import Foundation
import GRDB
import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// Size limit, maximum age and minimum free space, with LRU eviction: least recently used
/// resources go first; pinned resources and resources being read never do.
@Suite struct EvictionTests {
    func fill(_ cache: StreamCache, _ server: TestOrigin, _ path: String) async throws -> Resource {
        let url = server.url(path)
        let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
        try await resource.prefetch()
        await resource.flush()
        return resource
    }

    /// The free space of a volume of `size` bytes that holds the cache's data files only (their
    /// lengths), for ``StreamCache/Configuration/volumeFreeSpace``.
    static func volume(holding size: Int64) -> @Sendable (URL) -> Int64? {
        { directory in
            let data = directory.appendingPathComponent("data")
            let files = (try? FileManager.default.contentsOfDirectory(atPath: data.path)) ?? []
            let used = files.reduce(Int64(0)) { sum, name in
                sum + ((try? FileManager.default.attributesOfItem(atPath: data.appendingPathComponent(name).path)[.size] as? Int64) ?? 0)
            }
            return size - used
        }
    }

    func waitForEviction(_ cache: StreamCache, atMost bytes: Int64) async throws -> Int64 {
        var total = try await cache.store.totalCachedBytes()
        for _ in 0..<100 {
            guard total > bytes else { break }
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

    /// A prefetch that pins (a "download for offline") keeps its file whatever comes after it,
    /// though its first commit may not have made the file's entry in the index by the time the
    /// download ends: the pin waits for it. A resource with nothing cached has nothing to pin.
    @Test func aFileDownloadedForOfflinePlayIsNeverEvicted() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        for name in ["a", "b", "c", "d"] { server.setFile("/\(name)", data: TestData.random(count: 1_000_000, seed: 40 + UInt64(name.unicodeScalars.first!.value))) }
        try await withTemporaryCache(configure: { $0.maximumSize = 2_500_000 }) { cache in
            let url = server.url("/a")
            let album = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            #expect(try await album.setPinned(true) == false, "nothing cached, nothing pinned")
            try await album.prefetch(pinning: true)
            for name in ["/b", "/c", "/d"] {
                try await Task.sleep(for: .milliseconds(20))
                _ = try await fill(cache, server, name)
            }
            #expect(try await waitForEviction(cache, atMost: 2_500_000) <= 2_500_000)
            let entries = try await cache.store.entries()
            #expect(entries.first { $0.key == album.key }?.pinned == true, "the file downloaded for offline play was evicted or not pinned")
            #expect(!entries.contains { $0.key == CacheKey(url: server.url("/b")) }, "the least recently used unpinned file goes")
            #expect(try await album.setPinned(false))
            #expect(try await cache.store.entries().first { $0.key == album.key }?.pinned == false)
        }
    }

    /// A removal is not refused for a download no read waits for: right after a prefetch of a
    /// file's start, the small-gap fill of the rest (slow here: 50 kB/s) is stopped, and the file
    /// goes. A prefetch under way still refuses it.
    @Test func aRemovalStopsAFillNobodyAskedFor() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        server.setFile("/a", data: TestData.random(count: 500_000, seed: 45))
        // Slowed with the machine: under ThreadSanitizer, at 50 kB/s, the whole prefetch below once
        // ended before the test saw its first bytes, and the removal then rightly went through.
        server.bytesPerSecond = TestTiming.rate(50_000)
        try await withTemporaryCache(configure: { $0.joinDistance = 1 << 20 }) { cache in
            let url = server.url("/a")
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            try await song.prefetch(ByteRange(0, 10_000))
            // The fill of the rest has reached the origin.
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { server.requestsBeingAnswered == 0 }
            #expect(server.requestsBeingAnswered == 1)
            #expect(try await cache.remove(song.key), "a fill nobody asked for refused the removal")
            #expect(try await cache.store.entries().isEmpty)

            let prefetch = Task { try await song.prefetch() }
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { try await song.cachedRanges.isEmpty }
            try #require(!(try await song.cachedRanges).isEmpty, "the prefetch after the removal brought no byte")
            await #expect(throws: StreamCacheError.self) { try await cache.remove(song.key) }
            prefetch.cancel()
            _ = try? await prefetch.value
        }
    }

    /// A pass goes down to 90 % of the limit, not just under it: each file added to a full cache
    /// would otherwise start a pass of its own, and evict one file at a time. Five files of
    /// 1 MB under a limit of 4.2 MB: the fifth makes it 5 MB, and the two oldest go (3 MB, the
    /// first at or below 3.78), where one would bring it under the limit.
    @Test func aPassGoesDownToNinetyPercentOfTheLimit() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let names = ["a", "b", "c", "d", "e"]
        for (index, name) in names.enumerated() { server.setFile("/\(name)", data: TestData.random(count: 1_000_000, seed: 90 + UInt64(index))) }
        // Each file is committed once, whole, by `fill`'s flush: a commit of part of the fifth (a
        // slow fetch passing the commit interval) would start the pass with less to evict.
        try await withTemporaryCache(configure: { $0.maximumSize = 4_200_000; $0.commitInterval = .seconds(600) }) { cache in
            for name in names {
                _ = try await fill(cache, server, "/\(name)")
                try await Task.sleep(for: .milliseconds(20))
            }
            let total = try await waitForEviction(cache, atMost: 3_780_000)
            #expect(total == 3_000_000)
            let keys = Set(try await cache.store.entries().map(\.key.rawValue))
            #expect(keys == Set(["c", "d", "e"].map { server.url("/\($0)").absoluteString }), "\(keys.sorted())")
        }
    }

    /// Runs `body` `rounds` times on a resource of `data` that was just removed (so the body
    /// must load it again, with a wait on the index), while a second removal comes in after up
    /// to `maximumDelay`; returns how many of those removals happened (not refused as in use).
    static func racingRemovals(of data: Data, rounds: Int, maximumDelay: Duration,
                               _ body: @escaping @Sendable (Resource, Int) async throws -> Void) async throws -> Int {
        let server = try TestOrigin()
        defer { server.stop() }
        server.setFile("/raced", data: data)
        var removals = 0
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let url = server.url("/raced")
            let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            let microseconds = Int(maximumDelay / .microseconds(1))
            for round in 0..<rounds {
                _ = try? await cache.remove(resource.key)
                async let removed: Bool? = {
                    try? await Task.sleep(for: .microseconds(Int.random(in: 0...microseconds)))
                    return try? await cache.remove(resource.key)
                }()
                try await body(resource, round)
                if await removed == true { removals += 1 }
                await resource.flush()
            }
        }
        return removals
    }

    /// A read that begins while the resource is being removed (eviction, or `remove(_:)`) gets
    /// its bytes: the removal happens wholly before the read loads the resource, or is refused
    /// while the read sets up. Before, a removal that ran between the read's loading and its
    /// start left it with no data file ("The resource was removed from the cache during the
    /// read", a 502 once in a 240 s stress run of the proxy).
    @Test func aReadThatBeginsDuringARemovalGetsItsBytes() async throws {
        let data = TestData.random(count: 200_000, seed: 73)
        let removals = try await Self.racingRemovals(of: data, rounds: 500, maximumDelay: .milliseconds(3)) { resource, round in
            let range = ByteRange(Int64(round * 397), Int64(round * 397 + 1000))
            let bytes = try await resource.read(range).collect()
            #expect(bytes == data[Int(range.lowerBound)..<Int(range.upperBound)], "round \(round)")
        }
        // Both orders happened: reads that began before the removal and after it.
        #expect(removals > 0)
    }

    /// Asking for the length of a resource the cache does not know yet, while it is being
    /// removed (eviction under a full cache), gets the length. Its probe read ended before the
    /// answer was looked at, so a removal in between cleared what the probe had learned, and
    /// the proxy answered a suffix range with 502 "The origin did not tell the resource's
    /// length" (once in a 150 s stress run).
    @Test func theLengthAskedForDuringARemovalIsTold() async throws {
        let removals = try await Self.racingRemovals(of: TestData.random(count: 2_000, seed: 74), rounds: 1000, maximumDelay: .microseconds(1500)) { resource, round in
            let info = try await resource.loadInfo()
            #expect(info.totalLength == 2_000, "round \(round)")
        }
        #expect(removals > 0)
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

    /// Eviction passes over the least recently used resource while it is being read and evicts
    /// the next one instead, so the cache still gets under its limit.
    @Test func evictionPassesOverAResourceBeingReadToTheNext() async throws {
        let server = try TestOrigin()
        for (index, name) in ["/old", "/middle", "/new"].enumerated() {
            server.setFile(name, data: TestData.random(count: 1_000_000, seed: 73 + UInt64(index)))
        }
        try await withTemporaryCache(configure: { $0.maximumSize = 2_500_000; $0.readBufferLimit = 65_536; $0.chunkSize = 65_536 }) { cache in
            let old = try await fill(cache, server, "/old")
            var reader = old.read(from: 0).makeAsyncIterator()
            let first = try await reader.next()
            #expect(first != nil)
            try await Task.sleep(for: .milliseconds(20))
            _ = try await fill(cache, server, "/middle")
            try await Task.sleep(for: .milliseconds(20))
            _ = try await fill(cache, server, "/new")
            let total = try await waitForEviction(cache, atMost: 2_500_000)
            #expect(total <= 2_500_000)
            let keys = Set(try await cache.store.entries().map(\.key.rawValue))
            #expect(keys.contains(server.url("/old").absoluteString), "a resource being read must not be evicted")
            #expect(!keys.contains(server.url("/middle").absoluteString), "the next least recently used resource goes instead")
            #expect(keys.contains(server.url("/new").absoluteString))
            while try await reader.next() != nil {}
        }
    }

    /// A resource asked for counts as used then, before its read begins: of three files under a
    /// limit that holds two, the oldest, asked for again after the second was read, stays, and
    /// the second goes. Counted by reads alone, the file a caller had just asked for went, and
    /// its read then fetched it again whole.
    @Test func aResourceAskedForCountsAsUsed() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let files = (0..<3).map { TestData.random(count: 1_000_000, seed: 130 + UInt64($0)) }
        for (name, data) in zip(["/a", "/b", "/c"], files) { server.setFile(name, data: data) }
        try await withTemporaryCache(configure: { $0.maximumSize = 2_500_000; $0.commitInterval = .seconds(600) }) { cache in
            _ = try await fill(cache, server, "/a")
            try await Task.sleep(for: .milliseconds(20))
            _ = try await fill(cache, server, "/b")
            try await Task.sleep(for: .milliseconds(20))
            let a = cache.resource(for: CacheKey(url: server.url("/a")), origin: HTTPOrigin(url: server.url("/a")))
            try await Task.sleep(for: .milliseconds(20))
            _ = try await fill(cache, server, "/c")
            let keys = try await waitUntilEvicted(["/b"], from: cache, server)
            #expect(keys == Set(["/a", "/c"].map { server.url($0).absoluteString }), "\(keys.sorted())")
            #expect(TestData.sha256(try await a.read(from: 0).collect()) == TestData.sha256(files[0]))
            #expect(server.bodyBytesSent(for: "/a") == 1_000_000, "read from the cache")
        }
    }

    /// A resource asked for while a pass runs, after the pass chose it and before its removal,
    /// stays (the pass goes on to the next), as one whose read began then does: a caller that
    /// asks for a file reads it next. The volume here holds 4.4 MB and the cache's files only
    /// (see ``leastRecentlyUsedGoWhileTheVolumeHasLessThanTheMinimumFreeSpace()``); the oldest
    /// is asked for as the pass looks at the volume before removing it.
    @Test func aResourceAskedForDuringAPassStays() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let names = ["/a", "/b", "/c"]
        for (index, name) in names.enumerated() { server.setFile(name, data: TestData.random(count: 1_000_000, seed: 133 + UInt64(index))) }
        // Once armed, the pass's second look at the volume (before its first removal) asks for /a.
        let asking = Locked<(cache: StreamCache?, looks: Int)>((nil, 0))
        let urlA = server.url("/a")
        try await withTemporaryCache(configure: { configuration in
            configuration.commitInterval = .seconds(600)
            configuration.minimumFreeSpace = 1_500_000
            let volume = Self.volume(holding: 4_400_000)
            configuration.volumeFreeSpace = { directory in
                let cache = asking.withLock { state -> StreamCache? in
                    guard state.cache != nil else { return nil }
                    state.looks += 1
                    return state.looks == 2 ? state.cache : nil
                }
                _ = cache?.resource(for: CacheKey(url: urlA), origin: HTTPOrigin(url: urlA))
                return volume(directory)
            }
        }) { cache in
            _ = try await fill(cache, server, "/a")
            try await Task.sleep(for: .milliseconds(20))
            _ = try await fill(cache, server, "/b")
            try await Task.sleep(for: .milliseconds(20))
            asking.withLock { $0.cache = cache }
            _ = try await fill(cache, server, "/c")
            _ = try await waitUntilEvicted(["/b"], from: cache, server)
            try await Task.sleep(for: .milliseconds(200))
            let keys = Set(try await cache.store.entries().map(\.key.rawValue))
            #expect(keys == Set(["/a", "/c"].map { server.url($0).absoluteString }), "\(keys.sorted())")
            #expect(cache.statistics.evictedResources == 1)
            #expect(asking.withLock { $0.looks } >= 2, "the pass looked at the volume before its removal")
        }
    }

    /// Waits (up to 10 s) until the cache holds none of `paths` and has counted as many
    /// evictions (a pass counts each after its removal); returns the keys it holds then.
    func waitUntilEvicted(_ paths: [String], from cache: StreamCache, _ server: TestOrigin) async throws -> Set<String> {
        let gone = Set(paths.map { server.url($0).absoluteString })
        var keys = Set(try await cache.store.entries().map(\.key.rawValue))
        for _ in 0..<500 {
            guard !keys.isDisjoint(with: gone) || cache.statistics.evictedResources < paths.count else { break }
            try await Task.sleep(for: .milliseconds(20))
            keys = Set(try await cache.store.entries().map(\.key.rawValue))
        }
        return keys
    }

    /// Resources not read within the maximum age leave when the cache opens: here two days old
    /// by the index, with a maximum of one day. A pinned one stays however old, and one read
    /// lately stays.
    @Test func resourcesNotReadWithinTheMaximumAgeGoWhenTheCacheOpens() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        for (index, name) in ["/pinned", "/old", "/recent"].enumerated() {
            server.setFile(name, data: TestData.random(count: 200_000, seed: 120 + UInt64(index)))
        }
        try await withTemporaryDirectory { directory in
            do {
                let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
                try await withAsyncCleanup {
                    for name in ["/pinned", "/old", "/recent"] { _ = try await fill(cache, server, name) }
                    try await cache.setPinned(true, for: CacheKey(url: server.url("/pinned")))
                } cleanup: { await cache.shutdown() }
            }
            let twoDaysAgo = Date().timeIntervalSince1970 - 2 * 86_400
            try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).write { db in
                try db.execute(sql: #"UPDATE "resource" SET "lastAccessedAt" = ? WHERE "key" != ?"#,
                               arguments: [twoDaysAgo, server.url("/recent").absoluteString])
            }
            var configuration = StreamCache.Configuration(directory: directory)
            configuration.maximumAge = .seconds(86_400)
            let cache = try StreamCache(configuration: configuration)
            try await withAsyncCleanup {
                let keys = try await waitUntilEvicted(["/old"], from: cache, server)
                #expect(keys == Set(["/pinned", "/recent"].map { server.url($0).absoluteString }), "\(keys.sorted())")
                #expect(cache.statistics.evictedResources == 1)
                #expect(cache.statistics.evictedBytes == 200_000)
            } cleanup: { await cache.shutdown() }
        }
    }

    /// A resource the process opens the cache to read (``StreamCache/Configuration/keysToBeRead``:
    /// `get`, `prefetch`) outlives the pass that runs as the cache opens, which may come before
    /// the process could ask for it: of two resources two days old under a maximum age of a day,
    /// the other one goes. The same for one named by an alias
    /// (``StreamCache/Configuration/aliasesToBeRead``: a folder's files that `prefetch` resolves
    /// one at a time, whose keys only their service tells).
    @Test(arguments: [false, true]) func aResourceTheCacheIsOpenedToReadOutlivesThePassAtOpen(byAlias: Bool) async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        for (index, name) in ["/wanted", "/old"].enumerated() {
            server.setFile(name, data: TestData.random(count: 200_000, seed: 140 + UInt64(index)))
        }
        try await withTemporaryDirectory { directory in
            do {
                let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
                try await withAsyncCleanup {
                    for name in ["/wanted", "/old"] { _ = try await fill(cache, server, name) }
                    try await cache.setAlias("music:/wanted.mp3", for: CacheKey(url: server.url("/wanted")), fileName: "wanted.mp3")
                } cleanup: { await cache.shutdown() }
            }
            try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).write { db in
                try db.execute(sql: #"UPDATE "resource" SET "lastAccessedAt" = ?"#, arguments: [Date().timeIntervalSince1970 - 2 * 86_400])
            }
            var configuration = StreamCache.Configuration(directory: directory)
            configuration.maximumAge = .seconds(86_400)
            if byAlias {
                configuration.aliasesToBeRead = ["music:/wanted.mp3", "music:/never-cached.mp3"]
            } else {
                configuration.keysToBeRead = [CacheKey(url: server.url("/wanted"))]
            }
            let cache = try StreamCache(configuration: configuration)
            try await withAsyncCleanup {
                let keys = try await waitUntilEvicted(["/old"], from: cache, server)
                #expect(keys == [server.url("/wanted").absoluteString], "\(keys.sorted())")
                #expect(cache.statistics.evictedResources == 1)
            } cleanup: { await cache.shutdown() }
        }
    }

    /// A resource that ages while the cache is open leaves at the next look (once a minute; a
    /// fifth of a second here), with no commit to prompt it; not before its age.
    @Test func aResourceThatAgesWhileTheCacheIsOpenGoes() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        server.setFile("/song", data: TestData.random(count: 100_000, seed: 123))
        try await withTemporaryCache(configure: { configuration in
            configuration.maximumAge = .seconds(2)
            configuration.evictionCheckInterval = .milliseconds(200)
        }) { cache in
            let filledAt = ContinuousClock.now
            _ = try await fill(cache, server, "/song")
            let keys = try await waitUntilEvicted(["/song"], from: cache, server)
            #expect(keys.isEmpty)
            #expect(ContinuousClock.now - filledAt >= .seconds(2), "not before its age")
        }
    }

    /// A cache on a volume that fills keeps the minimum free space: least recently used
    /// resources go (a pinned one stays) until a tenth more than the minimum is free. The volume
    /// here holds 4.4 MB and the cache's files only; a third file of 1 MB leaves 1.4 MB free,
    /// under the minimum of 1.5 MB, and the oldest unpinned file goes (2.4 MB free after, over
    /// the 1.65 MB sought, so the next goes not). Each file is committed once, whole, by
    /// `fill`'s flush.
    @Test func leastRecentlyUsedGoWhileTheVolumeHasLessThanTheMinimumFreeSpace() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let names = ["/a", "/b", "/c"]
        for (index, name) in names.enumerated() { server.setFile(name, data: TestData.random(count: 1_000_000, seed: 124 + UInt64(index))) }
        try await withTemporaryCache(configure: { configuration in
            configuration.commitInterval = .seconds(600)
            configuration.minimumFreeSpace = 1_500_000
            configuration.volumeFreeSpace = Self.volume(holding: 4_400_000)
        }) { cache in
            let a = try await fill(cache, server, "/a")
            try await cache.setPinned(true, for: a.key)
            for name in names.dropFirst() {
                try await Task.sleep(for: .milliseconds(20))
                _ = try await fill(cache, server, name)
            }
            _ = try await waitUntilEvicted(["/b"], from: cache, server)
            // Any further pass has begun by now, and would evict at once.
            try await Task.sleep(for: .milliseconds(200))
            let keys = Set(try await cache.store.entries().map(\.key.rawValue))
            #expect(keys == Set(["/a", "/c"].map { server.url($0).absoluteString }), "\(keys.sorted())")
            #expect(cache.statistics.evictedResources == 1)
        }
    }

    /// A pass asked for at once (``StreamCache/evict(_:dryRun:)``, what `cache prune` runs) follows
    /// the rules it is given, in a cache with none of its own, and tells what it evicted; a dry run
    /// tells the same and removes nothing, counting the free space a removal would give by its
    /// bytes. On the volume of 4.4 MB of the test above, three files of 1 MB leave 1.4 MB free,
    /// under a minimum of 1.5 MB: the oldest goes, and 2.4 MB are then free. After shutdown, the
    /// cache refuses.
    @Test func aPassAskedForFollowsItsOwnRulesAndADryRunRemovesNothing() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let names = ["/a", "/b", "/c"]
        for (index, name) in names.enumerated() { server.setFile(name, data: TestData.random(count: 1_000_000, seed: 137 + UInt64(index))) }
        try await withTemporaryCache(configure: { configuration in
            configuration.volumeFreeSpace = Self.volume(holding: 4_400_000)
        }) { cache in
            for name in names {
                _ = try await fill(cache, server, name)
                try await Task.sleep(for: .milliseconds(20))
            }
            let rules = EvictionRules(minimumFreeSpace: 1_500_000)
            let expected = [EvictedResource(key: CacheKey(url: server.url("/a")), bytes: 1_000_000, reason: .freeSpace)]
            #expect(try await cache.evict(rules, dryRun: true) == expected)
            #expect(try await cache.store.entries().count == 3, "a dry run removes nothing")
            #expect(cache.statistics.evictedResources == 0)
            #expect(try await cache.evict(rules) == expected)
            #expect(Set(try await cache.store.entries().map(\.key.rawValue)) == Set(["/b", "/c"].map { server.url($0).absoluteString }))
            #expect(cache.statistics.evictedResources == 1)
            #expect(try await cache.evict(rules).isEmpty, "2.4 MB free")
            await cache.shutdown()
            await #expect {
                try await cache.evict(EvictionRules(maximumSize: 0))
            } throws: { error in
                (error as? StreamCacheError)?.code == .cacheInUse
            }
        }
    }

    /// Rules at the ends of their range are followed, not trapped on: a minimum free space of
    /// `Int64.max` (which the control API's prune takes) evicts every resource not pinned, as no
    /// volume has that much free; a maximum size of `Int64.max` evicts none. Before, the minimum's
    /// target (a tenth more) overflowed and stopped the process.
    @Test func rulesAtTheEndsOfTheirRangeAreFollowed() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        for (index, name) in ["/a", "/b"].enumerated() { server.setFile(name, data: TestData.random(count: 300_000, seed: 140 + UInt64(index))) }
        try await withTemporaryCache(configure: { configuration in
            configuration.volumeFreeSpace = Self.volume(holding: 4_400_000)
        }) { cache in
            let a = try await fill(cache, server, "/a")
            _ = try await fill(cache, server, "/b")
            try await cache.setPinned(true, for: a.key)
            #expect(try await cache.evict(EvictionRules(maximumSize: .max, minimumFreeSpace: 0)).isEmpty)
            let evicted = try await cache.evict(EvictionRules(minimumFreeSpace: .max), dryRun: true)
            #expect(evicted == [EvictedResource(key: CacheKey(url: server.url("/b")), bytes: 300_000, reason: .freeSpace)])
            #expect(try await cache.evict(EvictionRules(minimumFreeSpace: .max)) == evicted)
            #expect(try await cache.store.entries().map(\.key) == [a.key], "the pinned one stays")
        }
    }

    /// The free space the cache keeps is what `statvfs` says an unprivileged process may still
    /// write (`stat -f`'s available blocks), not the volume's free blocks (root's reserve too).
    @Test func theVolumesFreeSpaceIsWhatAProcessMayStillWrite() async throws {
        try await withTemporaryDirectory { directory in
            let configuration = StreamCache.Configuration(directory: directory)
            let free = try #require(configuration.volumeFreeSpace(directory))
            let stat = try await ExternalTool.run("stat", ["-f", "-c", "%a %S", directory.path], package: "coreutils")
            let fields = stat.output.split(whereSeparator: \.isWhitespace).compactMap { Int64($0) }
            let statAvailable = try #require(fields.count == 2 ? fields[0] * fields[1] : nil, "\(stat.output) \(stat.stderr)")
            // Other programs write meanwhile.
            #expect(abs(free - statAvailable) < 64 << 20, "statvfs \(free), stat -f \(statAvailable)")
        }
    }
}
