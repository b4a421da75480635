import StreamCacheTestSupport
import Testing

/// The cloud test server, which every source test stops at its end.
@Suite struct CloudTestServerStopTests {
    /// Clients that keep connecting while the server stops never crash the process: a SwiftNIO
    /// server whose task is cancelled traps on a connection accepted in that moment ("Deinited
    /// NIOAsyncWriter without calling finish()"; it did in every run of this test with the
    /// cancelled task, and once in a fresh clone's full suite).
    @Test func stoppingWhileClientsKeepConnectingDoesNotTrap() async throws {
        for _ in 0..<40 {
            let server = try await CloudTestServer(initialToken: "token")
            let stopConnecting = RawHTTP.keepConnecting(port: server.contentPort)
            try await Task.sleep(for: .milliseconds(5))
            await server.stop()
            stopConnecting()
        }
    }
}
