import Foundation
@testable import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import Testing

/// Prefetches and background fills keep to the background rate
/// (``StreamCache/Configuration/backgroundDownloadRate``); a player's read never does.
@Suite struct BackgroundRateTests {
    static let path = "/album.bin"

    /// A cache with the background rate `rate`, whose downloads go to `origin` over a transport
    /// that stops reading a socket while its body waits (as every download of the proxy does);
    /// `body` gets the resource of ``path``.
    static func withPacedCache(_ origin: TestOrigin, rate: Int64?, _ body: (StreamCache, Resource) async throws -> Void) async throws {
        let transport = AsyncHTTPClientTransport(configuration: .init())
        try await withAsyncCleanup {
            try await withTemporaryCache(configure: { $0.backgroundDownloadRate = rate }) { (cache: StreamCache) async throws -> Void in
                let url = origin.url(path)
                try await body(cache, cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport)))
            }
        } cleanup: {
            try? await transport.shutdown()
        }
    }

    /// Whether `read` ends within `bound`; cancels it otherwise.
    static func ends(_ read: Task<Data, any Error>, within bound: Duration) async throws -> Data? {
        let timer = Task {
            try await Task.sleep(for: bound)
            read.cancel()
        }
        defer { timer.cancel() }
        return try? await read.value
    }

    /// A 3 MB prefetch at 1 MB/s takes the time the rate gives it (on loopback it takes
    /// milliseconds), on one connection (one brings far more than the rate), every byte once;
    /// without a rate, the same prefetch goes at the link's speed.
    @Test func aPrefetchKeepsToTheRate() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let file = TestData.random(count: 3_000_000, seed: 91)
        origin.setFile(Self.path, data: file)
        try await Self.withPacedCache(origin, rate: 1_000_000) { _, album in
            let started = ContinuousClock.now
            try await album.prefetch()
            let took = ContinuousClock.now - started
            // What was taken in before the last run (a run of 1 MiB at most) had its time at the
            // rate, less the allowance of a quarter of a second.
            #expect(took >= .milliseconds(1_400), "3 MB at 1 MB/s took \(took)")
            #expect(TestData.sha256(try await album.read(ByteRange(0, Int64(file.count))).collect()) == TestData.sha256(file))
            #expect(origin.bodyBytesSent(for: Self.path) == Int64(file.count))
            #expect(origin.maximumConcurrency(for: Self.path) == 1, "\(origin.timeline(for: Self.path))")
        }
    }

    /// At a rate that would take minutes for what the player reads, the player's reads come at
    /// once: one beside the prefetch, and one that comes to the prefetch's own download, which
    /// goes at the link's speed while it brings what that player wants, and keeps to the rate
    /// again once the player has it: the prefetch is still under way when the reads end. No
    /// byte leaves the origin twice.
    @Test func aReadIsNeverHeldBackByTheRate() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let file = TestData.random(count: 8_000_000, seed: 92)
        origin.setFile(Self.path, data: file)
        try await Self.withPacedCache(origin, rate: 10_000) { cache, album in
            let prefetch = Task { try await album.prefetch(ByteRange(0, 6_000_000)) }
            defer { prefetch.cancel() }
            // The prefetch has begun, and waits for the rate.
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { origin.bodyBytesSent(for: Self.path) == 0 }
            #expect(origin.bodyBytesSent(for: Self.path) > 0)

            let beside = try await Self.ends(Task { try await album.read(ByteRange(7_000_000, 8_000_000)).collect() }, within: .seconds(60))
            #expect(beside == file[7_000_000..<8_000_000], "a read beside the prefetch was held back")
            let joined = try await Self.ends(Task { try await album.read(ByteRange(0, 2_000_000)).collect() }, within: .seconds(60))
            #expect(joined == file[0..<2_000_000], "a read of the prefetch's bytes was held back")
            let cached = try await album.cachedRanges
            #expect(!cached.contains(ByteRange(0, 6_000_000)), "the prefetch went on at the link's speed after the read: \(cached)")

            prefetch.cancel()
            _ = try? await prefetch.value
            await cache.shutdown()
            #expect(try await origin.waitUntilAnswersEnd())
            #expect(try await ParallelDownloadTests.servedRangesAreDisjoint(origin, path: Self.path), "bytes sent twice: \(origin.timeline(for: Self.path))")
        }
    }

    /// The rate is the cache's, and an app changes it while the cache is open: a prefetch that
    /// waits for its turn at 10 kB/s goes at the link's speed once the rate is lifted.
    @Test func theRateChangesWhileTheCacheIsOpen() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let file = TestData.random(count: 2_000_000, seed: 93)
        origin.setFile(Self.path, data: file)
        try await Self.withPacedCache(origin, rate: 10_000) { cache, album in
            #expect(cache.backgroundDownloadRate == 10_000)
            let prefetch = Task {
                try await album.prefetch()
                return Data()
            }
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { try await album.cachedRanges.isEmpty }
            #expect(try await !album.cachedRanges.contains(ByteRange(0, Int64(file.count))), "the prefetch kept to no rate")
            cache.backgroundDownloadRate = nil
            #expect(cache.backgroundDownloadRate == nil)
            #expect(try await Self.ends(prefetch, within: .seconds(60)) != nil, "the prefetch kept to the rate that was lifted")
            #expect(TestData.sha256(try await album.read(ByteRange(0, Int64(file.count))).collect()) == TestData.sha256(file))
            cache.backgroundDownloadRate = 0
            #expect(cache.backgroundDownloadRate == nil, "0 is no limit")
        }
    }

    /// The allowance: runs within a quarter of a second at the rate go at once, the rest waits
    /// its time; an idle pacer saves nothing beyond that quarter.
    @Test func thePacerLetsRunsGoAtTheRate() async throws {
        let pacer = DownloadPacer(bytesPerSecond: 1_000_000)
        let start = ContinuousClock.now
        #expect(pacer.take(200_000, at: start) == nil, "0.2 s of bytes go at once")
        #expect(pacer.take(100_000, at: start)?.until == start + .milliseconds(50), "then each run waits for its time")
        #expect(pacer.take(500_000, at: start)?.until == start + .milliseconds(550))
        // Ten seconds idle: only the allowance is saved.
        let later = start + .seconds(10)
        #expect(pacer.take(250_000, at: later) == nil)
        let turn = try #require(pacer.take(250_000, at: later))
        #expect(turn.until == later + .milliseconds(250))
        // A rate set after the bytes were counted ends their wait, however long it was to be.
        let waitedFor = Task { await pacer.waitFor(DownloadPacer.Turn(until: .now + .seconds(600), rateSetting: turn.rateSetting)) }
        pacer.bytesPerSecond = 2_000_000
        await waitedFor.value
        #expect(pacer.changes == turn.rateSetting + 1)
        #expect(pacer.usefulConnections(atConnectionSpeed: 400_000) == 5)
        #expect(pacer.usefulConnections(atConnectionSpeed: 4_000_000) == 1)
        #expect(pacer.usefulConnections(atConnectionSpeed: nil) == 1)
        #expect(DownloadPacer(bytesPerSecond: nil).take(10_000_000) == nil)
        // Before a request: a wait while the bytes taken have not had their time, nothing counted.
        let idle = DownloadPacer(bytesPerSecond: 1_000_000)
        #expect(idle.pendingTurn(at: start) == nil, "nothing taken, nothing to wait for")
        _ = idle.take(750_000, at: start)
        #expect(idle.pendingTurn(at: start)?.until == start + .milliseconds(500))
        #expect(idle.pendingTurn(at: start)?.until == start + .milliseconds(500), "asking counts nothing")
        #expect(idle.pendingTurn(at: start + .milliseconds(500)) == nil)
        #expect(DownloadPacer(bytesPerSecond: nil).usefulConnections(atConnectionSpeed: 1) == nil)
        // The largest rate the control API takes, over a connection that drips: the quotient is
        // past `Int.max`, and converting it stopped the process.
        #expect(DownloadPacer(bytesPerSecond: Int64.max).usefulConnections(atConnectionSpeed: 0.5) == ConnectionAllowance.mostConnections)
        #expect(DownloadPacer(bytesPerSecond: Int64.max).usefulConnections(atConnectionSpeed: .leastNonzeroMagnitude) == ConnectionAllowance.mostConnections)
    }

    /// A prefetch given a pacer of its own (``Resource/prefetch(_:pinning:pacedBy:)``) keeps to
    /// its rate where the cache has none, while a prefetch of another file beside it goes at the
    /// link's speed: an album downloaded slowly beside one wanted now. Lifting the pacer's rate
    /// frees it. Its bytes come once, on one connection (one brings far more than 10 kB/s).
    @Test func aPrefetchKeepsToItsOwnPacer() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let slow = TestData.random(count: 3_000_000, seed: 94)
        let fast = TestData.random(count: 3_000_000, seed: 95)
        origin.setFile(Self.path, data: slow)
        origin.setFile("/now.bin", data: fast)
        try await Self.withPacedCache(origin, rate: nil) { cache, album in
            #expect(cache.backgroundDownloadRate == nil)
            let pacer = DownloadPacer(bytesPerSecond: 10_000)
            let paced = Task {
                try await album.prefetch(pinning: true, pacedBy: pacer)
                return Data()
            }
            defer { paced.cancel() }
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { origin.bodyBytesSent(for: Self.path) == 0 }
            let transport = AsyncHTTPClientTransport(configuration: .init())
            try await withAsyncCleanup {
                let url = origin.url("/now.bin")
                let now = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport))
                try await now.prefetch()
                #expect(TestData.sha256(try await now.read(ByteRange(0, Int64(fast.count))).collect()) == TestData.sha256(fast))
            } cleanup: {
                try? await transport.shutdown()
            }
            #expect(try await !album.cachedRanges.contains(ByteRange(0, Int64(slow.count))), "the paced prefetch kept to no rate")

            pacer.bytesPerSecond = nil
            #expect(try await Self.ends(paced, within: .seconds(60)) != nil, "the prefetch kept to the rate that was lifted")
            #expect(TestData.sha256(try await album.read(ByteRange(0, Int64(slow.count))).collect()) == TestData.sha256(slow))
            #expect(try await cache.store.entries().first { $0.key == album.key }?.pinned == true, "the paced prefetch pins")
            #expect(origin.bodyBytesSent(for: Self.path) == Int64(slow.count))
            #expect(origin.maximumConcurrency(for: Self.path) == 1, "\(origin.timeline(for: Self.path))")
        }
    }

    /// Files smaller than a run the engine takes in at once (HLS segments, cover images) keep to
    /// the rate too: each waits before its request while the files before it have not had their
    /// time. Ten files of 20 kB at 100 kB/s, one after another with one pacer, take well over a
    /// second (each in one run, they took milliseconds).
    @Test func smallFilesKeepToTheRateTogether() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let files = (0..<10).map { TestData.random(count: 20_000, seed: 100 + UInt64($0)) }
        for (index, data) in files.enumerated() { origin.setFile("/segment\(index).ts", data: data) }
        let transport = AsyncHTTPClientTransport(configuration: .init())
        try await withAsyncCleanup {
            try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
                let pacer = DownloadPacer(bytesPerSecond: 100_000)
                let started = ContinuousClock.now
                for index in files.indices {
                    let url = origin.url("/segment\(index).ts")
                    try await cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport)).prefetch(pacedBy: pacer)
                }
                let took = ContinuousClock.now - started
                #expect(took >= .milliseconds(1_200), "200 kB at 100 kB/s took \(took)")
                for (index, data) in files.enumerated() {
                    let url = origin.url("/segment\(index).ts")
                    let read = try await cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport))
                        .read(ByteRange(0, Int64(data.count))).collect()
                    #expect(read == data)
                    #expect(origin.bodyBytesSent(for: "/segment\(index).ts") == Int64(data.count))
                }
            }
        } cleanup: {
            try? await transport.shutdown()
        }
    }
}
