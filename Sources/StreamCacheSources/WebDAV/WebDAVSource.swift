#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file or collection on a WebDAV server (Nextcloud, ownCloud, Yandex WebDAV, NAS boxes),
/// named `webdav://user@host[:port]/path` (HTTP) or `webdavs://user@host[:port]/path` (HTTPS).
///
/// Metadata comes from `PROPFIND` with `Depth: 0` (length, type, ETag, last-modified:
/// ``properties()``), listings from `Depth: 1`, bytes from ranged `GET`s; every request carries
/// Basic credentials. (Digest authentication is not supported.) The cache
/// key is `webdav:user@host:port/path`; the version is the ETag (else Last-Modified), checked with
/// `If-Range` on every download.
public struct WebDAVSource: Source {
    public var service: String { "webdav" }
    /// The file's HTTP(S) URL, without user info.
    public let url: URL
    /// The user name, if any.
    public let user: String?
    private let password: String?
    private let configuration: SourceConfiguration

    /// Creates a source for the HTTP(S) `url` of a WebDAV resource.
    ///
    /// - Parameters:
    ///   - url: An `http`/`https` URL (user info is ignored; pass `user`).
    ///   - user: The user name for Basic authentication.
    ///   - password: The password.
    ///   - configuration: The HTTP client.
    public init(url: URL, user: String?, password: String?, configuration: SourceConfiguration) {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        components?.user = nil
        components?.password = nil
        self.url = components?.url ?? url
        self.user = user
        self.password = password
        self.configuration = configuration
    }

    public var reference: String {
        let scheme = url.scheme == "https" ? "webdavs" : "webdav"
        let port = url.port.map { ":\($0)" } ?? ""
        let slash = url.hasDirectoryPath && !url.path.hasSuffix("/") ? "/" : ""
        return "\(scheme)://\(user.map { "\($0)@" } ?? "")\(url.host ?? "")\(port)\(Self.referencePath(url.path))\(slash)"
    }

    /// A path as a reference spells it: as people write it (spaces, accents), but for what a
    /// reference parsed back would read as something else: `%` (an escape), `#` (a fragment) and
    /// `?` (a query). `Track #1.mp3` was listed as `…/Track #1.mp3`, which named `…/Track `.
    static func referencePath(_ path: String) -> String {
        var spelled = ""
        for character in path {
            switch character {
            case "%": spelled += "%25"
            case "#": spelled += "%23"
            case "?": spelled += "%3F"
            default: spelled.append(character)
            }
        }
        return spelled
    }

    private var credentials: StaticCredentials? {
        guard let user else { return nil }
        let pair = Data("\(user):\(password ?? "")".utf8).base64EncodedString()
        return StaticCredentials(["Authorization": "Basic \(pair)"])
    }

    private static let propfindBody = Data("""
        <?xml version="1.0" encoding="utf-8"?><d:propfind xmlns:d="DAV:"><d:prop><d:getcontentlength/><d:getcontenttype/>\
        <d:getetag/><d:getlastmodified/><d:resourcetype/></d:prop></d:propfind>
        """.utf8)

    /// Sends `PROPFIND` with `depth` (never omitted: no `Depth` means infinity).
    func propfind(depth: Int) async throws -> PropfindResponse {
        var headers: HTTPHeaders = ["Depth": String(depth), "Content-Type": "application/xml; charset=utf-8"]
        if let credentials { headers.merge(try await credentials.authorizationHeaders()) }
        let response = try await configuration.transport.send(HTTPRequest(method: "PROPFIND", url: url, headers: headers,
                                                                         body: Self.propfindBody, timeout: .seconds(30)),
                                                              retrying: RetryPolicy())
        let data = try await response.body.collect(upTo: 16 << 20)
        switch response.status {
        case 207: return try PropfindResponse(xml: data)
        case 401, 403:
            throw StreamCacheError(.authenticationFailed, "The WebDAV server rejected the user or password (HTTP \(response.status)) for \(reference).",
                                   httpStatus: response.status)
        case 404: throw StreamCacheError(.notFound, "The WebDAV server has nothing at \(reference).", httpStatus: 404)
        case 405, 501: throw StreamCacheError(.badResponse, "\(url.redactedDescription) is not a WebDAV server (PROPFIND gave HTTP \(response.status)).",
                                              httpStatus: response.status)
        default: throw StreamCacheError(.originUnavailable, "The WebDAV server answered PROPFIND with HTTP \(response.status).", httpStatus: response.status)
        }
    }

    /// The file's properties (`PROPFIND`, `Depth: 0`): length, type, ETag, last-modified.
    ///
    /// - Throws: ``StreamCache/StreamCacheError`` (`notFound`, `authenticationFailed`,
    ///   `badResponse`, `invalidArgument` for a collection).
    public func properties() async throws -> PropfindResponse.Resource {
        guard let resource = try await propfind(depth: 0).resources.first else {
            throw StreamCacheError(.badResponse, "The WebDAV server's PROPFIND answer lists no resource.")
        }
        guard !resource.isCollection else {
            throw StreamCacheError(.invalidArgument, "\(reference) is a collection; list it with `streamcache ls`.")
        }
        return resource
    }

    /// The key and origin, made without asking the server: the key is the server, user and path,
    /// and each download checks the version with `If-Range` (the ETag, else Last-Modified). So a
    /// cached file plays with the server unreachable. ``properties()`` asks for the metadata.
    public func resolve() async throws -> ResolvedSource {
        guard !url.path.hasSuffix("/") else { throw StreamCacheError(.invalidArgument, "\(reference) is a collection; list it with `streamcache ls`.") }
        let port = url.port ?? (url.scheme == "https" ? 443 : 80)
        let key = CacheKey("webdav:\(user ?? "")@\(url.host?.lowercased() ?? ""):\(port)\(url.path)")
        let origin = configuration.origin(FixedDownloadLocator(url: url), credentials: credentials)
        return ResolvedSource(key: key, fileName: url.lastPathComponent, size: nil, mimeType: nil, version: nil, origin: origin)
    }

    public func list() async throws -> [SourceEntry] {
        entries(of: try await propfind(depth: 1))
    }

    /// One `PROPFIND` (`Depth: 1`) tells both: whether the reference is a collection (its own
    /// entry in the answer, with a trailing slash in the reference or without) and, if it is,
    /// what it holds. The file is resolved as ``resolve()`` does, without its properties.
    public func contents() async throws -> SourceContents {
        let answer = try await propfind(depth: 1)
        if url.path.hasSuffix("/") { return .folder(entries(of: answer)) }
        guard answer.resources.contains(where: { isOwnEntry($0) && $0.isCollection }) else { return .file(try await resolve()) }
        return .folder(entries(of: answer))
    }

    /// Hrefs may be absolute URLs or paths, with or without the collection's trailing slash.
    private func path(of resource: PropfindResponse.Resource) -> String {
        let path = URL(string: resource.href.percentEncoded(allowing: URICharacters.isPathAllowed))?.path ?? resource.href
        return path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// The reference's path with one trailing slash, as a collection's.
    private var collectionPath: String { url.path.hasSuffix("/") ? url.path : url.path + "/" }

    private func isOwnEntry(_ resource: PropfindResponse.Resource) -> Bool {
        let trimmed = path(of: resource)
        return trimmed + "/" == collectionPath || trimmed == url.path
    }

    /// The entries of a `Depth: 1` answer but the collection's own.
    private func entries(of answer: PropfindResponse) -> [SourceEntry] {
        answer.resources.compactMap { resource -> SourceEntry? in
            guard !isOwnEntry(resource) else { return nil }
            let trimmed = path(of: resource)
            let name = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
            var child = URLComponents(url: url, resolvingAgainstBaseURL: false)
            child?.path = collectionPath + name + (resource.isCollection ? "/" : "")
            let childSource = WebDAVSource(url: child?.url ?? url, user: user, password: nil, configuration: configuration)
            return SourceEntry(name: name, isFolder: resource.isCollection, size: resource.contentLength, reference: childSource.reference)
        }
    }
}
