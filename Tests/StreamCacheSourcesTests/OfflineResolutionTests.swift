import Foundation
import StreamCache
import StreamCacheSources
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
                    for _ in 0..<(200 * TestTiming.slowdown) where await played.isDownloading { try await Task.sleep(for: .milliseconds(10)) }
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
}
