import StreamCache

/// Turns a source reference that the control API registers (`yandex:/Music/a.mp3`) into what
/// the server plays: the server links no cloud service, so whoever runs it (the `streamcache`
/// tool, with `StreamCacheSources`) supplies this through
/// ``ProxyServer/Configuration/sourceResolver``.
///
/// With it, `streamcache get` and `prefetch` of a cloud file hand their work to a running
/// `serve` instead of waiting for the cache directory it holds.
public protocol SourceResolving: Sendable {
    /// The file `reference` names, resolved with `access` (or the resolver's own credentials,
    /// for what `access` leaves out). Bytes cached for an older version of the file are dropped
    /// before this returns.
    ///
    /// - Throws: ``StreamCache/StreamCacheError``: `invalidArgument` for a reference that is not
    ///   a file, `notFound`, `authenticationFailed`, `originUnavailable`.
    func resolve(_ reference: String, access: ControlAPI.SourceAccess) async throws -> SourceStream
}

/// A source's file, as the server registers it.
public struct SourceStream: Sendable {
    /// The stable key the source gives the file (service, account, file id or path).
    public var key: CacheKey
    /// Downloads the file's bytes.
    public var origin: any Origin
    /// The file name at the end of the stream URL.
    public var fileName: String
    /// Whether to look the file up again at its next request: it was found while its service
    /// was out of reach (from the cache alone), and a later lookup may find the service.
    public var isProvisional: Bool

    /// Creates a stream.
    public init(key: CacheKey, origin: any Origin, fileName: String, isProvisional: Bool = false) {
        self.key = key
        self.origin = origin
        self.fileName = fileName
        self.isProvisional = isProvisional
    }
}
