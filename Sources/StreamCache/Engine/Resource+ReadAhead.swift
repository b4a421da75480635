extension Resource {
    // What a download fetches once no reader needs it: its read-ahead, bounded in bytes and by the
    // grace period, held back while its player may be skimming, and stopped when the origin stalls.

    /// Starts or ends a download's idle spell: while no reader needs it, it may fetch at most
    /// ``StreamCache/Configuration/idleReadAhead`` more bytes, for at most the grace period.
    ///
    /// The read-ahead is one per read, not one per connection: a long read split across four
    /// connections that its player leaves reads ahead where the player was, and its parts
    /// further on, which the player never reached, only finish their request in flight (a cloud
    /// player that stops would otherwise pull four read-aheads, 16 MiB by default).
    func updateIdleState(_ download: inout Download) {
        if isNeeded(download) {
            download.idleSince = nil
            download.idleLimit = nil
            download.readAheadClaimEnd = nil
            if !download.readerReached {
                download.readerReached = readers.values.contains { download.isReached(byReaderAt: $0.position) }
            }
        } else if download.idleSince == nil {
            download.idleSince = .now
            // The request in flight is finished when it ends soon (its bytes are on the wire
            // already: within the read-ahead, and within ``maximumJoinWait`` at its speed, as a
            // read would wait for it); a longer one, on a slow link, is cut where the read-ahead
            // ends. The read-ahead grows with what the readers took, from the minimum (a probe
            // that read 2 bytes, a player that reads a little further on its next play) to the
            // maximum (a player that streamed a while).
            // A reader still here has the rest of its range cached and takes it to its end. The
            // read-ahead counts from there: the download may have written well past it before the
            // reader was woken (the bytes that arrived meanwhile are written in one go), and
            // counted from the download it would ask for bytes past the read-ahead.
            var readAheadStart: Int64?
            for reader in readers.values where !reader.isPrefetch && download.isReached(byReaderAt: reader.position) {
                let end = min(reader.end, download.position)
                download.readerTook = max(download.readerTook, end - reader.start)
                readAheadStart = max(readAheadStart ?? end, end)
            }
            let maximum = configuration.idleReadAhead
            let minimum = min(maximum, configuration.minimumIdleReadAhead)
            let finishable = speed(of: download).map { min(maximum, bytesWithinJoinWait(at: $0)) } ?? maximum
            let inFlightEnd = download.segmentEnd - download.position <= finishable ? download.segmentEnd : download.position
            // A part its reader never reached gets no request of its own past the one in flight,
            // and that one goes on as far as the origin has sent already: about a round trip's
            // worth at its speed (what travels while the cut does), at most the minimum
            // read-ahead. Going on by the minimum regardless cost each part 1 MiB more on a
            // cloud connection of 4 MB/s, where a round trip brings 160 kB.
            let readAhead = download.readerReached ? min(maximum, max(minimum, download.readerTook))
                : min(minimum, max(0, download.segmentEnd - download.position), bytesOnTheWire(download) ?? .max)
            download.idleLimit = max(inFlightEnd, (readAheadStart ?? download.position) + readAhead, download.readAheadClaimEnd ?? 0)
        }
    }

    /// Ends the read-ahead of every download no reader needs: each finishes the request it has in
    /// flight (those bytes are on the wire already) and asks for nothing more. A read that starts
    /// later gets its own download, as after any read-ahead that ended.
    ///
    /// For a prefetch that a stop overtook while it started (the server's control API): it first
    /// asked the origin whether the file is a playlist, reading its first byte, and that probe
    /// left a read-ahead behind. Had the prefetch started, it would have taken that download over,
    /// and the stop would have ended it; as it was, a megabyte was asked for after the stop.
    package func endReadAheads() {
        guard !configuration.completesResourcesInBackground else { return }
        for (id, var download) in downloads where download.kind == .read && !isNeeded(download) {
            updateIdleState(&download)
            download.readAheadClaimEnd = nil
            download.idleLimit = min(download.idleLimit ?? .max, max(download.position, download.segmentEnd))
            downloads[id] = download
        }
    }

    /// A player left at `reader`'s position: its read-ahead (what it took, within the minimum and
    /// maximum, as ``updateIdleState(_:)`` counts it) may reach past the end of the download it
    /// was in, into a part of a split read further on that it never reached. That part goes on
    /// to where the read-ahead ends (``Download/readAheadClaimEnd``) rather than ending with its
    /// request in flight: the read-ahead is the player's, wherever the download's windows were
    /// cut. A player that left 300 kB before a part's window, with a read-ahead of 2 MiB, got the
    /// part's request in flight (1 MiB into it) and no more.
    ///
    /// A part that begins right where the player left counts as further on once the player took
    /// bytes: it took its own download to the end, none of the part's, and the part is what it
    /// would have read next (the stream hands a player its download's last bytes in one step,
    /// and one that leaves then is at the part's first byte).
    func extendReadAhead(ofReaderThatLeft reader: ReaderState) {
        guard !reader.isPrefetch, !configuration.completesResourcesInBackground else { return }
        let maximum = configuration.idleReadAhead
        let readAhead = min(maximum, max(min(maximum, configuration.minimumIdleReadAhead), reader.position - reader.start))
        let end = reader.position + readAhead
        let tookBytes = reader.position > reader.start
        for (id, download) in downloads where download.kind == .read && download.start < end
            && (download.start > reader.position || (tookBytes && download.start == reader.position)) {
            let claim = max(download.readAheadClaimEnd ?? end, end)
            downloads[id]?.readAheadClaimEnd = claim
            if let idleLimit = download.idleLimit { downloads[id]?.idleLimit = max(idleLimit, claim) }
        }
    }

    /// About what the origin has sent of `download`'s request in flight beyond what arrived: its
    /// speed times the path's round trip, the shortest any of the resource's requests took from
    /// when its task sent it to when the transport received its first bytes (both stamped off the
    /// actor). The shortest, as TCP's own estimate takes it: a request that waited for a busy
    /// machine or a slow server says nothing about the path. `nil` with no speed or round trip known.
    func bytesOnTheWire(_ download: Download) -> Int64? {
        guard let speed = speed(of: download), let shortestRoundTrip else { return nil }
        return Int64(speed * max(0, shortestRoundTrip.timeInterval))
    }

    /// Records, on each download whose bytes `reader` has come to, that a reader reached it and
    /// how much the read has been handed: such a download reads ahead once no reader needs it,
    /// by as much as that (``updateIdleState(_:)``).
    ///
    /// Recorded at each step (and for the bytes a step hands out, ``noteHandedOut(to:upTo:)``),
    /// not only when a chunk arrives: a player that catches up with a part of a long read may
    /// take its cached bytes in one step and leave between two chunks, and the part, never seen
    /// reached, then ended a round trip past it (under load, at the end of its first request of
    /// 1 MiB, 750 kB past where the player left, instead of 1 MiB past).
    func noteTaken(by reader: ReaderState) {
        guard !reader.isPrefetch else { return }
        let taken = reader.position - reader.start
        let reached = downloads.values.filter { $0.isReached(byReaderAt: reader.position) && (!$0.readerReached || $0.readerTook < taken) }
        for download in reached {
            downloads[download.id]?.readerReached = true
            downloads[download.id]?.readerTook = max(download.readerTook, taken)
        }
    }

    /// Records that `reader`, at its position, is handed the bytes up to `end`: the downloads
    /// that fetched any of them have been reached (``noteTaken(by:)``). A step of cached bytes
    /// runs on from one download's bytes into the next one's, and the reader may leave before
    /// its next step shows where it got to.
    func noteHandedOut(to reader: ReaderState, upTo end: Int64) {
        guard !reader.isPrefetch, end > reader.position else { return }
        for (id, download) in downloads where !download.readerReached && download.start < end && reader.position <= download.limit {
            downloads[id]?.readerReached = true
        }
    }

    /// Whether an idle download has fetched its read-ahead. One that stops within
    /// ``StreamCache/Configuration/joinDistance`` of bytes that are cached or on their way goes on
    /// to them instead: a player that plays the same stretch again reads a little further than
    /// the first time (its bytes now come faster), and would find a hole right there that only
    /// the origin can fill.
    func reachedIdleLimit(_ download: inout Download) -> Bool {
        guard let idleLimit = download.idleLimit, download.position >= idleLimit else { return false }
        var next = available.firstLowerBound(atOrAfter: download.position) ?? Int64.max
        for other in downloads.values where other.id != download.id && other.start >= download.position {
            next = min(next, other.start)
        }
        guard next > download.position, next <= download.limit, next - download.position <= configuration.joinDistance else { return true }
        download.idleLimit = next
        return false
    }

    /// Whether a reader (not a prefetch) will want bytes of the download's window.
    func isNeeded(_ download: Download) -> Bool {
        readers.values.contains { $0.position < download.limit && $0.end > download.position }
    }

    /// After the last reader leaves, watches read downloads once per grace period and cancels
    /// those that made no progress during it (a stalled origin; see ``madeProgress(_:since:now:)``).
    /// A download that makes progress stops by itself at the end of its request in flight (see
    /// ``nextSegment(id:)``).
    func scheduleReaperIfIdle() {
        guard readers.isEmpty, downloads.values.contains(where: { $0.kind == .read }), reaper == nil,
              !configuration.completesResourcesInBackground else { return }
        let grace = configuration.idleDownloadGracePeriod
        let positions = downloads.mapValues(\.position)
        // Weak: the downloads it watches hold the resource; the watch alone must not.
        reaper = Task { [weak self] in
            do { try await Task.sleep(for: grace) } catch { return }
            await self?.reapIdleDownloads(positionsBefore: positions)
        }
    }

    func reapIdleDownloads(positionsBefore: [Int: Int64], now: ContinuousClock.Instant = .now) {
        reaper = nil
        guard readers.isEmpty else { return }
        for download in downloads.values where download.kind == .read && !madeProgress(download, since: positionsBefore[download.id], now: now) {
            download.task?.cancel()
            releaseHold(of: download.id)
        }
        scheduleReaperIfIdle()
    }

    /// Whether `download` made progress during the reaper's watch: it wrote bytes past
    /// `positionBefore`, or its transport holds bytes its task has not taken yet
    /// (``HTTPBody/bytesWaiting``), the newest of which arrived less than three grace periods ago.
    ///
    /// The second is a download whose task runs late (a busy machine: the transport receives on
    /// its own threads while the task waits for one of the pool's): its origin did not stall, and
    /// cancelling it would throw away what the origin sent, for the next reader to fetch again.
    /// The bound still stops one whose task no longer takes anything in.
    func madeProgress(_ download: Download, since positionBefore: Int64?, now: ContinuousClock.Instant) -> Bool {
        if positionBefore != download.position { return true }
        guard let body = download.answerBody, let waiting = body.bytesWaiting, waiting > 0, let newest = body.newestArrival else { return false }
        return now - newest < configuration.idleDownloadGracePeriod * 3
    }

    /// Holds back the read-ahead of a download started for a short bounded read (a seek, a
    /// probe) for ``StreamCache/Configuration/skimmingWindow``, once, when no reader needs it.
    ///
    /// A player that asks for a few hundred KiB here and then at once for a few hundred KiB
    /// elsewhere is skimming (probing a file's structure, scrubbing): the read-ahead would fetch
    /// bytes it is not about to play, and on a link that all connections share it takes half the
    /// link from the read the player waits for (`wan` profile: 256 KiB seeks 118 ms with it,
    /// 68 ms without). A read that begins during the hold decides: one reaching into the
    /// read-ahead lets it go on at once, one elsewhere drops it (``settleShortReadDownloads(for:)``).
    /// With no read meanwhile it goes on after the hold, so a player's second play of the stretch
    /// still finds its bytes cached.
    func holdReadAheadWhileSkimmingMayFollow(id: Int) async {
        guard let window = configuration.skimmingWindow, window > .zero, var download = downloads[id],
              download.opened, download.kind == .read, download.startedForShortRead, !download.heldBack,
              !configuration.completesResourcesInBackground, download.position < download.limit,
              !available.contains(download.position), !isNeeded(download) else { return }
        download.heldBack = true
        downloads[id] = download
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            downloads[id]?.holdRelease = continuation
            Task { [weak self] in
                try? await Task.sleep(for: window)
                await self?.releaseHold(of: id)
            }
        }
    }

    /// Ends download `id`'s hold, if it is held.
    func releaseHold(of id: Int) {
        guard let continuation = downloads[id]?.holdRelease else { return }
        downloads[id]?.holdRelease = nil
        continuation.resume()
    }

    /// A player's read of `range` began. The downloads of short reads it begins in (or just
    /// before) serve a stream from now on: a hold ends at once and none follows. The others, whose
    /// own readers are gone, end after their request in flight: the player is skimming, or reads
    /// the whole file from elsewhere and reaches their bytes with its own download in time.
    func settleShortReadDownloads(for range: ByteRange) {
        for (id, download) in downloads where download.startedForShortRead {
            let readAheadEnd = max(download.position, download.idleLimit ?? download.position) + configuration.joinDistance
            let near = ByteRange(download.start, max(download.start + 1, min(download.limit, readAheadEnd)))
            if ByteRange(max(0, near.lowerBound - configuration.joinDistance), near.upperBound).contains(range.lowerBound) {
                downloads[id]?.startedForShortRead = false
            } else if !readers.values.contains(where: { near.contains($0.position) && $0.end > $0.position }) {
                downloads[id]?.skimmedPast = true
                if download.holdRelease != nil {
                    // Held, so no request is in flight: it ends now, and the read's own download
                    // may reach past where it stood.
                    releaseHold(of: id)
                    downloadEnded(id: id, error: nil)
                    continue
                }
            }
            releaseHold(of: id)
        }
    }
}
