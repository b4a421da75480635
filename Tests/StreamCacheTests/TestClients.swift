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

    /// The HTTP client of tests whose origin holds an answer silent until the test's reader has
    /// got somewhere: that takes as long as the machine lets the reader run, and in the full
    /// suite under ThreadSanitizer once took more than the shared client's 30 s without a byte.
    /// The transport then rightly gave up on the silent answer and asked again on a new
    /// connection, and the held answer, released later, sent 64 KiB the cache never took into
    /// the closed connection: an origin's count of bytes sent twice that the test's hold made.
    static let heldAnswers: AsyncHTTPClientTransport = {
        var configuration = AsyncHTTPClientTransport.Configuration()
        configuration.idleReadTimeout = .seconds(600)
        return AsyncHTTPClientTransport(configuration: configuration)
    }()
}
