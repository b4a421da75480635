#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

extension ProxyServer {
    /// How the server listens and who may use its control API.
    public struct Configuration: Sendable {
        /// The address to bind: `127.0.0.1` by default. Anything that is not loopback needs
        /// ``allowsNonLoopbackHost``, since every stream URL then reaches the network.
        public var host: String = "127.0.0.1"
        /// The port; 0 picks a free one (read it from ``ProxyServer/port`` after starting).
        public var port: Int = 0
        /// Allows binding a non-loopback ``host``.
        public var allowsNonLoopbackHost = false
        /// The control API's bearer token; a fresh random one by default.
        public var controlToken: String?
        /// Lets non-loopback peers use the control API (with the token). Off by default.
        public var allowsRemoteControl = false
        /// Host names a request's `Host` may give, besides loopback ones (`127.0.0.1`,
        /// `localhost`, `[::1]`, `*.localhost`), while the server listens on a loopback ``host``;
        /// a request naming any other is refused (403). Empty by default; `nil` accepts any.
        ///
        /// A web page cannot read a loopback server's answers, unless it points a name of its
        /// own at 127.0.0.1 (DNS rebinding): the browser then sends that name as `Host`. With a
        /// URL token the user chose (`--url-token music`) and a known port, such a page could
        /// list a served folder and read its files. A server on another address is reached by
        /// the names of that address, and checks nothing.
        public var allowedHostNames: Set<String>? = []
        /// The web origins (`https://player.example`, `http://localhost:3000`: scheme, host and a
        /// port other than the scheme's) whose pages' scripts may read the server's answers
        /// (CORS). Empty by default; `nil` lets a page of any origin read them (`*`).
        ///
        /// A media element (`<audio src>`) plays a stream without it. A web player that fetches
        /// the bytes itself (hls.js, dash.js, Web Audio, `fetch` with a `Range`) needs its origin
        /// here: such requests are answered with `Access-Control-Allow-Origin` and the range
        /// fields exposed, and their preflights (`OPTIONS`) with 204, or 403 for another origin.
        /// Any origin suits stream URLs only: their ids are random, but a folder's token may be
        /// one a page can guess.
        public var allowedWebOrigins: Set<String>? = []
        /// The most bytes of request headers accepted; larger requests get 400.
        public var maximumHeaderSize = 16 * 1024
        /// How long an idle keep-alive connection stays open.
        public var idleConnectionTimeout: Duration = .seconds(120)
        /// How long requests in progress may go on once ``ProxyServer/stop()`` began; then their
        /// connections are closed (a player streaming a long file is cut). Idle connections
        /// close at once. Zero cuts every request at once.
        public var stopGracePeriod: Duration = .seconds(1)
        /// Whether cached bytes go to the socket with `sendfile` (zero-copy) rather than through a
        /// buffer. On by default; off gives back the buffered path (for comparison, or a platform
        /// whose `sendfile` misbehaves).
        public var sendsCachedBytesWithSendfile = true
        /// The most bytes one connection hands the kernel per turn of the server's event loop: its
        /// socket send buffer. 256 KiB by default (Linux caps it at `net.core.wmem_max`); `nil`
        /// keeps the system's self-tuning buffer.
        ///
        /// One event loop serves every connection, and on loopback an unbounded buffer lets one
        /// connection's `sendfile` move megabytes while the others wait for their first bytes;
        /// a bounded one makes a client slower than the loop give the others their turn. (A
        /// client that keeps up is bounded by the server's 4 MiB `sendfile` pieces instead, as
        /// nginx's `sendfile_max_chunk` does.) It also bounds how fast one connection can go
        /// across a network: at most this many bytes per round trip (256 KiB at 1 ms is 256 MB/s).
        public var connectionSendBufferSize: Int? = 256 * 1024
        /// The smallest ``connectionSendBufferSize`` accepted: 4 KiB, about what Linux allows.
        public static let smallestConnectionSendBufferSize = 4 * 1024
        /// What `GET /api/metrics` answers, in the Prometheus text format (`text/plain;
        /// version=0.0.4`): for example a `PrometheusCollectorRegistry`'s `emitToBuffer()`, with the
        /// cache's ``StreamCache/Configuration/metricsFactory`` writing into that registry. `nil`
        /// (the default) answers 404. Like the rest of the control API it needs the control token,
        /// which a Prometheus scrape job sends as `authorization: { credentials_file: … }`.
        public var metricsExposition: (@Sendable () -> [UInt8])?
        /// Resolves the source references (`yandex:/…`, `webdav://…`) that `POST /api/resources`
        /// registers with `"source"`; `nil` (the default) answers such a request 400.
        public var sourceResolver: (any SourceResolving)?
        /// Where the server logs; URLs are logged without queries and no header value is logged.
        public var logger = Logger(label: "streamcache.server", factory: { _ in SwiftLogNoOpLogHandler() })

        /// Creates the default settings: 127.0.0.1, a free port, a random control token.
        public init() {}

        /// Whether `host` is a loopback address (`127.0.0.0/8`, `::1`) or `localhost`.
        public static func isLoopbackHost(_ host: String) -> Bool {
            host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
        }

        /// Whether a request whose `Host` is `authority` (`name[:port]`; `nil` when it sent none,
        /// as an HTTP/1.0 client may) is answered: see ``allowedHostNames``.
        func acceptsHost(_ authority: String?) -> Bool {
            guard let allowed = allowedHostNames, Self.isLoopbackHost(host), let authority else { return true }
            var name = Substring(authority.lowercased())
            if name.hasPrefix("[") {
                // An IPv6 literal, with its port after the bracket.
                guard let close = name.firstIndex(of: "]") else { return false }
                name = name[...close]
            } else if let colon = name.lastIndex(of: ":") {
                name = name[..<colon]
            }
            if name.hasSuffix(".") { name = name.dropLast() }
            let text = String(name)
            // `*.localhost` never leaves the machine (RFC 6761); `127.` must begin an address, not a
            // name such as `127.attacker.example`.
            if text == "localhost" || text == "[::1]" || text.hasSuffix(".localhost") { return true }
            if text.hasPrefix("127."), Self.isIPv4Address(text) { return true }
            return allowed.contains { $0.lowercased() == text }
        }

        /// Whether `text` is four decimal octets (`127.0.0.1`, not `127.attacker.example`).
        static func isIPv4Address(_ text: String) -> Bool {
            let parts = text.split(separator: ".", omittingEmptySubsequences: false)
            return parts.count == 4 && parts.allSatisfy { part in !part.isEmpty && part.count <= 3 && part.utf8.allSatisfy({ (0x30...0x39).contains($0) }) && Int(part)! <= 255 }
        }
    }
}
