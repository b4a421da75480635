import ArgumentParser
import StreamCache
import StreamCacheServer
import StreamCacheSources

/// How `serve` resolves the source references its control API registers: a `get` or `prefetch`
/// of a cloud or WebDAV file beside it hands the reference over with the credentials it was
/// given; what those leave out comes from the server's own options (its `--token-env`, its
/// credentials file).
struct ServedSourceResolver: SourceResolving {
    let options: SourceOptions
    let transport: any HTTPTransport
    let cache: StreamCache
    /// How long a file resolved offline waits before a download asks its service again.
    var retryOfflineAfter: Duration = .seconds(30)

    func resolve(_ reference: String, access: ControlAPI.SourceAccess) async throws -> SourceStream {
        guard SourceReference.isSourceReference(reference) else {
            throw StreamCacheError(.invalidArgument, "'\(reference.prefix(200))' is not a source reference.")
        }
        let source: any Source
        do {
            source = try options.parser(for: reference, transport: transport, access: access)(reference)
        } catch let error as ValidationError {
            throw StreamCacheError(.invalidArgument, error.message)
        }
        return try await cache.stream(for: try await cache.resolve(source, retryingAfter: retryOfflineAfter))
    }
}

extension StreamCache {
    /// What the server registers for a source's file, once the bytes cached of an older version
    /// of it are dropped.
    func stream(for file: ResolvedSource) async throws -> SourceStream {
        _ = try await resource(for: file)
        return SourceStream(key: file.key, origin: file.origin, fileName: file.fileName, isProvisional: file.isOffline)
    }
}
