import Foundation
import StreamCache
@testable import StreamCacheSources
import StreamCacheTestSupport
import Testing

/// A cloud file resolved while its service is out of reach: what is cached plays, the rest
/// waits for the service, asked again once the interval has passed.
@Suite struct OfflineResolutionTests {
    @Test func aFileResolvedOfflinePlaysWhatIsCachedAndTheRestOnceItsServiceAnswers() async throws {
        let data = TestData.random(count: 12_000_000, seed: 114)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
            let source = try environment.source("yandex", path: "/Music/song.mp3")
            try await withTemporaryDirectory { directory in
                let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
                try await withAsyncCleanup {
                    let online = try await cache.resolve(source)
                    #expect(!online.isOffline)
                    let first = ByteRange(0, 100_000), last = ByteRange(11_900_000, 12_000_000)
                    let played = try await cache.resource(for: online)
                    #expect(try await played.read(first).collect() == data[0..<100_000])
                    // What the first read's download brought with it ends well before the last bytes.
                    try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(10)) { await played.isDownloading }
                    try #require(!(try await played.cachedRanges).contains(last.lowerBound))

                    environment.server.failAPICalls(1_000, status: 503)
                    let offline = try await cache.resolve(source, retryingAfter: TestTiming.time(.seconds(1)))
                    #expect(offline.isOffline && offline.key == online.key && offline.fileName == "song.mp3")
                    let resource = try await cache.resource(for: offline)
                    #expect(try await resource.read(first).collect() == data[0..<100_000], "the cached bytes play")
                    await #expect(throws: StreamCacheError.self, "the service is not asked again before the interval") {
                        _ = try await resource.read(last).collect()
                    }

                    environment.server.failAPICalls(0, status: 503)
                    try await Task.sleep(for: TestTiming.time(.seconds(1)))
                    #expect(try await resource.read(last).collect() == data[11_900_000..<12_000_000], "the service answered: the rest came")
                } cleanup: {
                    await cache.shutdown()
                }
            }
        }
    }

    /// How many requests `server` has seen, once none has come for 200 ms (timed by
    /// ``TestTiming``; 50 tries at most): the stragglers of a step that gave up on its requests
    /// land before a test counts what the next step asks.
    static func arrivalsOnceQuiet(_ server: CloudTestServer) async throws -> Int {
        var seen = server.arrivals.count
        for _ in 0..<50 {
            try await Task.sleep(for: TestTiming.time(.milliseconds(200)))
            let now = server.arrivals.count
            guard now != seen else { break }
            seen = now
        }
        return seen
    }

    /// Runs `body` with a test service holding `/Music/song.mp3` (`data`), its source, and a
    /// cache (of `configure`) that holds the file whole.
    static func withSongCachedWhole(_ data: Data, configure: (inout StreamCache.Configuration) -> Void = { _ in },
                                    _ body: (CloudTestEnvironment, any Source, StreamCache) async throws -> Void) async throws {
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
            let source = try environment.source("yandex", path: "/Music/song.mp3")
            try await withTemporaryDirectory { directory in
                var configuration = StreamCache.Configuration(directory: directory)
                configure(&configuration)
                let cache = try StreamCache(configuration: configuration)
                try await withAsyncCleanup {
                    try await cache.resource(for: try await cache.resolve(source)).prefetch()
                    try await body(environment, source, cache)
                } cleanup: {
                    await cache.shutdown()
                }
            }
        }
    }

    /// A file cached whole and resolved while its service is out of reach plays its cached
    /// bytes with no request; once the service answers again, the next read after the interval
    /// asks for the file's version first, and a file replaced at the service meanwhile plays its
    /// new bytes, not the old ones. Before, nothing of a file cached whole ever asked again: the
    /// old version played for as long as the resolved file was kept (a `serve` started offline).
    @Test func aFileReplacedWhileItsServiceWasOutOfReachPlaysItsNewBytesOnceItAnswers() async throws {
        let old = TestData.random(count: 1_500_000, seed: 115)
        let new = TestData.random(count: 1_500_000, seed: 116)
        let whole = ByteRange(0, Int64(old.count))
        // The question is a few requests to the service, which a loaded machine (CI) once took
        // longer than the default 2 s to answer: the cached bytes then play, as they should (the
        // next test holds that). This test is about the version found, so it waits for it.
        try await Self.withSongCachedWhole(old, configure: { $0.revalidationTimeout = TestTiming.time(.seconds(20)) }) { environment, source, cache in
            environment.server.failAPICalls(1_000, status: 503)
            // Long enough for the read below to come within it on a loaded machine.
            let interval = TestTiming.time(.seconds(3))
            let offline = try await cache.resolve(source, retryingAfter: interval)
            #expect(offline.isOffline)
            let resource = try await cache.resource(for: offline)
            // Counted as they come in: a download is recorded only once its last byte went out,
            // which may be after its client (the prefetch) had them all. And counted once they have
            // stopped coming: the failed resolution asks for the account beside the file's
            // metadata (`async let`), and under the sanitizer one such call, sent before the other's
            // 503 ended the resolution, was recorded during the read below (16 arrivals, not 15).
            let requestsBefore = try await Self.arrivalsOnceQuiet(environment.server)
            #expect(TestData.sha256(try await resource.read(whole).collect()) == TestData.sha256(old), "the cached bytes play")
            let during = environment.server.arrivals.dropFirst(requestsBefore).map { "\($0.host) /\($0.path)?\($0.query)" }
            #expect(during.isEmpty, "a read within the interval asks nothing: \(during)")

            environment.server.setFile("/Music/song.mp3", data: new, mimeType: "audio/mpeg")
            environment.server.failAPICalls(0, status: 503)
            try await Task.sleep(for: interval)
            #expect(TestData.sha256(try await resource.read(whole).collect()) == TestData.sha256(new), "the file replaced at the service played its old bytes")
            let compared = environment.server.arrivals.count
            #expect(TestData.sha256(try await resource.read(whole).collect()) == TestData.sha256(new))
            #expect(environment.server.arrivals.count == compared, "a read after the version was compared asked again")
        }
    }

    /// An answer is not a confirmation until the engine has compared it
    /// (``Origin/versionWasChecked()``): one that came after the read stopped waiting for it
    /// leaves the origin provisional, so the next read asks again. Before, the answer's arrival
    /// confirmed it: on a loaded machine (the whole suite pinned to one busy core) a version
    /// answer that came as the 1 s wait ended was never compared, nothing asked again, and a file
    /// replaced at the service played its old bytes for as long as the server ran.
    @Test func anAnswerTheEngineDidNotCompareLeavesTheOriginProvisional() async throws {
        struct AnsweringOrigin: Origin {
            var logDescription: String { "answering" }
            func open(_ request: OriginRequest) async throws -> OriginResponse {
                throw StreamCacheError(.originUnavailable, "not asked for bytes here")
            }
            func currentInfo() async throws -> ResourceInfo {
                ResourceInfo(totalLength: 10, mimeType: nil, acceptsByteRanges: true, validator: Validator(entityTag: "\"v2\""))
            }
        }
        let origin = OfflineOrigin(name: "song.mp3", failure: StreamCacheError(.originUnavailable, "out of reach"),
                                   retryInterval: .zero, resolveAgain: { AnsweringOrigin() })
        #expect(origin.isProvisional, "a try is due")
        _ = try await origin.currentInfo()
        #expect(origin.isProvisional, "an answer nobody compared confirmed the version")
        origin.versionWasChecked()
        #expect(!origin.isProvisional)
    }

    /// The question for the version waits at most the revalidation timeout: with the service's
    /// API calls held unanswered (a network that drops packets), the cached bytes play after it;
    /// the try runs on, and once the service answers, the next read checks the version it found.
    @Test func aServiceSlowToAnswerHoldsAReadOfCachedBytesNoLongerThanTheTimeout() async throws {
        let old = TestData.random(count: 1_000_000, seed: 117)
        let new = TestData.random(count: 1_000_000, seed: 118)
        let whole = ByteRange(0, Int64(old.count))
        try await Self.withSongCachedWhole(old, configure: { $0.revalidationTimeout = TestTiming.time(.seconds(1)) }) { environment, source, cache in
            environment.server.failAPICalls(1_000, status: 503)
            let resource = try await cache.resource(for: try await cache.resolve(source, retryingAfter: TestTiming.time(.milliseconds(500))))
            environment.server.failAPICalls(0, status: 503)
            environment.server.holdAPICalls()
            defer { environment.server.releaseAPICalls() }
            try await Task.sleep(for: TestTiming.time(.milliseconds(500)))

            let began = ContinuousClock.now
            #expect(TestData.sha256(try await resource.read(whole).collect()) == TestData.sha256(old), "no version came: the cached bytes play")
            #expect(ContinuousClock.now - began < TestTiming.time(.seconds(10)), "the read waited for the held question")
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { environment.server.apiCallsHeld == 0 }
            #expect(environment.server.apiCallsHeld > 0, "the try runs on")

            environment.server.setFile("/Music/song.mp3", data: new, mimeType: "audio/mpeg")
            environment.server.releaseAPICalls()
            var played = Data()
            for _ in 0..<(100 * TestTiming.slowdown) {
                played = try await resource.read(whole).collect()
                if played == new { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(TestData.sha256(played) == TestData.sha256(new), "the version the late answer found was never checked")
        }
    }
}
