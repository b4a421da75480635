#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// The engine's front door: a durable, range-aware cache in one directory, shared by every
/// front end in the process.
///
/// ```swift
/// let cache = try StreamCache(configuration: .init(directory: StreamCache.defaultDirectory()))
/// let origin = HTTPOrigin(url: songURL, headers: ["Authorization": "OAuth \(token)"])  // StreamCacheURLSession
/// let song = cache.resource(for: CacheKey(url: songURL), origin: origin)
/// for try await chunk in song.read(ByteRange(0, 64 * 1024)) {
///     // chunk.data, chunk.offset, chunk.source (.cache or .origin)
/// }
/// try await song.prefetch()              // fill the file for offline use
/// try await cache.setPinned(true, for: song.key)
/// await cache.shutdown()
/// ```
///
/// One `StreamCache` per directory: resources are coalesced within an instance, and a second
/// instance on the same directory, in this process or another, is refused until the first one's
/// ``shutdown()``.
public final class StreamCache: Sendable {
    /// The settings the cache was created with.
    public let configuration: Configuration
    /// The durable store (files and index).
    public let store: CacheStore
    let resources: ResidentResources
    /// When this instance opened the cache: when ``Configuration/keysToBeRead`` count as asked for.
    let openedAt: Date
    let usage = UsageTracker()
    /// Shared by every resource: downloads no reader waits for leave connections free per host.
    private let connectionGate = BulkConnectionGate()
    /// Shared by every resource: what each origin host's connections were measured to do.
    private let hostPaths: HostPathMemory
    /// Shared by every resource: the rate the downloads no reader waits for take together.
    private let backgroundPacer: DownloadPacer
    /// Whether a host's connection allowance changed in this process, so that ``shutdown()``
    /// stores the last word (a save started by the change may come after the directory is given up).
    private let hostAllowancesChanged: Locked<Bool>
    private let openFiles: OpenDataFiles
    let eviction = Locked(EvictionState())
    let metrics: CacheMetrics
    /// Keys whose resources are left out of ``statistics`` (see ``withoutStatistics(for:_:)``).
    private let uncountedKeys = Locked(Set<CacheKey>())
    /// Set by ``shutdown()`` before it stops the resources it has: one made afterwards starts out
    /// stopped, read under the same lock that adds it to the resources.
    private let isShutDown = Locked(false)

    struct EvictionState {
        /// The pass under way, if any.
        var task: Task<Void, Never>?
        /// Whether a pass asked for during it also removes aged resources; `nil` when none was asked for.
        var againCheckingAge: Bool?
        /// Runs a pass every ``Configuration/evictionCheckInterval`` while the cache is open, when
        /// a resource's age or the volume's free space can call for one without a commit.
        var watch: Task<Void, Never>?
    }

    /// Opens the cache, creating its directory if needed, and reconciles files and index.
    ///
    /// - Throws: ``StreamCacheError``: `cacheInUse` when another cache has the directory open, in
    ///   another process or in this one (see ``CacheStore``); `cacheIOFailed` when the directory or
    ///   index cannot be opened.
    public init(configuration: Configuration) throws {
        self.configuration = configuration
        openedAt = Date()
        self.store = try CacheStore(directory: configuration.directory, logger: configuration.logger)
        resources = ResidentResources(limit: configuration.maximumRecentResources)
        let store = self.store
        let hostAllowancesChanged = Locked(false)
        self.hostAllowancesChanged = hostAllowancesChanged
        hostPaths = HostPathMemory(connectionProbeInterval: configuration.connectionProbeInterval,
                                   remembered: store.hostConnectionAllowances()) { memory in
            hostAllowancesChanged.withLock { $0 = true }
            Task { try? await store.saveHostConnectionAllowances { memory.allowanceSnapshots() } }
        }
        metrics = CacheMetrics(factory: configuration.metricsFactory)
        backgroundPacer = DownloadPacer(bytesPerSecond: configuration.backgroundDownloadRate)
        let openFiles = OpenDataFiles(limit: configuration.maximumOpenDataFiles)
        self.openFiles = openFiles
        // Weak: `openFiles` keeps this closure, and every resource keeps `openFiles`. Strong
        // references made a cycle (files, resources, recent resources) that outlived the cache, so
        // a released cache never closed its index or its data files.
        openFiles.setCloser { [weak resources, weak openFiles] keys in
            for key in keys {
                if let resource = resources?.existing(key) {
                    Task { await resource.closeFileIfIdle() }
                } else {
                    // Freed from memory, which closed its file.
                    openFiles?.closed(key)
                }
            }
        }
        startEvictionWatch()
    }

    /// The resource for `key`, fetched from `origin` when bytes are missing.
    ///
    /// The same key always gives the same ``Resource``, so all its readers share downloads. When the
    /// resource already exists, `origin` replaces its origin for future downloads (for example a
    /// refreshed download link).
    public func resource(for key: CacheKey, origin: any Origin) -> Resource {
        let (resource, isNew) = resources.resource(for: key) { makeResource(key: key, origin: origin) }
        if !isNew { resource.setOrigin(origin) }
        // Asked for is as good as read, for eviction: a caller asks for a resource to read it,
        // and an eviction pass under way must not remove it before its read begins.
        resource.askedForAt.withLock { $0 = Date() }
        return resource
    }

    private func makeResource(key: CacheKey, origin: any Origin) -> Resource {
        Resource(key: key, origin: origin, store: store, configuration: configuration, usage: usage,
                 openFiles: openFiles, connectionGate: connectionGate, hostPaths: hostPaths, backgroundPacer: backgroundPacer,
                 metrics: uncountedKeys.withLock { $0.contains(key) } ? nil : metrics, shutDown: isShutDown.withLock { $0 },
                 onCommit: { [weak self] in self?.enforceEvictionPolicy() })
    }

    /// The bytes per second the downloads no reader waits for (prefetches, background fills) may
    /// take together, `nil` for no limit: ``Configuration/backgroundDownloadRate`` at first, and
    /// whatever an app sets later, say when the device moves from Wi-Fi to a metered link. A new
    /// rate applies to the next bytes those downloads take; a player's read is never held back.
    public var backgroundDownloadRate: Int64? {
        get { backgroundPacer.bytesPerSecond }
        set { backgroundPacer.bytesPerSecond = newValue }
    }

    /// What the cache has done since it was opened in this process: reads, bytes served from the
    /// cache and from origins, requests, errors, evictions (see ``CacheStatistics``). The same
    /// figures go to swift-metrics (``Configuration/metricsFactory``).
    public var statistics: CacheStatistics { metrics.statistics }

    /// Runs `body` with the resources of `keys`, made while it runs, left out of ``statistics`` and
    /// metrics: a server's start-up requests to itself are not what its users asked for.
    package func withoutStatistics<T>(for keys: [CacheKey], _ body: () async throws -> T) async rethrows -> T {
        uncountedKeys.withLock { $0.formUnion(keys) }
        defer { uncountedKeys.withLock { $0.subtract(keys) } }
        return try await body()
    }

    /// The resource for `key` if it is in memory, without touching its origin; `nil` otherwise.
    ///
    /// A resource is in memory while anything holds it (a caller, a read, a download, a commit,
    /// a subscriber to its ``Resource/events()``) and while it is among the
    /// ``Configuration/maximumRecentResources`` most recently asked for.
    /// Use it to watch or query a resource that a front end opened (``Resource/isIdle``,
    /// ``Resource/statistics``). ``resource(for:origin:)`` would replace the origin its next
    /// download uses, which is what a refreshed link needs and what an observer must not do.
    public func existingResource(for key: CacheKey) -> Resource? {
        resources.existing(key)
    }

    /// Checks the cached bytes of `key` against the digest its origin publishes, whether or not
    /// they were checked before (see ``Resource/checkContent()``); no request reaches the origin.
    ///
    /// - Returns: What the check found, or `nil` when the cache does not know `key`.
    /// - Throws: ``StreamCacheError`` (`cacheIOFailed`) when the cache cannot be read.
    public func checkContent(of key: CacheKey) async throws -> ContentCheckResult? {
        let resource: Resource
        if let existing = existingResource(for: key) {
            resource = existing
        } else {
            guard store.knows(key) else { return nil }
            resource = self.resource(for: key, origin: UnreachableOrigin(key: key))
        }
        return try await resource.checkContent()
    }

    /// What each origin host's refusals of one more connection taught (``ConnectionAllowance``),
    /// as the index keeps it.
    var hostConnectionAllowances: [String: ConnectionAllowance.Snapshot] { hostPaths.allowanceSnapshots() }

    /// The number of resources in memory (see ``existingResource(for:)``).
    public var residentResourceCount: Int { resources.count }

    /// Reads `range` of the resource `key` from `origin`; see ``Resource/read(_:)``.
    public func read(_ range: ByteRange, key: CacheKey, origin: any Origin) -> ReadStream {
        resource(for: key, origin: origin).read(range)
    }

    /// Pins or unpins a resource: pinned resources are never evicted.
    ///
    /// - Returns: `false` when the cache does not know `key`.
    @discardableResult
    public func setPinned(_ pinned: Bool, for key: CacheKey) async throws -> Bool {
        try await store.setPinned(pinned, for: key)
    }

    /// The resource `alias` last named (``setAlias(_:for:fileName:)``), with its file name then,
    /// while the index holds it: how a cloud file (`yandex:/Music/a.mp3`, whose key holds what only
    /// the service tells) is found in the cache when the service cannot be asked.
    public func resource(aliased alias: String) async throws -> (key: CacheKey, fileName: String)? {
        try await store.resource(aliased: alias)
    }

    /// The aliases that begin with `prefix` and name a resource the cache still holds, by alias:
    /// the cached files below a folder (`yandex:/Music/Album/`) by the references they were read
    /// by, for listing it while its service is out of reach.
    public func aliases(under prefix: String) async throws -> [(alias: String, key: CacheKey, fileName: String)] {
        try await store.aliases(under: prefix)
    }

    /// Records that `alias` names the resource `key`, a file named `fileName`.
    public func setAlias(_ alias: String, for key: CacheKey, fileName: String) async throws {
        try checkNotShutDown()
        try await store.setAlias(alias, for: key, fileName: fileName)
    }

    /// Every cached resource, most recently used first.
    public func entries() async throws -> [CacheStore.Entry] {
        await flush()
        return try await store.entries()
    }

    /// Deletes a resource's cached bytes and index entry. Downloads no read waits for (a fill
    /// nobody asked for, a read-ahead its player left) are stopped first, not a reason to refuse.
    ///
    /// - Returns: `false` when the cache does not know `key`.
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) when the resource is being read (by a
    ///   player, a prefetch); `cacheInUse` after ``shutdown()``.
    @discardableResult
    public func remove(_ key: CacheKey) async throws -> Bool {
        try checkNotShutDown()
        return try await removeResource(key)
    }

    /// ``remove(_:)`` without its check that the cache is open: for an eviction pass, which
    /// ``shutdown()`` lets finish (after its last commits, which may call for one) before it gives
    /// the directory up, and which passes the time it began as `askedSince`: a resource asked for
    /// since then (``Resource/askedForAt``) stays, as one being read does.
    func removeResource(_ key: CacheKey, unlessAskedForSince askedSince: Date? = nil) async throws -> Bool {
        guard store.knows(key) || resources.existing(key) != nil else { return try await store.remove(key) }
        // Through the resource's actor, even one made for this: a read that begins meanwhile then
        // loads the entry before or after the removal, never halfway through it.
        let resource = resources.resource(for: key, makesRecent: false) { makeResource(key: key, origin: UnreachableOrigin(key: key)) }.resource
        await resource.stopDownloadsNobodyWaitsFor()
        guard await resource.removeIfIdle(unlessAskedForSince: askedSince) else {
            throw StreamCacheError(.invalidArgument, "The resource \(key) is in use; stop reading it before removing it.")
        }
        return true
    }

    /// How many resources are in use right now: being read, or downloaded (a prefetch, a read-ahead
    /// finishing). ``removeAll()`` and eviction leave them alone; one a player has just begun to
    /// read may have no index entry yet (its row comes with its first commit), so it is counted here
    /// and not in ``entries()``.
    public var resourcesInUse: Int { usage.busyKeys.count }

    /// Deletes every resource that is not in use.
    ///
    /// - Returns: The number of resources deleted.
    /// - Throws: ``StreamCacheError`` (`cacheInUse`) after ``shutdown()``.
    @discardableResult
    public func removeAll() async throws -> Int {
        try checkNotShutDown()
        var removed = 0
        for entry in try await store.entries() where (try? await remove(entry.key)) == true { removed += 1 }
        return removed
    }

    /// Throws once ``shutdown()`` gave the directory up: a change made afterwards would land in
    /// what may be another cache's directory (a removal would delete that cache's data file).
    func checkNotShutDown() throws {
        guard isShutDown.withLock({ $0 }) else { return }
        throw StreamCacheError(.cacheInUse, "This cache was shut down and gave its directory (\(configuration.directory.path)) up; open a new StreamCache to change it.")
    }

    /// Waits until every written byte of every resource is synced and recorded in the index.
    public func flush() async {
        for resource in resources.all { await resource.flush() }
    }

    /// Stops every download, records what was written, lets the eviction pass those last commits
    /// call for finish, and gives the directory up (see ``CacheStore/releaseDirectory()``). Call before the process exits, or before another
    /// `StreamCache` opens the directory; this one must not be used afterwards. Should it be,
    /// nothing in the directory changes, since it may be another cache's by then: no download
    /// starts again, also for a resource first asked for afterwards (a read of bytes that are not
    /// cached throws `CancellationError`); cached bytes still read, but their use is not
    /// recorded; and ``remove(_:)``, ``removeAll()`` and ``setPinned(_:for:)`` throw
    /// ``StreamCacheError`` with ``StreamCacheError/Code/cacheInUse``.
    public func shutdown() async {
        isShutDown.withLock { $0 = true }
        for resource in resources.all { await resource.cancelDownloads() }
        await flush()
        let task = eviction.withLock { state in
            state.watch?.cancel()
            return state.task
        }
        await task?.value
        if hostAllowancesChanged.withLock({ $0 }) {
            let hostPaths = self.hostPaths
            try? await store.saveHostConnectionAllowances { hostPaths.allowanceSnapshots() }
        }
        store.releaseDirectory()
    }
}
