#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension Resource {
    /// A download in flight: one origin request at a time filling the gaps of `[position, limit)`
    /// in the data file. When the origin serves several ranges in one response, a download goes
    /// on past cached bytes and each request may ask for the gaps on both sides of them.
    struct Download {
        enum Kind { case read, prefetch, background }
        let id: Int
        let start: Int64
        var position: Int64
        /// The download stops when it reaches this offset. It only shrinks: when a seek lands far
        /// ahead inside this window, the new download takes over the rest. (It grows once, when
        /// the origin ignores the range and the body starts at byte 0.)
        var limit: Int64 {
            didSet { stop.set(limit) }
        }
        /// ``limit`` as the download's writer sees it, off the actor. Every copy of the download
        /// shares it: set `limit` only on a copy that goes back into `downloads`.
        let stop: DownloadStop
        var kind: Kind
        /// The end of the request in flight. Downloads fetch in segments that grow while the
        /// download stays useful, so nothing far beyond what is needed is ever on the wire.
        var segmentEnd: Int64
        /// The end of the range of the request in flight that is arriving now; its bytes go on at
        /// the first of `followingRanges` (the gaps after cached bytes), if any.
        var rangeEnd: Int64
        var followingRanges: [ByteRange] = []
        /// ``received`` when the request in flight was sent.
        var segmentStartReceived: Int64 = 0
        /// The version the resource knew when the request in flight was planned (`nil`: none yet).
        /// An answer to it may have left the origin before a version the resource learned since.
        var plannedUnder: ResourceInfo?
        var segmentSize: Int64
        var segmentStartedAt: ContinuousClock.Instant = .now
        /// When the download's task sent its request in flight (``Resource/bytesOnTheWire(_:)``).
        var requestSentAt: ContinuousClock.Instant?
        var segmentStartPosition: Int64
        var opened = false
        /// When the download last became unneeded (no reader in its window), and how far it may
        /// go from then on: ``StreamCache/Configuration/idleReadAhead`` past where it was.
        var idleSince: ContinuousClock.Instant?
        var idleLimit: Int64?
        /// A reader has come to the download's bytes (the download of a read starts where its
        /// reader is). Only such a download reads ahead once no reader needs it: the reader comes
        /// back where it left. A part of a long read that its reader never reached sends no
        /// request past the one in flight instead (``Resource/updateIdleState(_:)``).
        var readerReached = true
        /// The most bytes one read (not a prefetch) had been handed when last seen in the
        /// download's bytes: what the download reads ahead once no reader needs it
        /// (``Resource/updateIdleState(_:)``). Counted from what the readers took, not from how far
        /// the download got, which runs ahead of them by as much as the transport hands over at once.
        var readerTook: Int64 = 0
        /// Started by ``Resource/addParallelDownloads(in:kind:)`` as a part of a long range: its
        /// read counts as split from then on (its tail is split again as it shrinks).
        var isParallelPart = false
        /// Bytes per second of the download's last complete request, if it was long enough to tell.
        var throughput: Double?
        /// The request in flight as a sample of ``Resource/parallelGain``, from its first bytes
        /// on, with the mark ``ParallelGain/beginReceiving(at:)`` gave it then.
        var requestSample: (transfer: ParallelGain.TransferSample, receivingMark: ParallelGain.Mark)?
        /// The request in flight gave its early sample (``Resource/recordEarlySample(of:at:)``).
        var gaveEarlySample = false
        /// The request in flight was held back (``Resource/holdBehindTheReadBeforeIt(id:)``): its
        /// speed, which counts the time it waited, tells nothing about the path.
        var requestWasHeld = false
        /// Since when the download first waited for the read before it to come (a part of a long
        /// read on a link its connections share), if it ever did.
        var heldBehindItsReadSince: ContinuousClock.Instant?
        /// The split short read (see ``ParallelGain``) whose part the first request is.
        var splitReadID: Int?
        var received: Int64 = 0
        var task: Task<Void, Never>?
        /// Started for a short bounded read (a seek, a probe): its read-ahead waits a moment to see
        /// whether the player is skimming (``Resource/holdReadAheadWhileSkimmingMayFollow(id:)``).
        var startedForShortRead = false
        /// Its read-ahead has been held back once already.
        var heldBack = false
        /// Resumes the download while its read-ahead is held back.
        var holdRelease: CheckedContinuation<Void, Never>?
        /// A read began elsewhere after the short read's readers left (the player skims): the
        /// download ends after its request in flight.
        var skimmedPast = false
        /// The download's place among those no reader waits for (``BulkConnectionGate``), if it
        /// is one: it sends its first request once the gate lets it through.
        var gateTicket: BulkConnectionGate.Ticket?
        /// A reader came to wait for it: once it has a place at the gate, it goes at once.
        var readerWaits = false

        init(id: Int, start: Int64, position: Int64, limit: Int64, kind: Kind, segmentEnd: Int64, rangeEnd: Int64, segmentSize: Int64,
             segmentStartPosition: Int64, startedForShortRead: Bool = false) {
            self.id = id
            self.start = start
            self.position = position
            self.limit = limit
            self.stop = DownloadStop(limit)
            self.kind = kind
            self.segmentEnd = segmentEnd
            self.rangeEnd = rangeEnd
            self.segmentSize = segmentSize
            self.segmentStartPosition = segmentStartPosition
            self.startedForShortRead = startedForShortRead
        }

        var window: ByteRange { ByteRange(position, max(position, limit)) }

        /// Whether the download's requests have told the path's speed: its request in flight gave
        /// its early sample (``Resource/recordEarlySample(of:at:)``), or a request of it ended.
        var hasMeasuredItsPath: Bool { gaveEarlySample || segmentStartReceived > 0 || throughput != nil }

        /// Whether a reader at `offset` has come to the download's bytes (from its start, however
        /// far it got, to its limit).
        func isReached(byReaderAt offset: Int64) -> Bool { start <= offset && offset <= limit }
    }

    /// Makes sure a download will deliver `offset`: joins one that reaches it soon, splits one
    /// that would reach it too late, or starts one at `offset` that stops at the next cached byte.
    /// `streamed` is how much the reader has read so far: a download for a reader that streams
    /// (see ``readerStreams(streamed:readerEnd:)``) or a prefetch starts at the segment size the
    /// resource's connections have reached.
    func ensureDownload(covering offset: Int64, readerEnd: Int64, prefetch: Bool, streamed: Int64 = 0) throws {
        // The cache is shutting down: nothing starts again (a waiting download let through by the
        // gate as another ends would otherwise send a request after the shutdown).
        guard !isShuttingDown else { throw CancellationError() }
        let kind: Download.Kind = prefetch ? .prefetch : .read
        let streams = prefetch || readerStreams(streamed: streamed, readerEnd: readerEnd)
        if let info, !info.acceptsByteRanges {
            // The origin cannot seek: one sequential download from byte 0 serves everyone.
            if let id = downloads.keys.first {
                if prefetch { downloads[id]?.kind = .prefetch }
                return
            }
            startDownload(at: 0, limit: info.totalLength ?? Int64.max, kind: kind)
            return
        }
        if let (id, download) = downloads.first(where: { $0.value.window.contains(offset) }) {
            if prefetch { downloads[id]?.kind = .prefetch }
            releaseHold(of: id)
            // A reader waits for it now: it goes past the gate, if it still waits there (or, while
            // it finds out its host, as soon as it gets a place).
            if !prefetch {
                downloads[id]?.readerWaits = true
                if let ticket = download.gateTicket { connectionGate.admitNow(ticket) }
            }
            if joins(download, at: offset) { return }
            // Too far ahead: this seek gets its own download and the old one stops where it starts,
            // cutting its request in flight there if it reaches that far.
            downloads[id]?.limit = offset
            if offset < download.segmentEnd {
                logger.debug("request in flight cut for a read ahead of it", metadata: ["key": "\(key)", "at": "\(offset)"])
            }
            startDownloads(at: offset, limit: download.limit, kind: kind, readerEnd: readerEnd, continuesStream: streams)
            return
        }
        // A download stops at cached bytes unless its requests can skip them.
        var limit = crossesCachedBytes ? Int64.max : available.firstLowerBound(atOrAfter: offset) ?? Int64.max
        for download in downloads.values where download.position > offset { limit = min(limit, download.position) }
        if let total = info?.totalLength { limit = min(limit, total) }
        if kind == .prefetch { limit = min(limit, max(readerEnd, offset + 1)) }
        guard limit > offset else { throw StreamCacheError(.rangeNotSatisfiable, "Offset \(offset) is past the end of the resource.") }
        startDownloads(at: offset, limit: limit, kind: kind, readerEnd: readerEnd, continuesStream: streams)
    }

    /// Whether a read at `offset`, inside `download`'s window, waits for it rather than starting
    /// its own: the download reaches `offset` within ``StreamCache/Configuration/joinDistance``,
    /// or its request in flight brings it within ``StreamCache/Configuration/maximumJoinWait`` at
    /// the speed its connection last reached (before any speed is known, a first request is
    /// short and always joined).
    ///
    /// A request in flight is only split by cutting its connection, which loses what the origin
    /// has already sent past the cut; bytes just past the download's position are worth that
    /// wait, a seek far into a long request on a slow link is not.
    func joins(_ download: Download, at offset: Int64) -> Bool {
        let ahead = offset - download.position
        if ahead <= configuration.joinDistance { return true }
        guard offset < download.segmentEnd else { return false }
        guard let throughput = speed(of: download), throughput > 0 else { return true }
        return ahead <= bytesWithinJoinWait(at: throughput)
    }

    /// The speed `download`'s connection last reached, or the resource's when it has none yet.
    func speed(of download: Download) -> Double? {
        download.throughput ?? connectionThroughput
    }

    /// How many bytes a connection at `throughput` brings within
    /// ``StreamCache/Configuration/maximumJoinWait``: what a read waits for, what an unneeded
    /// request in flight still finishes, and how long a request to an origin that cannot stop a
    /// transfer may be.
    func bytesWithinJoinWait(at throughput: Double) -> Int64 {
        Int64(min(throughput * configuration.maximumJoinWait.timeInterval, Double(Int64.max / 2)))
    }

    /// Starts the download of `[start, limit)` for a reader that wants the bytes up to
    /// `readerEnd`: one download, or, for a short read on a slow connection, one per part of it
    /// (see ``shortReadParts(wanted:)``). The parts are requested at once and only for the read's
    /// own bytes; the last one goes on past the read with the usual read-ahead.
    func startDownloads(at start: Int64, limit: Int64, kind: Download.Kind, readerEnd: Int64, continuesStream: Bool) {
        let wanted = min(readerEnd, limit) - start
        let parts = kind == .read ? shortReadParts(wanted: wanted) : 1
        // A read that names its end and wants less than a first segment: a seek or a probe.
        let shortRead = kind == .read && readerEnd - start < configuration.initialSegmentSize && !readsToTheEnd(readerEnd)
        guard parts > 1 else {
            startDownload(at: start, limit: limit, kind: kind, wanted: readerEnd - start, continuesStream: continuesStream, shortRead: shortRead)
            return
        }
        let partLength = (wanted + Int64(parts) - 1) / Int64(parts)
        let splitReadID = makeID()
        parallelGain.beginSplitRead(id: splitReadID, parts: parts)
        var partStart = start
        for part in 0..<parts {
            let isLast = part == parts - 1
            let partEnd = isLast ? start + wanted : partStart + partLength
            startDownload(at: partStart, limit: isLast ? limit : partEnd, kind: kind, firstRequestLength: partEnd - partStart,
                          shortRead: isLast && shortRead, splitReadID: splitReadID)
            partStart = partEnd
        }
    }

    /// Whether a reader that has read `streamed` bytes and wants them up to `readerEnd` streams,
    /// rather than probes: it has read a first segment, or a quarter of one when it reads to the
    /// end (a player past its probe, such as one that plays on after a skim left no read-ahead).
    /// A player's request to the end that it drops at once (AVPlayer asks for the rest of the file
    /// and cancels it, then asks for pieces) never gets that far on a slow connection.
    func readerStreams(streamed: Int64, readerEnd: Int64) -> Bool {
        streamed >= configuration.initialSegmentSize || (readsToTheEnd(readerEnd) && streamed >= configuration.initialSegmentSize / 4)
    }

    /// Whether a read that wants the bytes up to `readerEnd` reads to the end of the resource
    /// (always false while its length is unknown).
    func readsToTheEnd(_ readerEnd: Int64) -> Bool {
        readerEnd >= (info?.totalLength ?? Int64.max)
    }

    /// How many connections a read of `wanted` bytes is split across. A short read (less than
    /// ``StreamCache/Configuration/initialSegmentSize``: a seek, a player's bounded request) is
    /// mostly transfer time on a connection the origin throttles: at 4 MB/s per connection, a
    /// 256 KiB seek spends 64 ms receiving and one round trip asking. Each extra connection
    /// shortens the transfer, and is added while it saves at least
    /// ``StreamCache/Configuration/minimumParallelGain`` at the speed the resource's connections
    /// last reached (2 parts for that seek: 32 ms each). Fast links never split: there the
    /// transfer is shorter than the gain asked for.
    func shortReadParts(wanted: Int64) -> Int {
        guard let gain = configuration.minimumParallelGain?.timeInterval, gain > 0, configuration.parallelDownloads > 1,
              wanted < configuration.initialSegmentSize, info?.acceptsByteRanges == true, let throughput = connectionThroughput, throughput > 0,
              parallelConnectionsMayHelp
        else { return 1 }
        let transfer = Double(wanted) / throughput
        // No part smaller than one TCP window's worth: below that, the round trip is all there is.
        let mostParts = Int(min(Int64(configuration.parallelDownloads), max(1, wanted / Self.smallestReadPart)))
        var parts = 1
        while parts < mostParts, transfer / Double(parts) - transfer / Double(parts + 1) >= gain {
            parts += 1
        }
        return parts
    }

    /// The smallest part a short read is split into.
    static let smallestReadPart: Int64 = 64 << 10

    /// Starts a download of `[start, limit)`. A read that wants fewer bytes than
    /// ``StreamCache/Configuration/initialSegmentSize`` (a player's probe, a short seek) asks for
    /// what it wants, but no less than a quarter of that size. Its read-ahead (see
    /// ``updateIdleState(_:)``) is a request of its own: asked for in the same request, the read's
    /// last bytes can wait behind read-ahead bytes wherever the path buffers (a throttling proxy
    /// held the last 300 bytes of each 256 KiB seek for 16 ms, one 64 KiB chunk at 4 MB/s).
    ///
    /// A download that continues a stream (`continuesStream`: a reader that has read a while, a
    /// prefetch, a part of a long range) starts at the segment size the resource's connections
    /// have reached: its bytes are wanted by someone who reads on, and starting small again would
    /// only add round trips. A reader's first download starts small, since a player's first
    /// request is often a probe it soon drops.
    ///
    /// `firstRequestLength` sets the first request's length (within what
    /// ``segmentSize(atMost:throughput:)`` allows): a part of a split short read asks for its own
    /// bytes and nothing more, a part of a long range for its share. `shortRead` marks the
    /// download of a seek or a probe, whose read-ahead waits to see whether the player skims.
    /// `splitReadID` names the split short read whose part the first request is.
    /// `aheadOfItsReader` marks a part that begins past where its reader is (see
    /// ``Download/readerReached``).
    ///
    /// A download no reader waits for (`bulk`: by default a prefetch's or a background fill's; the
    /// extra parts of a long read too) waits for a place at the origin's host first (see
    /// ``BulkConnectionGate``), and plans its first request once it has one.
    func startDownload(at start: Int64, limit: Int64, kind: Download.Kind, wanted: Int64? = nil, continuesStream: Bool = false,
                       firstRequestLength: Int64? = nil, shortRead: Bool = false, splitReadID: Int? = nil, bulk: Bool? = nil,
                       aheadOfItsReader: Bool = false) {
        guard !isShuttingDown else { return }
        let id = makeID()
        var segment = configuration.initialSegmentSize
        if let firstRequestLength {
            segment = min(firstRequestLength, segmentSize(atMost: firstRequestLength, throughput: connectionThroughput))
        } else if kind == .read, let wanted, wanted < segment {
            segment = max(segment / 4, wanted)
        } else if continuesStream, let throughput = connectionThroughput {
            segment = segmentSize(atMost: .max, throughput: throughput)
            if kind == .read, let wanted, let share = firstShare(ofALongRead: ByteRange(start, start + wanted)) { segment = min(segment, share) }
        }
        // A seek's or a probe's request asks for its own bytes; others take a short rest as well.
        let end = shortRead || splitReadID != nil
            ? min(limit, start + segment) : requestEnd(endAfterMissingBytes(segment, from: start, within: limit), takingTheRestOf: ByteRange(start, limit))
        downloads[id] = Download(id: id, start: start, position: start, limit: limit, kind: kind, segmentEnd: end,
                                 rangeEnd: end, segmentSize: segment, segmentStartPosition: start, startedForShortRead: shortRead)
        downloads[id]?.splitReadID = splitReadID
        downloads[id]?.readerReached = !aheadOfItsReader
        downloads[id]?.isParallelPart = aheadOfItsReader
        usage.begin(key)
        emit(.downloadStarted(ByteRange(start, limit)))
        logger.debug("download started", metadata: ["key": "\(key)", "start": "\(start)", "limit": "\(limit)"])
        if bulk ?? (kind != .read), let kept = configuration.connectionsKeptForReaders {
            let origin = self.origin
            if let limit = origin.connectionLimit, let ticket = takePlace(for: id, at: limit, keptForReaders: kept) {
                downloads[id]?.task = startDownloadTask { await self.runDownload(id: id, after: ticket) }
            } else {
                // The host is not known yet (a cloud link not resolved): found out first, off the actor.
                downloads[id]?.task = startDownloadTask { await self.runDownload(id: id, findingTheHostOf: origin, keptForReaders: kept) }
            }
            return
        }
        // The first request is planned here, on the actor, so the download task can send it at once.
        let first = Result { try nextSegment(id: id) }
        downloads[id]?.task = startDownloadTask { await self.runDownload(id: id, first: first) }
    }

    /// Starts a download's task on the origin's ``Origin/downloadExecutor`` when it names one:
    /// there the task takes each chunk on the thread that received it and writes it to the cache
    /// file at once. On Swift's global executor each chunk waits for a pool thread to wake, and is
    /// copied into the file from another CPU's cache (a cold loopback read through the proxy went
    /// from 760 to 810 MB/s, with 7 % less CPU; see `docs/benchmark-log.md`).
    ///
    /// Either way the task begins once the actor's current turn has ended, as a task isolated to
    /// the resource does: a download that started its request beside the turn that planned it
    /// changed which of a seek and a request in flight came first (a seek joined a request it
    /// should have cut, twice in ten runs of the suite).
    func startDownloadTask(_ operation: sending @escaping () async -> Void) -> Task<Void, Never> {
        if #available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *), let executor = origin.downloadExecutor {
            return Task(executorPreference: executor) { [self] in
                await afterThisTurn()
                await operation()
            }
        }
        return Task {
            assertIsolated()
            await operation()
        }
    }

    /// Nothing: a download's task that is not isolated to the resource awaits it first, so that it
    /// starts after the turn that created it (see ``startDownloadTask(_:)``).
    private func afterThisTurn() {}

    /// Runs a download no reader waits for once ``BulkConnectionGate`` lets it through. Its first
    /// request is planned then, from what is cached by then; ``downloadEnded(id:error:)`` gives its
    /// place back.
    nonisolated func runDownload(id: Int, after ticket: BulkConnectionGate.Ticket) async {
        do {
            try await connectionGate.enter(ticket)
        } catch {
            await downloadEnded(id: id, error: error)
            return
        }
        await runDownload(id: id, first: await planFirstRequest(id: id))
    }

    /// Runs a download no reader waits for whose origin does not know its host yet: once
    /// ``Origin/resolveConnectionLimit()`` names it, the download takes its place at the gate like
    /// any other; when nothing names it, it goes at once.
    nonisolated func runDownload(id: Int, findingTheHostOf origin: any Origin, keptForReaders kept: Int) async {
        let limit = await origin.resolveConnectionLimit()
        // The cache shut down meanwhile: no request may follow.
        guard !Task.isCancelled else {
            await downloadEnded(id: id, error: CancellationError())
            return
        }
        if let limit, let ticket = await takePlace(for: id, at: limit, keptForReaders: kept) {
            await runDownload(id: id, after: ticket)
        } else {
            await runDownload(id: id, first: await planFirstRequest(id: id))
        }
    }

    /// A place for download `id` among those that may hold all but `kept` of the host's
    /// connections; let through at once if a reader already waits for it. `nil` when the
    /// download has ended.
    func takePlace(for id: Int, at limit: OriginConnectionLimit, keptForReaders kept: Int) -> BulkConnectionGate.Ticket? {
        guard let download = downloads[id] else { return nil }
        let ticket = connectionGate.makeTicket(host: limit.host, capacity: limit.connections - kept)
        downloads[id]?.gateTicket = ticket
        if download.readerWaits { connectionGate.admitNow(ticket) }
        return ticket
    }

    /// The first request of download `id`, planned on the actor.
    func planFirstRequest(id: Int) -> Result<(any Origin, OriginRequest)?, any Error> {
        Result { try nextSegment(id: id) }
    }

    /// The download loop: request the next segment, write each chunk where it belongs, report it,
    /// until the download reaches its limit or is no longer needed. Runs off the actor.
    nonisolated func runDownload(id: Int, first: Result<(any Origin, OriginRequest)?, any Error>) async {
        do {
            var planned: (any Origin, OriginRequest)? = try first.get()
            segments: while let (origin, request) = planned {
                // No request leaves a cancelled download (its prefetch stopped, the cache shut
                // down), its first included: the connection gate may let a part through just as
                // it is cancelled.
                try Task.checkCancellation()
                // Stamped here, off the actor, right before the request goes out: the request's round
                // trip runs from here to its first bytes' arrival (see ``bytesOnTheWire(_:)``).
                let sentAt = ContinuousClock.now
                let response = try await origin.open(request)
                guard let (file, start, generation, limit) = try await downloadOpened(id: id, response: response, sentAt: sentAt) else { break }
                var offset = start
                // Where the bytes of each range after the first go (a multipart response).
                var rangeEnd = response.length.map { start + $0 } ?? Int64.max
                var followingRanges = response.followingRanges[...]
                var iterator = response.body.makeAsyncIterator()
                // What arrived while the last batch was written goes in one batch: one report to
                // the actor (and one wake-up of the readers) per run of bytes instead of one per
                // socket read. A download that keeps up takes one chunk at a time, and an answer's
                // first chunk, which a reader may wait for, goes alone.
                var takesMore = false
                while let first = try await iterator.nextChunk() {
                    var batch = WrittenRun(start: offset)
                    var chunk: HTTPBody.Chunk? = first
                    while let current = chunk {
                        var rest = current.data[...]
                        while !rest.isEmpty {
                            if offset >= rangeEnd, let next = followingRanges.popFirst() {
                                // The next range of a multipart answer: the run so far is reported first.
                                guard try await report(&batch, id: id, generation: generation) else { break segments }
                                offset = next.lowerBound
                                rangeEnd = next.upperBound
                                batch = WrittenRun(start: offset)
                            }
                            // The limit as the actor set it last, which it may lower at any time
                            // (see ``DownloadStop``): what lies past it is another download's.
                            let stop = limit.value
                            if offset >= stop {
                                guard try await report(&batch, id: id, generation: generation), offset < limit.value else { break segments }
                                continue
                            }
                            let piece = (followingRanges.isEmpty && offset >= rangeEnd ? rest : rest.prefix(Int(clamping: rangeEnd - offset)))
                                .prefix(Int(clamping: stop - offset))
                            try file.write(piece, at: offset)
                            rest = rest.dropFirst(piece.count)
                            offset += Int64(piece.count)
                            batch.add(Int64(piece.count), arrivedAt: current.arrivedAt)
                        }
                        chunk = takesMore && batch.count < Self.largestWrittenRun ? iterator.readyChunk() : nil
                        takesMore = true
                    }
                    guard try await report(&batch, id: id, generation: generation) else { break segments }
                }
                planned = try await nextSegmentAfterAnyHold(id: id)
            }
            await downloadEnded(id: id, error: nil)
        } catch {
            await downloadEnded(id: id, error: error)
        }
    }

    /// The most bytes a download writes before it reports them (``didWrite(id:run:generation:)``),
    /// when more have arrived meanwhile: readers waiting on the bytes see them at least this often.
    static let largestWrittenRun = 1 << 20

    /// Reports `run` to the actor unless it is empty, and empties it; returns whether the download
    /// goes on.
    nonisolated func report(_ run: inout WrittenRun, id: Int, generation: Int) async throws -> Bool {
        guard run.count > 0 else { return true }
        defer { run = WrittenRun(start: run.start + run.count) }
        return try await didWrite(id: id, run: run, generation: generation)
    }

    /// The next request of download `id` once its read-ahead has waited out a skim, if it waits
    /// (``holdReadAheadWhileSkimmingMayFollow(id:)``), and once a part has waited for the read
    /// before it, if it waits (``waitsForTheReadBeforeIt(_:)``: between requests, it holds with
    /// nothing on the wire); one actor call per request boundary.
    func nextSegmentAfterAnyHold(id: Int) async throws -> (any Origin, OriginRequest)? {
        await holdReadAheadWhileSkimmingMayFollow(id: id)
        if let download = downloads[id], waitsForTheReadBeforeIt(download) { await holdBehindTheReadBeforeIt(id: id) }
        // A hold ends early when the cache shuts down: no request may follow then.
        try Task.checkCancellation()
        return try nextSegment(id: id)
    }

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
            download.segmentStartPosition = download.position
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
        return (origin, OriginRequest(range: ByteRange(download.position, end), followingRanges: following, validator: validator))
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
    func recordThroughput(of download: inout Download) {
        guard !download.requestWasHeld else { return }
        let elapsed = (ContinuousClock.now - download.segmentStartedAt).timeInterval
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
        guard rest > 0, rest < smallRest, missingByteCount(in: window) <= origin.maximumRequestLength ?? .max else {
            return min(end, window.upperBound)
        }
        return window.upperBound
    }

    /// The most bytes one request of this resource asks for now (see ``segmentSize(atMost:throughput:)``).
    var largestRequest: Int64 {
        let maximum = min(configuration.maximumSegmentSize, origin.maximumRequestLength ?? .max)
        return splitsLongRanges ? min(maximum, configuration.parallelPartSize) : maximum
    }

    /// Whether the answer to `download`'s request in flight, of version `answered`, may decide the
    /// resource's version: it is the version the resource knows, or the request was planned while
    /// the resource knew the version it knows now (so the answer left the origin after the one
    /// that taught it that version).
    func answers(_ download: Download, withTheVersionKnown answered: ResourceInfo) -> Bool {
        if let known = info, known.isSameVersion(as: answered) { return true }
        return isOfTheVersionKnown(download)
    }

    /// Whether `download`'s request in flight was planned under the version the resource knows now.
    func isOfTheVersionKnown(_ download: Download) -> Bool {
        switch (info, download.plannedUnder) {
        case (nil, nil): true
        case let (known?, planned?): known.isSameVersion(as: planned)
        default: false
        }
    }

    /// Checks the origin's answer against the cached version and decides where writing starts.
    /// Returns `nil` when the download is no longer wanted.
    func downloadOpened(id: Int, response: OriginResponse, sentAt: ContinuousClock.Instant) throws -> (DataFile, Int64, Int, DownloadStop)? {
        guard let opened = downloads[id] else { return nil }
        var newInfo = response.info
        if !answers(opened, withTheVersionKnown: newInfo) {
            // Two answers that crossed a change at the origin may reach the actor in either order:
            // the one planned before the resource learned its version is dropped, not taken for a
            // newer version (which would drop the newer bytes and cut their readers). Its readers
            // ask again, with the version the resource knows now.
            logger.debug("an answer that may predate the version known dropped", metadata: ["key": "\(key)"])
            return nil
        }
        if let old = info {
            if !old.isSameVersion(as: newInfo) {
                try resetForNewVersion(newInfo)
            } else {
                // Keep what the origin did not repeat (a 206 may omit the type or the validator).
                if newInfo.mimeType == nil { newInfo.mimeType = old.mimeType }
                if newInfo.totalLength == nil { newInfo.totalLength = old.totalLength }
                if newInfo.validator.isEmpty { newInfo.validator = old.validator }
                if newInfo.fileName == nil { newInfo.fileName = old.fileName }
                if let asked = downloads[id]?.position, response.offset < asked { newInfo.acceptsByteRanges = false }
                storeInfo(newInfo)
            }
        } else {
            if !available.isEmpty, newInfo.validator.isEmpty {
                // Bytes cached without any version information cannot be proven current.
                try resetForNewVersion(newInfo)
            } else {
                storeInfo(newInfo)
            }
        }
        downloadsConfirmVersion = response.confirmsVersion
        if response.confirmsVersion { markVerified() }
        guard var download = downloads[id], let file = try reopenedFile() else { return nil }
        download.opened = true
        download.requestSentAt = sentAt
        download.position = response.offset
        if response.offset < download.segmentStartPosition {
            // The origin ignored the range: the body starts at 0 and must be followed to the end.
            download.limit = max(download.limit, newInfo.totalLength ?? Int64.max)
            download.segmentEnd = download.limit
        }
        download.segmentStartPosition = response.offset
        // The gaps past cached bytes that came in this response (none when the origin sent the first range only).
        download.followingRanges = response.followingRanges
        if let length = response.length {
            download.rangeEnd = response.offset + length
            if response.followingRanges.isEmpty { download.segmentEnd = min(download.segmentEnd, download.rangeEnd) }
        }
        if let total = newInfo.totalLength {
            download.limit = min(download.limit, total)
            download.segmentEnd = min(download.segmentEnd, total)
        }
        downloads[id] = download
        wakeWaiters(all: true)
        replanParallelDownloads()
        return (file, response.offset, generation, download.stop)
    }

    /// Records written bytes, wakes readers, and says whether the download should go on. The run
    /// carries when the transport received each chunk of it (see ``HTTPBody/Chunk``). A part
    /// that must wait for the read before it (``waitsForTheReadBeforeIt(_:)``) returns once its
    /// turn has come: meanwhile its body is not taken in, and the origin stops sending it.
    func didWrite(id: Int, run: WrittenRun, generation downloadGeneration: Int) async throws -> Bool {
        guard downloadGeneration == generation, var download = downloads[id] else { return false }
        let range = run.range
        var cut = range
        if let total = info?.totalLength { cut = range.clamped(toLength: total) }
        let newBytes = cut.count - available.coveredByteCount(in: cut)
        available.insert(cut)
        if newBytes > 0 {
            pendingBytes += newBytes
            if firstPendingAt == nil {
                firstPendingAt = .now
                armCommitTimer()
            }
        }
        statistics.bytesDownloaded += range.count
        let sampledBefore = download.gaveEarlySample
        for arrival in run.arrivals {
            noteTransfer(of: arrival.count, by: &download, arrivedAt: arrival.at)
        }
        download.received += range.count
        download.position = range.upperBound
        if download.position >= download.rangeEnd, !download.followingRanges.isEmpty {
            let next = download.followingRanges.removeFirst()
            download.position = next.lowerBound
            download.rangeEnd = next.upperBound
        }
        if download.position >= download.segmentEnd {
            recordThroughput(of: &download)
            recordParallelGainSample(of: &download)
            // The request is done: the next one starts past cached bytes, if the origin allows.
            if crossesCachedBytes { skipCachedBytes(&download) }
        }
        wakeWaiters()
        emit(.bytesCached(cut, totalCached: available.coveredByteCount))
        commitIfDue()

        var goOn = download.position < download.limit
        if goOn, info?.acceptsByteRanges != false, available.contains(download.position) {
            // Ran into cached bytes: whoever needs what lies beyond starts its own download there.
            goOn = false
        }
        if goOn, download.kind == .read, !configuration.completesResourcesInBackground {
            // An unneeded download is not cut mid-request: the bytes already on the wire would be
            // sent by the origin and thrown away here, and fetched again by the next reader.
            // ``nextSegment(id:)`` stops it at the end of the request in flight. Only a request
            // longer than the idle read-ahead (an origin that ignores ranges, or a read-ahead set
            // below the segment size) is cut where the read-ahead ends.
            updateIdleState(&download)
            if reachedIdleLimit(&download) { goOn = false }
        }
        downloads[id] = download
        if download.gaveEarlySample, !sampledBefore { replanParallelDownloads() }
        releaseHeldPartsWhoseTurnCame()
        guard goOn, waitsForTheReadBeforeIt(download) else { return goOn }
        await holdBehindTheReadBeforeIt(id: id)
        guard downloadGeneration == generation, let held = downloads[id] else { return false }
        return held.position < held.limit
    }

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
            download.idleLimit = max(inFlightEnd, (readAheadStart ?? download.position) + readAhead)
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

    /// Records how much `reader`'s read has been handed, on each download whose bytes it has come
    /// to: the read-ahead such a download leaves once no reader needs it grows with that
    /// (``updateIdleState(_:)``).
    func noteTaken(by reader: ReaderState) {
        guard !reader.isPrefetch else { return }
        let taken = reader.position - reader.start
        let reached = downloads.values.filter { $0.isReached(byReaderAt: reader.position) && $0.readerTook < taken }.map(\.id)
        for id in reached { downloads[id]?.readerTook = taken }
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

    /// How a download ended, for the debug log: the error's kind only, since a description may
    /// quote a URL with its query.
    static func kind(of error: (any Error)?) -> String {
        guard let error else { return "none" }
        if let streamError = error as? StreamCacheError { return streamError.code.description }
        return error is CancellationError ? "cancelled" : "\(type(of: error))"
    }

    func downloadEnded(id: Int, error: (any Error)?) {
        guard var download = downloads.removeValue(forKey: id) else { return }
        // Its place at the gate goes to the next in the queue; one that ended while it waited
        // there (a skim, the cache shutting down) leaves the queue.
        if let ticket = download.gateTicket { connectionGate.leave(ticket) }
        stopReceiving(&download)
        if let splitReadID = download.splitReadID { parallelGain.dropSplitRead(id: splitReadID) }
        usage.end(key)
        scheduleCommit()
        emit(.downloadEnded(ByteRange(download.start, max(download.start, download.position)), bytes: download.received))
        logger.debug("download ended", metadata: ["key": "\(key)", "download": "\(id)", "at": "\(download.position)",
                                                  "received": "\(download.received)", "error": "\(Self.kind(of: error))"])
        var error = error
        if (error as? StreamCacheError)?.code == .resourceChanged, !isOfTheVersionKnown(download) {
            // A download of a version the resource has already left, whose resume met the version
            // the resource learned since: old news, for no reader of the version known now.
            logger.debug("a download of an older version ended on its change", metadata: ["key": "\(key)"])
            error = nil
        }
        if let error, !(error is CancellationError) {
            let streamError = (error as? StreamCacheError)
                ?? StreamCacheError(.cacheIOFailed, "The download failed: \(error)", underlying: SendableErrorDescription(error))
            logger.info("download failed", metadata: ["key": "\(key)", "error": "\(streamError)"])
            emit(.error(code: streamError.code.description, message: streamError.message))
            if streamError.code == .resourceChanged, let info {
                // The origin's version changed mid-body: nothing of either version may be mixed.
                var stale = info
                stale.validator = Validator()
                try? resetForNewVersion(stale)
                self.info = nil
            }
            let window = ByteRange(download.position, max(download.position, download.limit))
            failureCount += 1
            recentFailures.append((failureCount, window, streamError))
            if recentFailures.count > 8 { recentFailures.removeFirst() }
            wakeWaiters(error: streamError, in: window)
        }
        wakeWaiters(all: true)
        releaseHeldPartsWhoseTurnCame()
        if error == nil { replanParallelDownloads() }
        scheduleReaperIfIdle()
        if readers.isEmpty, configuration.completesResourcesInBackground, error == nil { startBackgroundCompletion() }
        // A read-ahead the reaper stopped (a stalled origin) leaves its hole too.
        if error == nil || error is CancellationError { startFillingSmallGap() }
    }

    /// After the last reader leaves, watches read downloads once per grace period and cancels
    /// those that made no progress during it (a stalled origin). A download that makes progress
    /// stops by itself at the end of its request in flight (see ``nextSegment(id:)``).
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

    func reapIdleDownloads(positionsBefore: [Int: Int64]) {
        reaper = nil
        guard readers.isEmpty else { return }
        for download in downloads.values where download.kind == .read && positionsBefore[download.id] == download.position {
            download.task?.cancel()
            releaseHold(of: download.id)
        }
        scheduleReaperIfIdle()
    }

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

    // MARK: Skimming

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

    /// Cancels every download; used when the cache shuts down.
    func cancelDownloads() {
        isShuttingDown = true
        for download in downloads.values {
            download.task?.cancel()
            releaseHold(of: download.id)
        }
        reaper?.cancel()
        reaper = nil
        replanOnceMeasured?.cancel()
        replanOnceMeasured = nil
    }
}
