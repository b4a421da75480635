import Foundation
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import StreamCache
@testable import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// The server's connections spread over its event loops, each served on its own loop, and a port
/// that is in use refused rather than shared.
@Suite struct LoopListenerTests {
    /// Where each request was answered: its connection's loop, and whether the responder ran on it.
    private struct Answered: Sendable {
        var loop: ObjectIdentifier
        var onItsLoop: Bool
    }

    private static func server(port: Int = 0, loops: [any EventLoop], answered: Locked<[Answered]> = Locked([]),
                               running: @escaping @Sendable (Int) async -> Void) throws -> StoppableServer {
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        return try StoppableServer(logger: logger) { connections in
            try HTTPService.make(host: "127.0.0.1", port: port, connections: connections, eventLoops: loops, logger: logger,
                                 respond: { _, channel in
                                     answered.withLock {
                                         $0.append(Answered(loop: ObjectIdentifier(channel.eventLoop), onItsLoop: channel.eventLoop.inEventLoop))
                                     }
                                     return Response(status: .ok, headers: [.contentLength: "2"], body: ResponseBody(byteBuffer: ByteBuffer(string: "ok")))
                                 },
                                 onServerRunning: running)
        }
    }

    /// Sixteen players connecting at once used to queue on one thread; now every loop accepts its
    /// share, and answers each request on the loop of the connection it came on, with no hop to
    /// another thread on the way.
    @Test func connectionsAreSpreadOverTheLoopsAndAnsweredEachOnItsOwn() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let answered = Locked<[Answered]>([])
        let (ports, listening) = AsyncStream<Int>.makeStream()
        let server = try Self.server(loops: loops, answered: answered) { listening.yield($0) }
        var port = 0
        for await value in ports {
            port = value
            break
        }
        #expect(port != 0)
        // Each request on a connection of its own; the kernel picks a loop's socket by the
        // connection's addresses, so 32 connections all on one of two loops is a 2^-31 chance.
        for _ in 0..<32 {
            #expect(try await RawHTTP.get(port: port, path: "/", timeout: 30).status == 200)
        }
        await server.stop()
        let all = answered.withLock { $0 }
        #expect(all.count == 32)
        #expect(all.filter { !$0.onItsLoop }.isEmpty, "a responder ran off its connection's loop")
        #expect(Set(all.map(\.loop)) == Set(loops.map { ObjectIdentifier($0) }), "loops that answered: \(Set(all.map(\.loop)).count) of 2")
        try await group.shutdownGracefully()
    }

    /// A second server on a port the first listens on is refused with a clear error: it must not
    /// take a share of the first one's connections, as sockets that both allow `SO_REUSEPORT` would.
    @Test(arguments: [1, 2])
    func aPortInUseIsRefusedNotShared(loopCount: Int) async throws {
        let loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
        let (ports, listening) = AsyncStream<Int>.makeStream()
        let first = try Self.server(loops: loops) { listening.yield($0) }
        var port = 0
        for await value in ports {
            port = value
            break
        }
        #expect(port != 0)
        let error = #expect(throws: StreamCacheError.self) {
            _ = try Self.server(port: port, loops: Array(loops.prefix(loopCount))) { _ in }
        }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains("Address already in use") == true, "\(String(describing: error))")
        // The first server still answers every connection.
        for _ in 0..<8 {
            #expect(try await RawHTTP.get(port: port, path: "/", timeout: 30).status == 200)
        }
        await first.stop()
    }
}
