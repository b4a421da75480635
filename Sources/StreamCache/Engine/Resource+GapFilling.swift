extension Resource {
    // Downloads nobody asked for: the resource's gaps once its readers are gone.

    /// With background completion on, fills the resource's gaps once readers are gone (unless a
    /// prefetch ended since the last read began: ``fillsWaitForARead``).
    func startBackgroundCompletion() {
        guard !isShuttingDown, !fillsWaitForARead, downloads.isEmpty, let total = info?.totalLength,
              let gap = available.gaps(in: ByteRange(0, total)).first else { return }
        startDownload(at: gap.lowerBound, limit: gap.upperBound, kind: .background)
    }

    /// Once nobody reads and nothing downloads, fetches a gap of at most
    /// ``StreamCache/Configuration/joinDistance`` that follows cached bytes and ends at cached bytes
    /// or at the end of the resource; one at a time, each start once.
    ///
    /// The idle read-ahead already closes such a hole when it stops near cached bytes, but it is
    /// bounded by a grace period, and a download cut short by it (a loaded machine, a slow origin)
    /// leaves the hole behind. A player that plays the stretch again reads a little further than
    /// the first time, since its bytes now come from the cache and fill the sockets faster, and
    /// would find the origin right there (the proxy issue's "a second play makes no origin
    /// request": ffmpeg's second `-ss 150` play of a 3.6 MB M4A asked for the 1.04 MB between
    /// the bytes around the seek and the cached `moov` box in one CI run). Gaps farther from cached
    /// bytes, or larger, are left to readers: a probe of a large file costs no more than before.
    func startFillingSmallGap() {
        guard configuration.fillsSmallGaps, !isShuttingDown, !fillsWaitForARead, readers.isEmpty, downloads.isEmpty, let total = info?.totalLength,
              info?.acceptsByteRanges != false else { return }
        // Gaps are maximal: one that does not start at 0 follows cached bytes.
        let gap = available.gaps(in: ByteRange(0, total)).first { gap in
            gap.lowerBound > 0 && gap.count <= configuration.joinDistance && !smallGapsTried.contains(gap.lowerBound)
        }
        guard let gap else { return }
        smallGapsTried.insert(gap.lowerBound)
        logger.debug("filling a small gap", metadata: ["key": "\(key)", "start": "\(gap.lowerBound)", "end": "\(gap.upperBound)"])
        startDownload(at: gap.lowerBound, limit: gap.upperBound, kind: .background)
    }

    /// Stops the downloads nobody waits for when no read (a player's, a prefetch's) uses the
    /// resource, and returns once they have ended; no fill starts again until a read begins.
    /// Those are a small gap's fill or a background completion, a read-ahead its player left, a
    /// prefetch's request winding down after the prefetch ended: a removal the user asked for is
    /// not refused for them. Right after a prefetch of a file's start, they made
    /// `DELETE /api/resources/{id}?purge=1` answer 409 three times in five.
    func stopDownloadsNobodyWaitsFor() async {
        guard readers.isEmpty, !downloads.isEmpty else { return }
        fillsWaitForARead = true
        let unwanted = Array(downloads.values)
        for download in unwanted {
            download.task?.cancel()
            releaseHold(of: download.id)
            releasePace(of: download.id)
        }
        for download in unwanted { await download.task?.value }
    }
}
