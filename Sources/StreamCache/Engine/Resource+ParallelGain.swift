extension Resource {
    // The samples of ``parallelGain``, and the decisions taken from it. See ``ParallelGain``.

    /// Counts `bytes` that arrived for `download` at `arrivedAt` into its request's sample (and its
    /// split read's, for a part of one): the request is receiving from its first bytes on.
    ///
    /// Timed by when the transport received them, not when the download got to them: on a busy
    /// machine the download may take in a transfer's first bytes late, with the bytes that came
    /// meanwhile right behind them; timed when taken in, that backlog would count as bytes
    /// received in no time (a split seek on a shared link once measured twice the link's speed).
    func noteTransfer(of bytes: Int64, by download: inout Download, arrivedAt now: ContinuousClock.Instant) {
        if let splitReadID = download.splitReadID {
            parallelGain.noteSplitRead(id: splitReadID, bytes: bytes, firstChunkWindow: Self.firstChunkWindow, at: now)
        }
        // A request that waited for the read before it no longer tells the path's speed.
        guard !download.requestWasHeld else { return }
        if download.requestSample == nil {
            if let sentAt = download.requestSentAt {
                let roundTrip = now - sentAt
                shortestRoundTrip = shortestRoundTrip.map { min($0, roundTrip) } ?? roundTrip
            }
            download.requestSample = ParallelGain.TransferSample(firstBytes: bytes, at: now)
            var newestArrival: (@Sendable () -> ContinuousClock.Instant?)?
            if let body = download.answerBody { newestArrival = { body.newestArrival } }
            parallelGain.beginReceiving(download.id, at: now, newestArrival: newestArrival)
        } else if download.requestSample?.note(bytes, firstChunkWindow: Self.firstChunkWindow, at: now) == true {
            parallelGain.noteReceived(bytes, by: download.id, at: now)
            recordEarlySample(of: &download, at: now)
        } else {
            parallelGain.noteReceived(0, by: download.id, at: now)
        }
    }

    /// Records what a request tells once ``earlySampleBytes`` came after its first chunk, before
    /// it ends: a long read's first request received alone until its parts began, which its
    /// whole would not tell (the parts begin as soon as it has answered), and the parts' first
    /// requests tell what they fetch together long before they end. So a link the connections
    /// share is known while the read is young, and its parts can wait for the reader
    /// (``waitsForTheReadBeforeIt(_:)``). Once per request; a part of a split short read counts
    /// with its read instead.
    ///
    /// An early sample is short, so it tells of one connection alone or of several, not of a mix
    /// (``ParallelGain/Overlap/tellsOneKind``): a long read's first request on connections capped
    /// at 400 kB/s, its 256 KiB taking 650 ms, saw its parts begin 500 ms in and measured four
    /// connections together as fast as one, a shared link. A mix waits until the others' time
    /// outweighs its time alone.
    func recordEarlySample(of download: inout Download, at now: ContinuousClock.Instant) {
        guard !download.gaveEarlySample, download.splitReadID == nil, let sample = download.requestSample,
              let rate = sample.rate(smallest: Self.earlySampleBytes) else { return }
        let overlap = parallelGain.overlap(of: download.id, startedAt: sample.firstByteAt, at: now)
        // Beside others, it waits until they have told what they received over its time.
        guard overlap.tellsOneKind, overlap.receivedAlone || overlap.allRequestsRate != nil else { return }
        download.gaveEarlySample = true
        shareWithTheHost(parallelGain.record(rate: rate, during: overlap, at: now), at: now)
    }

    /// The bytes after its first chunk that make a request's early sample
    /// (``recordEarlySample(of:at:)``): on a cloud connection of 4 MB/s they take 65 ms, well
    /// within the time a long read's first request receives alone (a round trip, 40 ms or more,
    /// plus its parts' own first round trip).
    static let earlySampleBytes: Int64 = 256 << 10

    /// Whether `download`, a part of a long read that its reader has not reached, waits for the
    /// downloads before it: the resource measured that its connections share one link (several
    /// fetch no faster together than one alone), so whatever a part receives is taken from the
    /// bytes the reader waits for. A read split on such a link before it was measured (a cold
    /// read's parts begin once its first request has answered) then goes on in order, one
    /// connection receiving at a time, as fast as the link: a player buffering at its start got
    /// its first 5 MiB in 2.1 s instead of the link's 0.7 s (Benchmarks/in-order-delivery.sh).
    ///
    /// A held part keeps its request and connection: the origin stops sending once the sockets
    /// are full, and the part goes on from there, without a new request, when its turn comes
    /// (``releaseHeldPartsWhoseTurnCame()``).
    func waitsForTheReadBeforeIt(_ download: Download) -> Bool {
        guard download.kind == .read, download.isParallelPart, !download.readerReached, download.position < download.limit,
              let speedup = configuration.minimumParallelSpeedup, connectionsGain(minimumSpeedup: speedup) == false else { return false }
        if let since = download.heldBehindItsReadSince, ContinuousClock.now - since >= Self.longestWaitForTheReadBefore { return false }
        guard readers.values.contains(where: { !$0.isPrefetch && $0.position < download.position }) else { return false }
        // One that has no more than a round trip's worth left to fetch is as good as done: the
        // part's next request, sent once it has taken in what it holds, takes that long to
        // bring bytes, and the link would stand idle meanwhile.
        return downloads.values.contains { other in
            other.id != download.id && other.holdRelease == nil && other.position < download.position
                && other.limit - other.position > bytesOnTheWire(other) ?? 0
        }
    }

    /// The longest a part waits for the read before it (``waitsForTheReadBeforeIt(_:)``): an
    /// origin may close a connection that sends nothing for long (nginx after 60 s), and a read
    /// that stalled before it must not stall it too. The last of four parts of a 30 MB file
    /// waits 7.5 s on a link of 3 MB/s.
    static let longestWaitForTheReadBefore: Duration = .seconds(30)

    /// Holds download `id` back until its turn comes (``releaseHeldPartsWhoseTurnCame()``), or
    /// until ``longestWaitForTheReadBefore`` has passed. It stops counting as receiving: the
    /// requests that do receive meanwhile are samples of themselves alone.
    func holdBehindTheReadBeforeIt(id: Int) async {
        guard var download = downloads[id] else { return }
        stopReceiving(&download)
        download.requestWasHeld = true
        let since = download.heldBehindItsReadSince ?? .now
        download.heldBehindItsReadSince = since
        downloads[id] = download
        logger.debug("part waits for the read before it", metadata: ["key": "\(key)", "download": "\(id)", "at": "\(download.position)"])
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            downloads[id]?.holdRelease = continuation
            Task { [weak self] in
                try? await Task.sleep(until: since + Self.longestWaitForTheReadBefore)
                await self?.releaseHeldPartsWhoseTurnCame()
            }
        }
    }

    /// Lets the held parts go on whose turn came: nothing before them fetches for their reader
    /// any more, their reader left or reached them, the link no longer measures as shared, or
    /// they waited ``longestWaitForTheReadBefore``.
    func releaseHeldPartsWhoseTurnCame() {
        // From the first on: one that goes on holds back those after it.
        let held = downloads.values.filter { $0.heldBehindItsReadSince != nil && $0.holdRelease != nil }.sorted { $0.position < $1.position }
        for download in held where !waitsForTheReadBeforeIt(download) {
            releaseHold(of: download.id)
        }
    }

    /// Ends the request sample of `download`: a new request begins, or the download ended before
    /// its request did, or (with `rate`, its speed) it is recorded
    /// (``recordParallelGainSample(of:)``). Returns what the requests did meanwhile, and the
    /// sample.
    @discardableResult
    func stopReceiving(_ download: inout Download, sampling rate: Double? = nil)
        -> (overlap: ParallelGain.Overlap, transfer: ParallelGain.TransferSample)? {
        guard let sample = download.requestSample else { return nil }
        download.requestSample = nil
        let overlap = parallelGain.endReceiving(download.id, startedAt: sample.firstByteAt, at: sample.lastByteAt, holdingASampleOf: rate)
        return (overlap, sample)
    }

    /// Shares the samples ``parallelGain`` recorded late (a request's, held until the requests
    /// beside it told their bytes) with the host. Returns whether there were any: the parts may
    /// have waited for what they tell, and the caller plans them again.
    @discardableResult
    func actOnLateSamples() -> Bool {
        let late = parallelGain.takeLateSamples()
        for sample in late { shareWithTheHost(sample) }
        return !late.isEmpty
    }

    /// Hands the request that `download` just completed to ``parallelGain``: its speed after the
    /// first chunk and the connections receiving meanwhile. A request too short to tell (less than
    /// ``smallestGainSample`` after its first chunk) is not counted.
    func recordParallelGainSample(of download: inout Download) {
        let rate = download.splitReadID == nil ? download.requestSample?.rate(smallest: Self.smallestGainSample) : nil
        let ended = stopReceiving(&download, sampling: rate)
        if let splitReadID = download.splitReadID {
            // A part of a split short read: the read as a whole is the sample.
            download.splitReadID = nil
            shareWithTheHost(parallelGain.finishSplitReadPart(id: splitReadID, smallestSample: Self.smallestGainSample))
            return
        }
        guard let ended, let rate else { return }
        // Beside late requests, ``ParallelGain`` holds the sample until they tell: nothing now.
        shareWithTheHost(parallelGain.record(rate: rate, during: ended.overlap))
    }

    /// How long after a request's first bytes others still count as its first chunk.
    static let firstChunkWindow: Duration = .milliseconds(2)

    /// The fewest bytes after its first chunk that make a request a sample of ``parallelGain``:
    /// one part of a split 256 KiB seek gives about this much.
    static let smallestGainSample: Int64 = 48 << 10

    /// Whether splitting across connections is worth it as far as this resource and the other
    /// files of its host measured: not when several connections were seen to fetch no faster
    /// together than one alone.
    var parallelConnectionsMayHelp: Bool {
        guard let speedup = configuration.minimumParallelSpeedup else { return true }
        return connectionsGain(minimumSpeedup: speedup) != false
    }

    /// Whether several connections fetch at least `minimumSpeedup` times what one does alone, as
    /// far as this resource measured, and where it has not measured within
    /// ``ParallelGain/memory``, as the other resources of its host did (``HostPathMemory``);
    /// `nil` while neither tells.
    func connectionsGain(minimumSpeedup: Double, now: ContinuousClock.Instant = .now) -> Bool? {
        // Asked for each part at each written run (``waitsForTheReadBeforeIt(_:)``): the host's
        // figures, two locks and a string away, only when the resource's own leave a gap.
        let shared = parallelGain.measuredBoth(at: now) ? (nil, nil) : pathHost.map { hostPaths.rates(of: $0, at: now) } ?? (nil, nil)
        return parallelGain.helps(minimumSpeedup: minimumSpeedup, now: now, shared: shared)
    }

    /// Hands a sample that ``parallelGain`` just recorded at `now` to the other resources of the
    /// host (``HostPathMemory``).
    func shareWithTheHost(_ sample: ParallelGain.Sample?, at now: ContinuousClock.Instant = .now) {
        guard let sample, let host = pathHost else { return }
        hostPaths.record(sample, host: host, at: now)
    }

    /// The host this resource's samples are shared under: the one its origin answered from last
    /// (``Origin/connectionLimit``); `nil` while not known, or when the transport does not say.
    var pathHost: String? { origin.connectionLimit?.host }
}
