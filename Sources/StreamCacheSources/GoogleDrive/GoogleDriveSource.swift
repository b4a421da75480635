#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file or folder in Google Drive, named `gdrive:<file id>` (a folder: `gdrive:<folder id>`),
/// read through Drive API v3 with `Authorization: Bearer <token>`.
///
/// Metadata comes from `GET /drive/v3/files/{id}?fields=id,name,size,mimeType,md5Checksum,headRevisionId,capabilities/canReadRevisions`;
/// bytes from `GET /drive/v3/files/{id}/revisions/{headRevisionId}?alt=media` with `Range` when
/// the user may read the file's revisions, else from `GET /drive/v3/files/{id}?alt=media` (both
/// stable URLs that always need the token). Naming the revision makes every download of a link
/// the bytes of the version it was resolved with, so a file replaced meanwhile is never joined to
/// them and the link needs no asking again until a revalidation (a revision Drive no longer
/// keeps is 404, and the link is resolved again); a viewer who
/// may not read revisions (`canReadRevisions` false) gets the current bytes, whose version is
/// asked again once ``SourceConfiguration/linkVersionLifetime`` has passed. Google Docs, Sheets
/// and Slides have no bytes to download and are refused. The version is `md5Checksum` (else
/// `headRevisionId`); the cache key is `gdrive:<permission id>:<file id>`.
public struct GoogleDriveSource: Source {
    public var service: String { "gdrive" }
    /// The file or folder id.
    public let fileID: String
    private let api: CloudAPI
    private let configuration: SourceConfiguration

    /// Creates a source for the file or folder `fileID`.
    public init(fileID: String, token: any TokenProvider, configuration: SourceConfiguration) {
        self.fileID = fileID
        self.configuration = configuration
        api = CloudAPI(service: "Google Drive", credentials: TokenCredentials(token), transport: configuration.transport)
    }

    public var reference: String { "gdrive:\(fileID)" }
    private var base: URL { configuration.endpoints.googleDrive }

    struct About: Decodable {
        struct User: Decodable { var permissionId: String }
        var user: User
    }

    struct File: Decodable {
        var id: String
        var name: String
        var mimeType: String?
        /// Drive sends sizes as strings.
        var size: StatedSize?
        var md5Checksum: String?
        var headRevisionId: String?
        var capabilities: Capabilities?
    }

    struct Capabilities: Decodable { var canReadRevisions: Bool? }

    struct Listing: Decodable { var files: [File] }

    static let folderType = "application/vnd.google-apps.folder"

    public func resolve() async throws -> ResolvedSource {
        async let about = api.json(About.self, url: CloudAPI.url(base, "about", query: [("fields", "user(permissionId)")]))
        let (file, target) = try await describe()
        let permissionID = try await about.user.permissionId
        let source = self
        // Asked again before a revalidation: the media download does not tell a new version. A
        // link that names its version keeps its word on its bytes; one that does not (no version
        // id, a viewer's) keeps it for ``SourceConfiguration/linkVersionLifetime``.
        let locator = configuration.resolvingLocator(reference, initial: target) { try await source.describe().target }
        return ResolvedSource(key: CacheKey("gdrive:\(permissionID):\(file.id)"), fileName: file.name, size: target.totalLength,
                              mimeType: file.mimeType, version: target.version, origin: configuration.origin(locator, credentials: api.credentials))
    }

    /// The file's metadata now, and where to download it from.
    private func describe() async throws -> (file: File, target: DownloadTarget) {
        let file = try await api.json(File.self, url: CloudAPI.url(base, "files/\(fileID)", query: [
            ("fields", "id,name,size,mimeType,md5Checksum,headRevisionId,capabilities/canReadRevisions"), ("supportsAllDrives", "true"),
        ]))
        if file.mimeType == Self.folderType { throw StreamCacheError(.invalidArgument, "\(reference) is a folder; list it with `streamcache ls`.") }
        if file.mimeType?.hasPrefix("application/vnd.google-apps.") == true {
            throw StreamCacheError(.invalidArgument, "\(reference) is a Google \(file.mimeType ?? "") document, which has no bytes to stream.")
        }
        let version = (file.md5Checksum ?? file.headRevisionId).map { Validator(entityTag: "\"\($0)\"") }
        let media: URL
        let pinned: Bool
        if let revision = file.headRevisionId, file.capabilities?.canReadRevisions == true {
            media = CloudAPI.url(base, "files/\(file.id)/revisions/\(revision)", query: [("alt", "media")])
            pinned = true
        } else {
            media = CloudAPI.url(base, "files/\(file.id)", query: [("alt", "media"), ("supportsAllDrives", "true")])
            pinned = false
        }
        var target = DownloadTarget(url: media, sendsCredentials: true, expires: false, version: version,
                                    totalLength: file.size?.bytes, mimeType: file.mimeType, fileName: file.name,
                                    contentDigest: file.md5Checksum.flatMap { ContentDigest(algorithm: .md5, hex: $0) })
        target.pinsVersion = pinned
        return (file, target)
    }

    public func list() async throws -> [SourceEntry] {
        let listing = try await api.json(Listing.self, url: CloudAPI.url(base, "files", query: [
            ("q", "'\(fileID)' in parents and trashed = false"), ("fields", "files(id,name,size,mimeType)"), ("pageSize", "1000"),
            ("supportsAllDrives", "true"), ("includeItemsFromAllDrives", "true"),
        ]))
        return listing.files.map {
            SourceEntry(name: $0.name, isFolder: $0.mimeType == Self.folderType, size: $0.size?.bytes, reference: "gdrive:\($0.id)")
        }
    }
}
