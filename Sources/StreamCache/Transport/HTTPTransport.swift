#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Sends one HTTP request and streams its response body: the seam between the engine and an
/// HTTP client library.
///
/// Each client library lives in a module of its own, so the engine links none: `URLSessionTransport`
/// (`StreamCacheURLSession`, every platform, for apps) and `AsyncHTTPClientTransport`
/// (`StreamCacheHTTPClient`, SwiftNIO, for the server and the CLI). Every conformance must pass the same conformance suite
/// (`TransportConformanceTests`) and must:
/// - **not follow redirects**: return the 3xx response, so ``HTTPOrigin`` decides which headers
///   may follow the redirect to another host;
/// - **not decode** content encodings: send `Accept-Encoding: identity` unless told otherwise, since
///   byte ranges count encoded bytes;
/// - **stream** the body as it arrives, holding back the connection when the consumer is slow,
///   and time each chunk where it is received (``HTTPBody/Chunk/arrivedAt``), off Swift's
///   cooperative pool, not where the consumer takes it;
/// - **abort** the request (and drop its connection) when the task awaiting it is cancelled or
///   the body is abandoned;
/// - **fail at once** when a connection cannot be set up (refused, unreachable), without retrying:
///   callers retry by a ``RetryPolicy`` (``send(_:retrying:logger:)``), the same for every transport.
public protocol HTTPTransport: Sendable {
    /// Sends `request` and returns once the response head has arrived.
    ///
    /// - Throws: `CancellationError` when cancelled; ``StreamCacheError`` with
    ///   ``StreamCacheError/Code/originUnavailable`` when no response could be had.
    func send(_ request: HTTPRequest) async throws -> HTTPResponse

    /// Whether a slow consumer holds back the connection, as the requirements above ask. A
    /// transport that cannot (`URLSessionTransport` on Linux) buffers what the origin sends, up
    /// to a whole response, so ``HTTPOrigin`` keeps its requests short.
    var holdsBackSlowConsumers: Bool { get }

    /// The most connections the transport opens to one host at once, queueing more requests,
    /// or `nil` when it does not say. ``HTTPOrigin`` passes it on as its
    /// ``Origin/connectionLimit``.
    var maximumConnectionsPerHost: Int? { get }

    /// The executor whose thread receives every response body of this transport, when there is
    /// one (an event loop the client hands every body to), else `nil`.
    ///
    /// A task that prefers it takes each chunk on the thread that read it from the socket: the
    /// engine runs its downloads there (see ``Origin/downloadExecutor``), so the bytes go into the
    /// cache file while they are still in that CPU's cache, and no chunk waits for a thread of
    /// Swift's cooperative pool to wake up.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    var bodyExecutor: (any TaskExecutor)? { get }
}

extension HTTPTransport {
    /// Transports hold back a slow consumer unless they say otherwise.
    public var holdsBackSlowConsumers: Bool { true }

    /// Not known.
    public var maximumConnectionsPerHost: Int? { nil }

    /// None: bodies arrive wherever the client library delivers them.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    public var bodyExecutor: (any TaskExecutor)? { nil }
}

/// An HTTP request as the engine builds it.
public struct HTTPRequest: Sendable {
    /// The method: `GET` or `HEAD` for downloads; `POST` and `PROPFIND` for cloud and WebDAV APIs.
    public var method: String
    /// The absolute URL.
    public var url: URL
    /// The header fields to send.
    public var headers: HTTPHeaders
    /// How long to wait for the response head, and between two body chunks.
    public var timeout: Duration
    /// The request body (a JSON or XML document, a form), sent with its length; `nil` for none.
    public var body: Data?

    /// Creates a request.
    public init(method: String = "GET", url: URL, headers: HTTPHeaders = [:], body: Data? = nil, timeout: Duration = .seconds(30)) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// The head of an HTTP response plus its streaming body.
public struct HTTPResponse: Sendable {
    /// The status code.
    public var status: Int
    /// The response header fields.
    public var headers: HTTPHeaders
    /// The body, delivered in order as it arrives. Iterate it once.
    public var body: HTTPBody

    /// Creates a response.
    public init(status: Int, headers: HTTPHeaders, body: HTTPBody) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// A response body: an ordered, single-pass, back-pressured sequence of byte chunks.
///
/// Stopping iteration early (dropping the iterator) or cancelling the iterating task aborts the
/// underlying request, so the connection stops pulling bytes nobody wants.
public struct HTTPBody: AsyncSequence, Sendable {
    public typealias Element = Data

    /// A chunk of a body and when it arrived: when the transport received it, which may be well
    /// before the consumer gets to it on a busy machine. The engine times transfers by it (see
    /// `ParallelGain`). `URLSessionTransport` stamps a chunk in the session's delegate callback;
    /// `AsyncHTTPClientTransport` on the connection's event loop, as it comes off the socket.
    /// Neither waits for Swift's cooperative pool, where a stamp would come late on a busy machine
    /// (though on Linux, URLSession's delegate runs on libdispatch's threads, which a pool held
    /// throughout starves too).
    public struct Chunk: Sendable {
        /// The bytes.
        public var data: Data
        /// When the transport received them.
        public var arrivedAt: ContinuousClock.Instant

        /// Creates a chunk; `arrivedAt` defaults to now.
        public init(_ data: Data, arrivedAt: ContinuousClock.Instant = .now) {
            self.data = data
            self.arrivedAt = arrivedAt
        }
    }

    fileprivate enum Source: Sendable {
        /// Chunks pushed by a transport or a producer task.
        case buffer(AsyncBuffer<Chunk>)
        /// Chunks pulled on demand in the consumer's own task.
        case pull(any HTTPBodySource)
    }

    private let source: Source

    package init(buffer: AsyncBuffer<Chunk>) { self.source = .buffer(buffer) }

    /// A buffer for a transport to push a body's chunks into, for ``init(buffer:)``: it keeps
    /// when the newest chunk arrived (``newestArrival``).
    package static func makeBuffer(limit: Int) -> AsyncBuffer<Chunk> {
        AsyncBuffer(limit: limit, stamp: { $0.arrivedAt })
    }

    /// When the transport received the newest chunk of the body so far, whether or not the
    /// consumer has taken it in; `nil` before the first chunk, or when the body's source does not
    /// say (``HTTPBodySource/newestArrival``).
    ///
    /// A consumer that has handled every chunk that arrived up to this time has handled all that
    /// came: the engine tells so a transfer that stopped receiving from one whose task is late
    /// to take its bytes in (see `ParallelGain`), which only the transport can tell apart.
    public var newestArrival: ContinuousClock.Instant? {
        switch source {
        case .buffer(let buffer): buffer.newestStamp
        case .pull(let source): source.newestArrival
        }
    }

    /// How many bytes of the body the transport has received that the consumer has not taken
    /// yet; `nil` when the body's source does not say (``HTTPBodySource/bytesWaiting``).
    ///
    /// A consumer that runs late (a busy machine) has these at hand: the engine lets a read
    /// that begins within them wait for its download instead of cutting the download's request
    /// there, which would throw them away and ask the origin for them again.
    public var bytesWaiting: Int? {
        switch source {
        case .buffer(let buffer): buffer.queuedWeight
        case .pull(let source): source.bytesWaiting
        }
    }

    /// A body whose chunks `source` produces when the consumer asks, in the consumer's task: no
    /// task and no buffer of its own, so each chunk costs no extra thread hop.
    public init(pulling source: any HTTPBodySource) { self.source = .pull(source) }

    /// A body with the given chunks, already complete. Useful for tests and for transports that
    /// received the whole body at once.
    public init(chunks: [Data]) {
        let buffer = Self.makeBuffer(limit: Int.max)
        for chunk in chunks { buffer.offer(Chunk(chunk), weight: chunk.count) }
        buffer.finish()
        self.source = .buffer(buffer)
    }

    /// A body fed by `producer`, which is cancelled when the consumer stops listening.
    ///
    /// - Parameters:
    ///   - bufferLimit: Bytes held before `producer`'s writes suspend.
    ///   - producer: Writes the chunks through the given closure and returns at the end of the body.
    public static func streaming(
        bufferLimit: Int = 1 << 20,
        producer: @escaping @Sendable (_ write: @escaping @Sendable (Data) async throws -> Void) async throws -> Void
    ) -> HTTPBody {
        let buffer = makeBuffer(limit: bufferLimit)
        let task = Task {
            do {
                try await producer { chunk in try await buffer.send(Chunk(chunk), weight: chunk.count) }
                buffer.finish()
            } catch {
                buffer.finish(throwing: error)
            }
        }
        buffer.setOnCancel { task.cancel() }
        return HTTPBody(buffer: buffer)
    }

    /// Collects the whole body into memory; for small bodies (error pages, JSON, XML) only.
    ///
    /// - Parameter maxBytes: The most bytes to collect; the rest is dropped.
    public func collect(upTo maxBytes: Int) async throws -> Data {
        var result = Data()
        for try await chunk in self {
            result.append(chunk.prefix(maxBytes - result.count))
            if result.count >= maxBytes { break }
        }
        return result
    }

    /// Aborts the request without reading the body: call it for a response whose body is not wanted
    /// (a redirect, an error status), so the transfer stops instead of filling memory.
    public func discard() {
        switch source {
        case .buffer(let buffer): buffer.cancel()
        case .pull(let source): source.cancel()
        }
    }

    public func makeAsyncIterator() -> Iterator { Iterator(source: source) }

    /// Iterates a body; dropping it aborts the request.
    public struct Iterator: AsyncIteratorProtocol, Sendable {
        private let source: Source
        private let abandon: DeinitAction

        fileprivate init(source: Source) {
            self.source = source
            switch source {
            case .buffer(let buffer): abandon = DeinitAction { buffer.cancel() }
            case .pull(let pull): abandon = DeinitAction { pull.cancel() }
            }
        }

        public mutating func next() async throws -> Data? {
            try await nextChunk()?.data
        }

        /// The next chunk with the time it arrived, or `nil` at the end of the body.
        public mutating func nextChunk() async throws -> Chunk? {
            switch source {
            case .buffer(let buffer): try await buffer.next()
            case .pull(let pull): try await pull.nextChunk()
            }
        }

        /// The next chunk if it has arrived already, without waiting; `nil` when none has, and at
        /// the end of the body or on an error, which ``nextChunk()`` reports. A consumer that is
        /// slower than the network takes what piled up meanwhile with this after ``nextChunk()``,
        /// and handles it in one go.
        public mutating func readyChunk() -> Chunk? {
            switch source {
            case .buffer(let buffer): buffer.nextIfQueued()
            case .pull(let pull): pull.readyChunk()
            }
        }
    }
}

/// Produces a body's chunks on demand, for ``HTTPBody/init(pulling:)``.
///
/// Only one task calls ``next()`` at a time (the body's single consumer); ``cancel()`` may be
/// called from any thread, at any time, and must abort the underlying request.
public protocol HTTPBodySource: AnyObject, Sendable {
    /// The next chunk, or `nil` at the end of the body.
    func next() async throws -> Data?
    /// The next chunk with the time it arrived (see ``HTTPBody/Chunk``), or `nil` at the end of
    /// the body. The default implementation calls ``next()`` and says it arrived now.
    func nextChunk() async throws -> HTTPBody.Chunk?
    /// The next chunk if it is at hand without waiting (see ``HTTPBody/Iterator/readyChunk()``),
    /// else `nil`: also at the end and on an error, which ``nextChunk()`` then reports. The
    /// default implementation returns `nil`.
    func readyChunk() -> HTTPBody.Chunk?
    /// When the transport received the newest chunk of the body so far, taken or not (see
    /// ``HTTPBody/newestArrival``); `nil` before the first, or when the source cannot tell. The
    /// default implementation returns `nil`. Called from any thread, at any time.
    var newestArrival: ContinuousClock.Instant? { get }
    /// How many bytes of the body the transport has received that ``next()`` has not returned
    /// yet (see ``HTTPBody/bytesWaiting``); `nil` when the source cannot tell. The default
    /// implementation returns `nil`. Called from any thread, at any time.
    var bytesWaiting: Int? { get }
    /// Aborts the body: the request is cancelled and later calls to ``next()`` throw.
    func cancel()
}

extension HTTPBodySource {
    public func nextChunk() async throws -> HTTPBody.Chunk? {
        try await next().map { HTTPBody.Chunk($0) }
    }

    public func readyChunk() -> HTTPBody.Chunk? { nil }

    public var newestArrival: ContinuousClock.Instant? { nil }

    public var bytesWaiting: Int? { nil }
}
