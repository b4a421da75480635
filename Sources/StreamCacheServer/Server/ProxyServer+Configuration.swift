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
    }
}
