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
        /// What the download was before a prefetch took it over (``Resource/takeOver(forPrefetch:)``),
        /// and goes back to being once the prefetch is done: a player's read-ahead, say, goes on
        /// to where it would have stopped. A prefetch stopped by its caller cuts it instead.
        var kindBeforePrefetch: Kind?
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
        /// The answer in flight's body, which says when its newest bytes arrived, taken in or not
        /// (``HTTPBody/newestArrival``, for ``ParallelGain``), and how many wait for the
        /// download's task (``HTTPBody/bytesWaiting``, for ``Resource/joins(_:at:)`` and the reaper).
        var answerBody: HTTPBody?
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
        /// Where the read-ahead of a player that left in a download before this one ends, when it
        /// reaches into this one's window (``Resource/extendReadAhead(ofReaderThatLeft:)``): this
        /// download fetches up to there once idle, reached or not. Cleared when a reader needs it.
        var readAheadClaimEnd: Int64?
        /// Started by ``Resource/addParallelDownloads(in:kind:)`` as a part of a long range: its
        /// read counts as split from then on (its tail is split again as it shrinks).
        var isParallelPart = false
        /// One of several connections that share a range, whose bytes the others can bring as well
        /// (a part of a long range, a split seek's part after its first): its requests give way
        /// when the origin refuses one more connection (``OriginRequest/givesWayWhenBusy``).
        var isExtraConnection = false
        /// The origin is answering a request of the download: its answer came
        /// (``Resource/downloadOpened(id:response:sentAt:)``) and its body is not at its end yet.
        /// Such downloads hold the origin's connections; a request planned but not answered yet
        /// may still be refused.
        var isBeingAnswered = false
        /// Bytes per second of the download's last complete request, if it was long enough to tell.
        var throughput: Double?
        /// The request in flight as a sample of ``Resource/parallelGain``, from its first bytes
        /// on (``ParallelGain/beginReceiving(_:at:)``).
        var requestSample: ParallelGain.TransferSample?
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
        /// Resumes the download while it waits for a rate it keeps to
        /// (``Resource/holdForTheRate(id:until:)``): a prefetch's reader does not end
        /// that wait, as it ends a hold, since the prefetch is what the rate holds back.
        var paceRelease: CheckedContinuation<Void, Never>?
        /// The task that ends the wait for the rate when its turn comes; cancelled when a reader
        /// ends the wait first, so that it cannot end a later wait before that one's turn.
        var paceTimer: Task<Void, Never>?
        /// A read began elsewhere after the short read's readers left (the player skims): the
        /// download ends after its request in flight.
        var skimmedPast = false
        /// The download's place among those no reader waits for (``BulkConnectionGate``), if it
        /// is one: it sends its first request once the gate lets it through.
        var gateTicket: BulkConnectionGate.Ticket?
        /// A reader came to wait for it: once it has a place at the gate, it goes at once.
        var readerWaits = false
        /// It went through the gate (``gateTicket``) and planned its first request.
        var passedGate = false
        /// It has a place at the gate and has not gone through yet: no request of it is out.
        var waitsAtTheGate: Bool { gateTicket != nil && !passedGate }

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
                if prefetch { takeOver(forPrefetch: id) }
                return
            }
            startDownload(at: 0, limit: info.totalLength ?? Int64.max, kind: kind)
            return
        }
        if let (id, download) = downloads.first(where: { $0.value.window.contains(offset) }) {
            if prefetch { takeOver(forPrefetch: id) }
            releaseHold(of: id)
            // A reader waits for it now: it goes past the gate, if it still waits there (or, while
            // it finds out its host, as soon as it gets a place), and no longer keeps to the
            // background rate.
            if !prefetch {
                readerCame(toDownload: id)
                releasePace(of: id)
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

    /// Makes download `id` a prefetch's, remembering what it was: a prefetch that joins a
    /// player's read-ahead fetches the same bytes, and when it is done the read-ahead goes on as
    /// the player's (``endDownloadsOfEndedPrefetch(finished:)``).
    func takeOver(forPrefetch id: Int) {
        guard let download = downloads[id], download.kind != .prefetch else { return }
        downloads[id]?.kindBeforePrefetch = download.kind
        downloads[id]?.kind = .prefetch
    }

    /// Whether a read at `offset`, inside `download`'s window, waits for it rather than starting
    /// its own: the download reaches `offset` within ``StreamCache/Configuration/joinDistance``,
    /// or its request in flight brings it within ``StreamCache/Configuration/maximumJoinWait`` at
    /// the speed its connection last reached (before any speed is known, a first request is
    /// short and always joined).
    ///
    /// A request in flight is only split by cutting its connection, which loses what the origin
    /// has already sent past the cut; bytes just past the download's position are worth that
    /// wait, a seek far into a long request on a slow link is not. The distance counts from
    /// where the bytes its transport received end (``receivedEnd(of:)``), not from where it
    /// wrote: a read that begins within bytes already here waits for them, however late the
    /// download's task runs.
    func joins(_ download: Download, at offset: Int64) -> Bool {
        let ahead = offset - receivedEnd(of: download)
        if ahead <= configuration.joinDistance { return true }
        guard offset < download.segmentEnd else { return false }
        guard let throughput = speed(of: download), throughput > 0 else { return true }
        return ahead <= bytesWithinJoinWait(at: throughput)
    }

    /// Where the bytes of `download`'s range arriving now that its transport has received end:
    /// its position, and the bytes that wait in the transport for its task
    /// (``HTTPBody/bytesWaiting``; none where the body cannot say).
    func receivedEnd(of download: Download) -> Int64 {
        guard let waiting = download.answerBody?.bytesWaiting, waiting > 0 else { return download.position }
        return max(download.position, min(download.rangeEnd, download.position + Int64(waiting)))
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
                          shortRead: isLast && shortRead, splitReadID: splitReadID, extraConnection: part > 0)
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
        guard let gain = configuration.minimumParallelGain?.timeInterval, gain > 0, connectionsAllowed > 1,
              wanted < configuration.initialSegmentSize, info?.acceptsByteRanges == true, let throughput = connectionThroughput, throughput > 0,
              parallelConnectionsMayHelp
        else { return 1 }
        let transfer = Double(wanted) / throughput
        // No part smaller than one TCP window's worth: below that, the round trip is all there is.
        let mostParts = Int(min(Int64(connectionsAllowed), max(1, wanted / Self.smallestReadPart)))
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
    /// ``Download/readerReached``); such a part, and one marked `extraConnection`, gives way when
    /// the origin refuses one more connection (``Download/isExtraConnection``).
    ///
    /// A download no reader waits for (`bulk`: by default a prefetch's or a background fill's; the
    /// extra parts of a long read too) waits for a place at the origin's host first (see
    /// ``BulkConnectionGate``), and plans its first request once it has one.
    func startDownload(at start: Int64, limit: Int64, kind: Download.Kind, wanted: Int64? = nil, continuesStream: Bool = false,
                       firstRequestLength: Int64? = nil, shortRead: Bool = false, splitReadID: Int? = nil, bulk: Bool? = nil,
                       aheadOfItsReader: Bool = false, extraConnection: Bool = false) {
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
        // A first request of the initial size (1 MiB) went past an origin's own maximum below it.
        segment = min(segment, largestRequest)
        // A seek's or a probe's request asks for its own bytes; others take a short rest as well.
        let end = shortRead || splitReadID != nil
            ? min(limit, start + segment) : requestEnd(endAfterMissingBytes(segment, from: start, within: limit), takingTheRestOf: ByteRange(start, limit))
        downloads[id] = Download(id: id, start: start, position: start, limit: limit, kind: kind, segmentEnd: end,
                                 rangeEnd: end, segmentSize: segment, segmentStartPosition: start, startedForShortRead: shortRead)
        downloads[id]?.splitReadID = splitReadID
        downloads[id]?.readerReached = !aheadOfItsReader
        downloads[id]?.isParallelPart = aheadOfItsReader
        downloads[id]?.isExtraConnection = aheadOfItsReader || extraConnection
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
        await holdForTheRateBeforeTheRequest(id: id)
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
            await holdForTheRateBeforeTheRequest(id: id)
            await runDownload(id: id, first: await planFirstRequest(id: id))
        }
    }

    /// A place for download `id` among those that may hold all but `kept` of the host's
    /// connections; let through at once if a reader already waits for it. `nil` when the
    /// download has ended.
    func takePlace(for id: Int, at limit: OriginConnectionLimit, keptForReaders kept: Int) -> BulkConnectionGate.Ticket? {
        guard let download = downloads[id] else { return nil }
        // Where the origin refused one more connection, one of those it accepts stays a reader's.
        let accepted = connectionsAcceptedLately(byHost: limit.host) ?? .max
        let ticket = connectionGate.makeTicket(host: limit.host, capacity: min(limit.connections - kept, accepted - 1))
        downloads[id]?.gateTicket = ticket
        if download.readerWaits { connectionGate.admitNow(ticket) }
        return ticket
    }

    /// The first request of download `id`, planned on the actor.
    func planFirstRequest(id: Int) -> Result<(any Origin, OriginRequest)?, any Error> {
        if downloads[id]?.gateTicket != nil { downloads[id]?.passedGate = true }
        return Result { try nextSegment(id: id) }
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
                // Whether the body ran on past the ranges the answer stated.
                var overran = false
                answer: while let first = try await iterator.nextChunk() {
                    var batch = WrittenRun(start: offset)
                    var chunk: HTTPBody.Chunk? = first
                    pieces: while let current = chunk {
                        var rest = current.data[...]
                        while !rest.isEmpty {
                            if offset >= rangeEnd, let next = followingRanges.popFirst() {
                                // The next range of a multipart answer: the run so far is reported first.
                                guard try await report(&batch, id: id, generation: generation) else { break segments }
                                offset = next.lowerBound
                                rangeEnd = next.upperBound
                                batch = WrittenRun(start: offset)
                            }
                            if offset >= rangeEnd {
                                // Bytes of no range the answer stated (an app's own `Origin`
                                // whose body runs on past its length): they were cached as the
                                // bytes that follow, and a read got them. The answer ends here;
                                // the next request asks for what is still missing.
                                overran = true
                                break pieces
                            }
                            // The limit as the actor set it last, which it may lower at any time
                            // (see ``DownloadStop``): what lies past it is another download's.
                            let stop = limit.value
                            if offset >= stop {
                                guard try await report(&batch, id: id, generation: generation), offset < limit.value else { break segments }
                                continue
                            }
                            let piece = rest.prefix(Int(clamping: rangeEnd - offset)).prefix(Int(clamping: stop - offset))
                            try file.write(piece, at: offset)
                            rest = rest.dropFirst(piece.count)
                            offset += Int64(piece.count)
                            batch.add(Int64(piece.count), arrivedAt: current.arrivedAt)
                        }
                        chunk = takesMore && batch.count < Self.largestWrittenRun ? iterator.readyChunk() : nil
                        takesMore = true
                    }
                    guard try await report(&batch, id: id, generation: generation) else { break segments }
                    if overran {
                        response.body.discard()
                        break answer
                    }
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
        downloads[id]?.isBeingAnswered = false
        downloads[id]?.answerBody = nil
        await holdReadAheadWhileSkimmingMayFollow(id: id)
        if let download = downloads[id], waitsForTheReadBeforeIt(download) { await holdBehindTheReadBeforeIt(id: id) }
        await holdForTheRateBeforeTheRequest(id: id)
        // A hold ends early when the cache shuts down: no request may follow then.
        try Task.checkCancellation()
        return try nextSegment(id: id)
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
        if let impossible = response.impossibleNumbers {
            throw StreamCacheError(.badResponse, "The origin answered with \(impossible), which no resource can have.")
        }
        if response.offset > opened.segmentStartPosition {
            // Bytes before the answer's start would never come: each request asked again for them,
            // about fifty in a burst before the read gave up (an app's own `Origin`; `HTTPOrigin`
            // refuses such an answer itself).
            throw StreamCacheError(.badResponse, "The origin answered from byte \(response.offset) when asked from byte \(opened.segmentStartPosition).")
        }
        var newInfo = response.info
        // An answer from an earlier byte than asked: a store of whole blocks (an app's own
        // `Origin`) rounds a range's start down and still serves ranges; one from byte 0 that
        // carries the rest of the file ignored the range. (`HTTPOrigin` refuses a 206 from another
        // byte, which it cannot tell from a `Content-Range` that lies.)
        let startsEarly = response.offset < opened.segmentStartPosition
        let ignoresTheRange = startsEarly && response.offset == 0 && (response.length == nil || response.length == newInfo.totalLength)
        if ignoresTheRange { newInfo.acceptsByteRanges = false }
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
                if newInfo.contentDigest == nil { newInfo.contentDigest = old.contentDigest }
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
        download.isBeingAnswered = true
        noteAnswered(besides: downloads.values.count { $0.isBeingAnswered && $0.id != id })
        download.requestSentAt = sentAt
        download.answerBody = response.body
        download.position = response.offset
        if ignoresTheRange {
            // The body starts at 0 and must be followed to the end.
            download.limit = max(download.limit, newInfo.totalLength ?? Int64.max)
            download.segmentEnd = download.limit
        }
        // A block's bytes before the asked one are written too, and the request still counts from
        // the asked byte: cached bytes among those before it do not end the download.
        if !startsEarly || ignoresTheRange { download.segmentStartPosition = response.offset }
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
        if newBytes > 0 { checkContentIfComplete() }

        var goOn = download.position < download.limit
        if goOn, info?.acceptsByteRanges != false, download.position >= download.segmentStartPosition, available.contains(download.position) {
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
        if (download.gaveEarlySample && !sampledBefore) || actOnLateSamples() { replanParallelDownloads() }
        releaseHeldPartsWhoseTurnCame()
        // Counted where the run lies: past its end, a file's last run has no reader left to pace it.
        let turns = pacers(of: download, at: range.lowerBound).compactMap { pacer in pacer.take(range.count).map { (pacer, $0) } }
        guard goOn else { return false }
        if waitsForTheReadBeforeIt(download) {
            await holdBehindTheReadBeforeIt(id: id)
        } else if !turns.isEmpty {
            await holdForTheRate(id: id, until: turns)
        } else {
            return true
        }
        guard downloadGeneration == generation, let held = downloads[id] else { return false }
        return held.position < held.limit
    }

    /// The rates `download` keeps to: none when it is a player's read, or brings a byte a reader
    /// (other than a prefetch) in its window still wants, since a player that comes to its bytes
    /// frees it at once, up to the end of the player's read. Otherwise the cache's background
    /// rate (``StreamCache/backgroundDownloadRate``), when one is set, and the own rate of each
    /// prefetch it brings bytes for (``prefetch(_:pinning:pacedBy:)``), unless one of those has
    /// none: a prefetch at full speed is not slowed by a slower one of the same bytes.
    ///
    /// `offset` is where the bytes in question lie: by default the download's position, the next
    /// bytes it asks for.
    func pacers(of download: Download, at offset: Int64? = nil) -> [DownloadPacer] {
        guard download.kind != .read else { return [] }
        let offset = offset ?? download.position
        let servesAPlayer = readers.values.contains { reader in
            !reader.isPrefetch && download.isReached(byReaderAt: reader.position) && reader.position <= offset && offset < reader.end
        }
        guard !servesAPlayer else { return [] }
        var pacers = backgroundPacer.limits ? [backgroundPacer] : []
        let prefetches = readers.values.filter { $0.isPrefetch && $0.position <= offset && offset < $0.end }
        if !prefetches.isEmpty, prefetches.allSatisfy({ $0.pacer?.limits == true }) {
            for case let pacer? in prefetches.map(\.pacer) where !pacers.contains(where: { $0 === pacer }) { pacers.append(pacer) }
        }
        return pacers
    }

    /// Holds download `id` until each of its `turns` has come (the bytes it took have had their
    /// time at each rate), or until a rate is set again, or a reader comes to wait for it
    /// (``releasePace(of:)``). Meanwhile its body is not taken in and the origin slows to the
    /// rate. The request's speed from now on is the rate's, not the path's, so it is no sample of
    /// the path (``ParallelGain``).
    func holdForTheRate(id: Int, until turns: [(DownloadPacer, DownloadPacer.Turn)]) async {
        guard var download = downloads[id] else { return }
        stopReceiving(&download)
        download.requestWasHeld = true
        downloads[id] = download
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            downloads[id]?.paceRelease = continuation
            downloads[id]?.paceTimer = Task { [weak self] in
                for (pacer, turn) in turns { await pacer.waitFor(turn) }
                guard !Task.isCancelled else { return }
                await self?.releasePace(of: id)
            }
        }
    }

    /// Holds download `id`, before it asks for more bytes, while a rate it keeps to has been
    /// given more than its allowance (``DownloadPacer/pendingTurn(at:)``). A download otherwise
    /// waits only after a run of bytes it takes, so one that takes a small file in one run (an
    /// HLS segment, a cover image) never waited, and each file after it went at once: a stream's
    /// prefetch at 20 kB/s fetched half its segments in a second on a busy machine, where runs
    /// are longest.
    func holdForTheRateBeforeTheRequest(id: Int) async {
        guard let download = downloads[id] else { return }
        let turns = pacers(of: download).compactMap { pacer in pacer.pendingTurn().map { (pacer, $0) } }
        if !turns.isEmpty { await holdForTheRate(id: id, until: turns) }
    }

    /// Ends download `id`'s wait for the background rate, if it waits.
    func releasePace(of id: Int) {
        guard let continuation = downloads[id]?.paceRelease else { return }
        downloads[id]?.paceRelease = nil
        downloads[id]?.paceTimer?.cancel()
        downloads[id]?.paceTimer = nil
        continuation.resume()
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
        actOnLateSamples()
        if let splitReadID = download.splitReadID { parallelGain.dropSplitRead(id: splitReadID) }
        usage.end(key)
        scheduleCommit()
        emit(.downloadEnded(ByteRange(download.start, max(download.start, download.position)), bytes: download.received))
        logger.debug("download ended", metadata: ["key": "\(key)", "download": "\(id)", "at": "\(download.position)",
                                                  "received": "\(download.received)", "error": "\(Self.kind(of: error))"])
        var error = error
        let endedOnAChange = (error as? StreamCacheError)?.code == .resourceChanged
        if endedOnAChange, !isOfTheVersionKnown(download) {
            // A download of a version the resource has already left, whose resume met the version
            // the resource learned since: old news, for no reader of the version known now.
            logger.debug("a download of an older version ended on its change", metadata: ["key": "\(key)"])
            error = nil
        }
        if let refusal = error as? StreamCacheError, refusal.refusesOneMoreConnection, makesRoom(afterARefusalOf: download) {
            // Its bytes are left to the connections the origin accepted; nobody's read fails.
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
                stale.contentDigest = nil
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
        // Nothing starts by itself after a change met mid-body: a file the origin is rewriting
        // would be asked for again at once, meet the next change, and so on for as long as it
        // changes (20 requests a second against an origin that changes on every answer). A read
        // asks again, and is bounded (``StartedRead/versionChangesAnsweredAnew``).
        if readers.isEmpty, configuration.completesResourcesInBackground, error == nil, !endedOnAChange { startBackgroundCompletion() }
        // A read-ahead the reaper stopped (a stalled origin) leaves its hole too.
        if error == nil || error is CancellationError, !endedOnAChange { startFillingSmallGap() }
    }

    /// Whether a reader that still wants bytes has come into `download`'s window.
    func readerCame(to download: Download) -> Bool {
        readers.values.contains { download.isReached(byReaderAt: $0.position) && $0.position < $0.end }
    }

    /// Takes `refused`, which ended on the origin's refusal of its request for now (429, 503),
    /// as the origin saying one connection too many, and returns whether that ends it without a
    /// failure: when it was an extra connection (``Download/isExtraConnection``), or a reader's
    /// while extra connections of this resource held theirs.
    ///
    /// The connections on which the origin was answering this resource's other downloads are then what the
    /// origin accepts (``ConnectionAllowance``): the resource and the other files of its host
    /// split across no more from now on. A reader that had come to the refused download's bytes
    /// needs a connection, so the extra connection farthest ahead of every reader ends after its
    /// request in flight, and the reader asks again (with the retry policy's patience each time).
    /// Cancelling that request at once would have freed its connection sooner, but what it had on
    /// the wire was lost: 3.7 MB of a 31 MB read behind a throttling proxy, fetched twice.
    /// Left as it was, a reader's request kept being refused while two parts of 2 MiB held a
    /// service's two connections, and its read failed after the fifth attempt.
    func makesRoom(afterARefusalOf refused: Download, at now: ContinuousClock.Instant = .now) -> Bool {
        let holding = downloads.values.filter(\.isBeingAnswered)
        let readerWaits = readerCame(to: refused)
        let farthest = readerWaits ? holding.filter({ $0.isExtraConnection && !readerCame(to: $0) }).max(by: { $0.position < $1.position }) : nil
        guard refused.isExtraConnection || farthest != nil else { return false }
        connectionAllowance.recordRefusal(whileUsing: holding.count, at: now)
        if let host = pathHost { hostPaths.recordRefusal(host: host, whileUsing: holding.count, at: now) }
        logger.info("the origin refused one more connection; splitting across fewer",
                    metadata: ["key": "\(key)", "connections": "\(connectionsAllowed)"])
        if let farthest, let part = downloads[farthest.id] {
            logger.debug("a part ends after its request to make room for a reader", metadata: ["key": "\(key)", "download": "\(part.id)"])
            downloads[part.id]?.limit = min(part.limit, max(part.position, part.segmentEnd))
        }
        return true
    }

    /// An answer came while `others` of this resource's downloads had theirs: a probe of one
    /// connection more than the origin last accepted, answered, teaches the count
    /// (``ConnectionAllowance/recordAcceptance(whileUsing:at:)``).
    private func noteAnswered(besides others: Int, at now: ContinuousClock.Instant = .now) {
        connectionAllowance.recordAcceptance(whileUsing: others + 1, at: now)
        if let host = pathHost { hostPaths.recordAcceptance(host: host, whileUsing: others + 1, at: now) }
    }

    /// Cancels every download; used when the cache shuts down.
    func cancelDownloads() {
        isShuttingDown = true
        for download in downloads.values {
            download.task?.cancel()
            releaseHold(of: download.id)
            releasePace(of: download.id)
        }
        reaper?.cancel()
        reaper = nil
        replanOnceMeasured?.cancel()
        replanOnceMeasured = nil
        contentCheck?.cancel()
    }
}
