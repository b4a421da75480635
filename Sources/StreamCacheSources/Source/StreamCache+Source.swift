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

    /// Resolves `source`, and remembers its reference as a name of the file it resolved to. When
    /// the service cannot be reached (`originUnavailable`), the file the reference last named is
    /// resolved from the cache instead (``ResolvedSource/isOffline``): what is cached of it plays,
    /// and a download fails with the service's error.
    ///
    /// - Throws: what ``Source/resolve()`` throws, when the cache knows no file by the reference.
    public func resolve(_ source: any Source) async throws -> ResolvedSource {
        try await resolve(alias: source.reference) { try await source.resolve() }
    }

    /// ``resolve(_:)`` for a file found another way (by its path below a served folder), known
    /// in the cache as `alias`.
    public func resolve(alias: String, _ resolve: () async throws -> ResolvedSource) async throws -> ResolvedSource {
        do {
            let file = try await resolve()
            // A hint: an index that cannot be read or written now costs the offline fallback, not the file.
            let known = try? await resource(aliased: alias)
            if known?.key != file.key || known?.fileName != file.fileName { try? await setAlias(alias, for: file.key, fileName: file.fileName) }
            return file
        } catch let failure as StreamCacheError where failure.code == .originUnavailable {
            guard let cached = try? await resource(aliased: alias) else { throw failure }
            var file = ResolvedSource(key: cached.key, fileName: cached.fileName, size: nil, mimeType: nil, version: nil,
                                      origin: OfflineOrigin(name: alias, failure: failure))
            file.isOffline = true
            return file
        }
    }
}

/// The origin of a file resolved from the cache while its service could not be reached: each
/// request fails with the error the resolution met, so the cached bytes play and the others fail
/// as the service did.
struct OfflineOrigin: Origin {
    let name: String
    let failure: StreamCacheError

    var logDescription: String { "\(name), offline" }

    func open(_ request: OriginRequest) async throws -> OriginResponse { throw failure }
}
