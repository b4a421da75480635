import Foundation
import StreamCache
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Sends arbitrary bytes to an HTTP server on 127.0.0.1 and reads what comes back: for requests
/// no well-behaved client would send (malformed request lines, huge headers, hostile paths).
public enum RawHTTP {
    /// A response as raw text plus its parsed status.
    public struct Response: Sendable {
        /// The status code, or `nil` when the server closed without answering.
        public var status: Int?
        /// Everything received.
        public var raw: Data
        /// The header block, as text (all of it when no blank line ends one). Only those bytes
        /// are decoded: a body of a megabyte or more, decoded and split as text, took most of a
        /// second in a debug build.
        public var head: String {
            let end = raw.range(of: Data("\r\n\r\n".utf8))?.lowerBound ?? raw.endIndex
            return String(decoding: raw[raw.startIndex..<end], as: UTF8.self)
        }
        /// Everything received after the header block (as sent: a chunked body keeps its framing).
        public var body: Data {
            raw.range(of: Data("\r\n\r\n".utf8)).map { Data(raw[$0.upperBound...]) } ?? Data()
        }
    }

    /// The default wait of ``exchange(port:request:timeout:)`` and ``get(port:path:headers:timeout:)``
    /// in seconds: 5, stretched by ``TestTiming/slowdown``. An upper bound only (the requests close
    /// their connection, so an answer ends the wait); under ThreadSanitizer a cached 30 kB answer
    /// once took longer than 5 s while the whole suite ran.
    public static var defaultTimeout: Double { 5 * Double(TestTiming.slowdown) }

    /// Connects, sends `request`, and reads until the server closes or `timeout` passes.
    ///
    /// The socket I/O blocks, so it runs on a dispatch thread, never on the cooperative pool that
    /// the server under test needs.
    public static func exchange(port: Int, request: Data, timeout: Double = defaultTimeout) async throws -> Response {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try blockingExchange(port: port, request: request, timeout: timeout) })
            }
        }
    }

    /// Starts a thread that connects to 127.0.0.1:`port` and closes again at once, over and over
    /// (5,000 times at most), until the returned call stops it: a crowd of clients arriving while
    /// a server stops.
    public static func keepConnecting(port: Int) -> @Sendable () -> Void {
        let stopped = Locked(false)
        Thread {
            for _ in 0..<5_000 {
                guard !stopped.withLock({ $0 }) else { break }
                guard let fd = try? connectedSocket(port: port, timeout: 1) else { continue }
                close(fd)
            }
        }.start()
        return { stopped.withLock { $0 = true } }
    }

    /// A blocking TCP socket connected to 127.0.0.1:`port`, whose sends and receives give up after
    /// `timeout` seconds. The caller closes it.
    /// With `receiveBufferSize`, the socket's receive buffer is set before it connects, so the
    /// window it offers stays that small: a client that stops reading holds the server up soon.
    public static func connectedSocket(port: Int, timeout: Double, receiveBufferSize: Int? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        if var size = receiveBufferSize.map(Int32.init) {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var interval = timeval(tv_sec: Int(timeout), tv_usec: .init((timeout - Double(Int(timeout))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
        return fd
    }

    private static func blockingExchange(port: Int, request: Data, timeout: Double) throws -> Response {
        let received = try Connection(port: port, request: request, receiveBufferSize: nil, timeout: timeout).blockingRead(limit: 64 << 20)
        var status: Int?
        if let line = String(decoding: received.prefix(64), as: UTF8.self).split(separator: "\r\n").first {
            let parts = line.split(separator: " ")
            if parts.count >= 2, parts[0].hasPrefix("HTTP/") { status = Int(parts[1]) }
        }
        return Response(status: status, raw: received)
    }

    /// Sends a `GET` with the given extra header lines and `Connection: close`.
    public static func get(port: Int, path: String, headers: [String] = [], timeout: Double = defaultTimeout) async throws -> Response {
        var text = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for header in headers { text += header + "\r\n" }
        text += "\r\n"
        return try await exchange(port: port, request: Data(text.utf8), timeout: timeout)
    }

    /// A connection the test reads at its own pace: to hold a response half-read while something
    /// else happens, then take the rest.
    public final class Connection: Sendable {
        private let fd: Int32
        private let timeout: Double
        private let closedByPeer = Locked(false)

        /// Connects (by default with a small receive window) and sends `request`.
        public init(port: Int, request: Data, receiveBufferSize: Int? = 16 * 1024, timeout: Double = 10) throws {
            fd = try RawHTTP.connectedSocket(port: port, timeout: timeout, receiveBufferSize: receiveBufferSize)
            self.timeout = timeout
            var sent = 0
            request.withUnsafeBytes { raw in
                while sent < raw.count {
                    let count = send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                    if count <= 0 { break }
                    sent += count
                }
            }
        }

        deinit { close(fd) }

        /// Reads until `count` bytes came, the server closed, or the timeout passed.
        public func read(upTo count: Int) async -> Data {
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async { continuation.resume(returning: self.blockingRead(limit: count)) }
            }
        }

        /// Reads until the server closes or the timeout passes.
        public func readToEnd() async -> Data { await read(upTo: Int.max) }

        /// One `recv` of up to `count` bytes, waiting for the first to arrive: what arrived
        /// together at first (a segment sent alone is read alone by a client that waits for it).
        public func receiveOnce(upTo count: Int) async -> Data {
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    var buffer = [UInt8](repeating: 0, count: count)
                    let received = recv(self.fd, &buffer, count, 0)
                    continuation.resume(returning: received > 0 ? Data(buffer[0..<received]) : Data())
                }
            }
        }

        /// Whether a read ended because the server closed the connection (an end of stream or a
        /// reset), not because of the timeout or the limit.
        public var peerClosed: Bool { closedByPeer.withLock { $0 } }

        /// The bytes that arrived and were not read yet, without waiting or taking them (`FIONREAD`).
        public var unreadByteCount: Int {
            var count: Int32 = 0
            return ioctl(fd, UInt(FIONREAD), &count) == 0 ? Int(count) : 0
        }

        fileprivate func blockingRead(limit: Int) -> Data {
            var received = Data()
            var buffer = [UInt8](repeating: 0, count: 65536)
            let deadline = Date().addingTimeInterval(timeout)
            while received.count < limit, Date() < deadline {
                let count = recv(fd, &buffer, min(buffer.count, limit - received.count), 0)
                if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    closedByPeer.withLock { $0 = true }
                }
                if count <= 0 { break }
                received.append(contentsOf: buffer[0..<count])
            }
            return received
        }
    }
}
