#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file or folder on Yandex.Disk, named `yandex:/path` (`yandex:disk:/path` works too), read
/// through the REST API with `Authorization: OAuth <token>`.
///
/// Metadata comes from `GET /v1/disk/resources` (size, `mime_type`, md5, sha256, revision); bytes
/// from the link `GET /v1/disk/resources/download` returns, which expires: a download that meets
/// 403, 404 or 410 on it resolves a new link and carries on from the same byte. The link gets the
/// same OAuth token (as Yandex documents) and plain `Range` without `If-Range` (which Yandex answers
/// with 416); the version is checked with the sha256 (else md5, else revision) of each resolution.
/// The cache key is `yandex:<uid>:<path>`.
public struct YandexDiskSource: Source {
    public var service: String { "yandex" }
    /// The path on the disk, starting with `/`.
    public let path: String
    private let api: CloudAPI
    private let configuration: SourceConfiguration

    /// Creates a source for `path` (`/Music/a.mp3` or `disk:/Music/a.mp3`).
    public init(path: String, token: any TokenProvider, configuration: SourceConfiguration) {
        let trimmed = path.hasPrefix("disk:") ? String(path.dropFirst(5)) : path
        self.path = trimmed.hasPrefix("/") ? trimmed : "/" + trimmed
        self.configuration = configuration
        api = CloudAPI(service: "Yandex.Disk", credentials: TokenCredentials(token, scheme: "OAuth"), transport: configuration.transport)
    }

    public var reference: String { "yandex:\(path)" }
    private var base: URL { configuration.endpoints.yandex }

    struct DiskInfo: Decodable {
        struct User: Decodable { var uid: String }
        var user: User
    }

    struct Resource: Decodable {
        var name: String
        var type: String
        var size: StatedSize?
        var mime_type: String?
        var md5: String?
        var sha256: String?
        var revision: Int64?
        var path: String?
        /// A published resource's key (public links only).
        var public_key: String?
        struct Embedded: Decodable { var items: [Resource] }
        var _embedded: Embedded?

        var version: Validator? {
            let tag = sha256 ?? md5 ?? revision.map(String.init)
            return tag.map { Validator(entityTag: "\"\($0)\"") }
        }

        /// The file's SHA-256, else its MD5, which the cache checks the complete bytes against.
        var contentDigest: ContentDigest? {
            sha256.flatMap { ContentDigest(algorithm: .sha256, hex: $0) } ?? md5.flatMap { ContentDigest(algorithm: .md5, hex: $0) }
        }
    }

    struct Link: Decodable { var href: String }

    func metadata() async throws -> Resource {
        try await api.json(Resource.self, url: CloudAPI.url(base, "resources", query: [
            ("path", path), ("fields", "name,type,size,mime_type,md5,sha256,revision,path"),
        ]))
    }

    public func resolve() async throws -> ResolvedSource {
        async let account = api.json(DiskInfo.self, url: CloudAPI.url(base, "", query: [("fields", "user")]))
        let first = try await metadata()
        guard first.type == "file" else { throw StreamCacheError(.invalidArgument, "\(reference) is a folder; list it with `streamcache ls`.") }
        let uid = try await account.user.uid
        let source = self
        let locator = configuration.resolvingLocator("yandex:\(path)") {
            // Each link comes with fresh metadata, so a new version shows at the next resolution.
            async let link = source.api.json(Link.self, url: CloudAPI.url(source.base, "resources/download", query: [("path", source.path)]))
            let now = try await source.metadata()
            guard let href = URL(string: try await link.href) else {
                throw StreamCacheError(.badResponse, "Yandex.Disk gave a download link that is not a URL.")
            }
            return DownloadTarget(url: href, sendsCredentials: true, expires: true, version: now.version, totalLength: now.size?.bytes,
                                  mimeType: now.mime_type, fileName: now.name, contentDigest: now.contentDigest)
        }
        let origin = configuration.origin(locator, credentials: api.credentials)
        return ResolvedSource(key: CacheKey("yandex:\(uid):\(path)"), fileName: first.name, size: first.size?.bytes, mimeType: first.mime_type,
                              version: first.version, origin: origin)
    }

    public func list() async throws -> [SourceEntry] {
        let folder = try await api.json(Resource.self, url: CloudAPI.url(base, "resources", query: [
            ("path", path), ("limit", "10000"), ("fields", "name,type,_embedded.items.name,_embedded.items.type,_embedded.items.size"),
        ]))
        guard folder.type == "dir" else { throw StreamCacheError(.invalidArgument, "\(reference) is a file, not a folder.") }
        let prefix = path.hasSuffix("/") ? path : path + "/"
        return (folder._embedded?.items ?? []).map {
            SourceEntry(name: $0.name, isFolder: $0.type == "dir", size: $0.size?.bytes, reference: "yandex:\(prefix)\($0.name)")
        }
    }
}
