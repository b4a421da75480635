import Foundation
#if canImport(Glibc)
import Glibc
#endif
import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// What a cache finds on disk when it opens after a crash, a restored backup, or a hand that cut
/// or removed files: the index claims no byte its data file does not hold, and no data file the
/// index does not know stays on disk (eviction counts what the index knows, so it would never
/// free such a file). And the same while it runs: a read that meets bytes its data file lost gets
/// them from the origin, never zeros from a hole and never an error that asks the user to clear
/// the entry.
@Suite struct CacheReconciliationTests {
    static let path = "/song.mp3"
    static let size = 1_000_000

    /// Caches the whole of a file in a new cache and shuts the cache down; runs `change` on the
    /// data file and the cache directory; opens the cache again and reads the whole file, which
    /// must be the origin's bytes. Returns what the index claimed before that read, the bytes the
    /// origin sent for it, and the names in the data directory once the cache had opened.
    static func reopened(seed: UInt64, after change: (_ dataFile: URL, _ directory: URL) throws -> Void) async throws
        -> (claimed: RangeSet, fetched: Int64, dataFiles: [String]) {
        let server = try TestOrigin()
        let data = TestData.random(count: size, seed: seed)
        server.setFile(path, data: data)
        let url = server.url(path)
        return try await withTemporaryDirectory { directory in
            func openCache() throws -> (StreamCache, Resource) {
                let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
                return (cache, cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url)))
            }
            let (first, song) = try openCache()
            _ = try await song.read(from: 0).collect()
            #expect(try await song.cachedRanges.coveredByteCount == Int64(size))
            await first.shutdown()
            let files = try FileManager.default.contentsOfDirectory(at: directory.appendingPathComponent("data"), includingPropertiesForKeys: nil)
            #expect(files.count == 1)
            try change(try #require(files.first), directory)

            let before = server.bodyBytesSent(for: path)
            let (second, again) = try openCache()
            let dataFiles = try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("data").path).sorted()
            let claimed = try await again.cachedRanges
            #expect(TestData.sha256(try await again.read(from: 0).collect()) == TestData.sha256(data))
            await second.shutdown()
            return (claimed, server.bodyBytesSent(for: path) - before, dataFiles)
        }
    }

    /// A data file that lost its tail (a filesystem restored from an older copy, a hand that cut
    /// it): only the bytes it still holds count as cached, the rest comes from the origin.
    @Test func aDataFileCutShortKeepsOnlyTheBytesItHolds() async throws {
        let (claimed, fetched, _) = try await Self.reopened(seed: 94) { file, _ in #expect(truncate(file.path, 600_000) == 0) }
        #expect(claimed == RangeSet([ByteRange(0, 600_000)]))
        #expect(fetched == 400_000)
    }

    /// A data file that is gone: its index entry claims nothing, and the whole file comes from
    /// the origin again.
    @Test func aDataFileThatIsGoneLeavesNothingClaimed() async throws {
        let (claimed, fetched, _) = try await Self.reopened(seed: 95) { file, _ in try FileManager.default.removeItem(at: file) }
        #expect(claimed.isEmpty)
        #expect(fetched == Int64(Self.size))
    }

    /// A data file the index does not know (a process killed between creating it and its first
    /// commit) is deleted when the cache opens; the files the index knows stay.
    @Test func aDataFileTheIndexDoesNotKnowIsDeleted() async throws {
        var known = ""
        let (claimed, fetched, dataFiles) = try await Self.reopened(seed: 96) { file, directory in
            known = file.lastPathComponent
            try TestData.random(count: 300_000, seed: 97).write(to: directory.appendingPathComponent("data/0f1e2d3c4b5a69788796a5b4c3d2e1f0.data"))
        }
        #expect(dataFiles == [known])
        #expect(claimed.coveredByteCount == Int64(Self.size))
        #expect(fetched == 0)
    }

    /// An origin serving ``path``: ``size`` random bytes from `seed`, and their URL.
    static func origin(seed: UInt64) throws -> (TestOrigin, Data, URL) {
        let server = try TestOrigin()
        let data = TestData.random(count: size, seed: seed)
        server.setFile(path, data: data)
        return (server, data, server.url(path))
    }

    /// The data file of the cache's only resource.
    static func dataFile(in directory: URL) throws -> URL {
        let files = try FileManager.default.contentsOfDirectory(at: directory.appendingPathComponent("data"), includingPropertiesForKeys: nil)
        #expect(files.count == 1)
        return try #require(files.first)
    }

    /// A data file cut short under a resource in memory, the cache running: the read that meets
    /// the cut gets the origin's bytes for exactly what the file lost (it failed with "the cache
    /// file is shorter than its index claims" until the entry was cleared by hand), and once they
    /// are back the index claims the whole file again, for the next process too.
    @Test func aDataFileCutWhileTheCacheRunsIsFilledAgain() async throws {
        let (server, data, url) = try Self.origin(seed: 98)
        try await withTemporaryDirectory { directory in
            let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            _ = try await song.read(from: 0).collect()
            await song.flush()
            #expect(truncate(try Self.dataFile(in: directory).path, 600_000) == 0)

            let before = server.bodyBytesSent(for: Self.path)
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
            #expect(server.bodyBytesSent(for: Self.path) - before == 400_000)
            await song.flush()
            await cache.shutdown()

            let reopened = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            let again = reopened.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            #expect(try await again.cachedRanges == RangeSet([ByteRange(0, Int64(Self.size))]))
            #expect(TestData.sha256(try await again.read(from: 0).collect()) == TestData.sha256(data))
            #expect(server.bodyBytesSent(for: Self.path) - before == 400_000)
            await reopened.shutdown()
        }
    }

    /// A data file cut short and then written past the cut: the file has a hole where cached
    /// bytes were, and around the hole's edges, in the block the file was cut in and the block the
    /// new bytes began in, zeros that read as data. A read after it must get the origin's bytes
    /// there, not one zero. The write past the cut is a read of the gap between the two cached
    /// runs, or a read of the second run (whose loss, past the file's end, it meets first); the
    /// read after it takes the whole file, or the first run only, where the hole runs to the run's
    /// end. `lost` is what the file lost of what that read asks for; the read may fetch a block
    /// more on either side of the hole.
    @Test(arguments: [(ByteRange(500_000, 800_000), ByteRange(0, 1_000_000), Int64(400_000)),
                      (ByteRange(900_000, 1_000_000), ByteRange(0, 500_000), Int64(200_000))])
    func aDataFileCutAndWrittenPastTheCutServesNoZeros(writtenPast: ByteRange, thenRead: ByteRange, lost: Int64) async throws {
        let (server, data, url) = try Self.origin(seed: 99)
        try await withTemporaryDirectory { directory in
            var configuration = StreamCache.Configuration(directory: directory)
            configuration.fillsSmallGaps = false
            configuration.idleReadAhead = 0
            let cache = try StreamCache(configuration: configuration)
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            _ = try await song.read(ByteRange(0, 500_000)).collect()
            _ = try await song.read(ByteRange(800_000, Int64(Self.size))).collect()
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(30)))
            #expect(try await song.cachedRanges == RangeSet([ByteRange(0, 500_000), ByteRange(800_000, Int64(Self.size))]))
            await song.flush()
            #expect(truncate(try Self.dataFile(in: directory).path, 300_000) == 0)
            let past = try await song.read(writtenPast).collect()
            #expect(past == data[Int(writtenPast.lowerBound)..<Int(writtenPast.upperBound)])

            let before = server.bodyBytesSent(for: Self.path)
            let read = try await song.read(thenRead).collect()
            #expect(TestData.firstDifference(read, data[Int(thenRead.lowerBound)..<Int(thenRead.upperBound)]) == nil)
            let fetched = server.bodyBytesSent(for: Self.path) - before
            #expect(fetched >= lost && fetched <= lost + 2 * 65_536, "fetched \(fetched) bytes")
            await cache.shutdown()
        }
    }

    /// A data file deleted while the cache runs, its resource out of memory: the resource made
    /// for the next read finds the file gone, claims nothing (a status said "complete" before),
    /// and the whole file comes from the origin again.
    @Test func aDataFileDeletedWhileTheCacheRunsIsFetchedAgain() async throws {
        let (server, data, url) = try Self.origin(seed: 100)
        let key = CacheKey(url: url)
        try await withTemporaryDirectory { directory in
            var configuration = StreamCache.Configuration(directory: directory)
            configuration.maximumRecentResources = 0
            let cache = try StreamCache(configuration: configuration)
            do {
                let song = cache.resource(for: key, origin: HTTPOrigin(url: url))
                _ = try await song.read(from: 0).collect()
                await song.flush()
            }
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { cache.existingResource(for: key) != nil }
            #expect(cache.existingResource(for: key) == nil, "nothing holds the resource, so it leaves memory")
            try FileManager.default.removeItem(at: try Self.dataFile(in: directory))

            let before = server.bodyBytesSent(for: Self.path)
            let song = cache.resource(for: key, origin: HTTPOrigin(url: url))
            #expect(try await song.cachedRanges.isEmpty, "a status must not call the file cached")
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
            #expect(server.bodyBytesSent(for: Self.path) - before == Int64(Self.size))
            await cache.shutdown()
        }
    }
}
