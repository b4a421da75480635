import Foundation
import StreamCache
@testable import StreamCacheHLS
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// The loader's freshness rules, on a clock the test moves by hand, with a real cache and a real
/// loopback origin.
@Suite struct HLSPlaylistLoaderTests {
    /// A clock that moves only when told.
    final class ManualClock: Sendable {
        private let instant = Locked(ContinuousClock.now)
        var now: ContinuousClock.Instant { instant.withLock { $0 } }
        func advance(by duration: Duration) { instant.withLock { $0 += duration } }
    }

    static func mediaPlaylist(segments: Int, targetDuration: Int = 2, ended: Bool = false) -> Data {
        var text = "#EXTM3U\n#EXT-X-TARGETDURATION:\(targetDuration)\n#EXT-X-MEDIA-SEQUENCE:0\n"
        for index in 0..<segments { text += "#EXTINF:\(targetDuration).0,\nseg\(index).ts\n" }
        if ended { text += "#EXT-X-ENDLIST\n" }
        return Data(text.utf8)
    }

    static func load(_ loader: HLSPlaylistLoader, _ cache: StreamCache, _ url: URL) async throws -> HLSPlaylist {
        let origin = HTTPOrigin(url: url)
        return try await loader.playlist(of: cache.resource(for: CacheKey(url: url), origin: origin), origin: origin).playlist
    }

    @Test func aVODPlaylistLoadsOnceAndReplaysFromDiskWithTheOriginGone() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/vod.m3u8", data: Self.mediaPlaylist(segments: 5, ended: true), contentType: "application/vnd.apple.mpegurl")
        try await withTemporaryDirectory { (directory: URL) async throws -> Void in
            let cache = try StreamCache(configuration: .init(directory: directory))
            let loader = HLSPlaylistLoader()
            for _ in 0..<3 { #expect(try await Self.load(loader, cache, origin.url("/vod.m3u8")).segments.count == 5) }
            #expect(origin.dataRequests(for: "/vod.m3u8").count == 1)
            await cache.shutdown()
            origin.stop()

            let nextSession = try StreamCache(configuration: .init(directory: directory))
            let playlist = try await Self.load(HLSPlaylistLoader(), nextSession, origin.url("/vod.m3u8"))
            #expect(playlist.segments.count == 5 && !playlist.isLive)
            await nextSession.shutdown()
        }
    }

    /// Long playlists do not pile up in memory: past `maximumReferences`, the least recently used
    /// go, and a VOD playlist dropped is read again from the cache, not from the origin.
    @Test func longPlaylistsPastTheReferenceLimitLeaveMemoryAndComeBackFromTheCache() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        for (name, segments) in [("a", 60), ("b", 60), ("c", 150)] {
            origin.setFile("/\(name).m3u8", data: Self.mediaPlaylist(segments: segments, ended: true), contentType: "application/vnd.apple.mpegurl")
        }
        try await withTemporaryCache { (cache: StreamCache) async throws in
            let loader = HLSPlaylistLoader(maximumReferences: 100)
            #expect(try await Self.load(loader, cache, origin.url("/a.m3u8")).segments.count == 60)
            #expect(await loader.keptReferences == 60)
            #expect(try await Self.load(loader, cache, origin.url("/b.m3u8")).segments.count == 60)
            #expect(await loader.keptReferences == 60, "a went when b came")
            #expect(try await Self.load(loader, cache, origin.url("/a.m3u8")).segments.count == 60)
            #expect(await loader.keptReferences == 60)
            #expect(origin.dataRequests(for: "/a.m3u8").count == 1, "a came back from the cache")
            // One playlist longer than the limit is still kept while it is the one in use.
            #expect(try await Self.load(loader, cache, origin.url("/c.m3u8")).segments.count == 150)
            #expect(await loader.keptReferences == 150)
        }
    }

    /// Acceptance 3: a live playlist is reloaded after half its target duration, a failed reload
    /// leaves the old copy in use only while it is younger than one target duration, and after
    /// that the answer is an error, never the stale copy.
    @Test func aLivePlaylistIsReloadedAndNeverServedPastItsTargetDuration() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/live.m3u8", data: Self.mediaPlaylist(segments: 3), entityTag: "\"1\"")
        let clock = ManualClock()
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let loader = HLSPlaylistLoader(now: { clock.now })
            let url = origin.url("/live.m3u8")
            #expect(try await Self.load(loader, cache, url).segments.count == 3)
            origin.setFile("/live.m3u8", data: Self.mediaPlaylist(segments: 4), entityTag: "\"2\"")

            clock.advance(by: .milliseconds(900))
            #expect(try await Self.load(loader, cache, url).segments.count == 3, "still fresh: half of the 2 s target duration has not passed")
            #expect(origin.requests.filter { $0.path == "/live.m3u8" }.count == 1)

            clock.advance(by: .milliseconds(200))
            #expect(try await Self.load(loader, cache, url).segments.count == 4, "reloaded after 1.1 s")
            #expect(origin.requests.filter { $0.path == "/live.m3u8" }.count == 2)

            origin.faults = { _, path, _, _ in path == "/live.m3u8" ? .status(404) : nil }
            clock.advance(by: .milliseconds(1100))
            #expect(try await Self.load(loader, cache, url).segments.count == 4, "the reload failed; the copy is 1.1 s old, under the target duration")

            clock.advance(by: .milliseconds(1000))
            await #expect {
                _ = try await Self.load(loader, cache, url)
            } throws: { error in
                (error as? StreamCacheError)?.message.contains("older than its target duration") == true
            }
            origin.faults = nil
            #expect(try await Self.load(loader, cache, url).segments.count == 4, "the origin is back")
        }
    }

    @Test func aLivePlaylistCachedInAnEarlierSessionIsReloadedAtOnce() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/live.m3u8", data: Self.mediaPlaylist(segments: 3), entityTag: "\"1\"")
        try await withTemporaryDirectory { (directory: URL) async throws -> Void in
            let cache = try StreamCache(configuration: .init(directory: directory))
            #expect(try await Self.load(HLSPlaylistLoader(), cache, origin.url("/live.m3u8")).segments.count == 3)
            await cache.shutdown()

            origin.setFile("/live.m3u8", data: Self.mediaPlaylist(segments: 6), entityTag: "\"2\"")
            let nextSession = try StreamCache(configuration: .init(directory: directory))
            #expect(try await Self.load(HLSPlaylistLoader(), nextSession, origin.url("/live.m3u8")).segments.count == 6)
            await nextSession.shutdown()
        }
    }

    @Test func loadsOfOnePlaylistAtOnceCostOneRequest() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/vod.m3u8", data: Self.mediaPlaylist(segments: 50, ended: true))
        origin.faults = { _, _, _, index in index == 0 ? .stall(seconds: 0.3) : nil }
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let loader = HLSPlaylistLoader()
            let url = origin.url("/vod.m3u8")
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 { group.addTask { try await Self.load(loader, cache, url).segments.count } }
                for try await count in group { #expect(count == 50) }
            }
            #expect(origin.requests.filter { $0.path == "/vod.m3u8" }.count == 1)
        }
    }

    @Test func aFileThatIsNotAPlaylistIsAClearError() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/song.m3u8", data: TestData.random(count: 300_000, seed: 9))
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            await #expect {
                _ = try await Self.load(HLSPlaylistLoader(), cache, origin.url("/song.m3u8"))
            } throws: { error in
                (error as? StreamCacheError)?.code == .invalidPlaylist
            }
        }
    }
}
