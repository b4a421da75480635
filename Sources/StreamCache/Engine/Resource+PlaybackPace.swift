extension Resource {
    /// How many bytes a download may run ahead of `reader`: ``StreamCache/Configuration/playbackReadAhead``
    /// of playing time at the rate the reader consumes (see ``PlaybackPace``), and at least
    /// ``StreamCache/Configuration/minimumPlaybackReadAhead``. `nil` when nothing holds its
    /// downloads back: its rate is unknown (it waits for the origin, or has not read a second at
    /// its own pace yet), it is a prefetch, or the resource is filled for offline use anyway.
    func playbackWindow(of reader: ReaderState) -> Int64? {
        guard let duration = configuration.playbackReadAhead, !reader.isPrefetch, !configuration.completesResourcesInBackground,
              let rate = reader.pace.rate else { return nil }
        let ahead = rate * duration.timeInterval
        let bytes = ahead < Double(Int64.max / 4) ? Int64(ahead) : Int64.max / 4
        return max(configuration.minimumPlaybackReadAhead, bytes)
    }

    /// Where `download` stops while every reader that needs it plays in real time: the furthest
    /// end of their windows. `nil` when one of them reads faster, or none needs it (the idle
    /// read-ahead then applies).
    func playbackLimit(of download: Download) -> Int64? {
        var limit: Int64?
        for reader in readers.values where reader.position < download.limit && reader.end > download.position {
            guard let window = playbackWindow(of: reader) else { return nil }
            let end = reader.position + window
            limit = max(limit ?? end, end)
        }
        return limit
    }

    /// Starts the next download for `reader`, which plays in real time and is handed cached bytes
    /// up to `cachedEnd`, once less than half its window lies cached ahead of it: the origin then
    /// has half a window of playing time (30 s by default) to stay ahead, and a player never
    /// catches up with a paused download.
    func keepPlaybackWindowFilled(for reader: ReaderState, cachedEnd: Int64) {
        // `reader.end` is already cut to the resource's length (`nextStep`).
        guard let window = playbackWindow(of: reader), cachedEnd < reader.end, cachedEnd - reader.position < window / 2,
              !downloads.values.contains(where: { $0.window.contains(cachedEnd) }) else { return }
        logger.debug("download resumed ahead of a player", metadata: ["key": "\(key)", "at": "\(cachedEnd)"])
        try? ensureDownload(covering: cachedEnd, readerEnd: reader.end, prefetch: false, streamed: reader.position - reader.start)
    }
}
