#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file or folder someone shared from Yandex.Disk with a public link, read without an account:
/// the link as the owner sent it (`https://disk.yandex.ru/d/KEY`, `https://yadi.sk/i/KEY`, any
/// `disk.yandex.*` domain), followed by a path for a file inside a shared folder
/// (`https://disk.yandex.ru/d/KEY/Album/01%20Intro.mp3`, percent-encoded as a browser shows it).
///
/// Metadata comes from `GET /v1/disk/public/resources?public_key=LINK&path=PATH`, bytes from the
/// link `GET /v1/disk/public/resources/download` returns, which expires and is resolved again as
/// a private file's is. No `Authorization` goes anywhere: Yandex documents these calls as needing
/// none. The version is the file's sha256 (else md5, else revision). The cache key is
/// `yandex-public:<the resource's public key>:<path>`: the same share reached by `yadi.sk` or
/// `disk.yandex.com` is the same file.
public struct YandexPublicSource: Source {
    public var service: String { "yandex-public" }
    /// The public link, without a path: `https://disk.yandex.ru/d/KEY`.
    public let link: String
    /// The path inside the shared folder, starting with `/` (`/` for the shared file or folder itself).
    public let path: String
    private let api: CloudAPI
    private let configuration: SourceConfiguration

    /// Creates a source for `path` below the share `link`.
    public init(link: String, path: String = "/", configuration: SourceConfiguration) {
        self.link = link
        self.path = path.hasPrefix("/") ? path : "/" + path
        self.configuration = configuration
        api = CloudAPI(service: "Yandex.Disk", credentials: StaticCredentials([:]), transport: configuration.transport)
    }

    /// The link, then the path's segments percent-encoded: a URL a browser opens as well.
    public var reference: String {
        link + path.split(separator: "/").map { "/" + $0.percentEncoded(allowing: Self.isSegmentAllowed) }.joined()
    }

    /// Bytes a path segment keeps unencoded in a reference: a URL path's, but `/`.
    static func isSegmentAllowed(_ byte: UInt8) -> Bool { byte != UInt8(ascii: "/") && URICharacters.isPathAllowed(byte) }

    /// The share link and the path below it that `text` names, when it is a Yandex.Disk public
    /// link: `http(s)://` then `yadi.sk` or a `disk.yandex.*` (or `disk.360.yandex.*`) host, then
    /// `/d/KEY` or `/i/KEY`, then the path, percent-decoded.
    public static func parse(_ text: String) -> (link: String, path: String)? {
        guard let schemeEnd = text.firstRange(of: "://") else { return nil }
        let scheme = text[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "https" || scheme == "http" else { return nil }
        var rest = text[schemeEnd.upperBound...]
        if let query = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<query] }
        let segments = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard segments.count >= 3 else { return nil }
        let host = segments[0].lowercased()
        guard host == "yadi.sk" || host.hasPrefix("disk.yandex.") || host.hasPrefix("disk.360.yandex."),
              segments[1] == "d" || segments[1] == "i", !segments[2].isEmpty else { return nil }
        let link = "https://\(host)/\(segments[1])/\(segments[2])"
        var path = ""
        for segment in segments.dropFirst(3) where !segment.isEmpty {
            guard let name = segment.percentDecoded, name != ".", name != ".." else { return nil }
            path += "/" + name
        }
        return (link, path.isEmpty ? "/" : path)
    }

    private var base: URL { configuration.endpoints.yandex }

    private var query: [(String, String)] { path == "/" ? [("public_key", link)] : [("public_key", link), ("path", path)] }

    func metadata() async throws -> YandexDiskSource.Resource {
        try await call(YandexDiskSource.Resource.self, "public/resources", query + [("fields", "name,type,size,mime_type,md5,sha256,revision,path,public_key")])
    }

    /// A public API call. A refusal there is not about a token (none is sent): the owner has
    /// forbidden downloads, or the link has reached the download limit Yandex sets for popular
    /// files.
    private func call<Result: Decodable>(_ type: Result.Type, _ endpoint: String, _ query: [(String, String)]) async throws -> Result {
        do {
            return try await api.json(type, url: CloudAPI.url(base, endpoint, query: query))
        } catch let error as StreamCacheError where error.code == .authenticationFailed {
            throw StreamCacheError(.authenticationFailed, "Yandex.Disk refused \(reference) (HTTP \(error.httpStatus.map(String.init) ?? "?")): its owner "
                                   + "forbids downloads, or the link has reached its download limit for now.", httpStatus: error.httpStatus)
        }
    }

    public func resolve() async throws -> ResolvedSource {
        let first = try await metadata()
        guard first.type == "file" else { throw StreamCacheError(.invalidArgument, "\(reference) is a folder; list it with `streamcache ls`.") }
        let source = self
        let locator = configuration.resolvingLocator("yandex-public:\(path)") {
            // Each link comes with fresh metadata, so a new version shows at the next resolution.
            async let link = source.call(YandexDiskSource.Link.self, "public/resources/download", source.query)
            let now = try await source.metadata()
            guard let href = URL(string: try await link.href) else {
                throw StreamCacheError(.badResponse, "Yandex.Disk gave a download link that is not a URL.")
            }
            return DownloadTarget(url: href, sendsCredentials: false, expires: true, version: now.version, totalLength: now.size?.bytes,
                                  mimeType: now.mime_type, fileName: now.name, contentDigest: now.contentDigest)
        }
        let origin = configuration.origin(locator, credentials: nil)
        return ResolvedSource(key: CacheKey("yandex-public:\(first.public_key ?? link):\(path)"), fileName: first.name, size: first.size?.bytes,
                              mimeType: first.mime_type, version: first.version, origin: origin)
    }

    public func list() async throws -> [SourceEntry] {
        var entries: [SourceEntry] = []
        // A shared folder lists in pages; each page's offset is where the last ended, so a folder
        // of any size lists whole (bounded by the service's answers: an empty page ends it).
        for page in 0..<Self.maximumPages {
            let folder = try await call(YandexDiskSource.Resource.self, "public/resources", query + [
                ("limit", String(Self.pageSize)), ("offset", String(page * Self.pageSize)),
                ("fields", "name,type,_embedded.items.name,_embedded.items.type,_embedded.items.size"),
            ])
            guard folder.type == "dir" else { throw StreamCacheError(.invalidArgument, "\(reference) is a file, not a folder.") }
            let items = folder._embedded?.items ?? []
            let prefix = path == "/" ? "/" : path + "/"
            entries += items.map {
                SourceEntry(name: $0.name, isFolder: $0.type == "dir", size: $0.type == "dir" ? nil : $0.size?.bytes,
                            reference: YandexPublicSource(link: link, path: prefix + $0.name, configuration: configuration).reference)
            }
            if items.count < Self.pageSize { return entries }
        }
        return entries
    }

    /// Entries per page of a listing.
    static let pageSize = 1000
    /// The most pages a listing reads: 100,000 entries.
    static let maximumPages = 100
}
