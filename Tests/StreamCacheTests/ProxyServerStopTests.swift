#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// Stopping the proxy.
@Suite struct ProxyServerStopTests {
    /// Players that keep connecting while the proxy stops never crash the process (an app that
    /// embeds the proxy and stops it when it goes to the background, `serve` on Ctrl-C): a
    /// SwiftNIO server whose task is cancelled traps on a connection accepted in that moment
    /// ("Deinited NIOAsyncWriter without calling finish()"). With the default grace period, and
    /// with none: what is still open when it ends is closed, never cancelled (the stop that
    /// cancelled then trapped in every run with no grace period, and once on a busy machine
    /// after a second).
    @Test(arguments: [ProxyServer.Configuration().stopGracePeriod, .zero])
    func stoppingWhilePlayersKeepConnectingDoesNotTrap(gracePeriod: Duration) async throws {
        var configuration = ProxyServer.Configuration()
        configuration.stopGracePeriod = gracePeriod
        try await withTemporaryCache { cache in
            for _ in 0..<20 {
                let server = try ProxyServer(cache: cache, configuration: configuration)
                try await server.start()
                let stopConnecting = RawHTTP.keepConnecting(port: server.baseURL?.port ?? 0)
                try await Task.sleep(for: .milliseconds(5))
                await server.stop()
                stopConnecting()
            }
        }
    }

    /// A response still streaming when the grace period ends is cut by closing its connection:
    /// the player gets fewer bytes than the response announced and sees the connection close,
    /// and the stop returns without having to cancel the server. Its origin stalls, so the
    /// response would otherwise never end.
    @Test func aResponseThatOutlastsTheGracePeriodIsCutByClosingItsConnection() async throws {
        let logs = InMemoryLogHandler.Store()
        try await ProxyServerTests.withProxy(server: { $0.stopGracePeriod = .milliseconds(100) }, logs: logs) { server, origin in
            let size = 4_000_000
            origin.setFile("/stalled.bin", data: TestData.random(count: size, seed: 311))
            let released = Locked(false)
            defer { released.withLock { $0 = true } }
            origin.faults = { _, _, _, _ in .pause(afterBytes: 64 << 10, until: { released.withLock { $0 } }) }
            let registration = server.register(url: origin.url("/stalled.bin"), headers: ["Authorization": ProxyServerTests.secret])
            let url = server.url(for: registration)
            let request = "GET \(url.path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            let client = try RawHTTP.Connection(port: try #require(url.port), request: Data(request.utf8), receiveBufferSize: 1 << 20,
                                                timeout: TestTiming.time(.seconds(30)).timeInterval)
            let start = await client.read(upTo: 1000)
            #expect(String(decoding: start.prefix(12), as: UTF8.self) == "HTTP/1.1 200")
            await server.stop()
            let rest = await client.readToEnd()
            #expect(client.peerClosed, "the proxy closed the connection; the read did not just time out")
            #expect(start.count + rest.count < size, "the response was cut: \(start.count + rest.count) bytes")
            let cancelled = logs.lines.filter { $0.contains("cancelling") }
            #expect(cancelled.isEmpty, "\(cancelled)")
        }
    }
}
