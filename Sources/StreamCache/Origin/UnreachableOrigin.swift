/// The origin of a resource the cache makes only to remove it (eviction of a resource no longer
/// in memory): nothing reads it before a caller asks for the key with a real origin, which
/// replaces this one.
struct UnreachableOrigin: Origin {
    let key: CacheKey

    var logDescription: String { "no origin (\(key))" }

    func open(_ request: OriginRequest) async throws -> OriginResponse {
        throw StreamCacheError(.originUnavailable, "The resource \(key) has no origin here; ask for it with one.")
    }
}
