import StreamCacheHTTPClient
import StreamCacheTestSupport

/// The HTTP client of tests that play many players at once: one connection each (the shared
/// client queues requests beyond 8 per host, and a queued request times out on a machine slowed
/// down by a sanitizer), with its timeouts stretched by ``TestTiming/slowdown``.
enum TestClients {
    static let manyPlayers: AsyncHTTPClientTransport = {
        var configuration = AsyncHTTPClientTransport.Configuration()
        configuration.maximumConnectionsPerHost = 64
        configuration.connectTimeout = TestTiming.time(.seconds(10))
        configuration.idleReadTimeout = TestTiming.time(.seconds(30))
        return AsyncHTTPClientTransport(configuration: configuration)
    }()
}
