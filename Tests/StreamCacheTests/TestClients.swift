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
    /// suite under ThreadSanitizer took more than 30 s without a byte (twice, in stop 109's CI
    /// and in stop 110's rehearsal). At 30 s (the transport's idle read timeout and the origin's
    /// ``HTTPOrigin/Configuration/timeout``, the shorter of which counts) the body rightly gave
    /// up on the silent answer and went on from the same byte in a new request; the held answer,
    /// released later, sent 64 KiB the cache never took into the closed connection, an origin's
    /// count of bytes sent twice that the test's hold made. Its origins set
    /// ``heldAnswerTimeout`` too.
    static let heldAnswers: AsyncHTTPClientTransport = {
        var configuration = AsyncHTTPClientTransport.Configuration()
        configuration.idleReadTimeout = heldAnswerTimeout
        return AsyncHTTPClientTransport(configuration: configuration)
    }()

    /// How long ``heldAnswers`` and its origins wait for a silent answer: past what any run takes.
    static let heldAnswerTimeout: Duration = .seconds(600)
}
