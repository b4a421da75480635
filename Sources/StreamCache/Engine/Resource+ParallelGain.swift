extension Resource {
    // The samples of ``parallelGain``, and the decisions taken from it. See ``ParallelGain``.

    /// Counts `bytes` that just arrived for `download` into its request's sample: the request is
    /// receiving from its first bytes on. Bytes that follow them within ``firstChunkWindow``
    /// belong to the first chunk, whose bytes do not count toward its speed (a shaper sends its
    /// burst at once, and the socket may hand it over in several reads).
    func noteTransfer(of bytes: Int64, by download: inout Download) {
        let now = ContinuousClock.now
        if let splitReadID = download.splitReadID {
            parallelGain.noteSplitRead(id: splitReadID, bytes: bytes, firstChunkWindow: Self.firstChunkWindow, at: now)
        }
        guard let firstChunkAt = download.firstChunkAt else {
            download.firstChunkAt = now
            download.firstChunkBytes = bytes
            download.receivingMark = parallelGain.beginReceiving(at: now)
            download.receivingSince = now
            return
        }
        if now - firstChunkAt < Self.firstChunkWindow { download.firstChunkBytes += bytes }
    }

    /// Ends the request sample of `download` without recording it: a new request begins, or the
    /// download ended before its request did.
    func stopReceiving(_ download: inout Download) {
        if let mark = download.receivingMark, let since = download.receivingSince {
            parallelGain.endReceiving(since: mark, startedAt: since)
        }
        download.firstChunkAt = nil
        download.receivingMark = nil
        download.receivingSince = nil
    }

    /// Hands the request that `download` just completed to ``parallelGain``: its speed after the
    /// first chunk and the connections receiving meanwhile. A request too short to tell (less than
    /// ``smallestGainSample`` after its first chunk) is not counted.
    func recordParallelGainSample(of download: inout Download) {
        if let splitReadID = download.splitReadID {
            // A part of a split short read: the read as a whole is the sample.
            download.splitReadID = nil
            stopReceiving(&download)
            parallelGain.finishSplitReadPart(id: splitReadID, smallestSample: Self.smallestGainSample)
            return
        }
        guard let mark = download.receivingMark, let since = download.receivingSince else {
            stopReceiving(&download)
            return
        }
        let now = ContinuousClock.now
        let connections = parallelGain.endReceiving(since: mark, startedAt: since, at: now)
        let fetched = download.received - download.segmentStartReceived - download.firstChunkBytes
        let elapsed = (now - since).timeInterval
        download.receivingMark = nil  // ended just above
        stopReceiving(&download)
        guard fetched >= Self.smallestGainSample, elapsed > 0 else { return }
        parallelGain.record(rate: Double(fetched) / elapsed, connections: connections, at: now)
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
