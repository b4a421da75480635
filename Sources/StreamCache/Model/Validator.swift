/// What identifies one version of a resource: its entity tag, else its modification date.
///
/// The cache stores the validator with the resource and sends it in `If-Range` whenever it
/// resumes or extends a download, so bytes of two versions are never mixed (invariant 1).
public struct Validator: Hashable, Sendable, Codable {
    /// The `ETag` as the origin sent it, quotes and any `W/` prefix included.
    public var entityTag: String?
    /// The `Last-Modified` date as the origin sent it.
    public var lastModified: String?

    /// Creates a validator.
    public init(entityTag: String? = nil, lastModified: String? = nil) {
        self.entityTag = entityTag.flatMap { $0.isEmpty ? nil : $0 }
        self.lastModified = lastModified.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Whether the validator holds nothing to compare.
    public var isEmpty: Bool { entityTag == nil && lastModified == nil }

    /// Whether the entity tag is weak (`W/"…"`); weak tags may not be used in `If-Range`.
    public var hasWeakEntityTag: Bool { entityTag?.hasPrefix("W/") ?? false }

    /// The value to send in `If-Range`: a strong entity tag, else the modification date, else `nil`.
    public var ifRangeValue: String? {
        if let entityTag, !hasWeakEntityTag { return entityTag }
        return lastModified
    }

    /// Whether `other` names the same version. Compares what both sides have, entity tag first;
    /// returns `nil` when they share nothing to compare.
    public func matches(_ other: Validator) -> Bool? {
        if let mine = entityTag, let theirs = other.entityTag {
            return mine.trimmingWeakPrefix == theirs.trimmingWeakPrefix
        }
        if let mine = lastModified, let theirs = other.lastModified { return mine == theirs }
        return nil
    }
}

extension String {
    fileprivate var trimmingWeakPrefix: Substring { hasPrefix("W/") ? dropFirst(2) : Substring(self) }
}
