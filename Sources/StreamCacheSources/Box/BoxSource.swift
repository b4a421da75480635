#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file or folder in Box, named `box:<file id>` or `box:folder:<folder id>`, read through the
/// Box API with `Authorization: Bearer <token>`.
///
/// Metadata comes from `GET /2.0/files/{id}?fields=name,size,sha1,etag,file_version`; bytes from
/// `GET /2.0/files/{id}/content?version={file version id}`, which answers 302 with an expiring
/// `dl.boxcloud.com` URL: the redirect is followed without the token, with `Range` kept. Naming
/// the version makes every download of a link the bytes of the version it was resolved with, so
/// a file replaced meanwhile is never joined to them and the link needs no asking again until a
/// revalidation (a version Box no longer keeps is 404, and the link is resolved again). The version is the `sha1` (else `etag`); the cache key is
/// `box:<user id>:<file id>`.
public struct BoxSource: Source {
    public var service: String { "box" }
    /// The file id, or `folder:<id>`.
    public let item: String
    private let api: CloudAPI
    private let configuration: SourceConfiguration

    /// Creates a source for `item`: a file id, or `folder:` and a folder id.
    public init(item: String, token: any TokenProvider, configuration: SourceConfiguration) {
        self.item = item
        self.configuration = configuration
        api = CloudAPI(service: "Box", credentials: TokenCredentials(token), transport: configuration.transport)
    }

    public var reference: String { "box:\(item)" }
    private var base: URL { configuration.endpoints.box }

    struct User: Decodable { var id: String }

    struct File: Decodable {
        var type: String?
        var id: String
        var name: String
        var size: StatedSize?
        var sha1: String?
        var etag: String?
        var file_version: FileVersion?
    }

    struct FileVersion: Decodable { var id: String }

    struct Items: Decodable { var entries: [File] }

    public func resolve() async throws -> ResolvedSource {
        guard !item.hasPrefix("folder:") else { throw StreamCacheError(.invalidArgument, "\(reference) is a folder; list it with `streamcache ls`.") }
        async let user = api.json(User.self, url: CloudAPI.url(base, "users/me", query: [("fields", "id")]))
        let (file, target) = try await describe()
        let userID = try await user.id
        let source = self
        // Asked again before a revalidation: the content download does not tell a new version. A
        // link that names its version keeps its word on its bytes; one that does not (no version
        // id, a viewer's) keeps it for ``SourceConfiguration/linkVersionLifetime``.
        let locator = configuration.resolvingLocator(reference, initial: target) { try await source.describe().target }
        return ResolvedSource(key: CacheKey("box:\(userID):\(file.id)"), fileName: file.name, size: file.size?.bytes, mimeType: nil,
                              version: target.version, origin: configuration.origin(locator, credentials: api.credentials))
    }

    /// The file's metadata now, and where to download it from.
    private func describe() async throws -> (file: File, target: DownloadTarget) {
        let file = try await api.json(File.self, url: CloudAPI.url(base, "files/\(item)", query: [("fields", "name,size,sha1,etag,file_version")]))
        let version = (file.sha1 ?? file.etag).map { Validator(entityTag: "\"\($0)\"") }
        let pin = file.file_version.map { [("version", $0.id)] } ?? []
        var target = DownloadTarget(url: CloudAPI.url(base, "files/\(file.id)/content", query: pin), sendsCredentials: true, expires: false,
                                    version: version, totalLength: file.size?.bytes, fileName: file.name,
                                    contentDigest: file.sha1.flatMap { ContentDigest(algorithm: .sha1, hex: $0) })
        target.pinsVersion = !pin.isEmpty
        return (file, target)
    }

    public func list() async throws -> [SourceEntry] {
        guard item.hasPrefix("folder:") else { throw StreamCacheError(.invalidArgument, "\(reference) is a file; a folder is `box:folder:<id>`.") }
        let items = try await api.json(Items.self, url: CloudAPI.url(base, "folders/\(item.dropFirst(7))/items", query: [
            ("fields", "type,id,name,size"), ("limit", "1000"),
        ]))
        return items.entries.map {
            SourceEntry(name: $0.name, isFolder: $0.type == "folder", size: $0.size?.bytes, reference: $0.type == "folder" ? "box:folder:\($0.id)" : "box:\($0.id)")
        }
    }
}
