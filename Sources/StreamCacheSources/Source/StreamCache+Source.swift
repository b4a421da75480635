#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

extension StreamCache {
    /// The resource of a resolved source file. Cached bytes of another version than the one the
    /// service reports now are dropped first, so a replaced file never plays its old bytes.
    ///
    /// ```swift
    /// let file = try await source.resolve()
    /// let song = try await cache.resource(for: file)
    /// ```
    public func resource(for file: ResolvedSource) async throws -> Resource {
        let resource = resource(for: file.key, origin: file.origin)
        if let version = file.version { try await resource.expectVersion(version, totalLength: file.size) }
        return resource
    }
}
