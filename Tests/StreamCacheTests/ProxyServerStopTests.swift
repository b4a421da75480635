import StreamCache
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// Stopping the proxy.
@Suite struct ProxyServerStopTests {
    /// Players that keep connecting while the proxy stops never crash the process (an app that
    /// embeds the proxy and stops it when it goes to the background, `serve` on Ctrl-C): a
    /// SwiftNIO server whose task is cancelled traps on a connection accepted in that moment
    /// ("Deinited NIOAsyncWriter without calling finish()").
    @Test func stoppingWhilePlayersKeepConnectingDoesNotTrap() async throws {
        // The clients send no request, so each stop is over once the server has taken every
        // connection it accepted; the grace is long only for a sanitizer's busy machine.
        var configuration = ProxyServer.Configuration()
        configuration.stopGracePeriod = TestTiming.time(.seconds(5))
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
}
