/// Something that happened to a resource; see ``Resource/events()``.
public enum ResourceEvent: Sendable, Hashable {
    /// The resource's info became known or changed.
    case infoKnown(ResourceInfo)
    /// Bytes were written to the cache.
    case bytesCached(ByteRange, totalCached: Int64)
    /// Cached bytes became durable in the index (after a sync).
    case committed(RangeSet)
    /// The origin's version changed: every cached byte of the old version was dropped.
    case versionChanged(ResourceInfo)
    /// A download started for the range (its upper bound is `Int64.max` while the length is unknown).
    case downloadStarted(ByteRange)
    /// A download ended, having fetched `bytes`.
    case downloadEnded(ByteRange, bytes: Int64)
    /// An error reached readers or a download; the message never holds secrets.
    case error(code: String, message: String)
    /// Every byte of the resource is cached and their digest is the one the origin publishes.
    case contentMatched(ContentDigest)
    /// Every byte of the resource was cached, but their digest (`found`) is not the one the
    /// origin publishes (`expected`): every cached byte was dropped.
    case contentMismatch(expected: ContentDigest, found: ContentDigest)
}

/// Running totals for one resource in this process.
public struct ResourceStatistics: Sendable, Hashable, Codable {
    /// Bytes handed to readers that were cached when their read began.
    public var bytesServedFromCache: Int64 = 0
    /// Bytes handed to readers that were downloaded during their read.
    public var bytesServedFromOrigin: Int64 = 0
    /// Bytes received from the origin (body bytes, as written to the cache).
    public var bytesDownloaded: Int64 = 0
    /// Requests opened to the origin.
    public var originRequests: Int = 0
    /// Reads started.
    public var reads: Int = 0

    /// Creates empty totals.
    public init() {}
}
