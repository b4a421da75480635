/// What checking a resource's cached bytes against its origin's digest found (see
/// ``Resource/checkContent()``).
public enum ContentCheckResult: Sendable, Hashable {
    /// Every byte is cached, and their digest is the one the origin publishes.
    case matched(ContentDigest)
    /// Every byte was cached, but their digest (`found`) is not the origin's (`expected`): every
    /// cached byte was dropped, and the next read fetches them again.
    case mismatched(expected: ContentDigest, found: ContentDigest)
    /// The origin served bytes that failed its digest twice alike; they are kept as it serves them.
    case disputed(ContentDigest)
    /// The origin published no digest for the resource.
    case noDigest
    /// Not every byte of the resource is cached (or its length is unknown).
    case incomplete
}
