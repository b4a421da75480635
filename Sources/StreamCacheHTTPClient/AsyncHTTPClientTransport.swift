import AsyncHTTPClient
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOHTTP1
import NIOSSL
import StreamCache
// StreamCache and NIOHTTP1 both define HTTPHeaders; the engine's type is meant throughout.
import struct StreamCache.HTTPHeaders

/// An ``HTTPTransport`` on AsyncHTTPClient (SwiftNIO): true back-pressure, keep-alive connection
/// reuse, and no Foundation networking.
///
/// The proxy (`StreamCacheServer`) uses it by default, so the whole process runs on one NIO
/// event-loop group. Redirects are returned, not followed; content is never decoded.
///
/// Each response is received on its connection's event loop by a ``ResponseReceiver``, which
/// stamps every chunk as it comes off the socket and hands it straight to the consumer's buffer.
/// Abandoning or cancelling the body cancels the request, which closes the connection at once
/// (AsyncHTTPClient keeps a connection open when a consumer merely stops reading).
public final class AsyncHTTPClientTransport: HTTPTransport {
    /// Settings for a transport that owns its client.
    public struct Configuration: Sendable {
        /// How long to wait to open a connection.
        public var connectTimeout: Duration = .seconds(10)
        /// The longest silence of the origin allowed while a body is being received. It counts
        /// only while the transport wants bytes: a consumer that holds the body back (its buffer
        /// full) does not make the request time out, however long it takes.
        public var idleReadTimeout: Duration = .seconds(30)
        /// Connections kept per host (more requests queue for a free one).
        public var maximumConnectionsPerHost: Int = 8
        /// How long an unused keep-alive connection stays open.
        public var idleConnectionTimeout: Duration = .seconds(60)
        /// Idle connections kept open to each host beyond those in use, once the host has been
        /// contacted. A seek usually arrives while the previous read's download still holds its
        /// connection; a spare one saves it the connection set-up (a round trip, two with TLS).
        /// ``forDownloads`` keeps one. A host that closes the spare gets a new one at once, so
        /// leave it at 0 for a server that is about to stop (SwiftNIO servers built on
        /// `NIOAsyncChannel`, Hummingbird's among them, trap when a connection arrives while they
        /// shut down).
        public var spareConnectionsPerHost: Int = 0
        /// Bytes of a body held before the connection stops reading the socket.
        public var bufferLimit: Int = 1 << 20
        /// The most bytes one read of a connection's socket takes (at least 64 KiB), and so the
        /// largest chunk a plain-HTTP body hands on; over TLS, what one turn of the connection's
        /// event loop read (a few reads) comes decrypted as one chunk. Reads start small and grow
        /// while they come back full, so only an origin that sends faster than the proxy stores
        /// (loopback, a LAN, a fast line) gets chunks this large; a slow link hands each few
        /// bytes on as they come.
        ///
        /// Every chunk costs a write into the cache file, a report to the engine and a wake-up of
        /// the readers. At SwiftNIO's default, 64 KiB, a cold 200 MB read from a loopback origin
        /// cost the proxy half as much CPU again as at this size, and ran 30 % slower (see
        /// `docs/benchmark-log.md`, *Larger reads from the origin's socket*). A chunk shares the
        /// memory of its read, so each one the body's buffer (``bufferLimit``) holds keeps up to
        /// this much allocated: 1 MiB saved little more CPU and raised the proxy's peak memory by
        /// 9 MiB.
        public var largestRead: Int = 256 << 10
        /// The event loop that receives every response body, or `nil` for whichever loop of the
        /// group a connection lives on. It must belong to the client's group
        /// (`HTTPClient.defaultEventLoopGroup`). New connections open on it, so a body needs no
        /// hop between threads, and ``bodyExecutor`` names it: the engine's downloads run there
        /// and write each chunk on the thread that read it. ``forDownloads`` takes the group's
        /// last loop; the proxy serves its clients on the first loop of SwiftNIO's shared group
        /// (the same group on Linux).
        public var bodyEventLoop: (any EventLoop)?
        /// Certificate authorities trusted besides the system's (see
        /// ``trustCertificateAuthorities(inPEMFile:)``).
        var additionalAuthorities: [NIOSSLCertificate] = []

        /// The proxies requests go through, by origin; none by default (every request goes
        /// directly). ``ProxyRoutes/environment(_:)`` reads them as curl does; the `streamcache`
        /// tool does so unless told `--proxy`.
        public var proxyRoutes = ProxyRoutes()

        /// Creates the default settings.
        public init() {}

        /// The settings of ``AsyncHTTPClientTransport/forDownloads``: one spare connection per
        /// host, bodies on the last loop of the group. A transport for downloads that needs more
        /// (an authority to trust) starts from these.
        public static var forDownloads: Configuration {
            var configuration = Configuration()
            configuration.spareConnectionsPerHost = 1
            configuration.bodyEventLoop = Array(HTTPClient.defaultEventLoopGroup.makeIterator()).last
            return configuration
        }

        /// Trusts the certificate authorities in the PEM file at `path` besides the system's: an
        /// origin whose certificate a private authority signed (a WebDAV server at home, a
        /// company's gateway) is refused otherwise, as it is by a browser. The file is read now.
        ///
        /// - Throws: ``StreamCacheError`` (`invalidArgument`) when the file cannot be read or
        ///   holds no PEM certificate.
        public mutating func trustCertificateAuthorities(inPEMFile path: String) throws {
            let bytes: [UInt8]
            do {
                bytes = try Array(Data(contentsOf: URL(fileURLWithPath: path)))
            } catch {
                throw StreamCacheError(.invalidArgument, "The certificate file \(path) cannot be read.", underlying: SendableErrorDescription(error))
            }
            let certificates = (try? NIOSSLCertificate.fromPEMBytes(bytes)) ?? []
            guard !certificates.isEmpty else {
                throw StreamCacheError(.invalidArgument, "The certificate file \(path) holds no PEM certificate (-----BEGIN CERTIFICATE-----).")
            }
            additionalAuthorities += certificates
        }
    }

    /// A transport shared by everything in the process that does not need its own settings.
    public static let shared = AsyncHTTPClientTransport()

    /// The transport for fetching media from origins: like ``shared``, plus one spare connection
    /// per host (``Configuration/spareConnectionsPerHost``), so a seek's request goes out at once
    /// instead of waiting for a new connection. The proxy uses it by default.
    ///
    /// Its bodies arrive on the last loop of the group (``Configuration/bodyEventLoop``), so its
    /// downloads run beside the proxy's server loop, not on it.
    public static let forDownloads = AsyncHTTPClientTransport(configuration: .forDownloads)

    private let client: HTTPClient
    /// A client per proxy of ``Configuration/proxyRoutes`` (a client has one proxy, for every
    /// request), besides ``client`` for the origins reached directly.
    private let proxiedClients: [OutboundProxy: HTTPClient]
    private let proxyRoutes: ProxyRoutes
    private let ownsClient: Bool
    private let bufferLimit: Int
    private let idleReadTimeout: Duration
    /// The connections the transport's own client opens to one host; `nil` for a client the
    /// caller made (its pool is the caller's to tell).
    public let maximumConnectionsPerHost: Int?
    /// The loop that receives every response body, if one was chosen
    /// (``Configuration/bodyEventLoop``).
    public let bodyEventLoop: (any EventLoop)?

    /// Creates a transport with its own client on the shared event-loop group.
    public init(configuration: Configuration = Configuration()) {
        client = Self.makeClient(configuration, proxy: nil)
        var proxied: [OutboundProxy: HTTPClient] = [:]
        for proxy in [configuration.proxyRoutes.http, configuration.proxyRoutes.https].compactMap({ $0 }) where proxied[proxy] == nil {
            proxied[proxy] = Self.makeClient(configuration, proxy: proxy)
        }
        proxiedClients = proxied
        proxyRoutes = configuration.proxyRoutes
        ownsClient = true
        bufferLimit = configuration.bufferLimit
        idleReadTimeout = configuration.idleReadTimeout
        maximumConnectionsPerHost = configuration.maximumConnectionsPerHost
        bodyEventLoop = configuration.bodyEventLoop
    }

    private static func makeClient(_ configuration: Configuration, proxy: OutboundProxy?) -> HTTPClient {
        var clientConfiguration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            // The body's idle timeout is the receiver's (``ResponseReceiver``): the client's also
            // runs while a slow consumer holds the connection back.
            timeout: .init(connect: configuration.connectTimeout.timeAmount, read: nil),
            connectionPool: .init(idleTimeout: configuration.idleConnectionTimeout.timeAmount,
                                  concurrentHTTP1ConnectionsPerHostSoftLimit: configuration.maximumConnectionsPerHost),
            decompression: .disabled
        )
        clientConfiguration.httpVersion = .http1Only
        clientConfiguration.connectionPool.preWarmedHTTP1ConnectionCount = max(0, configuration.spareConnectionsPerHost)
        // A connection that cannot be set up fails its request at once, as URLSession's does, and
        // the caller retries it by its policy (`send(_:retrying:)`). The client's own retries went
        // on until the connect timeout: a player offline, or with its origin down, waited 10 s for
        // each read of bytes not in the cache.
        clientConfiguration.connectionPool.retryConnectionEstablishment = false
        // The client has no setting for its reads' size; each new HTTP/1.1 connection's channel is
        // handed to this hook before its first request.
        let largestRead = max(64 << 10, configuration.largestRead)
        clientConfiguration.http1_1ConnectionDebugInitializer = { channel in
            channel.setOption(ChannelOptions.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: largestRead))
        }
        if !configuration.additionalAuthorities.isEmpty {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.certificates(configuration.additionalAuthorities)]
            clientConfiguration.tlsConfiguration = tls
        }
        if let proxy {
            switch proxy.kind {
            case .http:
                let authorization = proxy.username.map { HTTPClient.Authorization.basic(username: $0, password: proxy.password ?? "") }
                clientConfiguration.proxy = .server(host: proxy.host, port: proxy.port, authorization: authorization)
            case .socks5:
                clientConfiguration.proxy = .socksServer(host: proxy.host, port: proxy.port)
            }
        }
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
    }

    /// Creates a transport on a client the caller owns and shuts down. Configure the client not to
    /// follow redirects, not to decompress, and without a read timeout (`timeout.read = nil`):
    /// the client's timer also runs while a slow consumer holds a body back, and the transport
    /// keeps its own, `idleReadTimeout`, which does not (see ``Configuration/idleReadTimeout``).
    /// `bodyEventLoop`, a loop of the client's group, receives every body
    /// (``Configuration/bodyEventLoop``). The client's reads keep SwiftNIO's size unless its
    /// `http1_1ConnectionDebugInitializer` sets the channel's `recvAllocator`
    /// (``Configuration/largestRead``).
    public init(client: HTTPClient, bufferLimit: Int = 1 << 20, idleReadTimeout: Duration = .seconds(30), bodyEventLoop: (any EventLoop)? = nil) {
        self.client = client
        self.proxiedClients = [:]
        self.proxyRoutes = ProxyRoutes()
        self.ownsClient = false
        self.bufferLimit = bufferLimit
        self.idleReadTimeout = idleReadTimeout
        self.maximumConnectionsPerHost = nil
        self.bodyEventLoop = bodyEventLoop
    }

    /// An executor on ``bodyEventLoop``, or `nil` when bodies arrive on any loop.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    public var bodyExecutor: (any TaskExecutor)? {
        bodyEventLoop.map { EventLoopTaskExecutor($0) }
    }

    deinit {
        // A client must be shut down before it is released; without awaiting (deinit cannot) the
        // event-loop work still finishes, and no request can be running once nobody holds `self`.
        if ownsClient {
            client.shutdown { _ in }
            for proxied in proxiedClients.values { proxied.shutdown { _ in } }
        }
    }

    /// Closes every connection. Requests in flight fail.
    public func shutdown() async throws {
        if ownsClient {
            try await client.shutdown()
            for proxied in proxiedClients.values { try await proxied.shutdown() }
        }
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        var headers = NIOHTTP1.HTTPHeaders()
        for field in request.headers { headers.add(name: field.name, value: field.value) }
        if !request.headers.contains("Accept-Encoding") { headers.add(name: "Accept-Encoding", value: "identity") }
        if !request.headers.contains("User-Agent") { headers.add(name: "User-Agent", value: "StreamCache/1") }
        let outgoing: HTTPClient.Request
        do {
            outgoing = try HTTPClient.Request(url: request.url.absoluteString, method: NIOHTTP1.HTTPMethod(rawValue: request.method),
                                              headers: headers, body: request.body.map { .bytes($0) })
        } catch {
            throw Self.translate(error)
        }
        // The receiver holds the transport until the response ends (see ``ResponseReceiver``).
        // The body's silence is bounded by the request's timeout too, as its documentation says.
        let proxy = proxyRoutes.isEmpty ? nil : proxyRoutes.proxy(scheme: request.url.scheme ?? "http", host: request.url.host ?? "", port: request.url.port)
        let route = proxy.flatMap { proxiedClients[$0] } ?? client
        return try await ResponseReceiver(bufferLimit: bufferLimit, idleReadTimeout: min(request.timeout, idleReadTimeout), transport: self, proxy: proxy)
            .send(outgoing, on: route, bodyEventLoop: bodyEventLoop, headTimeout: request.timeout)
    }

    static func translate(_ error: any Error, proxy: OutboundProxy? = nil) -> any Error {
        if error is CancellationError || error is StreamCacheError { return error }
        if let clientError = error as? HTTPClientError {
            switch clientError {
            case .proxyAuthenticationRequired:
                // Not the origin's refusal: trying again, or another token for the service, changes nothing.
                return StreamCacheError(.originUnavailable, "The proxy \(proxy.map { "\($0)" } ?? "") asks for credentials (407): give them in its URL (http://user:password@host:port).",
                                        connectionFailure: .proxyRefused)
            case .invalidProxyResponse:
                return StreamCacheError(.originUnavailable, "The proxy \(proxy.map { "\($0)" } ?? "") refused to open a connection to the origin.",
                                        connectionFailure: .proxyRefused)
            case .httpProxyHandshakeTimeout, .socksHandshakeTimeout:
                return StreamCacheError(.originUnavailable, "The proxy \(proxy.map { "\($0)" } ?? "") did not answer in time.", connectionFailure: .timedOut)
            case .cancelled:
                return CancellationError()
            case .deadlineExceeded, .readTimeout, .connectTimeout:
                return StreamCacheError(.originUnavailable, "The origin did not answer in time.", connectionFailure: .timedOut)
            case .remoteConnectionClosed:
                return StreamCacheError(.originUnavailable, "The connection to the origin was lost.", connectionFailure: .lost)
            default:
                return StreamCacheError(.originUnavailable, "The request to the origin failed (\(clientError.shortDescription)).")
            }
        }
        if let channelError = error as? ChannelError, channelError == .ioOnClosedChannel || channelError == .eof {
            return StreamCacheError(.originUnavailable, "The connection to the origin was lost.", connectionFailure: .lost)
        }
        if let failure = tlsFailure(error) {
            return StreamCacheError(.originUnavailable, failure.reason, underlying: SendableErrorDescription(error), connectionFailure: failure.kind)
        }
        // Connection failures: an `IOError` naming the system's reason.
        if let ioError = error as? IOError {
            let failure = failure(connecting: ioError.errnoCode)
            // The connection a proxied request opens is the proxy's.
            let reason = proxy.map { "The proxy \($0) could not be reached: \(failure.reason)" } ?? failure.reason
            return StreamCacheError(.originUnavailable, reason,
                                    underlying: SendableErrorDescription(domain: "IOError", code: Int(ioError.errnoCode), description: "\(ioError)"),
                                    connectionFailure: failure.kind)
        }
        return StreamCacheError(.originUnavailable, "The origin could not be reached (\(type(of: error))).", underlying: SendableErrorDescription(error))
    }

    /// What a failed TLS handshake means, in words that say what to do, or `nil` when `error`
    /// is not one. BoringSSL names its reason only in its error stack's text.
    static func tlsFailure(_ error: any Error) -> (reason: String, kind: StreamCacheError.ConnectionFailure?)? {
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return ("The origin's TLS certificate names another host.", .certificateRejected)
        }
        guard let sslError = error as? NIOSSLError, case .handshakeFailed(let stack) = sslError else { return nil }
        let text = String(describing: stack)
        if text.contains("CERTIFICATE_VERIFY_FAILED") {
            return ("The origin's TLS certificate is not trusted (or has expired): trust the authority that signed it "
                    + "(`--cacert FILE`, or `AsyncHTTPClientTransport.Configuration.trustCertificateAuthorities(inPEMFile:)`).", .certificateRejected)
        }
        return ("The TLS handshake with the origin failed (\(text)).", nil)
    }

    /// What a failed connection's `errno` means to someone who reads the error, in the words
    /// `URLSessionTransport` uses for the same failures, and to a retry.
    static func failure(connecting errno: CInt) -> (reason: String, kind: StreamCacheError.ConnectionFailure?) {
        switch errno {
        case ECONNREFUSED: ("The origin refused the connection.", .refused)
        case ECONNRESET, ECONNABORTED, EPIPE: ("The connection to the origin was lost.", .lost)
        case ETIMEDOUT: ("The origin did not answer in time.", .timedOut)
        case ENETUNREACH, ENETDOWN: ("There is no network connection.", nil)
        case EHOSTUNREACH, EHOSTDOWN: ("The origin's host cannot be reached.", nil)
        default: ("The origin could not be reached (errno \(errno)).", nil)
        }
    }
}

extension HTTPClientError {
    fileprivate var shortDescription: String {
        SendableErrorDescription.removingQueries(from: String(describing: self))
    }
}

extension Duration {
    var timeAmount: TimeAmount {
        let parts = components
        return .nanoseconds(parts.seconds * 1_000_000_000 + parts.attoseconds / 1_000_000_000)
    }
}
