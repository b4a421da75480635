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
/// free such a file).
@Suite struct CacheReconciliationTests {
    static let path = "/song.mp3"
    static let size = 1_000_000

    /// Caches the whole file in `directory`, shuts the cache down, and returns its data file.
    static func cacheWholeFile(in directory: URL, from server: TestOrigin) async throws -> URL {
        let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
        let url = server.url(path)
        let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
        _ = try await resource.read(from: 0).collect()
        #expect(try await resource.cachedRanges.coveredByteCount == Int64(size))
        await cache.shutdown()
        let files = try FileManager.default.contentsOfDirectory(at: directory.appendingPathComponent("data"), includingPropertiesForKeys: nil)
        #expect(files.count == 1)
        return try #require(files.first)
    }

    /// Opens the cache in `directory` again and reads the whole file: the cached ranges it
    /// claims before the read, and the file's bytes the origin sent for the read.
    static func reopenAndRead(_ directory: URL, from server: TestOrigin, data: Data) async throws -> (claimed: RangeSet, fetched: Int64) {
        let before = server.bodyBytesSent(for: path)
        let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
        let url = server.url(path)
        let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
        let claimed = try await resource.cachedRanges
        let bytes = try await resource.read(from: 0).collect()
        #expect(TestData.sha256(bytes) == TestData.sha256(data))
        await cache.shutdown()
        return (claimed, server.bodyBytesSent(for: path) - before)
    }

    /// A data file that lost its tail (a filesystem restored from an older copy, a hand that cut
    /// it): only the bytes it still holds count as cached, the rest comes from the origin.
    @Test func aDataFileCutShortKeepsOnlyTheBytesItHolds() async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: Self.size, seed: 94)
        server.setFile(Self.path, data: data)
        try await withTemporaryDirectory { directory in
            let file = try await Self.cacheWholeFile(in: directory, from: server)
            #expect(truncate(file.path, 600_000) == 0)
            let (claimed, fetched) = try await Self.reopenAndRead(directory, from: server, data: data)
            #expect(claimed == RangeSet([ByteRange(0, 600_000)]))
            #expect(fetched == 400_000)
        }
    }

    /// A data file that is gone: its index entry claims nothing, and the whole file comes from
    /// the origin again.
    @Test func aDataFileThatIsGoneLeavesNothingClaimed() async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: Self.size, seed: 95)
        server.setFile(Self.path, data: data)
        try await withTemporaryDirectory { directory in
            let file = try await Self.cacheWholeFile(in: directory, from: server)
            try FileManager.default.removeItem(at: file)
            let (claimed, fetched) = try await Self.reopenAndRead(directory, from: server, data: data)
            #expect(claimed.isEmpty)
            #expect(fetched == Int64(Self.size))
        }
    }

    /// A data file the index does not know (a process killed between creating it and its first
    /// commit) is deleted when the cache opens; the files the index knows stay.
    @Test func aDataFileTheIndexDoesNotKnowIsDeleted() async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: Self.size, seed: 96)
        server.setFile(Self.path, data: data)
        try await withTemporaryDirectory { directory in
            let known = try await Self.cacheWholeFile(in: directory, from: server)
            let stray = directory.appendingPathComponent("data/0f1e2d3c4b5a69788796a5b4c3d2e1f0.data")
            try TestData.random(count: 300_000, seed: 97).write(to: stray)
            let (claimed, fetched) = try await Self.reopenAndRead(directory, from: server, data: data)
            #expect(!FileManager.default.fileExists(atPath: stray.path))
            #expect(FileManager.default.fileExists(atPath: known.path))
            #expect(claimed.coveredByteCount == Int64(Self.size))
            #expect(fetched == 0)
        }
    }
}
