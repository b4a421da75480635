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
}
