#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file (or folder) in a cloud service or on a WebDAV server, named the way its user names it.
///
/// A source turns the user's reference into what the engine needs: an ``StreamCache/Origin``
/// that downloads byte ranges with the right credentials (resolving expiring links as needed),
/// and a **stable cache key** made of the service, the account and the file's id or path, never a
/// signed download link or a token. The file's version (revision, content hash, ETag) comes with
/// it, so a changed file drops its old cached bytes instead of mixing them with new ones.
///
/// ```swift
/// let source = try SourceReference.parse("yandex:/Music/a.mp3", credentials: .init(token: token))
/// let file = try await source.resolve()
/// let song = cache.resource(for: file.key, origin: file.origin)
/// ```
public protocol Source: Sendable {
    /// The service's short name (`webdav`, `yandex`, `dropbox`, `gdrive`, `onedrive`, `box`).
    var service: String { get }
    /// The reference as the user wrote it, without secrets.
    var reference: String { get }
    /// Looks the file up: its metadata, key, version and an origin for its bytes.
    ///
    /// - Throws: ``StreamCache/StreamCacheError`` (`notFound`, `authenticationFailed`,
    ///   `originUnavailable`, `badResponse`, `invalidArgument` for a folder).
    func resolve() async throws -> ResolvedSource
    /// Lists the folder the reference names.
    ///
    /// - Throws: ``StreamCache/StreamCacheError``.
    func list() async throws -> [SourceEntry]
    /// The file the reference names, resolved, or the folder's entries: what a command that takes
    /// either (`streamcache prefetch`) asks first. A default implementation comes with the protocol.
    ///
    /// - Throws: ``StreamCache/StreamCacheError``.
    func contents() async throws -> SourceContents
}

/// A source's file, ready to be read through the cache.
public struct ResolvedSource: Sendable {
    /// The stable cache key: `service:account:file id or path`.
    public var key: CacheKey
    /// The file's name.
    public var fileName: String
    /// The file's length, when the service tells it.
    public var size: Int64?
    /// The MIME type the service gives, if any (often missing or wrong: see ``StreamCache/MediaType``).
    public var mimeType: String?
    /// The version tag (revision, content hash, ETag).
    public var version: Validator?
    /// Downloads the file's bytes.
    public var origin: any Origin
    /// Whether the file was resolved from the cache alone, its service out of reach
    /// (``StreamCache/StreamCache/resolve(_:retryingAfter:)``): its origin fails until its service answers again, and a later
    /// resolution should replace it.
    public var isOffline = false

    /// Creates a resolved source.
    public init(key: CacheKey, fileName: String, size: Int64?, mimeType: String?, version: Validator?, origin: any Origin) {
        self.key = key
        self.fileName = fileName
        self.size = size
        self.mimeType = mimeType
        self.version = version
        self.origin = origin
    }
}

/// One entry of a folder listing.
public struct SourceEntry: Sendable, Hashable {
    /// The entry's name.
    public var name: String
    /// Whether it is a folder.
    public var isFolder: Bool
    /// Its size in bytes, for files whose size the service tells.
    public var size: Int64?
    /// A reference to the entry that ``SourceReference/parse(_:credentials:configuration:)`` accepts.
    public var reference: String

    /// Creates an entry.
    public init(name: String, isFolder: Bool, size: Int64?, reference: String) {
        self.name = name
        self.isFolder = isFolder
        self.size = size
        self.reference = reference
    }
}
