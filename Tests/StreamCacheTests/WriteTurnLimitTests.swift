#if os(Linux)
import Foundation
import Glibc
import StreamCache
@testable import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// Each client connection hands the kernel at most its send buffer per turn of the server's event
/// loop (``WriteTurnLimit``): the server's end of a real connection carries the configured
/// buffer, and a file far larger than it still arrives whole.
///
/// The server's socket is found among this process's descriptors (`/proc/self/fd`) by its two
/// ports, so the test reads the option the kernel actually applied.
@Suite struct WriteTurnLimitTests {
    enum Setting: Sendable, CustomStringConvertible {
        case byDefault, bounded(Int), off
        var description: String {
            switch self {
            case .byDefault: "the default"
            case .bounded(let size): "\(size) bytes"
            case .off: "off"
            }
        }
    }

    @Test(arguments: [Setting.byDefault, .bounded(96 * 1024), .off])
    func theServersEndOfEachConnectionHasTheBoundedSendBuffer(setting: Setting) async throws {
        try await ProxyServerTests.withProxy(server: { configuration in
            switch setting {
            case .byDefault: break
            case .bounded(let size): configuration.connectionSendBufferSize = size
            case .off: configuration.connectionSendBufferSize = nil
            }
        }) { server, origin in
            let data = TestData.random(count: 6_000_000, seed: 911)
            origin.setFile("/music/album.flac", data: data)
            let registration = server.register(url: origin.url("/music/album.flac"), headers: ["Authorization": ProxyServerTests.secret])
            let port = try #require(server.port)
            let warm = try await ProxyServerTests.curl(server.url(for: registration))
            #expect(TestData.sha256(warm.body) == TestData.sha256(data))

            let answer = try await Self.fetchWatchingTheServersSocket(port: port, path: registration.path)
            switch setting {
            case .byDefault: #expect(answer.sendBuffer == Self.reportedSendBuffer(requested: 256 * 1024))
            case .bounded(let size): #expect(answer.sendBuffer == Self.reportedSendBuffer(requested: size))
            case .off:
                #expect(answer.sendBuffer != nil && answer.sendBuffer != Self.reportedSendBuffer(requested: 256 * 1024),
                        "the system's own buffer, tuned as it goes")
            }
            // The whole file still arrives through the bounded buffer.
            #expect(answer.head.hasPrefix("HTTP/1.1 200"))
            #expect(TestData.sha256(answer.body) == TestData.sha256(data))
        }
    }

    /// GETs `path` on one keep-alive connection and, once the answer's first bytes are in (the
    /// connection's pipeline is set up), reads the send buffer of the server's end of it. The
    /// sockets block, so this runs on a dispatch thread, not on the cooperative pool the server's
    /// engine needs.
    static func fetchWatchingTheServersSocket(port: Int, path: String) async throws -> (sendBuffer: Int?, head: String, body: Data) {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result {
                    let client = try BlockingClient(port: port)
                    defer { client.close() }
                    try client.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    var received = try client.receive(atLeast: 1)
                    let sendBuffer = socket(localPort: port, peerPort: client.localPort).flatMap(sendBufferSize(of:))
                    let separator = Data("\r\n\r\n".utf8)
                    while received.range(of: separator) == nil { received.append(try client.receive(atLeast: 1)) }
                    let headEnd = received.range(of: separator)!
                    let head = String(decoding: received[..<headEnd.lowerBound], as: UTF8.self)
                    let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                        .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                    while received.count - headEnd.upperBound < length { received.append(try client.receive(atLeast: 1)) }
                    return (sendBuffer, head, Data(received[headEnd.upperBound...]))
                })
            }
        }
    }

    /// The descriptor of this process's TCP socket bound to `localPort` and connected to `peerPort`.
    static func socket(localPort: Int, peerPort: Int) -> Int32? {
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for name in descriptors {
            guard let descriptor = Int32(name) else { continue }
            if port(of: descriptor, peer: false) == localPort, port(of: descriptor, peer: true) == peerPort { return descriptor }
        }
        return nil
    }

    /// The IPv4 port of a socket's own or peer address, if it is an IPv4 socket.
    static func port(of descriptor: Int32, peer: Bool) -> Int? {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let result = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(descriptor, $0, &length) : getsockname(descriptor, $0, &length)
            }
        }
        guard result == 0, address.sin_family == sa_family_t(AF_INET) else { return nil }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// What Linux reports for a socket given a send buffer of `requested` bytes: the request,
    /// capped at `net.core.wmem_max`, doubled for the kernel's bookkeeping.
    static func reportedSendBuffer(requested: Int) -> Int {
        let text = (try? String(contentsOfFile: "/proc/sys/net/core/wmem_max", encoding: .utf8)) ?? ""
        let cap = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? requested
        return 2 * min(requested, cap)
    }

    static func sendBufferSize(of descriptor: Int32) -> Int? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &value, &length) == 0 else { return nil }
        return Int(value)
    }
}

/// A keep-alive TCP client on blocking sockets with a receive timeout, for tests that need to see
/// the connection itself (its local port) rather than only its bytes.
private final class BlockingClient {
    let descriptor: Int32
    let localPort: Int

    init(port: Int, timeout: Double = 10) throws {
        let fd = try RawHTTP.connectedSocket(port: port, timeout: timeout)
        guard let local = WriteTurnLimitTests.port(of: fd, peer: false) else {
            Glibc.close(fd)
            throw POSIXError(.EIO)
        }
        descriptor = fd
        localPort = local
    }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { throw POSIXError(.EPIPE) }
            sent += count
        }
    }

    /// Blocks until at least `count` bytes came (up to 1 MiB per call); throws when the server
    /// closes or the timeout passes first.
    func receive(atLeast count: Int) throws -> Data {
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while received.count < count {
            let read = recv(descriptor, &buffer, buffer.count, 0)
            guard read > 0 else { throw POSIXError(.ETIMEDOUT) }
            received.append(contentsOf: buffer[0..<read])
        }
        return received
    }

    func close() { Glibc.close(descriptor) }
}
#endif
