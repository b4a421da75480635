#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file or folder in OneDrive, named `onedrive:/path` or `onedrive:id:<item id>`, read through
/// Microsoft Graph with `Authorization: Bearer <token>`.
///
/// Metadata comes from `GET /me/drive/items/{id}` (or `/me/drive/root:/path`): size,
/// `file.mimeType`, `cTag`/`eTag`. Bytes come from `GET /me/drive/items/{id}/content`, which answers
/// 302 with a short-lived pre-authenticated URL on another host: the redirect is followed
/// **without** the bearer token, with `Range` kept. The version is the `cTag` (content tag, else
/// `eTag`); the cache key is `onedrive:<drive id>:<item id>`.
public struct OneDriveSource: Source {
    public var service: String { "onedrive" }
    /// `/path/to/file` or `id:<item id>`.
    public let item: String
    private let api: CloudAPI
    private let configuration: SourceConfiguration

    /// Creates a source for `item`: a path from the drive's root, or `id:` and an item id.
    public init(item: String, token: any TokenProvider, configuration: SourceConfiguration) {
        self.item = item.hasPrefix("id:") || item.hasPrefix("/") ? item : "/" + item
        self.configuration = configuration
        api = CloudAPI(service: "OneDrive", credentials: TokenCredentials(token), transport: configuration.transport)
    }

    public var reference: String { "onedrive:\(item)" }
    private var base: URL { configuration.endpoints.microsoftGraph }

    /// The Graph path of the item: `me/drive/items/{id}` or `me/drive/root:/path:`.
    private var itemPath: String {
        if item.hasPrefix("id:") { return "me/drive/items/\(item.dropFirst(3))" }
        return item == "/" ? "me/drive/root" : "me/drive/root:\(item):"
    }

    struct Drive: Decodable { var id: String }

    struct Item: Decodable {
        struct File: Decodable {
            /// Graph's `hashes`: `quickXorHash` on every drive, `sha1Hash` and `sha256Hash` on
            /// some personal ones.
            struct Hashes: Decodable {
                var quickXorHash: String?
                var sha1Hash: String?
                var sha256Hash: String?
            }
            var mimeType: String?
            var hashes: Hashes?

            var contentDigest: ContentDigest? {
                guard let hashes else { return nil }
                return hashes.sha256Hash.flatMap { ContentDigest(algorithm: .sha256, hex: $0) }
                    ?? hashes.sha1Hash.flatMap { ContentDigest(algorithm: .sha1, hex: $0) }
                    ?? hashes.quickXorHash.flatMap { ContentDigest(algorithm: .quickXor, base64: $0) }
            }
        }
        struct Folder: Decodable {}
        var id: String
        var name: String
        var size: StatedSize?
        var eTag: String?
        var cTag: String?
        var file: File?
        var folder: Folder?
    }

    struct Children: Decodable { var value: [Item] }

    public func resolve() async throws -> ResolvedSource {
        async let drive = api.json(Drive.self, url: CloudAPI.url(base, "me/drive", query: [("$select", "id")]))
        let (file, target) = try await describe()
        let driveID = try await drive.id
        let source = self
        // Asked again before a revalidation and once its word on the version is old
        // (``SourceConfiguration/linkVersionLifetime``): the content download does not tell a new version.
        let locator = configuration.resolvingLocator(reference, initial: target) { try await source.describe().target }
        return ResolvedSource(key: CacheKey("onedrive:\(driveID):\(file.id)"), fileName: file.name, size: file.size?.bytes, mimeType: file.file?.mimeType,
                              version: target.version, origin: configuration.origin(locator, credentials: api.credentials))
    }

    /// The item's metadata now, and where to download it from.
    private func describe() async throws -> (file: Item, target: DownloadTarget) {
        let file = try await api.json(Item.self, url: CloudAPI.url(base, itemPath))
        guard file.folder == nil else { throw StreamCacheError(.invalidArgument, "\(reference) is a folder; list it with `streamcache ls`.") }
        let version = (file.cTag ?? file.eTag).map { Validator(entityTag: "\"\($0)\"") }
        // `/content` redirects to a pre-authenticated URL on another host: HTTPOrigin follows it
        // without the token, and asks `/content` again for each request, so the URL never expires on us.
        let target = DownloadTarget(url: CloudAPI.url(base, "me/drive/items/\(file.id)/content"), sendsCredentials: true, expires: false,
                                    version: version, totalLength: file.size?.bytes, mimeType: file.file?.mimeType, fileName: file.name,
                                    contentDigest: file.file?.contentDigest)
        return (file, target)
    }

    public func list() async throws -> [SourceEntry] {
        let children = try await api.json(Children.self, url: CloudAPI.url(base, itemPath + "/children", query: [("$top", "1000")]))
        return children.value.map {
            SourceEntry(name: $0.name, isFolder: $0.folder != nil, size: $0.size?.bytes, reference: "onedrive:id:\($0.id)")
        }
    }
}
