#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension Resource {
    /// Reads `range` of the resource as one ordered stream of chunks.
    ///
    /// The range may run past the end (use `Int64.max` as the upper bound to read to the end): it
    /// is cut to the resource's length once known. A range starting at or past the end gives an
    /// empty stream.
    ///
    /// ```swift
    /// for try await chunk in resource.read(ByteRange(0, 1 << 20)) {
    ///     player.feed(chunk.data)
    /// }
    /// ```
    public nonisolated func read(_ range: ByteRange) -> ReadStream {
        let buffer = AsyncBuffer<ReadChunk>(limit: configuration.readBufferLimit)
        let task = Task { await self.runRead(range, delivery: .chunks(buffer)) }
        buffer.setOnCancel { task.cancel() }
        return ReadStream(buffer: buffer)
    }

    /// Reads `range` of the resource as one ordered stream of cached regions: where its bytes
    /// lie in the cache file, each handed on once it is cached (see ``RegionStream``).
    ///
    /// The range may run past the end, as with ``read(_:)``.
    ///
    /// ```swift
    /// for try await region in resource.regions(ByteRange(0, Int64.max)) {
    ///     try send(region)  // e.g. sendfile from region.duplicateFileDescriptor()
    /// }
    /// ```
    public nonisolated func regions(_ range: ByteRange) -> RegionStream {
        let buffer = AsyncBuffer<CachedRegion>(limit: configuration.readBufferLimit)
        let task = Task { await self.runRead(range, delivery: .regions(buffer)) }
        buffer.setOnCancel { task.cancel() }
        return RegionStream(buffer: buffer)
    }

    /// Reads from `offset` to the end of the resource.
    public nonisolated func read(from offset: Int64) -> ReadStream {
        read(ByteRange(offset, Int64.max))
    }

    /// The cached bytes of `range`, when every one of them is cached; `nil` otherwise (read it
    /// with ``read(_:)``). Counts as a read served from the cache.
    public func cachedRegion(_ range: ByteRange) async throws -> CachedRegion? {
        let began = ContinuousClock.now
        try await ensureLoaded()
        await revalidateIfDue()
        guard !range.isEmpty, available.contains(range), let file else { return nil }
        countServed(reads: 1, cache: range.count, origin: 0)
        metrics?.recordFirstByte(after: .now - began, fromCache: true)
        touchIfDue()
        return CachedRegion(range: range, file: file, info: info)
    }

    /// The resource's info, asking the origin only when the cache does not know the length yet.
    ///
    /// When it must ask, it starts the download a reader at `offset` would need, so the bytes the
    /// caller reads next are already on their way and the question costs no extra request.
    ///
    /// - Parameter offset: Where the caller will read first (0 when unknown).
    /// - Throws: ``StreamCacheError`` when the origin fails or does not tell the length
    ///   (`badResponse`), `CancellationError` when cancelled.
    public func loadInfo(near offset: Int64 = 0) async throws -> ResourceInfo {
        try await ensureLoaded()
        await revalidateIfDue()
        if let info, info.totalLength != nil { return info }
        // The probe's region carries the version it was read from: the read may end, and a
        // removal (eviction) clear what the resource learned, before this resumes.
        var probe = regions(ByteRange(max(0, offset), max(0, offset) + 1)).makeAsyncIterator()
        let region = try await probe.next()
        if let info, info.totalLength != nil { return info }
        if let version = region?.info, version.totalLength != nil { return version }
        if offset > 0 { return try await loadInfo(near: 0) }
        if let info { return info }
        throw StreamCacheError(.badResponse, "The origin did not tell the resource's length.")
    }

    /// Downloads every missing byte of `range` into the cache (the whole resource when `nil`),
    /// and returns when they are all cached.
    ///
    /// Cached bytes are skipped without being read; downloads started here are not stopped for
    /// lack of readers while it runs. Cancelling the task stops them too (those a player reads
    /// from go on for the player); what they fetched stays cached.
    ///
    /// When the prefetch completes the resource and its origin publishes a content digest
    /// (``ResourceInfo/contentDigest``), it returns once the bytes were checked against it. Bytes
    /// that do not match are dropped and downloaded once more.
    ///
    /// - Throws: ``StreamCacheError`` when the origin fails, or with
    ///   ``StreamCacheError/Code/contentMismatch`` when the bytes failed the digest twice, differently;
    ///   `CancellationError` when cancelled.
    public func prefetch(_ range: ByteRange? = nil) async throws {
        try await prefetch(range, pacer: nil)
    }

    /// ``prefetch(_:)``, its downloads kept to `pacer`'s rate as well as the cache's background rate.
    func prefetch(_ range: ByteRange?, pacer: DownloadPacer?) async throws {
        for attempt in 1...2 {
            let dropsBefore = contentDrops
            let buffer = AsyncBuffer<ReadChunk>(limit: 1)
            await runRead(range ?? ByteRange(0, Int64.max), delivery: .nothing(buffer), pacer: pacer)
            let failure = try? await buffer.errorIfFailed()
            if failure == nil || (failure as? StreamCacheError)?.endsAReadOfDroppedBytes == true {
                // The check may end the read itself: it drops the bytes while the read takes its last steps.
                await awaitContentCheck()
            }
            if contentDrops == dropsBefore {
                if let failure { throw failure }
                return
            }
            if attempt == 2 {
                throw StreamCacheError(.contentMismatch, "The downloaded bytes did not match the digest the origin publishes, twice; they were dropped.")
            }
            logger.info("downloading the resource again after its bytes failed the origin's digest", metadata: ["key": "\(key)"])
        }
    }

    /// Downloads `range` (the whole resource by default) as ``prefetch(_:)`` does and, with
    /// `pinning`, pins the resource once the bytes are recorded (``setPinned(_:)``): a file
    /// downloaded for offline play that eviction never removes, however full the cache gets,
    /// until it is unpinned. A prefetch that fails pins nothing; what it fetched stays, unpinned.
    ///
    /// - Throws: what ``prefetch(_:)`` throws; ``StreamCacheError/Code/cacheIOFailed`` when the
    ///   index could not record the pin.
    public func prefetch(_ range: ByteRange? = nil, pinning: Bool) async throws {
        try await prefetch(range, pinning: pinning, pacedBy: nil)
    }

    /// ``prefetch(_:pinning:)``, at no more than `pacer`'s rate: the downloads that bring the
    /// prefetch's bytes keep to it, together with every other prefetch given the same pacer, and
    /// to the cache's ``StreamCache/backgroundDownloadRate`` as well. As with that rate, a player
    /// that comes to the bytes is never held back. A download that brings bytes of several
    /// prefetches keeps to each of their rates, unless one of them has none. `nil` keeps to the
    /// cache's rate alone.
    ///
    /// - Throws: what ``prefetch(_:pinning:)`` throws.
    public func prefetch(_ range: ByteRange? = nil, pinning: Bool = false, pacedBy pacer: DownloadPacer?) async throws {
        try await prefetch(range, pacer: pacer)
        if pinning { _ = try await setPinned(true) }
    }

    /// Pins the resource (eviction never removes it) or unpins it, once every byte written so far
    /// is recorded in the index, which creates its entry if no commit did yet.
    /// ``StreamCache/setPinned(_:for:)`` does the same for a key alone.
    ///
    /// - Returns: `false` when the index holds nothing of the resource (nothing was cached).
    public func setPinned(_ pinned: Bool) async throws -> Bool {
        await flush()
        do {
            return try await store.setPinned(pinned, for: key)
        } catch {
            throw StreamCacheError(.cacheIOFailed, "The cache index could not record the pin of \(key).", underlying: SendableErrorDescription(error))
        }
    }

    /// The read loop. Planning happens on the actor; disk reads and hand-off to the consumer do not,
    /// so readers never hold up downloads or each other.
    nonisolated func runRead(_ range: ByteRange, delivery: ReadDelivery, pacer: DownloadPacer? = nil) async {
        let began = ContinuousClock.now
        let readerID: Int
        let initiallyCached: RangeSet
        let generation: Int
        let isPrefetch = delivery.isPrefetch
        do {
            (readerID, initiallyCached, generation) = try await beginRead(range, prefetch: isPrefetch, pacer: pacer)
        } catch {
            delivery.finish(throwing: error)
            return
        }
        var position = range.lowerBound
        var servedCache: Int64 = 0
        var servedOrigin: Int64 = 0
        var awaitsFirstByte = !isPrefetch
        do {
            while true {
                // Handed to `nextStep`, which counts them first and may then throw (a cancelled
                // read): zeroed before, so that the error path below does not count them again.
                let (cacheToCount, originToCount) = (servedCache, servedOrigin)
                servedCache = 0
                servedOrigin = 0
                let step = try await nextStep(readerID: readerID, position: position, end: range.upperBound, generation: generation,
                                              servedCache: cacheToCount, servedOrigin: originToCount, skipCached: isPrefetch)
                guard case .available(let run, let file, let version) = step else { break }
                if awaitsFirstByte {
                    awaitsFirstByte = false
                    metrics?.recordFirstByte(after: .now - began, fromCache: initiallyCached.contains(run.lowerBound))
                }
                let buffer: AsyncBuffer<ReadChunk>
                switch delivery {
                case .nothing:
                    position = run.upperBound
                    continue
                case .regions(let regions):
                    try await regions.send(CachedRegion(range: run, file: file, info: version), weight: Int(clamping: run.count))
                    // Counted once handed over: a send that throws (the consumer left) served nothing.
                    let cached = initiallyCached.coveredByteCount(in: run)
                    servedCache += cached
                    servedOrigin += run.count - cached
                    position = run.upperBound
                    continue
                case .chunks(let chunks):
                    buffer = chunks
                }
                while position < run.upperBound {
                    let count = Int(min(Int64(configuration.chunkSize), run.upperBound - position))
                    let data = try file.read(count: count, at: position)
                    guard data.count == count else {
                        throw StreamCacheError(.cacheIOFailed, "The cache file is shorter than its index claims; clear the cache entry.",
                                               range: ByteRange(position, run.upperBound))
                    }
                    // Label the chunk by where its bytes were when the read began; split it only
                    // where it crosses from cached to downloaded bytes (rare), so the usual chunk is
                    // handed on without a copy.
                    var offset = position
                    let chunkEnd = position + Int64(count)
                    while offset < chunkEnd {
                        let cachedRun = initiallyCached.range(containing: offset)
                        let boundary = min(chunkEnd, cachedRun?.upperBound ?? initiallyCached.firstLowerBound(atOrAfter: offset) ?? chunkEnd)
                        let source: ChunkSource = cachedRun != nil ? .cache : .origin
                        let length = Int(boundary - offset)
                        let piece = length == count ? data : data.subdata(in: Int(offset - position)..<Int(boundary - position))
                        try await buffer.send(ReadChunk(offset: offset, data: piece, source: source), weight: length)
                        if source == .cache { servedCache += Int64(length) } else { servedOrigin += Int64(length) }
                        offset = boundary
                    }
                    position += Int64(count)
                }
            }
            delivery.finish()
        } catch {
            delivery.finish(throwing: error)
        }
        await endRead(readerID: readerID, handedOutTo: position, servedCache: servedCache, servedOrigin: servedOrigin)
    }

    enum ReadStep {
        /// Cached bytes of the file, and the info of the version they belong to.
        case available(ByteRange, DataFile, ResourceInfo?)
        case end
    }

    func beginRead(_ range: ByteRange, prefetch: Bool, pacer: DownloadPacer? = nil) async throws -> (Int, RangeSet, Int) {
        // Refused before any offset arithmetic (see ``ByteRange/largestLength``).
        guard range.lowerBound < ByteRange.largestLength else {
            throw StreamCacheError(.rangeNotSatisfiable, "Offset \(range.lowerBound) is past the end of any resource (\(ByteRange.largestLength) bytes at most).")
        }
        // Until the reader is registered below (in the same turn as the load's end), a removal
        // must wait: see ``removeIfIdle()``.
        readsStarting += 1
        defer { readsStarting -= 1 }
        try await ensureLoaded()
        // A read that starts on a missing byte gets the origin's word from its own download's
        // answer, before any cached byte goes out: asking first would only add a round trip,
        // unless the origin's downloads do not tell the version (a cloud API's revision), or the
        // read joins a request sent before it began, whose answer may be older than the interval.
        if available.contains(range.lowerBound) || !downloadsConfirmVersion {
            await revalidateIfDue()
        } else if configuration.revalidationInterval != nil, startsInARequestAlreadySent(at: range.lowerBound) {
            await revalidateIfDue(forARequestInFlight: true)
        }
        let id = makeID()
        fillsWaitForARead = false
        readers[id] = ReaderState(start: range.lowerBound, position: range.lowerBound, end: range.upperBound, failuresSeen: failureCount, isPrefetch: prefetch,
                                  pace: PlaybackPace(smallestStep: Int64(configuration.chunkSize)), pacer: pacer)
        usage.begin(key)
        statistics.reads += 1
        logger.debug("read began", metadata: ["key": "\(key)", "reader": "\(id)", "start": "\(range.lowerBound)", "end": "\(range.upperBound)"])
        reaper?.cancel()
        reaper = nil
        touchIfDue()
        if !prefetch { settleShortReadDownloads(for: range) }
        // Start fetching a missing first byte now rather than on the next call: the origin round
        // trip is the longest wait of a cold read. `nextStep` joins this download (or reports why
        // there is none).
        let end = info?.totalLength.map { min($0, range.upperBound) } ?? range.upperBound
        if range.lowerBound < end, !available.contains(range.lowerBound) {
            try? ensureDownload(covering: range.lowerBound, readerEnd: range.upperBound, prefetch: prefetch)
        }
        return (id, available.intersection(range), generation)
    }

    /// Records recency for eviction, at most once a second per resource; a resource without an
    /// index row yet gets its time when the row is created.
    func touchIfDue() {
        guard entryID != nil, lastTouched.map({ ContinuousClock.now - $0 > .seconds(1) }) ?? true else { return }
        lastTouched = .now
        let store = self.store
        let key = self.key
        enqueueStoreOperation { try? await store.touch(key) }
    }

    /// Adds to ``statistics`` in one change, so the cache-wide counts take one step, not three.
    func countServed(reads: Int, cache: Int64, origin: Int64) {
        guard reads > 0 || cache > 0 || origin > 0 else { return }
        var totals = statistics
        totals.reads += reads
        totals.bytesServedFromCache += cache
        totals.bytesServedFromOrigin += origin
        statistics = totals
    }

    /// The read of `readerID` ended; its consumer was handed every byte before `handedOutTo`.
    ///
    /// The reader's recorded position is where its last step began (`nextStep` records it): a
    /// consumer that leaves while a step's bytes are still being handed out, or before the read
    /// asks for its next step, leaves it there, up to a whole step behind where it got to
    /// (655 kB, once, in a test whose player left 300 kB before a part of a split read, and
    /// whose read-ahead then ended short of that part). Its read-ahead counts from where it got.
    func endRead(readerID: Int, handedOutTo handedOut: Int64, servedCache: Int64, servedOrigin: Int64) {
        countServed(reads: 0, cache: servedCache, origin: servedOrigin)
        guard var reader = readers.removeValue(forKey: readerID) else { return }
        reader.position = max(reader.position, min(handedOut, reader.end))
        logger.debug("read ended", metadata: ["key": "\(key)", "reader": "\(readerID)", "at": "\(reader.position)"])
        usage.end(key)
        extendReadAhead(ofReaderThatLeft: reader)
        if reader.isPrefetch {
            let wanted = ByteRange(reader.start, max(reader.start, min(reader.end, info?.totalLength ?? reader.end)))
            endDownloadsOfEndedPrefetch(finished: available.contains(wanted))
        }
        releaseHeldPartsWhoseTurnCame()
        scheduleReaperIfIdle()
        if readers.isEmpty, configuration.completesResourcesInBackground {
            startBackgroundCompletion()
            replanParallelDownloads()
        }
        startFillingSmallGap()
    }

    /// A prefetch ended (done, failed, or cancelled by its caller): the downloads it kept going
    /// that no other prefetch needs stop being a prefetch's. One a player reads from goes on as
    /// that player's (and stops as a player's does). When the prefetch is done (`finished`: every
    /// byte it wanted cached), one it took over goes back to what it was: a player's read-ahead
    /// goes on to where it would have stopped (cut, the player coming back would find a hole
    /// and wait for a request). The others are cut at once, request in flight and all: a prefetch
    /// that is done has nothing left for them to fetch, and one its caller cancelled (an app's
    /// "stop downloading", `DELETE /api/resources/{id}/prefetch`, Ctrl-C on `streamcache
    /// prefetch`) must stop fetching, the read-ahead it took over included (given back, a
    /// stopped prefetch's download asked the origin for more after the stop). Before 2026-12-02
    /// a cancelled prefetch's downloads went on to the end of the file. When it did not end
    /// `finished`, until a read begins, no fill closes the holes it left (``fillsWaitForARead``).
    func endDownloadsOfEndedPrefetch(finished: Bool) {
        if !finished, !readers.values.contains(where: \.isPrefetch) { fillsWaitForARead = true }
        func wanted(_ reader: ReaderState) -> ByteRange { ByteRange(reader.position, max(reader.position, reader.end)) }
        for (id, download) in downloads where download.kind == .prefetch {
            let needers = readers.values.filter { wanted($0).overlaps(download.window) }
            if needers.contains(where: \.isPrefetch) { continue }
            let before = !needers.isEmpty ? .read : finished ? download.kindBeforePrefetch : nil
            if let before {
                downloads[id]?.kind = before
                downloads[id]?.kindBeforePrefetch = nil
                continue
            }
            download.task?.cancel()
            releaseHold(of: id)
            releasePace(of: id)
        }
    }

    /// Waits until the byte at `position` is cached and returns the cached run that starts there
    /// (cut to `end`), or `.end` past the end of the read or the resource.
    func nextStep(readerID: Int, position: Int64, end requestedEnd: Int64, generation readerGeneration: Int,
                  servedCache: Int64, servedOrigin: Int64, skipCached: Bool) async throws -> ReadStep {
        countServed(reads: 0, cache: servedCache, origin: servedOrigin)
        var position = position
        var replans = 0
        if !skipCached, configuration.playbackReadAhead != nil {
            readers[readerID]?.pace.reader(at: position, cached: available.contains(position))
        }
        while true {
            try Task.checkCancellation()
            guard readerGeneration == generation else { throw droppedDuringRead(generation: readerGeneration) }
            guard let file = try reopenedFile() else { throw StreamCacheError(.cacheIOFailed, "The resource was removed from the cache during the read.") }
            var end = requestedEnd
            if let total = info?.totalLength { end = min(end, total) }
            readers[readerID]?.position = position
            readers[readerID]?.end = end
            if let reader = readers[readerID] { noteTaken(by: reader) }
            if position >= end { return .end }
            if let run = available.range(containing: position) {
                let cut = ByteRange(position, min(run.upperBound, end))
                if let lost = bytesTheFileLost(in: cut, of: run, file: file), forgetBytesTheFileLost(lost) { continue }
                if skipCached, cut.upperBound < end {
                    position = cut.upperBound
                    replans = 0
                    continue
                }
                // Steps are measured out only to tell a player's pace (``PlaybackPace``), which
                // matters only while bytes it will read are missing: a read of cached bytes to its
                // end (a warm read) gets them in one step, as one `sendfile` region.
                guard configuration.playbackReadAhead != nil, cut.upperBound < end, let reader = readers[readerID], !skipCached else {
                    if let reader = readers[readerID] { noteHandedOut(to: reader, upTo: cut.upperBound) }
                    return .available(cut, file, info)
                }
                let step = min(cut.count, reader.pace.stepLimit)
                noteHandedOut(to: reader, upTo: position + step)
                readers[readerID]?.pace.handedOutStep(bytes: step)
                keepPlaybackWindowFilled(for: reader, cachedEnd: run.upperBound)
                return .available(ByteRange(position, position + step), file, info)
            }
            // Counts waits that ended without the byte at `position` arriving (downloads that stopped
            // short); progress resets it.
            replans += 1
            if replans > 50 {
                throw StreamCacheError(.originUnavailable, "The origin kept ending downloads without delivering byte \(position).", range: ByteRange(position, end))
            }
            // A download for this byte failed since this reader last planned: that is its answer.
            let seen = readers[readerID]?.failuresSeen ?? failureCount
            if let failure = recentFailures.last(where: { $0.number > seen && $0.window.contains(position) }) { throw failure.error }
            readers[readerID]?.failuresSeen = failureCount
            let reader = readers[readerID]
            try ensureDownload(covering: position, readerEnd: end, prefetch: skipCached, streamed: position - (reader?.start ?? position))
            if let reader, partsServe(reader) {
                addParallelDownloads(in: ByteRange(position, end), kind: skipCached ? .prefetch : .read, pacer: reader.pacer)
            }
            try await waitUntilAvailable(position)
        }
    }

    /// Suspends until `offset` is cached, a download covering it ends (re-plan), or it fails.
    func waitUntilAvailable(_ offset: Int64) async throws {
        let id = makeID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                waiters[id] = Waiter(offset: offset, continuation: continuation)
            }
        } onCancel: {
            Task { await self.cancelWaiter(id) }
        }
    }

    private func cancelWaiter(_ id: Int) {
        waiters.removeValue(forKey: id)?.continuation.resume(throwing: CancellationError())
    }

    /// Wakes waiters whose offset is now cached, or all of them (to re-plan) when `all` is set.
    func wakeWaiters(all: Bool = false, error: (any Error)? = nil, in window: ByteRange? = nil) {
        for (id, waiter) in waiters {
            let inWindow = window.map { $0.contains(waiter.offset) } ?? true
            guard all || available.contains(waiter.offset) || (error != nil && inWindow) else { continue }
            waiters[id] = nil
            if let error, inWindow, !available.contains(waiter.offset) {
                waiter.continuation.resume(throwing: error)
            } else {
                waiter.continuation.resume()
            }
        }
    }
}

extension AsyncBuffer {
    /// For a buffer nobody consumes: the error it was finished with, if any.
    func errorIfFailed() async throws -> (any Error)? {
        do {
            while try await next() != nil {}
            return nil
        } catch {
            return error
        }
    }
}
