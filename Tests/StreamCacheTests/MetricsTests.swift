import Foundation
import MetricsTestKit
@testable import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// ``StreamCache/statistics`` and the swift-metrics figures (``StreamCache/Configuration/metricsFactory``)
/// agree with what a real loopback origin saw and with what readers were handed.
@Suite struct MetricsTests {
    static func resource(_ cache: StreamCache, _ origin: TestOrigin, _ path: String) -> Resource {
        let url = origin.url(path)
        return cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
    }

    static func readWhole(_ resource: Resource) async throws -> Data {
        var data = Data()
        for try await chunk in resource.read(from: 0) { data.append(chunk.data) }
        return data
    }

    static func counter(_ metrics: TestMetrics, _ label: String, _ dimensions: [(String, String)] = []) -> Int64 {
        metrics.counterTotal(label: label, dimensions: dimensions)
    }

    @Test func bytesAreCountedByWhereTheyCameFromAndMatchWhatTheOriginSent() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let data = TestData.random(count: 2_500_000, seed: 1101)
        origin.setFile("/a.bin", data: data)
        let metrics = TestMetrics()
        try await withTemporaryCache(configure: { $0.metricsFactory = metrics }) { cache in
            let song = Self.resource(cache, origin, "/a.bin")
            #expect(TestData.sha256(try await Self.readWhole(song)) == TestData.sha256(data))
            var totals = cache.statistics
            #expect(try await origin.waitUntilAnswersEnd())
            let sent = origin.requests.map(\.bodyBytesSent).reduce(0, +)
            #expect(sent == 2_500_000)
            #expect(totals.bytesDownloaded == sent)
            #expect(totals.originRequests == origin.requests.count)
            #expect(totals.bytesServedFromOrigin == 2_500_000)
            #expect(totals.bytesServedFromCache == 0)
            #expect(totals.reads == 1)

            // The replay comes from the cache: no request, and every byte counted as cached.
            #expect(TestData.sha256(try await Self.readWhole(song)) == TestData.sha256(data))
            totals = cache.statistics
            #expect(origin.requests.map(\.bodyBytesSent).reduce(0, +) == sent)
            #expect(totals.bytesServedFromCache == 2_500_000)
            #expect(totals.bytesServedFromOrigin == 2_500_000)
            #expect(totals.bytesDownloaded == sent)
            #expect(totals.reads == 2)
            #expect(totals.cacheHitRatio == 0.5)
            #expect(totals.downloadsInFlight == 0)
            #expect(totals.errors == 0)

            // The backend saw the same figures.
            #expect(Self.counter(metrics, "streamcache_reads_total") == 2)
            #expect(Self.counter(metrics, "streamcache_served_bytes_total", [("source", "cache")]) == 2_500_000)
            #expect(Self.counter(metrics, "streamcache_served_bytes_total", [("source", "origin")]) == 2_500_000)
            #expect(Self.counter(metrics, "streamcache_downloaded_bytes_total") == sent)
            #expect(Self.counter(metrics, "streamcache_origin_requests_total") == Int64(origin.requests.count))
            #expect(try metrics.expectTimer("streamcache_first_byte_seconds", [("source", "origin")]).values.count == 1)
            #expect(try metrics.expectTimer("streamcache_first_byte_seconds", [("source", "cache")]).values.count == 1)
            let inFlight = try metrics.expectMeter("streamcache_downloads_in_flight")
            #expect(inFlight.lastValue == 0)
            #expect((inFlight.values.max() ?? 0) >= 1)
        }
    }

    /// Readers that share downloads each count the bytes they were handed; the origin sent them
    /// once, and the totals show it.
    @Test func sharedDownloadsShowAsServedBytesAboveDownloadedBytes() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let data = TestData.random(count: 3_000_000, seed: 1102)
        origin.setFile("/b.bin", data: data)
        origin.bytesPerSecond = 6_000_000
        try await withTemporaryCache(configure: { $0.maximumJoinWait = .seconds(60) }) { cache in
            let song = Self.resource(cache, origin, "/b.bin")
            let digests = try await withThrowingTaskGroup(of: Data.self) { group in
                for _ in 0..<4 { group.addTask { try await Self.readWhole(song) } }
                return try await group.reduce(into: [String]()) { $0.append(TestData.sha256($1)) }
            }
            #expect(digests == Array(repeating: TestData.sha256(data), count: 4))
            let totals = cache.statistics
            #expect(try await origin.waitUntilAnswersEnd())
            let sent = origin.requests.map(\.bodyBytesSent).reduce(0, +)
            #expect(sent == 3_000_000, "no byte fetched twice")
            #expect(totals.bytesDownloaded == sent)
            #expect(totals.bytesServed == 12_000_000)
            #expect(totals.originRequests == origin.requests.count)
            #expect(totals.reads == 4)
        }
    }

    @Test func versionChangesRevalidationsAndErrorsAreCountedByKind() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/c.bin", data: TestData.random(count: 600_000, seed: 1103), entityTag: "\"v1\"")
        let metrics = TestMetrics()
        try await withTemporaryCache(configure: {
            $0.metricsFactory = metrics
            $0.revalidationInterval = .zero
            $0.revalidationTimeout = TestTiming.time(.seconds(20))  // answered, however loaded the machine
        }) { cache in
            let song = Self.resource(cache, origin, "/c.bin")
            _ = try await Self.readWhole(song)
            // Asked and confirmed: the same version.
            _ = try await Self.readWhole(song)
            let new = TestData.random(count: 500_000, seed: 1104)
            origin.setFile("/c.bin", data: new, entityTag: "\"v2\"")
            // Asked and changed: the old bytes go, the new ones come.
            #expect(TestData.sha256(try await Self.readWhole(song)) == TestData.sha256(new))
            // An origin that is gone: the question fails and the cached bytes are served.
            origin.stop()
            #expect(TestData.sha256(try await Self.readWhole(song)) == TestData.sha256(new))
            let totals = cache.statistics
            #expect(totals.revalidations == 3)
            #expect(totals.revalidationFailures == 1)
            #expect(totals.versionChanges == 1)
            #expect(Self.counter(metrics, "streamcache_revalidations_total", [("result", "confirmed")]) == 1)
            #expect(Self.counter(metrics, "streamcache_revalidations_total", [("result", "changed")]) == 1)
            #expect(Self.counter(metrics, "streamcache_revalidations_total", [("result", "failed")]) == 1)
            #expect(Self.counter(metrics, "streamcache_version_changes_total") == 1)
            #expect(totals.originRequests == origin.requests.count + 1, "the failed question counts as a request too")

            // A file the origin does not have: the read fails, and the error is counted by its code.
            let other = try TestOrigin()
            defer { other.stop() }
            let missing = Self.resource(cache, other, "/missing.bin")
            await #expect(throws: StreamCacheError.self) { _ = try await Self.readWhole(missing) }
            #expect(cache.statistics.errors == 1)
            #expect(Self.counter(metrics, "streamcache_errors_total", [("code", StreamCacheError.Code.notFound.description)]) == 1)
        }
    }

    @Test func evictionsAreCountedWithTheBytesTheyFreed() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        for name in ["d", "e", "f"] { origin.setFile("/\(name)", data: TestData.random(count: 1_000_000, seed: 1105)) }
        let metrics = TestMetrics()
        try await withTemporaryCache(configure: {
            $0.metricsFactory = metrics
            $0.maximumSize = 2_500_000
        }) { cache in
            for name in ["d", "e", "f"] {
                let resource = Self.resource(cache, origin, "/\(name)")
                try await resource.prefetch()
                await resource.flush()
                try await Task.sleep(for: .milliseconds(20))
            }
            var totals = cache.statistics
            for _ in 0..<100 {
                guard totals.evictedResources == 0 else { break }
                try await Task.sleep(for: .milliseconds(20))
                totals = cache.statistics
            }
            #expect(totals.evictedResources == 1)
            #expect(totals.evictedBytes == 1_000_000)
            #expect(try await cache.store.totalCachedBytes() == 2_000_000)
            #expect(Self.counter(metrics, "streamcache_evictions_total") == 1)
            #expect(Self.counter(metrics, "streamcache_evicted_bytes_total") == 1_000_000)
            #expect(totals.reads == 3, "prefetches are reads")
            #expect(totals.bytesServed == 0, "a prefetch hands no byte to a reader")
        }
    }
}
