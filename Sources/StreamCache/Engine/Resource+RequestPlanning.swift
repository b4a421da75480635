extension Resource {
    // How a download asks for its bytes: where its next request starts and ends, how long it is
    // (segments that double, shares of a split range), and the cached bytes it skips.

    /// The next request of download `id`, or `nil` when it is done: at its limit, into cached
    /// bytes, or idle past the grace period. Segments double (see ``segmentSize(atMost:throughput:)``),
    /// except in a split range, where a connection whose speed is known asks for its share.
    func nextSegment(id: Int) throws -> (any Origin, OriginRequest)? {
        guard var download = downloads[id] else { return nil }
        let crosses = crossesCachedBytes
        if crosses { skipCachedBytes(&download) }
        if download.opened {
            guard download.position < download.limit, !available.contains(download.position) else { return nil }
            if download.skimmedPast {
                logger.debug("read-ahead dropped: the player skims", metadata: ["key": "\(key)", "at": "\(download.position)"])
                return nil
            }
            if download.kind == .read, !configuration.completesResourcesInBackground {
                updateIdleState(&download)
                if let idleSince = download.idleSince, ContinuousClock.now - idleSince >= configuration.idleDownloadGracePeriod { return nil }
                if reachedIdleLimit(&download) { return nil }
            }
            // Segments double while nothing tells how long the reader stays. Once its range is
            // split (it streams, or a prefetch fills it) and this connection's speed is measured,
            // the next request asks for the download's share at once: doubling from there would
            // only cost each connection more requests (a cold 30 MiB read on four cloud
            // connections asked for 1, 2 and then the rest of each part: twelve requests).
            let share = splitWorkShare()
            // On a link its connections share, a download that parts wait for, or a part whose
            // turn came after it waited, has the link alone: the rest of its window is one
            // request, not two or three (each a round trip of an idle link).
            let hasTheLinkAlone = download.heldBehindItsReadSince != nil
                || downloads.values.contains { $0.holdRelease != nil && $0.heldBehindItsReadSince != nil && $0.start >= download.limit }
            let grown = (share != nil && download.throughput != nil) || hasTheLinkAlone ? Int64.max : download.segmentSize * 2
            download.segmentSize = segmentSize(atMost: grown, throughput: download.throughput)
            let length = min(download.segmentSize, share ?? .max)
            let end = requestEnd(endAfterMissingBytes(length, from: download.position, within: download.limit), takingTheRestOf: download.window)
            // The idle limit binds read downloads only: one a prefetch took over goes on.
            let idleLimit = download.kind == .read ? download.idleLimit : nil
            download.segmentEnd = min(download.limit, idleLimit ?? Int64.max, end)
            guard download.segmentEnd > download.position else { return nil }
        }
        if download.kind == .read, let paceEnd = playbackLimit(of: download) {
            // Far enough ahead of every player it serves: it ends here, and the reader starts the
            // next one once it has played half its window (``keepPlaybackWindowFilled(for:cachedEnd:)``).
            guard download.position < paceEnd else {
                logger.debug("download paused ahead of a player", metadata: ["key": "\(key)", "at": "\(download.position)"])
                return nil
            }
            download.segmentEnd = min(download.segmentEnd, max(paceEnd, download.position + configuration.initialSegmentSize))
        }
        // An origin that cannot seek answers from byte 0 whatever is asked: its one download
        // follows the body from there over the cached bytes (the same version's, written again)
        // to those missing. Stopping at a cached first byte would leave every later read without one.
        let followsTheWholeBody = info?.acceptsByteRanges == false && !download.opened
        if followsTheWholeBody {
            guard download.position < download.limit, !available.contains(ByteRange(download.position, download.limit)) else { return nil }
            download.segmentEnd = download.limit
        } else {
            guard !available.contains(download.position), download.position < download.limit else { return nil }
        }
        // The request asks from here. A first request may start past where its download began:
        // one that waited for a place or a rate skips what another download cached meanwhile.
        download.segmentStartPosition = download.position
        // Cut at the first cached byte: a window planned across cached bytes (while the origin
        // seemed to serve several ranges) must not fetch them once it turns out not to.
        let following = followsTheWholeBody ? [] : planFollowingRanges(&download, crossing: crosses)
        download.rangeEnd = download.segmentEnd
        download.followingRanges = following
        if let last = following.last { download.segmentEnd = last.upperBound }
        download.segmentStartedAt = .now
        download.segmentStartReceived = download.received
        download.gaveEarlySample = false
        download.requestWasHeld = false
        download.plannedUnder = info
        stopReceiving(&download)
        downloads[id] = download
        statistics.originRequests += 1
        logger.debug("origin request", metadata: ["key": "\(key)", "download": "\(id)", "kind": "\(download.kind)", "start": "\(download.position)",
                                                   "end": "\(download.rangeEnd)", "ranges": "\(following.count + 1)",
                                                   "part": "\(download.isParallelPart)", "readerReached": "\(download.readerReached)"])
        let validator = info?.validator.ifRangeValue != nil ? info?.validator : nil
        let end = download.rangeEnd == Int64.max ? Int64.max : download.rangeEnd
        return (origin, OriginRequest(range: ByteRange(download.position, end), followingRanges: following, validator: validator,
                                      givesWayWhenBusy: download.isExtraConnection))
    }

    /// Whether downloads go on past cached bytes: the origin serves several ranges in one
    /// response, so one request asks for the gaps on both sides of them (a reader that crosses
    /// the islands a player's seeks left costs one request, not one per gap, and no byte twice).
    var crossesCachedBytes: Bool {
        info?.acceptsByteRanges == true && info?.totalLength != nil && origin.servesMultipleRanges
    }

    /// Moves a download that stands at cached bytes to the gap after them, within its limit.
    func skipCachedBytes(_ download: inout Download) {
        guard let run = available.range(containing: download.position), run.upperBound < download.limit else { return }
        download.position = run.upperBound
        if !download.opened { download.segmentEnd = endAfterMissingBytes(download.segmentSize, from: download.position, within: download.limit) }
    }

    /// Cuts the download's next request (`[position, segmentEnd)`) at the first cached byte and,
    /// when `crossing`, returns the gaps after it that the same request asks for: as many as fit
    /// the missing bytes the request was planned for, at most ``maximumRangesPerRequest`` ranges
    /// in all.
    func planFollowingRanges(_ download: inout Download, crossing: Bool) -> [ByteRange] {
        let planned = missingByteCount(in: ByteRange(download.position, max(download.position, download.segmentEnd)))
        guard let cached = available.firstLowerBound(atOrAfter: download.position), cached < download.segmentEnd else { return [] }
        download.segmentEnd = cached
        guard crossing else { return [] }
        var budget = planned - (cached - download.position)
        // The request's span stays within what the download may fetch.
        let idleLimit = download.kind == .read ? download.idleLimit : nil
        let end = min(download.limit, idleLimit ?? Int64.max)
        guard budget > 0, cached < end else { return [] }
        var following: [ByteRange] = []
        for gap in available.gaps(in: ByteRange(cached, end)) {
            guard budget > 0, following.count + 1 < Self.maximumRangesPerRequest else { break }
            let range = ByteRange(offset: gap.lowerBound, length: min(gap.count, budget))
            following.append(range)
            budget -= range.count
        }
        return following
    }

    /// The most ranges one request asks for: a header of a few hundred bytes, well within what
    /// servers accept (Apache's `MaxRanges` default is 200; nginx has no limit).
    static let maximumRangesPerRequest = 16

    /// Measures the request that `download` just completed. Its time includes the round trip, so
    /// a short request understates the speed: the segments sized from it come out smaller, never
    /// larger. The resource keeps the figure for the parts it starts next and for whether to
    /// split at all (``splitsLongRanges``, ``shortReadParts(wanted:)``).
    ///
    /// A request shorter than a first segment (a seek, a probe) may set the resource's figure when
    /// it has none, or raise it, but not lower it: its time is mostly the round trip and how soon
    /// the machine ran the download, so one late wake-up on a fast link (a 256 KiB seek in 12 ms
    /// instead of 2 on loopback) would read as a slow connection and split the next seek (or a
    /// long read whose first request starts past cached bytes) across connections that gain
    /// nothing there.
    ///
    /// Timed from when the request left to when its last bytes arrived, both stamped off the
    /// actor (``Download/requestSentAt``, ``HTTPBody/Chunk/arrivedAt``), not by when the download
    /// took them in: a task that runs late on a busy machine made a fast link look slow, and a
    /// seek then judged far into a request in flight cut it, throwing away what the origin had
    /// already sent past the cut (``joins(_:at:)``).
    func recordThroughput(of download: inout Download) {
        guard !download.requestWasHeld else { return }
        let sent = download.requestSentAt ?? download.segmentStartedAt
        let elapsed = ((download.requestSample?.lastByteAt ?? .now) - sent).timeInterval
        let fetched = download.received - download.segmentStartReceived
        guard elapsed > 0, fetched >= configuration.initialSegmentSize / 4 else { return }
        let measured = Double(fetched) / elapsed
        download.throughput = measured
        if fetched >= configuration.initialSegmentSize || measured > connectionThroughput ?? 0 {
            connectionThroughput = measured
        }
    }

    /// The size of a download's next request: `limit` (twice the last one, while it grows),
    /// within ``StreamCache/Configuration/initialSegmentSize`` and
    /// ``StreamCache/Configuration/maximumSegmentSize`` (or the origin's
    /// ``Origin/maximumRequestLength``, when smaller), and within
    /// ``StreamCache/Configuration/parallelPartSize`` while long ranges are split across
    /// connections: a request in flight cannot be split, so a longer one would keep the tail of
    /// its range from the other connections.
    ///
    /// Requests are not bounded in time: each one costs a round trip and counts against a cloud
    /// API's quota, and a seek into a long request in flight does not wait for it, the request
    /// being cut instead (see ``joins(_:at:)``). An origin that cannot stop a transfer
    /// (``Origin/stopsAbandonedTransfers``) would receive a cut request whole, so its requests
    /// end within ``StreamCache/Configuration/maximumJoinWait`` at `throughput`, the speed its
    /// connection last reached: a seek into one waits at most that long.
    func segmentSize(atMost limit: Int64, throughput: Double?) -> Int64 {
        var size = limit
        if !origin.stopsAbandonedTransfers, let throughput {
            size = min(size, bytesWithinJoinWait(at: throughput))
        }
        return min(largestRequest, max(configuration.initialSegmentSize, size))
    }

    /// Where a request from `start` that asks for `count` bytes ends, at `limit` at most: past
    /// the cached bytes on the way when requests skip them (``crossesCachedBytes``), so that
    /// a request's planned end, and where a part split off after it begins, is where its bytes
    /// end. (Counted in offsets, a request across a seek's 256 KiB fell that much short of its
    /// share, and the last part of the read got it.)
    func endAfterMissingBytes(_ count: Int64, from start: Int64, within limit: Int64) -> Int64 {
        guard crossesCachedBytes else { return start + min(count, limit - start) }
        var left = count
        for gap in available.gaps(in: ByteRange(start, max(start, limit))) {
            if gap.count >= left { return gap.lowerBound + left }
            left -= gap.count
        }
        return limit
    }

    /// Where a request from the start of `window` planned to end at `end` ends: at the window's
    /// end when what would be left after it is less than a quarter of the request, or of
    /// ``StreamCache/Configuration/initialSegmentSize``. The rest would be a request of its own
    /// on the same connection: a round trip more, and one more request against a cloud API's
    /// quota, to save a quarter of the request's transfer at most. A window split unevenly across
    /// connections once left requests of 2 bytes and of 64 KiB behind, and each part of a 30 MB
    /// read across four connections one of 440 KB.
    func requestEnd(_ end: Int64, takingTheRestOf window: ByteRange) -> Int64 {
        let rest = window.upperBound - end
        let smallRest = max(configuration.initialSegmentSize, end - window.lowerBound) / 4
        guard rest > 0, rest < smallRest, missingByteCount(in: window) <= originsLargestRequest else {
            return min(end, window.upperBound)
        }
        return window.upperBound
    }

    /// The most bytes one request of this resource asks for now (see ``segmentSize(atMost:throughput:)``).
    var largestRequest: Int64 {
        let maximum = min(configuration.maximumSegmentSize, originsLargestRequest)
        return splitsLongRanges ? min(maximum, configuration.parallelPartSize) : maximum
    }

    /// The origin's ``Origin/maximumRequestLength`` when it is a count of bytes (a number below
    /// one is no limit an origin can mean, and is taken as none).
    var originsLargestRequest: Int64 {
        guard let maximum = origin.maximumRequestLength, maximum > 0 else { return .max }
        return maximum
    }
}
