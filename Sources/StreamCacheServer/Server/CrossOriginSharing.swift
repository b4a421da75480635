import HTTPTypes
import HummingbirdCore
import NIOCore

/// Cross-origin resource sharing (CORS) for the web pages the user allowed
/// (``ProxyServer/Configuration/allowedWebOrigins``).
///
/// A media element (`<audio src>`) plays a stream of another origin without it; a page's script
/// does not: a web player that fetches the bytes itself (hls.js or dash.js through Media Source
/// Extensions, Web Audio, an `<audio crossorigin>` it draws a waveform from, a `fetch` with a
/// `Range`) reads an answer only when the server names the page's origin. Which origins is the
/// user's choice, never a default: a folder mount's token may be one a page can guess.
struct CrossOriginSharing: Sendable {
    /// The allowed origins, lowercased without a trailing `/`; `nil`: any.
    private let allowed: Set<String>?

    /// The methods the server answers, for a preflight.
    static let methods = "GET, HEAD, POST, PUT, DELETE"
    /// The response fields a page's script may read besides the safelisted ones: those a range
    /// reader and the control API's clients need.
    static let exposedFields = "Accept-Ranges, Content-Range, Content-Length, ETag, Last-Modified, StreamCache-Error"
    /// How long a browser may keep a preflight's answer, in seconds.
    static let preflightLifetime = "600"
    static let requestPrivateNetwork = HTTPField.Name("Access-Control-Request-Private-Network")!
    static let allowPrivateNetwork = HTTPField.Name("Access-Control-Allow-Private-Network")!

    init(allowing origins: Set<String>?) {
        allowed = origins.map { Set($0.map(Self.normalized)) }
    }

    /// `https://App.example/` → `https://app.example`: browsers send an origin lowercased and
    /// without a path; a user may type either.
    static func normalized(_ origin: String) -> String {
        var text = origin.lowercased()
        while text.hasSuffix("/") { text.removeLast() }
        return text
    }

    /// What `Access-Control-Allow-Origin` answers a request from `origin`: the origin itself, or
    /// `*` when any is allowed; `nil` when none was sent or it is not allowed.
    func allowedOriginValue(for origin: String?) -> String? {
        guard let origin, !origin.isEmpty else { return nil }
        guard let allowed else { return "*" }
        return allowed.contains(Self.normalized(origin)) ? origin : nil
    }

    /// The answer to a CORS preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`):
    /// 204 with what the page may send, for an allowed origin; 403 saying how to allow it
    /// otherwise. `nil` for any other request.
    func preflightResponse(to request: Request) -> Response? {
        guard request.method == .options, let origin = request.headers[.origin],
              request.headers[.accessControlRequestMethod] != nil else { return nil }
        guard let value = allowedOriginValue(for: origin) else {
            return PlaylistResponder.plainText(.forbidden, "Web pages of \(origin) may not read this server's answers (see ProxyServer.Configuration.allowedWebOrigins, `serve --allow-origin`).")
        }
        var headers: HTTPFields = [.accessControlAllowOrigin: value, .accessControlAllowMethods: Self.methods,
                                   .accessControlMaxAge: Self.preflightLifetime, .contentLength: "0"]
        // Any request field is accepted (a player's `Range`, `If-Range`, the control API's `Authorization`).
        if let requested = request.headers[.accessControlRequestHeaders] { headers[.accessControlAllowHeaders] = requested }
        // Chrome asks before a public page reaches a loopback server (Private Network Access).
        if request.headers[Self.requestPrivateNetwork]?.lowercased() == "true" { headers[Self.allowPrivateNetwork] = "true" }
        if allowed != nil { headers[.vary] = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers" }
        return Response(status: .noContent, headers: headers)
    }

    /// Lets an allowed origin's page read `response` to `request`.
    func allow(_ response: inout Response, for request: Request) {
        // The answer depends on the origin it was asked from: a browser's cache must not give one
        // origin's answer to another (with no origin allowed, answers stay as they were).
        if let allowed, !allowed.isEmpty {
            response.headers[.vary] = response.headers[.vary].map { $0 + ", Origin" } ?? "Origin"
        }
        guard let value = allowedOriginValue(for: request.headers[.origin]) else { return }
        response.headers[.accessControlAllowOrigin] = value
        response.headers[.accessControlExposeHeaders] = Self.exposedFields
    }
}
