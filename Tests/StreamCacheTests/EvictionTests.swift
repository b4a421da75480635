import Foundation
import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// Size limit with LRU eviction: least recently used resources go first; pinned resources and
/// resources being read never do.
@Suite struct EvictionTests {
    func fill(_ cache: StreamCache, _ server: TestOrigin, _ path: String) async throws -> Resource {
        let url = server.url(path)
        let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
        try await resource.prefetch()
        await resource.flush()
        return resource
    }

    func waitForEviction(_ cache: StreamCache, atMost bytes: Int64) async throws -> Int64 {
        var total = try await cache.store.totalCachedBytes()
        for _ in 0..<100 where total > bytes {
            try await Task.sleep(for: .milliseconds(20))
            total = try await cache.store.totalCachedBytes()
        }
        return total
    }

    @Test func leastRecentlyUsedGoesFirstAndPinnedStays() async throws {
        let server = try TestOrigin()
        for name in ["a", "b", "c", "d"] { server.setFile("/\(name)", data: TestData.random(count: 1_000_000, seed: UInt64(name.unicodeScalars.first!.value))) }
        try await withTemporaryCache(configure: { $0.maximumSize = 2_500_000 }) { cache in
            let a = try await fill(cache, server, "/a")
            try await cache.setPinned(true, for: a.key)
            _ = try await fill(cache, server, "/b")
            try await Task.sleep(for: .milliseconds(20))
            _ = try await fill(cache, server, "/c")
            try await Task.sleep(for: .milliseconds(20))
            _ = try await fill(cache, server, "/d")
            let total = try await waitForEviction(cache, atMost: 2_500_000)
            #expect(total <= 2_500_000)
            let keys = Set(try await cache.store.entries().map(\.key.rawValue))
            #expect(keys.contains(server.url("/a").absoluteString), "pinned resources are never evicted")
            #expect(!keys.contains(server.url("/b").absoluteString), "the least recently used resource goes first")
            #expect(keys.contains(server.url("/d").absoluteString))
        }
    }

    @Test func aResourceBeingReadIsNotEvicted() async throws {
        let server = try TestOrigin()
        server.setFile("/old", data: TestData.random(count: 1_000_000, seed: 71))
        server.setFile("/new", data: TestData.random(count: 2_000_000, seed: 72))
        try await withTemporaryCache(configure: { $0.maximumSize = 1_500_000; $0.readBufferLimit = 65_536; $0.chunkSize = 65_536 }) { cache in
            let old = try await fill(cache, server, "/old")
            // Hold a read of /old open while /new pushes the cache over its limit.
            var reader = old.read(from: 0).makeAsyncIterator()
            let first = try await reader.next()
            #expect(first != nil)
            _ = try await fill(cache, server, "/new")
            try await Task.sleep(for: .milliseconds(200))
            let keys = Set(try await cache.store.entries().map(\.key.rawValue))
            #expect(keys.contains(server.url("/old").absoluteString), "a resource being read must not be evicted")
            while try await reader.next() != nil {}
        }
    }
}
