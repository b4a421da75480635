#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// One cached resource, shared by every reader of its key in the process.
///
/// A `Resource` owns the set of bytes on disk, the downloads in flight and the readers waiting
/// for them. ``read(_:)`` answers a range as one ordered stream: cached segments come from disk,
/// missing ones join a download that will reach them soon or start a new download at the gap,
/// which stops at the next cached byte. No byte is requested from the origin while it is cached
/// or already in flight (invariant 3), and a seek never waits behind a sequential download
/// (invariant 4).
///
/// Get resources from ``StreamCache/resource(for:origin:)``; the same key always gives the same
/// `Resource` object.
public actor Resource {
    /// The resource's cache key.
    public nonisolated let key: CacheKey
    let store: CacheStore
    let configuration: StreamCache.Configuration
    let logger: Logger
    let usage: UsageTracker
    let openFiles: OpenDataFiles
    let connectionGate: BulkConnectionGate
    /// What the resources of each origin host measured of the path to it, this one's included
    /// (``HostPathMemory``).
    let hostPaths: HostPathMemory
    /// Shared by every resource of the cache: holds the downloads no reader waits for to the
    /// background rate (``StreamCache/backgroundDownloadRate``).
    let backgroundPacer: DownloadPacer
    /// The cache-wide counts, which ``statistics`` and ``emit(_:)`` feed; `nil` for a resource the
    /// cache does not count (a server's own start-up warm-up, see ``StreamCache/withoutStatistics(for:_:)``).
    nonisolated let metrics: CacheMetrics?
    let onCommit: @Sendable () -> Void
    /// Where missing bytes come from; replaceable from any thread (a refreshed download link).
    nonisolated let originBox: Locked<any Origin>
    var origin: any Origin { originBox.withLock { $0 } }
    /// When the resource was last asked for (``StreamCache/resource(for:origin:)``), on the wall
    /// clock, as its index row's last access is: eviction counts it as a use
    /// (``StreamCache/evictionPass(checkingAge:now:)``).
    nonisolated let askedForAt = Locked<Date?>(nil)

    // Loaded from the store on first use. A new resource has no index row until the store chain
    // creates it, off the path of the first read; store operations read `entryID` when they run.
    var isLoaded = false
    var entryID: Int64?
    var lastTouched: ContinuousClock.Instant?
    var file: DataFile?
    /// The data file's path while ``closeFileIfIdle()`` has closed it; the next use reopens it.
    var closedFilePath: String?
    var loadTask: Task<Void, any Error>?
    /// Reads that wait for the resource to load before they count as readers: a removal meanwhile
    /// would leave them a resource without a data file.
    var readsStarting = 0
    /// The resource's info, once a request has told it.
    public internal(set) var info: ResourceInfo? {
        didSet { infoSnapshot.withLock { $0 = info } }
    }
    private nonisolated let infoSnapshot = Locked<ResourceInfo?>(nil)

    /// ``info`` as last set, readable without waiting for the actor: `nil` until the resource
    /// is loaded or the origin has answered. A server uses it to answer a cached resource at once.
    public nonisolated var knownInfo: ResourceInfo? { infoSnapshot.withLock { $0 } }
    /// Bytes in the data file (committed to the index or about to be).
    var available = RangeSet()
    var generation = 0

    // Durability.
    var pendingBytes: Int64 = 0
    var firstPendingAt: ContinuousClock.Instant?
    var commitScheduled = false
    /// Wakes the resource once ``StreamCache/Configuration/commitInterval`` has passed since bytes
    /// began to wait for their commit (see ``armCommitTimer()``).
    var commitTimer: Task<Void, Never>?
    var storeChain: Task<Void, Never>?

    // Downloads, readers and waiters.
    var downloads: [Int: Download] = [:]
    var readers: [Int: ReaderState] = [:]
    var waiters: [Int: Waiter] = [:]
    var nextID = 0
    var reaper: Task<Void, Never>?
    /// Plans the parts of a long read again once its first request has had time to tell the
    /// path's speed (see ``addParallelDownloads(in:kind:)``).
    var replanOnceMeasured: Task<Void, Never>?
    /// How fast one origin connection of this resource last delivered a request (bytes per
    /// second): new parts of a streaming range start at the segment size it allows.
    var connectionThroughput: Double?
    /// The shortest time any of the resource's requests took from being sent to its first bytes
    /// (see ``bytesOnTheWire(_:)``).
    var shortestRoundTrip: Duration?
    /// Whether this resource's connections side by side fetch faster than one alone (see
    /// ``StreamCache/Configuration/minimumParallelSpeedup``).
    var parallelGain = ParallelGain()
    /// How many connections the origin lately accepted at once before it refused one more of this
    /// resource's (``ConnectionAllowance``; the host's, in ``hostPaths``, counts too).
    var connectionAllowance: ConnectionAllowance
    /// The last download failures (at most 8), numbered: a reader whose wait ended for a re-plan
    /// just before the download failed would otherwise miss the error and start the download again.
    var recentFailures: [(number: Int, window: ByteRange, error: StreamCacheError)] = []
    var failureCount = 0
    /// Where ``startFillingSmallGap()`` began downloads, so a gap the origin does not fill is tried once.
    var smallGapsTried: Set<Int64> = []
    /// Set when the last prefetch of the resource ends with bytes it wanted still missing (its
    /// caller stopped it, or it failed), until a read begins: no fill starts meanwhile
    /// (``startFillingSmallGap()``, ``startBackgroundCompletion()``). An app's "stop downloading"
    /// must stop the traffic: a prefetch split across connections leaves holes between its parts
    /// when it is stopped, and the fills went on to close them.
    var fillsWaitForARead = false
    /// Set by ``cancelDownloads()`` when the cache shuts down, or from the start for a resource
    /// made after that: no new download starts, since the directory may be another cache's by now.
    var isShuttingDown: Bool

    /// When the origin last confirmed the cached version, and when asking it last failed; kept
    /// off the actor so that a server can tell at once whether a read must ask first (see
    /// ``isRevalidationDue``).
    nonisolated let verification = Locked(Verification())
    /// Whether the last download's answer told the version it carries (``OriginResponse/confirmsVersion``).
    /// When it did not, a read that starts on a missing byte asks the origin first as well: its
    /// download could not tell a replaced file from the one cached.
    var downloadsConfirmVersion = true
    /// The question to the origin in flight, which a read that comes meanwhile waits for when
    /// the question is recent enough for it (see ``Resource/revalidateIfDue(forARequestInFlight:)``).
    var revalidation: VersionQuestion?
    /// The question that goes out once ``revalidation`` is answered, for the reads that came too
    /// late to trust that one's answer.
    var queuedRevalidation: QueuedVersionQuestion?
    /// When ``verification`` was last written to the index (at most every few seconds).
    var verificationStoredAt: ContinuousClock.Instant?

    // Content digests (see Resource+ContentCheck.swift).
    /// The hashing of the complete cached bytes under way, if any.
    var contentCheck: Task<Void, Never>?
    /// The content digest the complete cached bytes were found to match.
    var contentMatched: ContentDigest?
    /// What the last check that failed expected and found instead.
    var lastContentMismatch: (expected: ContentDigest, found: ContentDigest)?
    /// A published digest the origin's bytes failed twice in a row with the same wrong digest:
    /// the bytes are what the origin serves, and they are kept and not checked again (the index
    /// keeps this too, so that the next process does not download them once more).
    var disputedDigest: ContentDigest?
    /// How many times a check dropped the cached bytes.
    var contentDrops = 0
    /// Why the cached bytes were last dropped, and the generation that began: a reader of the
    /// generation before is told that reason (``droppedDuringRead(generation:)``).
    var lastDrop: (generation: Int, code: StreamCacheError.Code)?

    /// The subscribers of ``events()``, by an identifier of the resource's.
    var eventMailboxes: [Int: EventMailbox] = [:]
    /// Running totals for this resource since it was last made in memory (see
    /// ``StreamCache/existingResource(for:)``): the cache keeps a resource while it is used or
    /// recently asked for, and a caller that holds it keeps it too.
    public internal(set) var statistics = ResourceStatistics() {
        didSet { metrics?.record(from: oldValue, to: statistics) }
    }

    struct ReaderState {
        let start: Int64
        var position: Int64
        var end: Int64
        /// The number of download failures that happened before this reader last planned; later
        /// ones covering its position end the read (see ``Resource/recentFailures``).
        var failuresSeen: Int = 0
        /// Prefetches keep their downloads going, but only readers that deliver bytes make a
        /// download "needed" for the idle grace period.
        var isPrefetch: Bool
        /// How fast the reader consumes, and how long its next step may be.
        var pace: PlaybackPace
        /// A prefetch's own rate (``Resource/prefetch(_:pinning:pacedBy:)``), which the downloads
        /// that bring its bytes keep to besides the cache's.
        var pacer: DownloadPacer?
    }

    struct Waiter {
        var offset: Int64
        var continuation: CheckedContinuation<Void, any Error>
    }

    init(key: CacheKey, origin: any Origin, store: CacheStore, configuration: StreamCache.Configuration, usage: UsageTracker,
         openFiles: OpenDataFiles, connectionGate: BulkConnectionGate, hostPaths: HostPathMemory,
         backgroundPacer: DownloadPacer, metrics: CacheMetrics?, shutDown: Bool = false,
         onCommit: @escaping @Sendable () -> Void) {
        self.key = key
        self.isShuttingDown = shutDown
        self.originBox = Locked(origin)
        self.store = store
        self.configuration = configuration
        self.logger = configuration.logger
        self.usage = usage
        self.openFiles = openFiles
        self.connectionGate = connectionGate
        self.hostPaths = hostPaths
        self.backgroundPacer = backgroundPacer
        self.connectionAllowance = ConnectionAllowance(firstHold: configuration.connectionProbeInterval)
        self.metrics = metrics
        self.onCommit = onCommit
    }

    nonisolated func setOrigin(_ origin: any Origin) { originBox.withLock { $0 = origin } }

    /// The bytes of the resource that are cached (written to the data file).
    public var cachedRanges: RangeSet {
        get async throws {
            try await ensureLoaded(needsFile: false)
            return available
        }
    }

    /// Whether every byte of the resource is cached (its length must be known).
    public var isComplete: Bool {
        get async throws {
            try await ensureLoaded(needsFile: false)
            guard let total = info?.totalLength else { return false }
            return available.contains(ByteRange(0, total))
        }
    }

    /// Whether a download from the origin is in flight.
    public var isDownloading: Bool { !downloads.isEmpty }

    /// One line per download under way: its kind, window and request, the bytes it received, how
    /// long no reader has needed it (not how long since its last bytes: one left by its reader
    /// goes on within its read-ahead), and whether its task was cancelled. For a test's report
    /// when a download outlives its bound.
    package var downloadsDescription: [String] {
        let now = ContinuousClock.now
        return downloads.values.sorted { $0.id < $1.id }.map { download in
            let unneeded = download.idleSince.map { "\(now - $0)" } ?? "no"
            let task = download.task.map { $0.isCancelled ? "cancelled" : "running" } ?? "none"
            return "download \(download.id) \(download.kind) at \(download.position) of [\(download.start), \(download.limit)), "
                + "request up to \(download.rangeEnd), opened \(download.opened), received \(download.received), "
                + "no reader for \(unneeded) (read-ahead limit \(download.idleLimit.map(String.init) ?? "none")), readers waiting \(download.readerWaits), "
                + "held back \(download.heldBack), part \(download.isParallelPart), task \(task)"
        }
    }

    /// Whether no read and no download of the resource is under way. The work a resource does
    /// by itself once its last reader leaves (an idle read-ahead, filling small holes) starts in
    /// the same step as that reader's end, so an idle resource stays idle until it is read again.
    public var isIdle: Bool { readers.isEmpty && downloads.isEmpty }

    /// What happens to this resource from now on: info, cached bytes, downloads, errors. A slow
    /// consumer misses none of them but progress that later events restate (see
    /// ``ResourceEvents``); the resource stays in memory while it is watched.
    public func events() -> ResourceEvents {
        let id = makeID()
        let mailbox = EventMailbox()
        eventMailboxes[id] = mailbox
        return ResourceEvents(subscription: ResourceEvents.Subscription(resource: self, id: id, mailbox: mailbox))
    }

    func removeEventMailbox(_ id: Int) { eventMailboxes[id] = nil }

    func emit(_ event: ResourceEvent) {
        metrics?.record(event)
        for mailbox in eventMailboxes.values { mailbox.post(event) }
    }

    func makeID() -> Int {
        nextID += 1
        return nextID
    }

    /// Whether readers or downloads are active.
    var isActive: Bool { !readers.isEmpty || !downloads.isEmpty }

    // MARK: Loading and store operations

    /// Loads the index entry and opens the data file, once. Every read starts here, so it also
    /// reopens a file closed while idle and records the file's use (``OpenDataFiles``); a
    /// question about the cached state (`needsFile: false`) leaves a closed file closed.
    func ensureLoaded(needsFile: Bool = true) async throws {
        if isLoaded {
            guard needsFile else { return }
            _ = try reopenedFile()
            openFiles.used(key)
            return
        }
        if loadTask == nil, storeChain == nil, !store.knows(key) {
            // A resource the index has never seen: nothing to read, so no task and no wait.
            file = try DataFile(path: store.dataPath(for: key))
            isLoaded = true
            openFiles.used(key)
            return
        }
        if let loadTask { return try await loadTask.value }
        let task = Task { try await self.load() }
        loadTask = task
        defer { loadTask = nil }
        try await task.value
        openFiles.used(key)
    }

    /// The data file, reopened if ``closeFileIfIdle()`` closed it; `nil` before loading and after removal.
    func reopenedFile() throws -> DataFile? {
        if file == nil, let path = closedFilePath {
            let reopened = try DataFile(path: path)
            file = reopened
            closedFilePath = nil
            forgetEverythingIfTheFileWasGone(reopened)
        }
        return file
    }

    /// Closes the data file if nothing uses the resource and every written byte is committed;
    /// the next use reopens it. Asked by ``OpenDataFiles`` when too many files are open. Readers,
    /// downloads and commits hold the file object they were given, so its descriptor closes only
    /// once they are done with it.
    func closeFileIfIdle() {
        guard let file, isLoaded else { return }
        guard !isActive, pendingBytes == 0, !commitScheduled else {
            // In use: the list moves it to its recent end, so it is not asked again at once.
            openFiles.refresh(key)
            return
        }
        closedFilePath = file.path
        self.file = nil
        openFiles.closed(key)
    }

    /// Reads the index entry (a read transaction, which never waits for writers). A resource the
    /// index does not know yet gets its data file at once and its index row from the store chain,
    /// before any commit, so the first request does not wait for a write transaction.
    private func load() async throws {
        await storeChain?.value
        guard !isLoaded else { return }
        if let entry = try await store.entry(for: key) {
            file = try DataFile(path: entry.dataPath)
            entryID = entry.id
            info = entry.info
            available = entry.spans
            verification.withLock { $0.confirmedAt = entry.verifiedAt }
            contentMatched = entry.contentMatched
            disputedDigest = entry.contentDisputed
            if let file { forgetEverythingIfTheFileWasGone(file) }
        } else {
            // The row is created by the first commit (``performCommit()``), off the read path.
            file = try DataFile(path: store.dataPath(for: key))
        }
        isLoaded = true
        // Bytes completed by an earlier run that ended before their check (a killed process) are
        // checked now; bytes once found to match are not hashed again.
        checkContentIfComplete()
    }

    /// Creates the index row of a resource the index did not know, with the info known by now,
    /// in one step before any span is recorded for it. Runs in the store chain.
    private func createEntryIfNeeded() async throws -> Int64? {
        if let entryID { return entryID }
        let entry = try await store.openEntry(for: key)
        guard isLoaded else { return nil }
        if entryID == nil { entryID = entry.id }
        if let info, info != entry.info { try await store.updateInfo(resourceID: entry.id, info: info) }
        if let confirmedAt = verification.withLock({ $0.confirmedAt }) { try await store.recordVerification(resourceID: entry.id, at: confirmedAt) }
        // A check that ended before the first commit could not record what it found.
        if let matched = contentMatched, entry.contentMatched != matched {
            try await store.recordContentCheck(resourceID: entry.id, digest: matched, disputed: false)
        } else if let disputed = disputedDigest, entry.contentDisputed != disputed {
            try await store.recordContentCheck(resourceID: entry.id, digest: disputed, disputed: true)
        }
        return entryID
    }

    /// Runs store operations one after another, in the order they were asked for, so a commit
    /// of an old version can never land after the reset that dropped it. An operation holds the
    /// resource until it has run: a resource nobody uses any more is freed from memory only once
    /// its written bytes are recorded (``ResidentResources``).
    func enqueueStoreOperation(_ operation: @escaping @Sendable () async -> Void) {
        let previous = storeChain
        storeChain = Task {
            await previous?.value
            await operation()
        }
    }

    /// Waits until every written byte is synced and recorded in the index.
    public func flush() async {
        scheduleCommit()
        await storeChain?.value
    }

    /// Forgets the in-memory state and deletes the resource from the store, if nothing is using it.
    /// Called by eviction and removal. A load in progress or a read still starting counts as a
    /// use: between a read's load and its start, a removal left it with no data file (a 502 in a
    /// stress run of the proxy with eviction running all along). So does being asked for at
    /// `askedSince` or later (an eviction pass that began then): its caller is about to read it.
    func removeIfIdle(unlessAskedForSince askedSince: Date? = nil) async -> Bool {
        guard !isActive, readsStarting == 0, loadTask == nil else { return false }
        if let askedSince, let asked = askedForAt.withLock({ $0 }), asked >= askedSince { return false }
        isLoaded = false
        entryID = nil
        file = nil
        closedFilePath = nil
        openFiles.closed(key)
        info = nil
        available = RangeSet()
        smallGapsTried = []
        pendingBytes = 0
        generation += 1
        let store = self.store
        let key = self.key
        enqueueStoreOperation {
            do {
                try await store.remove(key)
                // A resource whose first commit had not happened has a data file but no row.
                unlink(store.dataPath(for: key))
            } catch {
                // The row stays (an I/O error, a store that gave its directory up), and with it
                // the file it names.
            }
        }
        await storeChain?.value
        return true
    }

    /// Drops every cached byte: the origin's version differs from the cached one.
    func resetForNewVersion(_ newInfo: ResourceInfo) throws {
        logger.info("the origin's version changed; dropping cached bytes", metadata: ["key": "\(key)", "cachedBytes": "\(available.coveredByteCount)"])
        try dropEveryCachedByte(info: newInfo, failingWaitersWith: StreamCacheError(.resourceChanged, "The resource changed on the origin; bytes of the old version were dropped."))
        emit(.versionChanged(newInfo))
    }

    /// Drops every cached byte, here and in the index, and records `newInfo` as the resource's
    /// info; readers waiting for bytes meet `error`, and the others, at their next step, an
    /// error of the same code (``droppedDuringRead(generation:)``).
    func dropEveryCachedByte(info newInfo: ResourceInfo, failingWaitersWith error: StreamCacheError) throws {
        generation += 1
        lastDrop = (generation, error.code)
        available = RangeSet()
        smallGapsTried = []
        pendingBytes = 0
        firstPendingAt = nil
        contentMatched = nil
        disputedDigest = nil
        info = newInfo
        if let path = file?.path ?? closedFilePath {
            // Downloads of the old version keep writing into the unlinked file, harmlessly. A file
            // closed while idle is created anew when it is reopened.
            unlink(path)
            if file != nil { file = try DataFile(path: path) }
        }
        let store = self.store
        enqueueStoreOperation {
            guard let id = await self.entryID else { return }
            do {
                try await store.reset(resourceID: id)
                try await store.updateInfo(resourceID: id, info: newInfo)
            } catch {}
        }
        for (id, waiter) in waiters {
            waiters[id] = nil
            waiter.continuation.resume(throwing: error)
        }
    }

    /// The error for a reader of `readerGeneration` whose bytes have since been dropped: a
    /// content mismatch when that was the first drop since the reader began (the bytes it read
    /// may be the corrupted ones), a version change otherwise.
    func droppedDuringRead(generation readerGeneration: Int) -> StreamCacheError {
        if let lastDrop, lastDrop.code == .contentMismatch, lastDrop.generation == readerGeneration + 1 {
            return StreamCacheError(.contentMismatch, "The cached bytes did not match the origin's digest and were dropped during the read; read it again.")
        }
        return StreamCacheError(.resourceChanged, "The resource changed on the origin during the read; read it again.")
    }

    func storeInfo(_ newInfo: ResourceInfo) {
        let changed = info != newInfo
        info = newInfo
        guard changed else { return }
        let store = self.store
        enqueueStoreOperation {
            guard let id = await self.entryID else { return }
            do { try await store.updateInfo(resourceID: id, info: newInfo) } catch {}
        }
        emit(.infoKnown(newInfo))
    }

    // MARK: Commits (record after write)

    /// Schedules a commit when enough bytes or time have piled up.
    func commitIfDue() {
        guard pendingBytes > 0, let firstPendingAt else { return }
        if pendingBytes >= configuration.commitBatchBytes || ContinuousClock.now - firstPendingAt >= configuration.commitInterval {
            scheduleCommit()
        }
    }

    /// Makes sure bytes waiting for their commit are recorded once ``StreamCache/Configuration/commitInterval``
    /// has passed, even when no more arrive to check it (``commitIfDue()`` runs on arrivals): a
    /// download held up by its origin, or by a reader that stopped reading, left its last bytes
    /// out of the index for as long as it stalled, and a process killed then lost them.
    func armCommitTimer() {
        guard commitTimer == nil else { return }
        let waited = firstPendingAt.map { ContinuousClock.now - $0 } ?? .zero
        let delay = max(.zero, configuration.commitInterval - waited)
        commitTimer = Task { [weak self] in
            try? await Task.sleep(for: delay)
            guard !Task.isCancelled else { return }
            await self?.commitTimerFired()
        }
    }

    private func commitTimerFired() {
        commitTimer = nil
        commitIfDue()
        // Bytes that came after the last commit began their wait later: their turn is to come.
        if pendingBytes > 0, !commitScheduled { armCommitTimer() }
    }

    func scheduleCommit() {
        guard pendingBytes > 0, !commitScheduled else { return }
        commitScheduled = true
        enqueueStoreOperation { await self.performCommit() }
    }

    private func performCommit() async {
        commitScheduled = false
        guard pendingBytes > 0, let file else { return }
        let id: Int64
        do {
            guard let created = try await createEntryIfNeeded() else { return }
            id = created
        } catch {
            logger.info("could not create the index entry", metadata: ["key": "\(key)", "error": "\(error)"])
            return
        }
        guard pendingBytes > 0 else { return }
        let snapshot = available
        pendingBytes = 0
        firstPendingAt = nil
        commitTimer?.cancel()
        commitTimer = nil
        do {
            try await store.commit(resourceID: id, spans: snapshot, file: file)
            emit(.committed(snapshot))
        } catch {
            logger.info("could not record cached bytes", metadata: ["key": "\(key)", "error": "\(error)"])
            emit(.error(code: (error as? StreamCacheError)?.code.description ?? "cacheIOFailed", message: "\(error)"))
        }
        onCommit()
    }
}

/// Counts, per key, the readers and downloads in progress, so eviction can skip busy resources
/// without asking each actor.
final class UsageTracker: Sendable {
    private let counts = Locked([CacheKey: Int]())

    func begin(_ key: CacheKey) { counts.withLock { $0[key, default: 0] += 1 } }

    func end(_ key: CacheKey) {
        counts.withLock { counts in
            let next = (counts[key] ?? 1) - 1
            counts[key] = next > 0 ? next : nil
        }
    }

    var busyKeys: Set<CacheKey> { counts.withLock { Set($0.keys) } }
}

extension Resource {
    /// A one-line summary of the live state, for diagnostics (no secrets: offsets and counts only).
    func debugSnapshot() -> String {
        let downloadText = downloads.values.map { "#\($0.id) \($0.kind) pos=\($0.position) limit=\($0.limit) seg=\($0.segmentEnd) opened=\($0.opened)" }
        let readerText = readers.map { "r\($0.key) pos=\($0.value.position) end=\($0.value.end)" }
        return "gen=\(generation) info=\(info.map { "\($0.totalLength ?? -1)/\($0.validator.entityTag ?? "-")" } ?? "nil") available=\(available) "
            + "downloads=\(downloadText) readers=\(readerText) waiters=\(waiters.values.map(\.offset))"
    }
}
