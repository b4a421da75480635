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
        if download.requestSample == nil {
            if let sentAt = download.requestSentAt {
                let roundTrip = now - sentAt
                shortestRoundTrip = shortestRoundTrip.map { min($0, roundTrip) } ?? roundTrip
            }
            download.requestSample = (ParallelGain.TransferSample(firstBytes: bytes, at: now), parallelGain.beginReceiving(at: now))
        } else {
            download.requestSample?.transfer.note(bytes, firstChunkWindow: Self.firstChunkWindow, at: now)
        }
    }

    /// Ends the request sample of `download` without recording it: a new request begins, or the
    /// download ended before its request did. Returns how many requests received on average
    /// meanwhile, and the sample.
    @discardableResult
    func stopReceiving(_ download: inout Download) -> (connections: Double, transfer: ParallelGain.TransferSample)? {
        guard let sample = download.requestSample else { return nil }
        download.requestSample = nil
        let connections = parallelGain.endReceiving(since: sample.receivingMark, startedAt: sample.transfer.firstByteAt,
                                                    at: sample.transfer.lastByteAt)
        return (connections, sample.transfer)
    }

    /// Hands the request that `download` just completed to ``parallelGain``: its speed after the
    /// first chunk and the connections receiving meanwhile. A request too short to tell (less than
    /// ``smallestGainSample`` after its first chunk) is not counted.
    func recordParallelGainSample(of download: inout Download) {
        let ended = stopReceiving(&download)
        if let splitReadID = download.splitReadID {
            // A part of a split short read: the read as a whole is the sample.
            download.splitReadID = nil
            parallelGain.finishSplitReadPart(id: splitReadID, smallestSample: Self.smallestGainSample)
            return
        }
        guard let ended, let rate = ended.transfer.rate(smallest: Self.smallestGainSample) else { return }
        parallelGain.record(rate: rate, connections: ended.connections)
    }

    /// How long after a request's first bytes others still count as its first chunk.
    static let firstChunkWindow: Duration = .milliseconds(2)

    /// The fewest bytes after its first chunk that make a request a sample of ``parallelGain``:
    /// one part of a split 256 KiB seek gives about this much.
    static let smallestGainSample: Int64 = 48 << 10

    /// Whether splitting across connections is worth it as far as this resource measured: not when
    /// several connections were seen to fetch no faster together than one alone.
    var parallelConnectionsMayHelp: Bool {
        guard let speedup = configuration.minimumParallelSpeedup else { return true }
        return parallelGain.helps(minimumSpeedup: speedup) != false
    }
}
