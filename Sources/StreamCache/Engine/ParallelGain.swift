/// What a resource's own transfers tell about its path to the origin: whether connections side by
/// side fetch faster than one alone, as with cloud storage that caps each connection, or share one
/// bottleneck (a home link, a single traffic shaper), where an extra connection adds a request and
/// halves the speed of the part a reader waits for without adding a byte per second.
///
/// Fed one sample per finished origin request: the speed of its body after the first chunk (so
/// neither the round trip nor a shaper's initial burst counts), how many of the resource's
/// requests were receiving meanwhile, on average over its time, and what all of them received
/// per second meanwhile. A cap on each connection keeps each one's speed as connections are
/// added; a shared link divides it among them, and all of them together receive no more than one.
///
/// A short read split across connections is one sample of its own: the speed of all its parts
/// together, from the first byte of any to the last byte of all. Its parts are too short to tell
/// anything one by one, and on a shared link they may well arrive one after the other, each as
/// fast as one connection alone.
struct ParallelGain: Sendable {
    /// The bytes of one transfer (a request, or a split read's parts together) as they arrive.
    /// Its speed leaves out the first chunk: bytes within a window of the first ones (a shaper
    /// sends its burst at once, and the socket may hand it over in several reads).
    struct TransferSample: Sendable {
        let firstByteAt: ContinuousClock.Instant
        private(set) var firstChunkBytes: Int64
        private(set) var bytes: Int64
        private(set) var lastByteAt: ContinuousClock.Instant

        init(firstBytes: Int64, at now: ContinuousClock.Instant) {
            firstByteAt = now
            firstChunkBytes = firstBytes
            bytes = firstBytes
            lastByteAt = now
        }

        /// Adds `count` bytes that arrived at `now`; returns whether they count toward its speed
        /// (they came after its first chunk).
        @discardableResult
        mutating func note(_ count: Int64, firstChunkWindow: Duration, at now: ContinuousClock.Instant) -> Bool {
            let isFirstChunk = now - firstByteAt < firstChunkWindow
            if isFirstChunk { firstChunkBytes += count }
            bytes += count
            lastByteAt = now
            return !isFirstChunk
        }

        /// Bytes per second after the first chunk, or `nil` when fewer than `smallest` bytes came
        /// after it.
        func rate(smallest: Int64) -> Double? {
            let fetched = bytes - firstChunkBytes
            let elapsed = (lastByteAt - firstByteAt).timeInterval
            guard fetched >= smallest, elapsed > 0 else { return nil }
            return Double(fetched) / elapsed
        }
    }

    /// Where a request's sample begins (``beginReceiving(at:)``): the time integral of the
    /// requests receiving, and the bytes all of them had received, at its first bytes.
    struct Mark: Sendable {
        fileprivate let receivingSeconds: Double
        fileprivate let aloneSeconds: Double
        fileprivate let bytes: Int64
    }

    /// What the resource's requests did while one of them received: how many received on
    /// average, itself included, and the bytes per second all of them received after their first
    /// chunks (``noteReceived(_:)``; `nil` when no time passed).
    struct Overlap: Sendable {
        let connections: Double
        let allRequestsRate: Double?
        /// The share of the time it was the only request receiving, from 0 to 1.
        let aloneShare: Double

        init(connections: Double, allRequestsRate: Double?, aloneShare: Double = 0) {
            self.connections = connections
            self.allRequestsRate = allRequestsRate
            self.aloneShare = aloneShare
        }

        /// Whether the request received alone (``receivedAlone``) or beside others nearly all
        /// along (alone for less than a tenth of its time), not a mix of both.
        /// A short sample of a mix tells neither: a request that just began has bytes on their
        /// way that have not come, so its time counts and hardly its bytes (at 400 kB/s a 64 KiB
        /// chunk takes 160 ms), and several connections side by side look as fast as one.
        var tellsOneKind: Bool { receivedAlone || aloneShare < 0.1 }

        /// Whether the request received alone: fewer than ``ParallelGain/aloneBelow`` requests on
        /// average.
        var receivedAlone: Bool { connections < ParallelGain.aloneBelow }

        /// Whether the request received beside others: ``ParallelGain/togetherFrom`` requests or
        /// more on average.
        var receivedTogether: Bool { connections >= ParallelGain.togetherFrom }
    }

    /// A request that averaged fewer requests receiving than this, itself included, received
    /// alone: the others' first or last bytes brush it, nothing more.
    static let aloneBelow = 1.1

    /// A request that averaged at least this many requests receiving, itself included, received
    /// beside others; between ``aloneBelow`` and this it overlapped them only in part, which
    /// tells neither kind.
    static let togetherFrom = 1.5

    /// A speed recorded: of one request alone, or of several side by side together, in bytes per
    /// second.
    enum Sample: Sendable, Equatable {
        case alone(Double)
        case together(Double)
    }

    /// How many of the resource's requests are receiving (from their first bytes until they end).
    private(set) var receiving = 0
    /// The time integral of ``receiving`` in seconds, up to ``integratedUntil``.
    private var receivingSeconds: Double = 0
    /// The seconds during which exactly one request was receiving, up to ``integratedUntil``.
    private var aloneSeconds: Double = 0
    /// The bytes the resource's receiving requests have received after their first chunks.
    private var bytesReceived: Int64 = 0
    private var integratedUntil: ContinuousClock.Instant?
    /// Bytes per second of requests that received alone: the best within ``memory``, else the
    /// last one.
    private var aloneRates = WindowedMaximum(window: Self.memory)
    /// Bytes per second of all requests together while several received: the best within
    /// ``memory``.
    private var togetherRates = WindowedMaximum(window: Self.memory)
    /// The split short reads under way, by an identifier of the resource's.
    private var splitReads: [Int: SplitRead] = [:]

    /// A split short read under way: its parts still to finish, and its bytes so far.
    private struct SplitRead {
        var partsLeft: Int
        var transfer: TransferSample?
    }

    /// How long a measurement stands. Once one of several connections found no gain, nothing is
    /// split any more, so nothing measures again; after this long a split may try again (the
    /// path's other traffic may have gone). Within it, the best sample of each kind counts (see
    /// ``WindowedMaximum``): a late wake-up on a busy machine lowers one sample, and a request
    /// alone measured low would make connections side by side look like a gain.
    static let memory: Duration = .seconds(30)

    /// Bytes per second of one request alone, as far as measured (see ``aloneRates``).
    func alone(at now: ContinuousClock.Instant = .now) -> Double? {
        aloneRates.maximum(at: now) ?? aloneRates.newest
    }

    /// Bytes per second of several requests together, as far as measured within ``memory``.
    func together(at now: ContinuousClock.Instant = .now) -> Double? {
        togetherRates.maximum(at: now)
    }

    /// Whether both kinds were measured within ``memory`` before `now`: then what the host's
    /// other files measured changes nothing (see ``helps(minimumSpeedup:now:shared:)``).
    func measuredBoth(at now: ContinuousClock.Instant) -> Bool {
        aloneRates.maximum(at: now) != nil && togetherRates.maximum(at: now) != nil
    }

    /// A request starts receiving; returns the mark its ``endReceiving(since:startedAt:at:)`` takes.
    mutating func beginReceiving(at now: ContinuousClock.Instant = .now) -> Mark {
        integrate(until: now)
        receiving += 1
        return Mark(receivingSeconds: receivingSeconds, aloneSeconds: aloneSeconds, bytes: bytesReceived)
    }

    /// `count` bytes of a receiving request arrived after its first chunk.
    mutating func noteReceived(_ count: Int64) {
        bytesReceived += count
    }

    /// A request stops receiving (finished, cut, or failed); returns what the requests did since
    /// `mark` (its ``beginReceiving(at:)``, at its first bytes, `start`).
    @discardableResult
    mutating func endReceiving(since mark: Mark, startedAt start: ContinuousClock.Instant, at now: ContinuousClock.Instant = .now) -> Overlap {
        integrate(until: now)
        receiving = max(0, receiving - 1)
        return overlap(since: mark, startedAt: start, receivingSeconds: receivingSeconds, aloneSeconds: aloneSeconds, at: now, orIfNoTimePassed: 1)
    }

    /// What the requests did from `start` (a request's first bytes, when ``beginReceiving(at:)``
    /// gave it `mark`) until `now`: what ``endReceiving(since:startedAt:at:)`` would return,
    /// without ending the request.
    func overlap(since mark: Mark, startedAt start: ContinuousClock.Instant, at now: ContinuousClock.Instant) -> Overlap {
        let totals = integrals(until: now)
        return overlap(since: mark, startedAt: start, receivingSeconds: totals.receiving, aloneSeconds: totals.alone, at: now,
                       orIfNoTimePassed: Double(max(1, receiving)))
    }

    private func overlap(since mark: Mark, startedAt start: ContinuousClock.Instant, receivingSeconds seconds: Double,
                         aloneSeconds alone: Double, at now: ContinuousClock.Instant, orIfNoTimePassed connections: Double) -> Overlap {
        let elapsed = (now - start).timeInterval
        guard elapsed > 0 else {
            return Overlap(connections: connections, allRequestsRate: nil, aloneShare: connections < Self.aloneBelow ? 1 : 0)
        }
        return Overlap(connections: (seconds - mark.receivingSeconds) / elapsed, allRequestsRate: Double(bytesReceived - mark.bytes) / elapsed,
                       aloneShare: min(1, (alone - mark.aloneSeconds) / elapsed))
    }

    /// Brings ``receivingSeconds`` and ``aloneSeconds`` up to `now` (``integrals(until:)``).
    private mutating func integrate(until now: ContinuousClock.Instant) {
        if let last = integratedUntil, now <= last { return }
        (receivingSeconds, aloneSeconds) = integrals(until: now)
        integratedUntil = now
    }

    /// ``receivingSeconds`` and ``aloneSeconds`` with the time since the last change added: the
    /// requests receiving meanwhile times that time, and that time if one alone received.
    private func integrals(until now: ContinuousClock.Instant) -> (receiving: Double, alone: Double) {
        guard let last = integratedUntil, now > last else { return (receivingSeconds, aloneSeconds) }
        let step = (now - last).timeInterval
        return (receivingSeconds + Double(receiving) * step, aloneSeconds + (receiving == 1 ? step : 0))
    }

    /// Records the request that received `rate` bytes per second during `overlap`. Alone (fewer
    /// than ``aloneBelow`` requests on average), its rate is what one connection does; beside
    /// others (``togetherFrom`` or more), what all of them received is what several do. One that
    /// overlapped others only in part says little either way and is left out.
    ///
    /// What all received, not its own rate times their number: a request that received alone
    /// for half its time and beside three others on a shared link for the other half averages
    /// 2.5 requests at 62.5 % of the link, which multiplied would look like 1.56 links.
    ///
    /// Returns what it recorded, if anything, for the other resources of the host
    /// (``HostPathMemory``).
    @discardableResult
    mutating func record(rate: Double, during overlap: Overlap, at now: ContinuousClock.Instant = .now) -> Sample? {
        guard rate > 0, overlap.connections >= 1 else { return nil }
        if overlap.receivedAlone {
            aloneRates.record(rate, at: now)
            return .alone(rate)
        } else if overlap.receivedTogether, let together = overlap.allRequestsRate, together > 0 {
            togetherRates.record(together, at: now)
            return .together(together)
        }
        return nil
    }

    /// A short read split in `parts` requests starts; `id` names it in the calls that follow.
    mutating func beginSplitRead(id: Int, parts: Int) {
        splitReads[id] = SplitRead(partsLeft: parts)
    }

    /// `bytes` of split read `id` arrived. Those within `firstChunkWindow` of its first bytes are
    /// its first chunk, which does not count toward its speed.
    mutating func noteSplitRead(id: Int, bytes: Int64, firstChunkWindow: Duration, at now: ContinuousClock.Instant = .now) {
        guard var read = splitReads[id] else { return }
        if read.transfer == nil {
            read.transfer = TransferSample(firstBytes: bytes, at: now)
        } else {
            read.transfer?.note(bytes, firstChunkWindow: firstChunkWindow, at: now)
        }
        splitReads[id] = read
    }

    /// One part of split read `id` has all its bytes; after the last, the read is a sample of
    /// several connections if at least `smallestSample` bytes came after its first chunk. Returns
    /// that sample, if recorded.
    @discardableResult
    mutating func finishSplitReadPart(id: Int, smallestSample: Int64, at now: ContinuousClock.Instant = .now) -> Sample? {
        guard var read = splitReads[id] else { return nil }
        read.partsLeft -= 1
        guard read.partsLeft <= 0 else {
            splitReads[id] = read
            return nil
        }
        splitReads[id] = nil
        guard let rate = read.transfer?.rate(smallest: smallestSample) else { return nil }
        togetherRates.record(rate, at: now)
        return .together(rate)
    }

    /// Split read `id` will not finish (a part failed or was cancelled): no sample.
    mutating func dropSplitRead(id: Int) {
        splitReads[id] = nil
    }

    /// Whether several connections were measured to fetch at least `minimumSpeedup` times what one
    /// does alone; `nil` until both were measured (or the measurement of several is older than
    /// ``memory``).
    ///
    /// `shared` is what the other resources of the host measured within ``memory``
    /// (``HostPathMemory``): it stands in for a kind this resource has not measured within
    /// ``memory``, so a new file of a host that was just measured does not pay for measuring again.
    func helps(minimumSpeedup: Double, now: ContinuousClock.Instant = .now,
               shared: (alone: Double?, together: Double?) = (nil, nil)) -> Bool? {
        guard let alone = aloneRates.maximum(at: now) ?? shared.alone ?? aloneRates.newest,
              let together = together(at: now) ?? shared.together else { return nil }
        return together >= alone * minimumSpeedup
    }
}
