import CoreMetrics

/// Where the engine counts what it does, for one cache: the totals behind
/// ``StreamCache/statistics`` and the same figures through swift-metrics.
///
/// Resources report their per-resource statistics' changes and their events here; the cache
/// reports evictions. Every swift-metrics handle is made once, with the configured factory (or
/// the process's bootstrapped one), so counting costs a lock and the backend's own increment.
/// The labels and dimensions are listed in ``StreamCache/Configuration/metricsFactory``.
final class CacheMetrics: Sendable {
    /// What a revalidation question found.
    enum RevalidationResult: String {
        case confirmed, changed, failed
    }

    private let totals = Locked(CacheStatistics())
    private let factory: any MetricsFactory
    private let reads: Counter
    private let servedFromCache: Counter
    private let servedFromOrigin: Counter
    private let downloaded: Counter
    private let originRequests: Counter
    private let downloadsInFlight: Meter
    private let versionChanges: Counter
    private let contentChecks: [Bool: Counter]
    private let revalidations: [RevalidationResult: Counter]
    private let evictions: Counter
    private let evictedBytes: Counter
    private let firstByteFromCache: Timer
    private let firstByteFromOrigin: Timer
    /// Errors by code, each counter made when its code first occurs.
    private let failures = Locked([String: Counter]())

    init(factory: (any MetricsFactory)?) {
        let factory = factory ?? MetricsSystem.factory
        self.factory = factory
        reads = Counter(label: "streamcache_reads_total", factory: factory)
        servedFromCache = Counter(label: "streamcache_served_bytes_total", dimensions: [("source", "cache")], factory: factory)
        servedFromOrigin = Counter(label: "streamcache_served_bytes_total", dimensions: [("source", "origin")], factory: factory)
        downloaded = Counter(label: "streamcache_downloaded_bytes_total", factory: factory)
        originRequests = Counter(label: "streamcache_origin_requests_total", factory: factory)
        downloadsInFlight = Meter(label: "streamcache_downloads_in_flight", factory: factory)
        versionChanges = Counter(label: "streamcache_version_changes_total", factory: factory)
        contentChecks = [true: Counter(label: "streamcache_content_checks_total", dimensions: [("result", "matched")], factory: factory),
                         false: Counter(label: "streamcache_content_checks_total", dimensions: [("result", "mismatched")], factory: factory)]
        var revalidations: [RevalidationResult: Counter] = [:]
        for result in [RevalidationResult.confirmed, .changed, .failed] {
            revalidations[result] = Counter(label: "streamcache_revalidations_total", dimensions: [("result", result.rawValue)], factory: factory)
        }
        self.revalidations = revalidations
        evictions = Counter(label: "streamcache_evictions_total", factory: factory)
        evictedBytes = Counter(label: "streamcache_evicted_bytes_total", factory: factory)
        firstByteFromCache = Timer(label: "streamcache_first_byte_seconds", dimensions: [("source", "cache")], factory: factory)
        firstByteFromOrigin = Timer(label: "streamcache_first_byte_seconds", dimensions: [("source", "origin")], factory: factory)
    }

    /// The totals so far.
    var statistics: CacheStatistics { totals.withLock { $0 } }

    /// Adds what a resource's statistics gained (`now` minus `before`).
    func record(from before: ResourceStatistics, to now: ResourceStatistics) {
        let reads = now.reads - before.reads
        let fromCache = now.bytesServedFromCache - before.bytesServedFromCache
        let fromOrigin = now.bytesServedFromOrigin - before.bytesServedFromOrigin
        let downloaded = now.bytesDownloaded - before.bytesDownloaded
        let requests = now.originRequests - before.originRequests
        totals.withLock {
            $0.reads += reads
            $0.bytesServedFromCache += fromCache
            $0.bytesServedFromOrigin += fromOrigin
            $0.bytesDownloaded += downloaded
            $0.originRequests += requests
        }
        // Counters only go up: a resource's totals start again at zero when it is made anew in
        // memory, which is a new `before`, never a decrease.
        if reads > 0 { self.reads.increment(by: reads) }
        if fromCache > 0 { servedFromCache.increment(by: fromCache) }
        if fromOrigin > 0 { servedFromOrigin.increment(by: fromOrigin) }
        if downloaded > 0 { self.downloaded.increment(by: downloaded) }
        if requests > 0 { originRequests.increment(by: requests) }
    }

    /// Counts what an event tells: downloads starting and ending, errors, version changes, content checks.
    func record(_ event: ResourceEvent) {
        switch event {
        case .downloadStarted:
            totals.withLock { $0.downloadsInFlight += 1 }
            downloadsInFlight.increment()
        case .downloadEnded:
            totals.withLock { $0.downloadsInFlight -= 1 }
            downloadsInFlight.decrement()
        case .error(let code, _):
            totals.withLock { $0.errors += 1 }
            let counter = failures.withLock { counters in
                if let counter = counters[code] { return counter }
                let counter = Counter(label: "streamcache_errors_total", dimensions: [("code", code)], factory: factory)
                counters[code] = counter
                return counter
            }
            counter.increment()
        case .versionChanged:
            totals.withLock { $0.versionChanges += 1 }
            versionChanges.increment()
        case .contentMatched:
            totals.withLock { $0.contentMatches += 1 }
            contentChecks[true]?.increment()
        case .contentMismatch:
            totals.withLock { $0.contentMismatches += 1 }
            contentChecks[false]?.increment()
        case .infoKnown, .bytesCached, .committed:
            break
        }
    }

    /// Records how long a read waited for its first byte, by where that byte was.
    func recordFirstByte(after wait: Duration, fromCache: Bool) {
        let (seconds, attoseconds) = wait.components
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        (fromCache ? firstByteFromCache : firstByteFromOrigin).recordNanoseconds(nanoseconds)
    }

    /// Counts a question about the cached version and what it found.
    func recordRevalidation(_ result: RevalidationResult) {
        totals.withLock {
            $0.revalidations += 1
            if result == .failed { $0.revalidationFailures += 1 }
        }
        revalidations[result]?.increment()
    }

    /// Counts a resource evicted for the size limit.
    func recordEviction(bytes: Int64) {
        totals.withLock {
            $0.evictedResources += 1
            $0.evictedBytes += bytes
        }
        evictions.increment()
        evictedBytes.increment(by: bytes)
    }
}
