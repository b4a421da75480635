#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file or folder in Dropbox, named `dropbox:/path` (or `dropbox:id:…`), read through API v2
/// with `Authorization: Bearer <token>`.
///
/// Metadata comes from `POST /2/files/get_metadata` (size, `rev`, `content_hash`; no MIME type,
/// so the extension decides); bytes from `/2/files/download` with the file's id in
/// `Dropbox-API-Arg` and a `Range` header, a stable endpoint that needs the token. The version is
/// the `content_hash` (else `rev`); the cache key is `dropbox:<account id>:<file id>`.
public struct DropboxSource: Source {
    public var service: String { "dropbox" }
    /// The path (`/Music/a.mp3`) or id (`id:…`).
    public let path: String
    private let api: CloudAPI
    private let configuration: SourceConfiguration

    /// Creates a source for `path`.
    public init(path: String, token: any TokenProvider, configuration: SourceConfiguration) {
        self.path = path.hasPrefix("id:") || path.hasPrefix("/") ? path : "/" + path
        self.configuration = configuration
        api = CloudAPI(service: "Dropbox", credentials: TokenCredentials(token), transport: configuration.transport)
    }

    public var reference: String { "dropbox:\(path)" }

    struct Account: Decodable { var account_id: String }

    struct Metadata: Decodable {
        var tag: String
        var name: String
        var id: String?
        var size: StatedSize?
        var rev: String?
        var content_hash: String?
        var path_display: String?

        enum CodingKeys: String, CodingKey {
            case tag = ".tag", name, id, size, rev, content_hash, path_display
        }
    }

    struct Listing: Decodable { var entries: [Metadata] }

    /// The JSON argument of a Dropbox call, "HTTP header safe": every non-ASCII character and
    /// U+007F escaped as `\uXXXX`, since it may travel in the `Dropbox-API-Arg` header.
    package static func argument(path: String) -> String {
        var escaped = ""
        for unit in path.utf16 {
            switch unit {
            case 0x22: escaped += "\\\""
            case 0x5C: escaped += "\\\\"
            case 0x20..<0x7F: escaped += String(UnicodeScalar(UInt8(unit)))
            default:
                let hex = String(unit, radix: 16)
                escaped += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            }
        }
        return "{\"path\":\"\(escaped)\"}"
    }

    public func resolve() async throws -> ResolvedSource {
        let base = configuration.endpoints.dropboxAPI
        // `users/get_current_account` takes no argument: the body is the JSON `null`.
        async let account = api.json(Account.self, method: "POST", url: base.appendingPathComponent("users/get_current_account"),
                                     headers: ["Content-Type": "application/json"], body: Data("null".utf8))
        let file = try await api.json(Metadata.self, method: "POST", url: base.appendingPathComponent("files/get_metadata"),
                                      headers: ["Content-Type": "application/json"], body: Data(Self.argument(path: path).utf8))
        guard file.tag == "file", let id = file.id else {
            throw StreamCacheError(.invalidArgument, "\(reference) is a folder; list it with `streamcache ls`.")
        }
        let accountID = try await account.account_id
        let version = (file.content_hash ?? file.rev).map { Validator(entityTag: "\"\($0)\"") }
        var target = DownloadTarget(url: configuration.endpoints.dropboxContent.appendingPathComponent("files/download"),
                                    headers: ["Dropbox-API-Arg": Self.argument(path: id)], sendsCredentials: true, expires: false,
                                    version: version, totalLength: file.size?.bytes, fileName: file.name,
                                    contentDigest: file.content_hash.flatMap { ContentDigest(algorithm: .dropboxContentHash, hex: $0) })
        // Each download reports the metadata of what it sends; a file replaced meanwhile shows there.
        target.versionHeader = file.content_hash != nil
            ? VersionHeader(name: "Dropbox-API-Result", jsonKey: "content_hash", digestAlgorithm: .dropboxContentHash)
            : VersionHeader(name: "Dropbox-API-Result", jsonKey: "rev")
        let origin = configuration.origin(FixedDownloadLocator(target: target), credentials: api.credentials)
        return ResolvedSource(key: CacheKey("dropbox:\(accountID):\(id)"), fileName: file.name, size: file.size?.bytes, mimeType: nil,
                              version: version, origin: origin)
    }

    public func list() async throws -> [SourceEntry] {
        let listing = try await api.json(Listing.self, method: "POST", url: configuration.endpoints.dropboxAPI.appendingPathComponent("files/list_folder"),
                                         headers: ["Content-Type": "application/json"], body: Data(Self.argument(path: path == "/" ? "" : path).utf8))
        let prefix = path.hasSuffix("/") ? path : path + "/"
        return listing.entries.map {
            SourceEntry(name: $0.name, isFolder: $0.tag == "folder", size: $0.size?.bytes, reference: "dropbox:\($0.path_display ?? prefix + $0.name)")
        }
    }
}

