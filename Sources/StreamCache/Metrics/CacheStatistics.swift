/// Running totals for a whole cache since it was opened in this process; see
/// ``StreamCache/statistics``.
///
/// The same figures go to the app's metrics backend through swift-metrics (see
/// ``StreamCache/Configuration/metricsFactory``), where a dashboard can follow their rates;
/// this snapshot is for a status screen, a log line at exit, or a server's `/api/stats`.
///
/// ```swift
/// let totals = cache.statistics
/// print("served \(totals.bytesServed) bytes, \(totals.bytesDownloaded) of them fetched from the origin")
/// ```
public struct CacheStatistics: Sendable, Hashable, Codable {
    /// Reads started (each range a player or a front end asked for, prefetches included).
    public var reads = 0
    /// Bytes handed to readers that were cached when their read began.
    public var bytesServedFromCache: Int64 = 0
    /// Bytes handed to readers that were downloaded during their read. Readers that share one
    /// download each count its bytes; compare with ``bytesDownloaded`` to see what sharing saved.
    public var bytesServedFromOrigin: Int64 = 0
    /// Body bytes received from origins and written to the cache.
    public var bytesDownloaded: Int64 = 0
    /// Requests sent to origins: downloads' requests and revalidation questions.
    public var originRequests = 0
    /// Downloads running now.
    public var downloadsInFlight = 0
    /// Errors that ended downloads or reached readers: an origin that failed, a file that changed
    /// during a read, a cache write that failed. A cancelled download is not one.
    public var errors = 0
    /// Times an origin's file turned out to have changed, so that the cached bytes of the old
    /// version were dropped.
    public var versionChanges = 0
    /// Questions asked to origins about the cached version (see
    /// ``StreamCache/Configuration/revalidationInterval``), including those that failed.
    public var revalidations = 0
    /// Revalidation questions that failed or went unanswered in time; their reads were served
    /// the cached bytes.
    public var revalidationFailures = 0
    /// Complete resources whose bytes were checked against the content digest their origin
    /// publishes, and matched (see ``ContentDigest``).
    public var contentMatches = 0
    /// Complete resources whose bytes did not match their origin's content digest, and were
    /// dropped.
    public var contentMismatches = 0
    /// Resources evicted to keep the cache under its size limit.
    public var evictedResources = 0
    /// Cached bytes those evictions freed.
    public var evictedBytes: Int64 = 0

    /// Creates empty totals.
    public init() {}

    /// Every byte handed to readers.
    public var bytesServed: Int64 { bytesServedFromCache + bytesServedFromOrigin }

    /// The share of served bytes that came from the cache, or `nil` before any byte was served.
    public var cacheHitRatio: Double? {
        bytesServed > 0 ? Double(bytesServedFromCache) / Double(bytesServed) : nil
    }
}
