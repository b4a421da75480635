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

    /// What the resource's requests did while one of them received: how many received on
    /// average, itself included, and the bytes per second all of them received after their first
    /// chunks (``noteReceived(_:by:at:)``; `nil` when no time passed, or while a request beside
    /// it has not told what it received over most of that time).
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

    /// The requests receiving (from their first bytes until they end), by the identifier each
    /// began with. What all requests received is known up to the earliest time each has told
    /// (``Receiving/knownUntil(_:)``).
    private var receiving: [Int: Receiving] = [:]

    /// A request receiving: when its first bytes arrived, when the newest bytes it has told of
    /// arrived, and, if its transport says, when the newest bytes it received arrived, told or not.
    private struct Receiving {
        let since: ContinuousClock.Instant
        var told: ContinuousClock.Instant
        let newestArrival: (@Sendable () -> ContinuousClock.Instant?)?

        /// Whether its transport says it has told every byte that arrived: then it received
        /// nothing since, and what it received is known up to now, however long ago it told.
        /// A request whose task runs late has bytes that arrived and are not told; one whose
        /// origin went quiet has none (its transport knows, the engine alone could not tell).
        var hasToldAll: Bool {
            guard let newest = newestArrival?() else { return false }
            return newest <= told
        }

        /// Whether its transport can say (``hasToldAll``).
        var says: Bool { newestArrival?() != nil }

        /// What it received is known up to this time, or up to `now` if it has told all.
        func knownUntil(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant {
            hasToldAll ? now : min(now, told)
        }
    }
    /// When the requests that ended received, from their first bytes to their last, for as long
    /// as a request still receiving began before they ended.
    ///
    /// Spans, not a running count of the requests receiving integrated over time: requests tell
    /// of their bytes in an order of their own (a task running late tells of bytes that arrived
    /// before those another one told of already), and a count integrated as they tell went back
    /// in time for the late one: a part beside a late first request measured 0 connections.
    private var endedSpans: [(request: Int, since: ContinuousClock.Instant, until: ContinuousClock.Instant)] = []
    /// Samples of requests that ended beside others before those had told what they received
    /// over the request's time (``endReceiving(_:startedAt:at:holdingASampleOf:)``), recorded
    /// once they have (``lateSamples``).
    private var heldSamples: [HeldSample] = []
    /// Samples recorded from ``heldSamples`` since ``takeLateSamples()`` last took them.
    private var lateSamples: [Sample] = []

    /// A request's sample of several, held until the requests beside it have told their bytes.
    private struct HeldSample {
        let request: Int
        let rate: Double
        let start: ContinuousClock.Instant
        let end: ContinuousClock.Instant
    }

    /// How long after a held sample's request ended the requests beside it may take to tell
    /// their bytes, when one of them cannot say whether it has bytes untold
    /// (``HTTPBody/newestArrival``): one that tells nothing for longer is taken to have
    /// stalled, not run late. When they all can say, a late one is waited for up to ``memory``:
    /// one that stalled has told all, and holds nothing back. The whole test suite on one core
    /// runs a download task more than 3 s behind its transfer at times, and the sample beside it
    /// was lost: a read still to measure then measured again.
    static let longestWaitForALateRequest: Duration = .seconds(3)

    /// The bytes the receiving requests received after their first chunks, by when the transport
    /// received them, in the order of that time: what all requests received over a stretch of
    /// time counts the bytes that arrived within it, not those told within it.
    private var arrivals: [Arrival] = []

    /// Bytes that arrived at one time (or within ``ParallelGain/arrivalResolution`` after it).
    private struct Arrival {
        let at: ContinuousClock.Instant
        let count: Int64
    }

    /// How close in time arrivals are counted as one.
    static let arrivalResolution: Duration = .milliseconds(1)

    /// The most arrivals kept (``keepTheArrivalsFew()``): a few hundred KiB.
    static let mostArrivals = 8192

    /// How many arrivals are kept now.
    var arrivalsKept: Int { arrivals.count }

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

    /// Request `request` (an identifier of the caller's, unique among those receiving) starts
    /// receiving: its first bytes arrived at `now`.
    ///
    /// `newestArrival` says when the newest bytes of the request arrived, told or not (its body's
    /// ``HTTPBody/newestArrival``): with it, a request that has told all it received counts as
    /// known up to now (``Receiving/hasToldAll``).
    mutating func beginReceiving(_ request: Int, at now: ContinuousClock.Instant,
                                 newestArrival: (@Sendable () -> ContinuousClock.Instant?)? = nil) {
        receiving[request] = Receiving(since: now, told: now, newestArrival: newestArrival)
    }

    /// Bytes of receiving request `request` arrived at `now`, of which `count` came after its first
    /// chunk (0 for bytes of the first chunk, which tell when it got to, not how fast).
    mutating func noteReceived(_ count: Int64, by request: Int, at now: ContinuousClock.Instant) {
        guard let told = receiving[request]?.told else { return }
        receiving[request]?.told = max(told, now)
        defer { if !heldSamples.isEmpty, now > told { recordHeldSamplesNowKnown(at: now) } }
        guard count > 0 else { return }
        if let last = arrivals.last, last.at > now {
            arrivals.insert(Arrival(at: now, count: count), at: firstArrival(after: now))
            keepTheArrivalsFew()
        } else if let last = arrivals.last, now - last.at < Self.arrivalResolution {
            // One entry per millisecond at most: a long request alone at 60 MB/s keeps a few
            // thousand entries, not one per socket read.
            arrivals[arrivals.count - 1] = Arrival(at: last.at, count: last.count + count)
        } else {
            arrivals.append(Arrival(at: now, count: count))
            keepTheArrivalsFew()
        }
    }

    /// Past ``mostArrivals``, merges the older half of the arrivals in pairs, each at the later
    /// time of the two: a request that receives for minutes (an answer to a whole large file,
    /// from an origin that ignores ranges) kept one entry per millisecond until it ended. Old
    /// arrivals grow coarser the older they are, and count only for samples as long as they
    /// are old, where the bytes of a coarse entry at either end are a small share; the newest
    /// half, which a part's sample beside such a request counts, keeps its resolution.
    private mutating func keepTheArrivalsFew() {
        guard arrivals.count > Self.mostArrivals else { return }
        let older = arrivals.count / 2
        var kept: [Arrival] = []
        kept.reserveCapacity(Self.mostArrivals)
        var index = 0
        while index + 1 < older {
            kept.append(Arrival(at: arrivals[index + 1].at, count: arrivals[index].count + arrivals[index + 1].count))
            index += 2
        }
        kept.append(contentsOf: arrivals[index...])
        arrivals = kept
    }

    /// Request `request` stops receiving (finished, cut, or failed): its last bytes arrived at
    /// `now`. Returns what the requests did from its first bytes, `start`, until then.
    ///
    /// With `rate`, its speed as a sample: when it received beside others that have not told
    /// what they received over its time (the overlap's ``Overlap/allRequestsRate`` is `nil`), the
    /// sample is held and recorded once they have, or dropped if they tell nothing for
    /// ``longestWaitForALateRequest``. A request that ended before a late one told would
    /// otherwise tell nothing, and a read whose measuring part ended so measured again.
    @discardableResult
    mutating func endReceiving(_ request: Int, startedAt start: ContinuousClock.Instant, at now: ContinuousClock.Instant,
                               holdingASampleOf rate: Double? = nil) -> Overlap {
        let overlap = overlap(of: request, startedAt: start, at: now)
        if let rate, overlap.receivedTogether, overlap.tellsOneKind, overlap.allRequestsRate == nil {
            heldSamples.append(HeldSample(request: request, rate: rate, start: start, end: now))
        }
        if let since = receiving.removeValue(forKey: request)?.since, now > since { endedSpans.append((request, since, now)) }
        recordHeldSamplesNowKnown(at: now)
        forgetWhatNoSampleCounts()
        return overlap
    }

    /// Whether a sample of several is held until late requests tell their bytes: what it tells
    /// is on its way.
    var holdsASample: Bool { !heldSamples.isEmpty }

    /// The samples recorded since the last call once late requests had told their bytes (see
    /// ``endReceiving(_:startedAt:at:holdingASampleOf:)``), for the caller to act on.
    mutating func takeLateSamples() -> [Sample] {
        defer { lateSamples.removeAll() }
        return lateSamples
    }

    /// Records each held sample whose time the requests beside it have told by now, and drops
    /// those they left untold for too long.
    private mutating func recordHeldSamplesNowKnown(at now: ContinuousClock.Instant) {
        var waiting: [HeldSample] = []
        for held in heldSamples {
            let overlap = overlap(of: held.request, startedAt: held.start, at: held.end)
            if overlap.allRequestsRate != nil {
                if let sample = record(rate: held.rate, during: overlap, at: held.end) { lateSamples.append(sample) }
            } else if now - held.end < Self.longestWaitForALateRequest
                        || (now - held.end < Self.memory && receiving.values.allSatisfy(\.says)) {
                waiting.append(held)
            }
        }
        heldSamples = waiting
    }

    /// What the requests did from `start` (request `request`'s first bytes) until `now`: what
    /// ``endReceiving(_:startedAt:at:)`` would return, without ending the request.
    func overlap(of request: Int, startedAt start: ContinuousClock.Instant, at now: ContinuousClock.Instant) -> Overlap {
        let elapsed = (now - start).timeInterval
        guard elapsed > 0 else {
            let connections = Double(max(1, receiving.count))
            return Overlap(connections: connections, allRequestsRate: nil, aloneShare: connections < Self.aloneBelow ? 1 : 0)
        }
        // The requests receiving go on until `now` as far as this sample is concerned.
        var spans: [(since: ContinuousClock.Instant, until: ContinuousClock.Instant)] =
            endedSpans.filter { $0.request != request }.map { (since: $0.since, until: $0.until) }
        for (other, state) in receiving where other != request { spans.append((state.since, now)) }
        spans.append((start, now))
        let time = Self.receivingTime(of: spans, from: start, to: now)
        // What all received is counted up to where each request beside this one has told its
        // bytes, and this one up to `now`.
        var known = now
        for (other, state) in receiving where other != request && state.since < now { known = state.knownUntil(known) }
        let knownSeconds = (known - start).timeInterval
        let allRequestsRate = knownSeconds >= elapsed * Self.knownShareOfASample
            ? Double(bytesArrived(after: start, upTo: known)) / knownSeconds : nil
        return Overlap(connections: time.total / elapsed, allRequestsRate: allRequestsRate, aloneShare: min(1, time.alone / elapsed))
    }

    /// The share of a sample's time over which the bytes of every request beside it must be
    /// known before what all of them received counts: a request whose task runs late has told
    /// less than it received, and counted as received, its missing bytes would make connections
    /// side by side look like one (a long read's part on connections capped at 400 kB/s, beside
    /// a first request that had not yet told a second's worth, measured both together at 501 kB/s).
    static let knownShareOfASample = 0.5

    /// Within `start`...`end`: the seconds of all `spans` together (two requests receiving for a
    /// second count two), and the seconds during which exactly one of them received.
    static func receivingTime(of spans: [(since: ContinuousClock.Instant, until: ContinuousClock.Instant)],
                              from start: ContinuousClock.Instant, to end: ContinuousClock.Instant) -> (total: Double, alone: Double) {
        var changes: [(at: ContinuousClock.Instant, step: Int)] = []
        var total = 0.0
        for span in spans {
            let from = max(span.since, start), until = min(span.until, end)
            guard until > from else { continue }
            total += (until - from).timeInterval
            changes.append((from, 1))
            changes.append((until, -1))
        }
        changes.sort { $0.at < $1.at }
        var alone = 0.0, count = 0
        var last = start
        for change in changes {
            if count == 1 { alone += (change.at - last).timeInterval }
            count += change.step
            last = change.at
        }
        return (total, alone)
    }

    /// The bytes that arrived after `start`, up to and including `end`.
    private func bytesArrived(after start: ContinuousClock.Instant, upTo end: ContinuousClock.Instant) -> Int64 {
        var total: Int64 = 0
        var index = firstArrival(after: start)
        while index < arrivals.count, arrivals[index].at <= end {
            total += arrivals[index].count
            index += 1
        }
        return total
    }

    /// The index of the first arrival later than `instant` (``arrivals`` is in the order of time).
    private func firstArrival(after instant: ContinuousClock.Instant) -> Int {
        var low = 0, high = arrivals.count
        while low < high {
            let middle = (low + high) / 2
            if arrivals[middle].at <= instant { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Drops the arrivals and spans that end before the first bytes of every request still
    /// receiving and every held sample: no sample begins before those.
    private mutating func forgetWhatNoSampleCounts() {
        guard let earliest = (receiving.values.map(\.since) + heldSamples.map(\.start)).min() else {
            arrivals.removeAll(keepingCapacity: true)
            endedSpans.removeAll(keepingCapacity: true)
            return
        }
        let stale = firstArrival(after: earliest) // arrivals at `earliest` itself count for no sample either
        if stale > 0 { arrivals.removeFirst(stale) }
        endedSpans.removeAll { $0.until <= earliest }
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
        // A request counts itself: an average below one is a sum of seconds rounded down.
        guard rate > 0, overlap.connections > 0.999 else { return nil }
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
