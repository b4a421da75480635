import Foundation
@testable import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// A long-running process that has read many resources keeps only those in use and the most
/// recently asked for in memory (``StreamCache/Configuration/maximumRecentResources``); a freed
/// resource is made again from the index and loses no byte, and one still in use is never split
/// into two objects.
@Suite struct ResidentResourcesTests {
    static func resource(_ cache: StreamCache, _ server: TestOrigin, _ path: String) -> Resource {
        let url = server.url(path)
        return cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
    }

    static func key(_ server: TestOrigin, _ path: String) -> CacheKey { CacheKey(url: server.url(path)) }

    /// Waits (at most 60 s) until at most `limit` resources are in memory: a resource that has
    /// just been read is still held for a moment by the tasks that end its read.
    static func settle(_ cache: StreamCache, atMost limit: Int) async throws -> Int {
        let deadline = ContinuousClock.now + .seconds(60)
        while cache.residentResourceCount > limit, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        return cache.residentResourceCount
    }

    typealias File = (path: String, data: Data)

    /// An origin serving `count` files of about 60 kB.
    static func origin(files count: Int, seed: UInt64) throws -> (TestOrigin, [File]) {
        let server = try TestOrigin()
        let files = (0..<count).map { index in ("/track\(index).bin", TestData.random(count: 60_000 + index, seed: seed + UInt64(index))) }
        for (path, data) in files { server.setFile(path, data: data) }
        return (server, files)
    }

    /// A fresh cache keeping `recent` idle resources in memory, and an origin serving `count` files.
    static func withCache(recent: Int, files count: Int, seed: UInt64, _ body: (StreamCache, TestOrigin, [File]) async throws -> Void) async throws {
        let (server, files) = try origin(files: count, seed: seed)
        try await withTemporaryCache(configure: {
            $0.maximumRecentResources = recent
            $0.completesResourcesInBackground = false
        }) { cache in
            try await body(cache, server, files)
        }
    }

    @Test func idleResourcesPastTheLimitAreFreedAndMadeAgainFromTheIndex() async throws {
        try await Self.withCache(recent: 4, files: 30, seed: 500) { cache, server, files in
            for (path, data) in files {
                let read = try await Self.resource(cache, server, path).read(from: 0).collect()
                #expect(TestData.sha256(read) == TestData.sha256(data), "\(path)")
            }
            #expect(try await Self.settle(cache, atMost: 4) <= 4)
            // The last four asked for are the ones kept.
            for (path, _) in files.suffix(4) { #expect(cache.existingResource(for: Self.key(server, path)) != nil, "\(path)") }
            #expect(cache.existingResource(for: Self.key(server, files[0].path)) == nil)

            // Every file again: the freed ones come back from the index with all their bytes.
            let requests = server.requestsArrived
            for (path, data) in files {
                let resource = Self.resource(cache, server, path)
                #expect(try await resource.cachedRanges == RangeSet([ByteRange(0, Int64(data.count))]), "\(path)")
                let read = try await resource.read(from: 0).collect()
                #expect(TestData.sha256(read) == TestData.sha256(data), "\(path)")
            }
            #expect(server.requestsArrived == requests, "a resource made again must not fetch what the index holds")
            #expect(try await Self.settle(cache, atMost: 4) <= 4)
        }
    }

    /// A resource that fell off the recent list while something still held it (a commit, a
    /// download) comes back on the list when it is asked for again, and the list then drops its
    /// oldest: the list never outgrows its limit. It used to drop one only when a resource was
    /// made, so here the list kept both, and the third file stayed in memory with nothing using it.
    @Test func aResourceAskedForAgainWhileStillHeldKeepsTheListWithinItsLimit() async throws {
        try await Self.withCache(recent: 1, files: 3, seed: 520) { cache, server, files in
            let first = Self.resource(cache, server, files[0].path)
            for (path, data) in files.dropFirst() {
                let read = try await Self.resource(cache, server, path).read(from: 0).collect()
                #expect(read == data, "\(path)")
            }
            // The first fell off the list (two were made after it), but the test holds it; asked
            // for again, it is the recent one, and nothing holds the other two.
            #expect(Self.resource(cache, server, files[0].path) === first)
            #expect(try await Self.settle(cache, atMost: 1) <= 1)
            #expect(cache.existingResource(for: Self.key(server, files[2].path)) == nil)
            withExtendedLifetime(first) {}
        }
    }

    @Test func aResourceFreedAfterItsReadRecordsItsBytesFirst() async throws {
        let (server, files) = try Self.origin(files: 12, seed: 600)
        try await withTemporaryDirectory { directory in
            var configuration = StreamCache.Configuration(directory: directory)
            configuration.maximumRecentResources = 0
            configuration.completesResourcesInBackground = false
            configuration.commitInterval = .seconds(3600)
            let cache = try StreamCache(configuration: configuration)
            for (path, data) in files {
                let read = try await Self.resource(cache, server, path).read(from: 0).collect()
                #expect(TestData.sha256(read) == TestData.sha256(data), "\(path)")
            }
            // Nothing holds them, so they go; each one's commit runs before it does.
            #expect(try await Self.settle(cache, atMost: 0) == 0)
            await cache.shutdown()

            let reopened = try StreamCache(configuration: configuration)
            let entries = try await reopened.entries()
            #expect(entries.count == files.count)
            for (path, data) in files {
                let entry = entries.first { $0.key == Self.key(server, path) }
                #expect(entry?.spans == RangeSet([ByteRange(0, Int64(data.count))]), "\(path)")
            }
            await reopened.shutdown()
        }
    }

    @Test func aResourceItsCallerHoldsStaysTheSameObject() async throws {
        try await Self.withCache(recent: 1, files: 10, seed: 700) { cache, server, files in
            let held = Self.resource(cache, server, files[0].path)
            _ = try await held.read(ByteRange(0, 10_000)).collect()
            for (path, _) in files.dropFirst() { _ = try await Self.resource(cache, server, path).read(from: 0).collect() }
            #expect(try await Self.settle(cache, atMost: 2) <= 2)
            #expect(cache.existingResource(for: held.key) === held)
            #expect(Self.resource(cache, server, files[0].path) === held, "a second object for a held key would download its bytes again")
            #expect(await held.statistics.bytesServedFromOrigin == 10_000)
        }
    }

    @Test func aResourceWhoseEventsAreWatchedStaysInMemory() async throws {
        try await Self.withCache(recent: 1, files: 10, seed: 800) { cache, server, files in
            let events = await Self.resource(cache, server, files[0].path).events()
            for (path, _) in files.dropFirst() { _ = try await Self.resource(cache, server, path).read(from: 0).collect() }
            #expect(try await Self.settle(cache, atMost: 2) <= 2)
            #expect(cache.existingResource(for: Self.key(server, files[0].path)) != nil, "the subscription holds the resource")

            // What happens to it now reaches the subscriber.
            let watcher = Task {
                for await event in events {
                    if case .committed = event { return true }
                }
                return false
            }
            let read = try await Self.resource(cache, server, files[0].path).read(from: 0).collect()
            #expect(TestData.sha256(read) == TestData.sha256(files[0].data))
            let timeout = Task {
                try await Task.sleep(for: .seconds(60))
                watcher.cancel()
            }
            #expect(await watcher.value, "no commit event reached the subscriber")
            timeout.cancel()
        }
    }

    /// Readers in waves, with nothing keeping their resource between waves: the readers of a
    /// wave share one object and its downloads, the next wave gets a new object that knows every
    /// byte the earlier ones fetched, and the origin sends each byte once.
    @Test func readersInWavesWhileResourcesAreFreedFetchEachByteOnce() async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: 1_500_000, seed: 950)
        server.setFile("/shared.bin", data: data)
        server.bytesPerSecond = TestTiming.rate(6_000_000)
        try await withTemporaryCache(configure: {
            $0.maximumRecentResources = 0
            $0.completesResourcesInBackground = false
        }) { cache in
            let waves = [ByteRange(0, 500_000), ByteRange(250_000, 1_500_000), ByteRange(0, 1_500_000)]
            for (number, range) in waves.enumerated() {
                let expected = TestData.sha256(data.subdata(in: Int(range.lowerBound)..<Int(range.upperBound)))
                let digests = try await withThrowingTaskGroup(of: String.self) { group in
                    for _ in 0..<4 {
                        group.addTask { TestData.sha256(try await Self.resource(cache, server, "/shared.bin").read(range).collect()) }
                    }
                    return try await group.reduce(into: [String]()) { $0.append($1) }
                }
                #expect(digests.count == 4 && digests.allSatisfy { $0 == expected }, "wave \(number)")
                // Gone from memory before the next wave begins.
                #expect(try await Self.settle(cache, atMost: 0) == 0, "wave \(number)")
            }
            #expect(server.bodyBytesSent(for: "/shared.bin") == Int64(data.count), "a byte was fetched twice")
        }
    }

    /// Dropping a subscription lets the resource go again.
    @Test func anEndedSubscriptionNoLongerHoldsTheResource() async throws {
        try await Self.withCache(recent: 0, files: 4, seed: 900) { cache, server, files async throws in
            var events: ResourceEvents? = await Self.resource(cache, server, files[0].path).events()
            #expect(events != nil)
            #expect(cache.existingResource(for: Self.key(server, files[0].path)) != nil)
            events = nil
            #expect(try await Self.settle(cache, atMost: 0) == 0)
        }
    }
}
