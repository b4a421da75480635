/// The rules one eviction pass follows: the three a ``StreamCache/Configuration`` names for every
/// pass (``StreamCache/Configuration/maximumSize``, ``StreamCache/Configuration/maximumAge``,
/// ``StreamCache/Configuration/minimumFreeSpace``), or others for one pass asked for at once
/// (``StreamCache/evict(_:dryRun:)``: `streamcache cache prune`, an app's "free up space").
///
/// A pass never evicts a pinned resource, nor one being read, downloaded or asked for while it
/// runs. It applies the rules in this order, least recently used first: age (it costs nothing
/// the user wants), then size (a number agreed on), then free space (the device's).
public struct EvictionRules: Sendable, Hashable {
    /// Resources are evicted until the cache holds at most 90 % of this many bytes, when it holds
    /// more; `nil` for no limit.
    public var maximumSize: Int64?
    /// Resources not read (nor asked for) for this long are evicted; `nil` for no limit.
    public var maximumAge: Duration?
    /// Resources are evicted while the cache's volume has less than this many bytes free for an
    /// unprivileged process, until it has a tenth more; `nil` for no minimum.
    public var minimumFreeSpace: Int64?

    /// Creates rules; each one left `nil` does not apply.
    public init(maximumSize: Int64? = nil, maximumAge: Duration? = nil, minimumFreeSpace: Int64? = nil) {
        self.maximumSize = maximumSize
        self.maximumAge = maximumAge
        self.minimumFreeSpace = minimumFreeSpace
    }

    /// Whether any rule applies.
    public var isEmpty: Bool { maximumSize == nil && maximumAge == nil && minimumFreeSpace == nil }
}

/// Why a pass evicted a resource: the rule of ``EvictionRules`` it followed.
public enum EvictionReason: String, Sendable, Hashable, Codable, CustomStringConvertible {
    /// Not read for longer than ``EvictionRules/maximumAge``.
    case age
    /// The cache held more than ``EvictionRules/maximumSize``.
    case size
    /// The volume had less free than ``EvictionRules/minimumFreeSpace``.
    case freeSpace

    /// The reason in words, for logs and the command line.
    public var description: String {
        switch self {
        case .age: "not read for longer than the maximum age"
        case .size: "the cache is over its maximum size"
        case .freeSpace: "the volume has less than the minimum free space"
        }
    }
}

/// A resource an eviction pass removed (or, in a dry run, would have).
public struct EvictedResource: Sendable, Hashable {
    /// The resource's key.
    public var key: CacheKey
    /// The cached bytes it held.
    public var bytes: Int64
    /// The rule it went by.
    public var reason: EvictionReason

    /// Creates a record of an eviction.
    public init(key: CacheKey, bytes: Int64, reason: EvictionReason) {
        self.key = key
        self.bytes = bytes
        self.reason = reason
    }
}
