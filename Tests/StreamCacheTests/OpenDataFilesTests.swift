#if os(Linux)
import Foundation
@testable import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// A long-running process that has read many resources keeps only a bounded number of data files
/// open (``StreamCache/Configuration/maximumOpenDataFiles``), and closing an idle one loses nothing.
/// Open descriptors are counted from `/proc/self/fd`, as the kernel sees them.
@Suite struct OpenDataFilesTests {
    /// The descriptors of this process open on files below `directory` (symbolic links resolved).
    static func openDescriptors(under directory: URL) -> Int {
        let prefix = directory.resolvingSymlinksInPath().path
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return descriptors.filter { descriptor in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)"))?.hasPrefix(prefix + "/") == true
        }.count
    }

    /// Waits (at most 60 s) until at most `limit` descriptors are open below `directory`: idle
    /// files are closed by tasks of their own, just after the use that put them over the limit.
    static func settle(under directory: URL, atMost limit: Int) async throws -> Int {
        let deadline = ContinuousClock.now + .seconds(60)
        while Self.openDescriptors(under: directory) > limit, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        return Self.openDescriptors(under: directory)
    }

    static func resource(_ cache: StreamCache, _ server: TestOrigin, _ path: String) -> Resource {
        let url = server.url(path)
        return cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
    }

    /// An app that opens a cache, uses it and lets it go (a signed-out account, a closed window)
    /// gets every descriptor back: the index's SQLite files and the data files. A reference cycle
    /// through the open-file limit's closer once kept them, and the resources, for the life of the
    /// process (the test suite reached 2,300 descriptors).
    @Test func aCacheThatIsShutDownAndReleasedClosesItsIndexAndDataFiles() async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: 300_000, seed: 41)
        server.setFile("/song.mp3", data: data)
        try await withTemporaryDirectory { directory in
            var cache: StreamCache? = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            let read = try await Self.resource(try #require(cache), server, "/song.mp3").read(from: 0).collect()
            #expect(TestData.sha256(read) == TestData.sha256(data))
            // The index (a writer and a reader connection, its journal) and the song's data file.
            #expect(Self.openDescriptors(under: directory) >= 2)
            await cache?.shutdown()
            cache = nil
            // Let go as the last task holding a part of it ends (a commit, the read's own task).
            #expect(try await Self.settle(under: directory, atMost: 0) == 0)
        }
    }

    @Test func readingManyResourcesKeepsAtMostTheLimitOfFilesOpenAndLosesNoByte() async throws {
        let server = try TestOrigin()
        let files = (0..<24).map { index in ("/track\(index).bin", TestData.random(count: 100_000 + index, seed: UInt64(100 + index))) }
        for (path, data) in files { server.setFile(path, data: data) }
        try await withTemporaryCache(configure: {
            $0.maximumOpenDataFiles = 4
            $0.completesResourcesInBackground = false
        }) { cache in
            // Data files only: the index keeps its own SQLite files open.
            let directory = cache.configuration.directory.appendingPathComponent("data")
            for (path, data) in files {
                let read = try await Self.resource(cache, server, path).read(from: 0).collect()
                #expect(TestData.sha256(read) == TestData.sha256(data), "\(path)")
            }
            await cache.flush()
            #expect(try await Self.settle(under: directory, atMost: 4) <= 4)

            // Every file again, now from the cache: closed files are reopened, nothing is fetched.
            let requests = server.requestsArrived
            for (path, data) in files.reversed() {
                let read = try await Self.resource(cache, server, path).read(from: 0).collect()
                #expect(TestData.sha256(read) == TestData.sha256(data), "\(path)")
                #expect(try await Self.resource(cache, server, path).cachedRanges == RangeSet([ByteRange(0, Int64(data.count))]))
            }
            #expect(server.requestsArrived == requests)
            #expect(try await Self.settle(under: directory, atMost: 4) <= 4)
        }
    }

    @Test func aResourceBeingReadKeepsItsFileWhileOthersComeAndGo() async throws {
        let slow = try TestOrigin()
        let long = TestData.random(count: 600_000, seed: 41)
        slow.setFile("/long.bin", data: long)
        slow.bytesPerSecond = TestTiming.rate(400_000)
        let fast = try TestOrigin()
        let others = (0..<8).map { index in ("/short\(index).bin", TestData.random(count: 50_000, seed: UInt64(200 + index))) }
        for (path, data) in others { fast.setFile(path, data: data) }
        try await withTemporaryCache(configure: {
            $0.maximumOpenDataFiles = 2
            $0.completesResourcesInBackground = false
        }) { cache in
            let longRead = Task { try await Self.resource(cache, slow, "/long.bin").read(from: 0).collect() }
            for (path, data) in others {
                let read = try await Self.resource(cache, fast, path).read(from: 0).collect()
                #expect(TestData.sha256(read) == TestData.sha256(data), "\(path)")
            }
            // The long read was under way the whole time (600 kB at 400 kB/s) and still gets every byte.
            #expect(TestData.sha256(try await longRead.value) == TestData.sha256(long))
            let cached = try await Self.resource(cache, slow, "/long.bin").cachedRanges
            #expect(cached == RangeSet([ByteRange(0, Int64(long.count))]))
        }
    }
}
#endif
