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
    /// resolved from the cache instead (``ResolvedSource/isOffline``): what is cached of it plays
    /// at once; a download asks the service again once `interval` has passed since the last try,
    /// and fails with its error until it answers. The cached bytes' version is unconfirmed
    /// meanwhile (``StreamCache/Origin/isProvisional``): whenever a try is due, a read of cached
    /// bytes first asks for the version (waiting at most
    /// ``StreamCache/StreamCache/Configuration/revalidationTimeout``), so a file replaced at the
    /// service while it was out of reach plays its new bytes once it answers.
    ///
    /// - Throws: what ``Source/resolve()`` throws, when the cache knows no file by the reference.
    public func resolve(_ source: any Source, retryingAfter interval: Duration = .seconds(30)) async throws -> ResolvedSource {
        try await resolve(alias: source.reference, retryingAfter: interval, again: { try await source.resolve().origin }) { try await source.resolve() }
    }

    /// ``resolve(_:retryingAfter:)`` for a file found another way (by its path below a served
    /// folder), known in the cache as `alias`. A file resolved offline this way never asks again
    /// by itself (`again` nil): resolve it anew later.
    public func resolve(alias: String, retryingAfter interval: Duration = .seconds(30), again: (@Sendable () async throws -> any Origin)? = nil,
                        _ resolve: () async throws -> ResolvedSource) async throws -> ResolvedSource {
        do {
            let file = try await resolve()
            // A hint: an index that cannot be read or written now costs the offline fallback, not the file.
            let known = try? await resource(aliased: alias)
            if known?.key != file.key || known?.fileName != file.fileName { try? await setAlias(alias, for: file.key, fileName: file.fileName) }
            return file
        } catch let failure as StreamCacheError where failure.code == .originUnavailable {
            guard let cached = try? await resource(aliased: alias) else { throw failure }
            var file = ResolvedSource(key: cached.key, fileName: cached.fileName, size: nil, mimeType: nil, version: nil,
                                      origin: OfflineOrigin(name: alias, failure: failure, retryInterval: interval, resolveAgain: again))
            file.isOffline = true
            return file
        }
    }
}
