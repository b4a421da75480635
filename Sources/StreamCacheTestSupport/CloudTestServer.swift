import Crypto
import Foundation
import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import StreamCache
import StreamCacheServer

/// Local stand-ins for the cloud services' documented APIs (`shared/reference/cloud-apis.md`), the
/// only way to test the sources offline: Yandex.Disk, Dropbox, Google Drive, OneDrive (Graph) and
/// Box, plus an OAuth sign-in page and token endpoint, on one "API" listener, and a second listener on another port
/// that plays the content hosts the APIs hand out links or redirects to.
///
/// Everything a test needs to prove is recorded: each request's server, path, `Authorization`
/// value and `Range`, and the body bytes sent. Faults are switches: download links that expire
/// after some bytes (cut mid-body, then 410), access tokens that expire after some bytes (then
/// 401 until refreshed), files replaced by new versions.
public final class CloudTestServer: @unchecked Sendable {
    // @unchecked: all mutable state is in `state`, under its lock.

    /// Which listener answered.
    public enum Host: String, Sendable { case api, content }

    /// One request as the server saw it.
    public struct Record: Sendable {
        public var host: Host
        public var method: String
        public var path: String
        public var authorization: String?
        public var range: String?
        public var status: Int
        public var bodyBytes: Int64
        /// Whether the body was file bytes (a download), not an API answer.
        public var isDownload: Bool
    }

    /// A request as it came in, before it was answered (``arrivals``).
    public struct Arrival: Sendable {
        public var host: Host
        public var path: String
        /// The query, as sent (percent-encoded).
        public var query: String
    }

    struct File {
        var id: String
        var path: String
        var data: Data
        var mimeType: String?
        var revision: Int
        /// Earlier versions' bytes by revision (Box serves them by `file_version` id, Drive by
        /// revision id).
        var history: [Int: Data] = [:]
        /// The size the API states instead of the real one (``misstateSize(_:as:)``).
        var misstatedSize: Int64?
        /// The size the API answers with: the bytes' count unless misstated.
        var statedSize: Int64 { misstatedSize ?? Int64(data.count) }
        var name: String { String(path.split(separator: "/").last ?? "") }
        /// The digests the services publish, each the real one of `data` as their documentation
        /// defines it; the Dropbox and OneDrive ones come from the engine's hashers, which
        /// `ContentDigestTests` check against published vectors.
        var md5: String { Self.hex(Insecure.MD5.hash(data: data)) }
        var sha1: String { Self.hex(Insecure.SHA1.hash(data: data)) }
        var sha256: String { Self.hex(SHA256.hash(data: data)) }
        var dropboxContentHash: String { ContentHasher.digest(.dropboxContentHash, of: data).hex }
        var quickXorHash: String { Data(ContentHasher.digest(.quickXor, of: data).bytes).base64EncodedString() }

        static func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 { digest.map { String(format: "%02x", $0) }.joined() }
        /// Box's id for the current version.
        var boxVersionID: String { "\(id)v\(revision)" }

        /// The bytes of `revision` (the current ones for `nil`), if it was ever stored.
        func data(revision: Int?) -> Data? {
            guard let revision, revision != self.revision else { return data }
            return history[revision]
        }
    }

    struct Link {
        var fileID: String
        /// The version the link serves; `nil`: whatever is current when it is used.
        var revision: Int?
        var remaining: Int64?
    }

    struct State {
        var files: [String: File] = [:]
        var nextID = 1
        var accessTokens: [String: Int64?] = [:]
        var refreshToken = "refresh-secret-5d1c"
        var rotatesRefreshTokens = false
        var requiredScope: String?
        var tokenGrants = 0
        var linkBudget: Int64?
        var links: [String: Link] = [:]
        var linksIssued = 0
        var records: [Record] = []
        var arrivals: [Arrival] = []
        var contentConnections = 0
        var contentConnectionsUsed = 0
        var apiFailures: (count: Int, status: Int, retryAfter: String?, body: String?) = (0, 503, nil, nil)
        /// API calls wait (unanswered) while this is set: ``holdAPICalls()``.
        var holdsAPICalls = false
        var apiCallsHeld = 0
        var downloadFailures: (count: Int, status: Int, body: String?) = (0, 503, nil)
        var revisionsReadable = true
        /// Yandex.Disk public links' keys (`KEY` of `https://disk.yandex.ru/d/KEY`) to the path each shares.
        var publicShares: [String: String] = [:]
        var signInRefusal: String?
        var requiredClientSecret: String?
        var signIns: [[String: String]] = []
        var codes: [String: IssuedCode] = [:]
        var codeGrants = 0
        var codeExchanges: [[String: String]] = []
        var refusalsEchoTheRequest = false
        /// Download answers still to send with the byte at `offset` flipped, when they carry it.
        var corruption: (answers: Int, offset: Int64) = (0, 0)
    }

    /// A code the sign-in page handed out, and what its exchange must match.
    struct IssuedCode {
        var redirectURI: String
        var challenge: String?
    }

    private let state = Locked(State())
    /// The two listeners.
    private var listeners: [StoppableServer] = []
    /// The API listener's port.
    public private(set) var apiPort = 0
    /// The content listener's port.
    public private(set) var contentPort = 0
    /// The client id the token endpoint accepts.
    public let clientID = "test-client"

    /// Starts both listeners with one valid access token, `initialToken`.
    public init(initialToken: String) async throws {
        state.withLock { $0.accessTokens[initialToken] = .some(nil) }
        apiPort = try await listen(host: .api)
        contentPort = try await listen(host: .content)
    }

    /// Stops both listeners, gracefully (see `StoppableServer`: a cancelled task traps on a
    /// connection that arrives as it stops, which a fresh clone's full suite hit once).
    public func stop() async {
        for listener in listeners { await listener.stop() }
    }

    // MARK: Set-up and switches

    /// Stores `data` at `path` (`/Music/a.mp3`); storing again makes a new version of the same file.
    @discardableResult
    public func setFile(_ path: String, data: Data, mimeType: String? = nil) -> String {
        state.withLock { state in
            if var file = state.files[path] {
                file.history[file.revision] = file.data
                file.data = data
                file.revision += 1
                file.mimeType = mimeType
                state.files[path] = file
                return file.id
            }
            let id = "id\(state.nextID)"
            state.nextID += 1
            state.files[path] = File(id: id, path: path, data: data, mimeType: mimeType, revision: 1)
            return id
        }
    }

    /// Makes the API state `size` as the size of the file at `path` (in its metadata and
    /// listings), as a service with a bug or a tampered answer would; the downloads still send
    /// the real bytes, with their real lengths.
    public func misstateSize(_ path: String, as size: Int64) {
        state.withLock { $0.files[path]?.misstatedSize = size }
    }

    /// The id of the file at `path`.
    public func fileID(_ path: String) -> String? { state.withLock { $0.files[path]?.id } }

    /// Publishes the file or folder at `path` as Yandex.Disk does, and returns its public link
    /// (`https://disk.yandex.ru/d/KEY`), which the public API takes as `public_key`, as it takes
    /// the key itself or the link on another Yandex domain.
    public func sharePublicly(_ path: String) -> String {
        state.withLock { state in
            let key = "pk\(state.nextID)x" + String(UUID().uuidString.prefix(6))
            state.nextID += 1
            state.publicShares[key] = path
            return "https://disk.yandex.ru/d/\(key)"
        }
    }

    /// Unpublishes every public link: their calls answer 404 from now on.
    public func unshareAll() { state.withLock { $0.publicShares = [:] } }

    /// Download links (Yandex) expire once they have sent this many bytes: the response in flight
    /// is completed (links are checked when a request starts), and later requests get 410.
    public func expireLinks(afterBytes bytes: Int64?) { state.withLock { $0.linkBudget = bytes } }

    /// The access tokens valid now expire after this many more bytes of downloads, then get 401;
    /// tokens the endpoint issues later do not expire.
    public func expireTokens(afterBytes bytes: Int64) {
        state.withLock { state in
            for token in state.accessTokens.keys { state.accessTokens[token] = .some(bytes) }
        }
    }

    /// From now on every grant of the token endpoint comes with a new refresh token, and the one
    /// used is refused from then on (`invalid_grant`), as Box's endpoint does.
    public func rotateRefreshTokens() { state.withLock { $0.rotatesRefreshTokens = true } }

    /// From now on the token endpoint grants only a refresh that asks for exactly `scope`, as
    /// Microsoft's endpoint can require.
    public func requireScope(_ scope: String) { state.withLock { $0.requiredScope = scope } }

    /// Answers the next `count` API calls (not downloads, not the token endpoint) with `status`
    /// and, when given, `Retry-After` and a JSON `body`: a service that rate-limits (429; Google
    /// Drive's 403 with ``driveRateLimitBody``) or is briefly down (503).
    public func failAPICalls(_ count: Int, status: Int, retryAfter: String? = nil, body: String? = nil) {
        state.withLock { $0.apiFailures = (count, status, retryAfter, body) }
    }

    /// From now on API calls (not downloads, not the token endpoint) get no answer until
    /// ``releaseAPICalls()``, or a minute at most: a service on a network that drops its packets,
    /// whose requests time out.
    public func holdAPICalls() { state.withLock { $0.holdsAPICalls = true } }

    /// Answers the API calls held by ``holdAPICalls()``, and the next ones at once.
    public func releaseAPICalls() { state.withLock { $0.holdsAPICalls = false } }

    /// How many API calls wait for an answer now (``holdAPICalls()``).
    public var apiCallsHeld: Int { state.withLock { $0.apiCallsHeld } }

    /// Waits while API calls are held (a minute at most).
    private func waitWhileAPICallsAreHeld(path: String) async {
        guard path != "/oauth/token", state.withLock({ $0.holdsAPICalls }) else { return }
        state.withLock { $0.apiCallsHeld += 1 }
        for _ in 0..<3000 {
            guard state.withLock({ $0.holdsAPICalls }) else { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        state.withLock { $0.apiCallsHeld -= 1 }
    }

    /// Answers the next `count` downloads (before any byte) with `status` and, when given, a JSON `body`.
    public func failDownloads(_ count: Int, status: Int, body: String? = nil) {
        state.withLock { $0.downloadFailures = (count, status, body) }
    }

    /// What Google Drive answers with 403 when a user's rate limit is exceeded (its documented
    /// error format; back off and try again).
    public static let driveRateLimitBody = """
        {"error": {"errors": [{"domain": "usageLimits", "reason": "userRateLimitExceeded", "message": "User Rate Limit Exceeded"}], \
        "code": 403, "message": "User Rate Limit Exceeded"}}
        """

    /// Makes the next `answers` downloads that carry the byte at `offset` send it flipped (every
    /// bit inverted), while the APIs keep publishing the digests of the true bytes: a file
    /// corrupted between the service and the cache.
    public func corruptDownloads(_ answers: Int, atOffset offset: Int64) { state.withLock { $0.corruption = (answers, offset) } }

    /// Whether the Drive user may read files' revisions (`capabilities.canReadRevisions`; a viewer
    /// of someone else's file may not, and gets 403 from `revisions/{id}`).
    public func allowReadingRevisions(_ allowed: Bool) { state.withLock { $0.revisionsReadable = allowed } }

    /// Drops every file's earlier versions, as a service that keeps none (or purged them) does:
    /// a download that names one is then not found.
    public func forgetEarlierVersions() {
        state.withLock { state in
            for path in state.files.keys { state.files[path]?.history = [:] }
        }
    }

    /// From now on the sign-in page (`/oauth/authorize`) sends the browser back with `error`
    /// (`access_denied`: the user pressed "Deny") instead of a code.
    public func refuseSignIns(with error: String) { state.withLock { $0.signInRefusal = error } }

    /// From now on a refused refresh's `error` quotes the refresh token it was sent, as a careless
    /// server's error text may: what a client reports of it must not pass the token on.
    public func echoRequestsInRefusals() { state.withLock { $0.refusalsEchoTheRequest = true } }

    /// From now on the token endpoint exchanges a sign-in's code only with this client secret, as
    /// Google's and Box's do.
    public func requireClientSecret(_ secret: String) { state.withLock { $0.requiredClientSecret = secret } }

    /// The query of each visit to the sign-in page.
    public var signIns: [[String: String]] { state.withLock { $0.signIns } }
    /// Codes exchanged for tokens.
    public var codeGrants: Int { state.withLock { $0.codeGrants } }
    /// The forms of the authorization-code grants asked for, granted or not.
    public var codeExchanges: [[String: String]] { state.withLock { $0.codeExchanges } }

    /// The refresh token the token endpoint accepts.
    public var refreshToken: String { state.withLock { $0.refreshToken } }
    /// Access tokens issued by the token endpoint.
    public var tokenGrants: Int { state.withLock { $0.tokenGrants } }
    /// Download links handed out (Yandex `href`s, OneDrive and Box redirects).
    public var linksIssued: Int { state.withLock { $0.linksIssued } }
    /// Every request so far, each once answered (a download's once its last byte went out).
    public var records: [Record] { state.withLock { $0.records } }
    /// Every request so far in the order they came in, on both listeners: what a client asked
    /// for before what, where ``records`` holds a download only after its last byte.
    public var arrivals: [Arrival] { state.withLock { $0.arrivals } }
    /// Connections the content listener has accepted on which no request has come (yet): a
    /// client that keeps a spare connection to a content host has one.
    public var contentConnectionsUnused: Int { state.withLock { $0.contentConnections - $0.contentConnectionsUsed } }

    /// File bytes sent by every download so far.
    public var downloadedBytes: Int64 { records.filter(\.isDownload).reduce(0) { $0 + $1.bodyBytes } }

    /// ``downloadedBytes`` once it has reached `expected`, or after `timeout` (bounded polling):
    /// a download is recorded after its last byte went out, which its client may have read first.
    public func downloadedBytes(awaiting expected: Int64, timeout: Duration = .seconds(5)) async -> Int64 {
        let deadline = ContinuousClock.now + timeout
        while downloadedBytes < expected, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        return downloadedBytes
    }

    /// The base URLs to give ``StreamCacheSources``' configuration (everything on 127.0.0.1).
    public func url(_ host: Host, _ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(host == .api ? apiPort : contentPort)\(path)")!
    }

    // MARK: Serving

    private func listen(host: Host) async throws -> Int {
        let (stream, continuation) = AsyncStream<Int>.makeStream()
        let logger = Logger(label: "cloud-test-server", factory: { _ in SwiftLogNoOpLogHandler() })
        listeners.append(StoppableServer(logger: logger, onExit: { _ in continuation.finish() }) { connections in
            Application(
                responder: CallbackResponder<BasicRequestContext> { [self] request, _ in
                    var body = Data()
                    for try await buffer in request.body { body.append(contentsOf: buffer.readableBytesView) }
                    if host == .api { await self.waitWhileAPICallsAreHeld(path: request.uri.path) }
                    return self.respond(host: host, request: request, body: body)
                },
                server: .http1(configuration: .init(additionalChannelHandlers: [connections.handler(), ConnectionCounter(host: host, state: self.state)])),
                configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) },
                logger: logger
            )
        })
        for await port in stream { return port }
        return 0
    }

    /// Counts the content listener's connections as their pipelines are set up, and those a
    /// request came on as its first part passes.
    private final class ConnectionCounter: ChannelInboundHandler, RemovableChannelHandler {
        /// The decoded request parts, passed on untouched (never unwrapped).
        typealias InboundIn = Any
        let host: Host
        let state: Locked<State>
        var carriedARequest = false
        init(host: Host, state: Locked<State>) {
            self.host = host
            self.state = state
        }
        func handlerAdded(context: ChannelHandlerContext) {
            guard host == .content else { return }
            state.withLock { $0.contentConnections += 1 }
        }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if host == .content, !carriedARequest {
                carriedARequest = true
                state.withLock { $0.contentConnectionsUsed += 1 }
            }
            context.fireChannelRead(data)
        }
    }

    private func respond(host: Host, request: Request, body: Data) -> Response {
        let path = request.uri.path
        let query = Dictionary(request.uri.queryParameters.map { (String($0.key), String($0.value)) }, uniquingKeysWith: { first, _ in first })
        let authorization = request.headers[.authorization]
        let range = request.headers[.range]
        let method = request.method.rawValue
        let state = self.state
        state.withLock { $0.arrivals.append(Arrival(host: host, path: path, query: request.uri.query ?? "")) }
        let record: @Sendable (Int, Int64, Bool) -> Void = { status, bytes, isDownload in
            state.withLock { $0.records.append(Record(host: host, method: method, path: path, authorization: authorization, range: range,
                                                      status: status, bodyBytes: bytes, isDownload: isDownload)) }
        }
        func json(_ object: Any, status: HTTPResponse.Status = .ok) -> Response {
            let data = (try? JSONSerialization.data(withJSONObject: object)) ?? Data()
            record(Int(status.code), Int64(data.count), false)
            return Response(status: status, headers: [.contentType: "application/json", .contentLength: String(data.count)],
                            body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
        }
        func empty(_ status: HTTPResponse.Status, _ headers: HTTPFields = [:]) -> Response {
            record(Int(status.code), 0, false)
            var fields = headers
            fields[.contentLength] = "0"
            return Response(status: status, headers: fields)
        }

        if host == .content {
            // Pre-signed links: the token must not travel here, except to Yandex's, which wants it.
            let parts = path.split(separator: "/")
            guard parts.count == 2, let link = state.withLock({ $0.links[String(parts[1])] }) else { return empty(.notFound) }
            if parts[0] == "yandex" {
                guard validToken(authorization, scheme: "OAuth") else { return empty(.unauthorized) }
            } else if authorization != nil {
                return empty(.badRequest)
            }
            if (link.remaining ?? 1) <= 0 { return empty(.gone) }
            return download(fileID: link.fileID, revision: link.revision, range: range, link: String(parts[1]), authorization: authorization, record: record)
        }

        // Downloads and the redirects to them are not API calls, though some start on the API's host.
        let startsADownload = path == "/dropbox-content/2/files/download" || query["alt"] == "media" || path.hasSuffix("/content")
        if path != "/oauth/token", !startsADownload, let failure = state.withLock({ state -> (status: Int, retryAfter: String?, body: String?)? in
            guard state.apiFailures.count > 0 else { return nil }
            state.apiFailures.count -= 1
            return (state.apiFailures.status, state.apiFailures.retryAfter, state.apiFailures.body)
        }) {
            var headers: HTTPFields = [:]
            if let retryAfter = failure.retryAfter { headers[.retryAfter] = retryAfter }
            return failed(HTTPResponse.Status(code: failure.status), body: failure.body, headers, record: record)
        }

        if path == "/oauth/authorize" {
            return signIn(query: query, record: record)
        }

        if path == "/oauth/token" {
            let form = Dictionary(String(decoding: body, as: UTF8.self).split(separator: "&").map { pair -> (String, String) in
                let kv = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
                return (kv.first ?? "", kv.count > 1 ? kv[1] : "")
            }, uniquingKeysWith: { first, _ in first })
            if form["grant_type"] == "authorization_code" { return exchange(form: form, json: json) }
            let granted = state.withLock { state -> (String, String?)? in
                guard form["grant_type"] == "refresh_token", form["refresh_token"] == state.refreshToken, form["client_id"] == clientID,
                      state.requiredScope.map({ form["scope"] == $0 }) ?? true else { return nil }
                state.tokenGrants += 1
                let token = "access-\(state.tokenGrants)-\(UUID().uuidString.prefix(8))"
                state.accessTokens[token] = .some(nil)
                guard state.rotatesRefreshTokens else { return (token, nil) }
                state.refreshToken = "refresh-\(state.tokenGrants)-\(UUID().uuidString.prefix(8))"
                return (token, state.refreshToken)
            }
            guard let granted else {
                let echoes = state.withLock { $0.refusalsEchoTheRequest }
                return json(["error": echoes ? "invalid_grant (refresh_token=\(form["refresh_token"] ?? ""))" : "invalid_grant"], status: .badRequest)
            }
            var answer: [String: Any] = ["access_token": granted.0, "token_type": "bearer", "expires_in": 3600]
            if let rotated = granted.1 { answer["refresh_token"] = rotated }
            return json(answer)
        }

        if path.hasPrefix("/yandex/v1/disk/public/") {
            // Published resources: no token needed, as Yandex documents.
            let given = query["public_key"] ?? ""
            let key = given.hasPrefix("https://") ? String(given.split(separator: "/").last ?? "") : given
            guard let shared = state.withLock({ $0.publicShares[key] }) else { return json(["error": "DiskNotFoundError"], status: .notFound) }
            let inner = query["path"] ?? "/"
            let target = inner == "/" ? shared : shared + inner
            switch path.dropFirst("/yandex/v1/disk/public".count) {
            case "/resources":
                if let file = file(path: target) {
                    return json(["name": file.name, "type": "file", "size": file.statedSize, "mime_type": file.mimeType ?? "application/octet-stream",
                                 "md5": file.md5, "sha256": file.sha256, "revision": file.revision, "path": inner, "public_key": key])
                }
                let items = children(of: target)
                guard !items.isEmpty else { return json(["error": "DiskNotFoundError"], status: .notFound) }
                let offset = Int(query["offset"] ?? "") ?? 0, limit = Int(query["limit"] ?? "") ?? 20
                let page = items.dropFirst(offset).prefix(limit)
                return json(["name": target.split(separator: "/").last.map(String.init) ?? "", "type": "dir", "path": inner, "public_key": key,
                             "_embedded": ["items": page.map { ["name": $0.name, "type": $0.isFolder ? "dir" : "file", "size": $0.size] as [String: Any] },
                                           "offset": offset, "limit": limit, "total": items.count] as [String: Any]])
            case "/resources/download":
                guard let file = file(path: target) else { return json(["error": "DiskNotFoundError"], status: .notFound) }
                return json(["href": url(.content, "/yandex-public/\(issueLink(for: file.id))").absoluteString, "method": "GET", "templated": false])
            default: return empty(.notFound)
            }
        }

        let scheme = path.hasPrefix("/yandex/") ? "OAuth" : "Bearer"
        guard validToken(authorization, scheme: scheme) else { return empty(.unauthorized, [.wwwAuthenticate: scheme]) }

        if path.hasPrefix("/yandex/v1/disk") {
            let rest = String(path.dropFirst("/yandex/v1/disk".count))
            let target = (query["path"] ?? "").replacingOccurrences(of: "disk:", with: "")
            switch rest {
            case "", "/": return json(["user": ["uid": "y-uid-7", "login": "tester"], "total_space": 1 << 40])
            case "/resources":
                if let file = file(path: target) {
                    return json(["name": file.name, "type": "file", "size": file.statedSize, "mime_type": file.mimeType ?? "application/octet-stream",
                                 "md5": file.md5, "sha256": file.sha256, "revision": file.revision, "path": "disk:" + file.path])
                }
                let items = children(of: target)
                guard !items.isEmpty || target == "/" else { return json(["error": "DiskNotFoundError"], status: .notFound) }
                return json(["name": target, "type": "dir", "_embedded": ["items": items.map {
                    ["name": $0.name, "type": $0.isFolder ? "dir" : "file", "size": $0.size] as [String: Any]
                }]])
            case "/resources/download":
                guard let file = file(path: target) else { return json(["error": "DiskNotFoundError"], status: .notFound) }
                return json(["href": url(.content, "/yandex/\(issueLink(for: file.id))").absoluteString + "?fsize=\(file.data.count)",
                             "method": "GET", "templated": false])
            default: return empty(.notFound)
            }
        }
        if path.hasPrefix("/dropbox/2/") {
            let argument = (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? nil
            let target = argument?["path"] as? String ?? ""
            switch path.dropFirst("/dropbox/2/".count) {
            case "users/get_current_account": return json(["account_id": "dbid:AAB7", "name": ["display_name": "Tester"]])
            case "files/get_metadata":
                if file(reference: target) == nil, isFolder(target) {
                    return json([".tag": "folder", "name": target.split(separator: "/").last.map(String.init) ?? "", "id": "id:folder" + target,
                                 "path_display": target])
                }
                guard let file = file(reference: target) else { return json(["error_summary": "path/not_found/"], status: .conflict) }
                return json([".tag": "file", "name": file.name, "id": "id:" + file.id, "size": file.statedSize, "rev": "r\(file.revision)",
                             "content_hash": file.dropboxContentHash, "path_display": file.path])
            case "files/list_folder":
                return json(["entries": children(of: target.isEmpty ? "/" : target).map {
                    [".tag": $0.isFolder ? "folder" : "file", "name": $0.name, "size": $0.size, "path_display": $0.path] as [String: Any]
                }, "has_more": false])
            default: return empty(.notFound)
            }
        }
        if path == "/dropbox-content/2/files/download" {
            let argument = request.headers[HTTPField.Name("Dropbox-API-Arg")!].flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            guard let reference = argument?["path"] as? String, let file = file(reference: reference) else {
                return json(["error_summary": "path/not_found/"], status: .conflict)
            }
            var response = download(fileID: file.id, range: range, link: nil, authorization: authorization, record: record)
            let result = "{\"name\":\"\(file.name.unicodeScalars.map { $0.isASCII ? String($0) : String(format: "\\u%04x", $0.value) }.joined())\","
                + "\"id\":\"id:\(file.id)\",\"rev\":\"r\(file.revision)\",\"content_hash\":\"\(file.dropboxContentHash)\",\"size\":\(file.statedSize)}"
            response.headers[HTTPField.Name("Dropbox-API-Result")!] = result
            return response
        }
        if path.hasPrefix("/drive/v3/") {
            let rest = path.dropFirst("/drive/v3/".count)
            if rest == "about" { return json(["user": ["permissionId": "g-perm-3", "displayName": "Tester"]]) }
            if rest == "files" {
                let folder = (query["q"] ?? "").split(separator: "'").first.map(String.init) ?? ""
                return json(["files": children(of: folder == "root" ? "/" : folderPath(id: folder)).map {
                    ["id": $0.isFolder ? "folder:" + $0.path : $0.id, "name": $0.name, "size": String($0.size),
                     "mimeType": $0.isFolder ? "application/vnd.google-apps.folder" : "audio/mpeg"] as [String: Any]
                }])
            }
            let parts = rest.dropFirst("files/".count).split(separator: "/")
            let folder = String(rest.dropFirst("files/".count)).replacingOccurrences(of: "folder:", with: "")
            if rest.hasPrefix("files/"), file(id: String(parts.first ?? "")) == nil, isFolder(folder) {
                return json(["id": "folder:" + folder, "name": folder.split(separator: "/").last.map(String.init) ?? "",
                             "mimeType": "application/vnd.google-apps.folder", "capabilities": ["canReadRevisions": true]])
            }
            guard rest.hasPrefix("files/"), let file = file(id: String(parts.first ?? "")) else { return json(["error": ["code": 404]], status: .notFound) }
            let revisionsReadable = state.withLock { $0.revisionsReadable }
            if parts.count == 3, parts[1] == "revisions" {
                // A revision's bytes by its id; one the service no longer keeps is not found.
                guard revisionsReadable else { return json(["error": ["code": 403, "reason": "insufficientFilePermissions"]], status: .forbidden) }
                guard parts[2].hasPrefix("rev"), let number = Int(parts[2].dropFirst(3)), file.data(revision: number) != nil,
                      query["alt"] == "media" else {
                    return json(["error": ["code": 404, "reason": "notFound"]], status: .notFound)
                }
                return download(fileID: file.id, revision: number, range: range, link: nil, authorization: authorization, record: record)
            }
            if file.mimeType?.hasPrefix("application/vnd.google-apps.") == true {
                // A Docs Editors file has no bytes of its own: no size, no checksum, and no media.
                if query["alt"] == "media" {
                    return json(["error": ["code": 403, "message": "Only files with binary content can be downloaded. Use Export with Docs Editors files.",
                                           "errors": [["domain": "global", "reason": "fileNotDownloadable"]]]], status: .forbidden)
                }
                return json(["id": file.id, "name": file.name, "mimeType": file.mimeType!, "capabilities": ["canReadRevisions": revisionsReadable]])
            }
            if query["alt"] == "media" { return download(fileID: file.id, range: range, link: nil, authorization: authorization, record: record) }
            return json(["id": file.id, "name": file.name, "size": String(file.statedSize), "mimeType": file.mimeType ?? "application/octet-stream",
                         "md5Checksum": file.md5, "headRevisionId": "rev\(file.revision)",
                         "capabilities": ["canReadRevisions": revisionsReadable]])
        }
        if path.hasPrefix("/graph/v1.0/me/drive") {
            let rest = String(path.dropFirst("/graph/v1.0/me/drive".count))
            if rest.isEmpty { return json(["id": "od-drive-9", "driveType": "personal"]) }
            var item: File?
            var suffix = ""
            if rest.hasPrefix("/items/folder:") {
                // The stand-in's folder ids are their paths (`folder:/Music/Album`), slashes and all.
                let inner = String(rest.dropFirst("/items/folder:".count))
                let folder = inner.hasSuffix("/children") ? String(inner.dropLast("/children".count)) : inner
                guard isFolder(folder) else { return json(["error": ["code": "itemNotFound"]], status: .notFound) }
                if inner.hasSuffix("/children") { return json(["value": children(of: folder).map { graphItem($0) }]) }
                return json(["id": "folder:" + folder, "name": folder.split(separator: "/").last.map(String.init) ?? "",
                             "folder": ["childCount": children(of: folder).count]])
            } else if rest.hasPrefix("/items/") {
                let parts = rest.dropFirst("/items/".count).split(separator: "/", maxSplits: 1)
                item = file(id: String(parts.first ?? ""))
                suffix = parts.count > 1 ? String(parts[1]) : ""
            } else if rest.hasPrefix("/root:") {
                let inner = rest.dropFirst("/root:".count)
                let pieces = inner.components(separatedBy: ":").map { $0.removingPercentEncoding ?? $0 }
                item = file(path: pieces[0])
                suffix = pieces.count > 1 ? String(pieces[1].drop { $0 == "/" }) : ""
                if item == nil, suffix == "children" {
                    return json(["value": children(of: pieces[0]).map { graphItem($0) }])
                }
                if item == nil, suffix.isEmpty, isFolder(pieces[0]) {
                    return json(["id": "folder:" + pieces[0], "name": pieces[0].split(separator: "/").last.map(String.init) ?? "",
                                 "folder": ["childCount": children(of: pieces[0]).count]])
                }
            }
            guard let item else { return json(["error": ["code": "itemNotFound"]], status: .notFound) }
            if suffix == "content" {
                return empty(.found, [.location: url(.content, "/onedrive/\(issueLink(for: item.id))").absoluteString + "?tempauth=signed"])
            }
            return json(["id": item.id, "name": item.name, "size": item.statedSize, "eTag": "\"{\(item.id)},\(item.revision)\"",
                         "cTag": "\"c:{\(item.id)},\(item.revision)\"", "file": ["mimeType": item.mimeType ?? "application/octet-stream", "hashes": ["quickXorHash": item.quickXorHash]]])
        }
        if path.hasPrefix("/box/2.0/") {
            let rest = path.dropFirst("/box/2.0/".count)
            if rest == "users/me" { return json(["type": "user", "id": "box-user-11"]) }
            if rest.hasPrefix("folders/"), rest.hasSuffix("/items") {
                let id = String(rest.dropFirst("folders/".count).dropLast("/items".count))
                return json(["entries": children(of: id == "0" ? "/" : folderPath(id: id)).map {
                    ["type": $0.isFolder ? "folder" : "file", "id": $0.isFolder ? $0.path : $0.id, "name": $0.name, "size": $0.size] as [String: Any]
                }])
            }
            let parts = rest.dropFirst("files/".count).split(separator: "/")
            guard rest.hasPrefix("files/"), let file = file(id: String(parts.first ?? "")) else { return json(["type": "error", "status": 404], status: .notFound) }
            if parts.count > 1, parts[1] == "content" {
                // `version` names a file version to download; an unknown one is not found.
                var revision: Int?
                if let version = query["version"] {
                    guard version.hasPrefix(file.id + "v"), let number = Int(version.dropFirst(file.id.count + 1)), file.data(revision: number) != nil else {
                        return json(["type": "error", "status": 404, "code": "not_found"], status: .notFound)
                    }
                    revision = number
                }
                return empty(.found, [.location: url(.content, "/box/\(issueLink(for: file.id, revision: revision))").absoluteString])
            }
            return json(["type": "file", "id": file.id, "name": file.name, "size": file.statedSize, "sha1": file.sha1, "etag": String(file.revision),
                         "file_version": ["type": "file_version", "id": file.boxVersionID, "sha1": file.sha1]])
        }
        return empty(.notFound)
    }

    // MARK: Helpers

    struct Child {
        var name: String
        var path: String
        var id: String
        var size: Int64
        var isFolder: Bool
    }

    /// The sign-in page of RFC 6749 §4.1.1 with PKCE (RFC 7636), for a user who allows access at
    /// once: a redirect to `redirect_uri` with a code and the `state` given, or with the error
    /// ``refuseSignIns(with:)`` set. A request the page must not answer with a redirect (another
    /// client id, a redirect address off this machine, a challenge method but `S256`) gets 400,
    /// as the services show an error page then.
    private func signIn(query: [String: String], record: @escaping @Sendable (Int, Int64, Bool) -> Void) -> Response {
        let refusal = state.withLock { state -> String? in
            state.signIns.append(query)
            return state.signInRefusal
        }
        guard query["response_type"] == "code", query["client_id"] == clientID, let redirect = query["redirect_uri"],
              ["http://127.0.0.1:", "http://localhost:", "http://[::1]:"].contains(where: { redirect.hasPrefix($0) }),
              query["code_challenge"] == nil || query["code_challenge_method"] == "S256" else {
            record(400, 0, false)
            return Response(status: .badRequest, headers: [.contentLength: "0"])
        }
        var answer = [("state", query["state"] ?? "")]
        if let refusal {
            answer.insert(("error", refusal), at: 0)
        } else {
            let code = "code-" + UUID().uuidString
            state.withLock { $0.codes[code] = IssuedCode(redirectURI: redirect, challenge: query["code_challenge"]) }
            answer.insert(("code", code), at: 0)
        }
        let encoded = answer.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed.subtracting(CharacterSet(charactersIn: "&=+"))) ?? "")" }
        record(302, 0, false)
        return Response(status: .found, headers: [.location: redirect + (redirect.contains("?") ? "&" : "?") + encoded.joined(separator: "&"),
                                                  .contentLength: "0"])
    }

    /// The authorization-code grant (RFC 6749 §4.1.3): a code used once, with the address it was
    /// issued for, this client's id (and secret, when required) and the PKCE verifier of its
    /// challenge. Grants an access token and a refresh token that the refresh grant accepts from
    /// then on.
    private func exchange(form: [String: String], json: (Any, HTTPResponse.Status) -> Response) -> Response {
        let granted = state.withLock { state -> (String, String)? in
            state.codeExchanges.append(form)
            guard let code = form["code"], let issued = state.codes.removeValue(forKey: code), form["client_id"] == clientID,
                  form["redirect_uri"] == issued.redirectURI,
                  state.requiredClientSecret.map({ form["client_secret"] == $0 }) ?? true else { return nil }
            if let challenge = issued.challenge {
                guard let verifier = form["code_verifier"], SecretToken.base64URL(SHA256.hash(data: Data(verifier.utf8))) == challenge else { return nil }
            }
            state.codeGrants += 1
            let token = "access-code-\(state.codeGrants)-\(UUID().uuidString.prefix(8))"
            state.accessTokens[token] = .some(nil)
            state.refreshToken = "refresh-code-\(state.codeGrants)-\(UUID().uuidString.prefix(8))"
            return (token, state.refreshToken)
        }
        guard let granted else { return json(["error": "invalid_grant"], .badRequest) }
        return json(["access_token": granted.0, "refresh_token": granted.1, "token_type": "bearer", "expires_in": 3600], .ok)
    }

    private func graphItem(_ child: Child) -> [String: Any] {
        child.isFolder ? ["id": "folder:" + child.path, "name": child.name, "folder": ["childCount": 1]] : ["id": child.id, "name": child.name, "size": child.size]
    }

    private func file(path: String) -> File? { state.withLock { $0.files[path] } }
    private func file(id: String) -> File? { state.withLock { $0.files.values.first { $0.id == id } } }
    private func file(reference: String) -> File? {
        reference.hasPrefix("id:") ? file(id: String(reference.dropFirst(3))) : file(path: reference)
    }

    /// Whether `path` is a folder: some file lies below it.
    private func isFolder(_ path: String) -> Bool { !path.isEmpty && !children(of: path).isEmpty }

    /// Folder ids of the stand-ins are their paths, after `folder:` in those their listings give.
    private func folderPath(id: String) -> String { id.hasPrefix("folder:") ? String(id.dropFirst("folder:".count)) : id }

    private func children(of folder: String) -> [Child] {
        let prefix = folder.hasSuffix("/") ? folder : folder + "/"
        var seen: [String: Child] = [:]
        for file in state.withLock({ Array($0.files.values) }) where file.path.hasPrefix(prefix) {
            let rest = file.path.dropFirst(prefix.count)
            let parts = rest.split(separator: "/")
            guard let first = parts.first else { continue }
            if parts.count == 1 {
                seen[String(first)] = Child(name: String(first), path: file.path, id: file.id, size: file.statedSize, isFolder: false)
            } else {
                seen[String(first)] = Child(name: String(first), path: prefix + first, id: prefix + first, size: 0, isFolder: true)
            }
        }
        return seen.values.sorted { $0.name < $1.name }
    }

    private func issueLink(for fileID: String, revision: Int? = nil) -> String {
        let token = "L" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(20)
        state.withLock { state in
            state.links[token] = Link(fileID: fileID, revision: revision, remaining: state.linkBudget)
            state.linksIssued += 1
        }
        return token
    }

    private func validToken(_ authorization: String?, scheme: String) -> Bool {
        guard let authorization, authorization.hasPrefix(scheme + " ") else { return false }
        let token = String(authorization.dropFirst(scheme.count + 1))
        return state.withLock { state in
            guard let budget = state.accessTokens[token] else { return false }
            return budget.map { $0 > 0 } ?? true
        }
    }

    /// Charges `bytes` to the token in `authorization`.
    private func charge(_ authorization: String?, bytes: Int64) {
        guard let authorization, let token = authorization.split(separator: " ").last.map(String.init) else { return }
        state.withLock { state in
            if case .some(.some(let budget)) = state.accessTokens[token] { state.accessTokens[token] = .some(budget - bytes) }
        }
    }

    /// A failure answer, with a JSON body when given.
    private func failed(_ status: HTTPResponse.Status, body: String?, _ headers: HTTPFields = [:],
                        record: @Sendable (Int, Int64, Bool) -> Void) -> Response {
        let data = Data((body ?? "").utf8)
        record(Int(status.code), Int64(data.count), false)
        var fields = headers
        fields[.contentLength] = String(data.count)
        if body != nil { fields[.contentType] = "application/json" }
        return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    private func download(fileID: String, revision: Int? = nil, range: String?, link: String?, authorization: String?,
                          record: @escaping @Sendable (Int, Int64, Bool) -> Void) -> Response {
        if let failure = state.withLock({ state -> (status: Int, body: String?)? in
            guard state.downloadFailures.count > 0 else { return nil }
            state.downloadFailures.count -= 1
            return (state.downloadFailures.status, state.downloadFailures.body)
        }) {
            return failed(HTTPResponse.Status(code: failure.status), body: failure.body, record: record)
        }
        guard let file = file(id: fileID), var data = file.data(revision: revision) else {
            record(404, 0, false)
            return Response(status: .notFound, headers: [.contentLength: "0"])
        }
        let total = Int64(data.count)
        var start: Int64 = 0
        var end = total
        var status = HTTPResponse.Status.ok
        if let range, range.hasPrefix("bytes="), !range.contains(",") {
            let bounds = range.dropFirst(6).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
            if let first = Int64(bounds[0]) {
                guard first < total else {
                    record(416, 0, false)
                    return Response(status: .rangeNotSatisfiable, headers: [.contentRange: "bytes */\(total)", .contentLength: "0"])
                }
                start = first
                if bounds.count > 1, let last = Int64(bounds[1]) { end = min(total, last + 1) }
                status = .partialContent
            }
        }
        var headers: HTTPFields = [.contentLength: String(end - start), .acceptRanges: "bytes", .contentType: file.mimeType ?? "application/octet-stream"]
        if status == .partialContent { headers[.contentRange] = "bytes \(start)-\(end - 1)/\(total)" }
        charge(authorization, bytes: end - start)
        let state = self.state
        state.withLock { state in
            let offset = state.corruption.offset
            guard state.corruption.answers > 0, (start..<end).contains(offset) else { return }
            state.corruption.answers -= 1
            data[data.startIndex + Int(offset)] ^= 0xFF
        }
        let (first, last, answer, sentData) = (start, end, status, data)
        return Response(status: answer, headers: headers, body: ResponseBody(contentLength: Int(last - first)) { writer in
            let (start, end, status) = (first, last, answer)
            var offset = start
            var sent: Int64 = 0
            defer { record(Int(status.code), sent, true) }
            while offset < end {
                let count = min(end - offset, 64 * 1024)
                if let link {
                    state.withLock { state in
                        if let remaining = state.links[link]?.remaining { state.links[link]?.remaining = remaining - count }
                    }
                }
                try await writer.write(ByteBuffer(bytes: sentData[Int(offset)..<Int(offset + count)]))
                offset += count
                sent += count
            }
            try await writer.finish(nil)
        })
    }
}
