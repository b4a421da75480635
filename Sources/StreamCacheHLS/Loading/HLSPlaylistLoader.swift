#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Loads playlists, keeps the parsed ones in memory, and reloads live playlists as they age.
///
/// - **VOD playlists** (with `#EXT-X-ENDLIST` or `#EXT-X-PLAYLIST-TYPE:VOD`) never change, so
///   they are read through the cache like any file and kept: a second play, or one with the
///   origin gone, reads them from disk.
/// - **Live playlists** change every target duration. A loaded one is used for half its target
///   duration (the interval RFC 8216 §6.3.4 gives a client whose reload found no change), then
///   reloaded from the origin. If the reload fails the old copy is still used until it is one
///   target duration old, and never after: a stale live playlist is an error, not an answer.
///   A live playlist found in the cache from an earlier session is of unknown age, so it is
///   reloaded at once.
///
/// Loads of one playlist are coalesced: any number of players asking at once cost one request.
public actor HLSPlaylistLoader {
    /// A parsed playlist and when it was loaded.
    public struct LoadedPlaylist: Sendable {
        /// The cache key of the playlist file.
        public let key: CacheKey
        /// The playlist.
        public let playlist: HLSPlaylist
        /// When the bytes were requested from the origin, or read from the cache.
        public let loadedAt: ContinuousClock.Instant

        /// How long the playlist is used before a reload is tried: forever for VOD, half the
        /// target duration (at least 250 ms) for live.
        public var refreshInterval: Duration? {
            guard playlist.isLive else { return nil }
            return .milliseconds(max(250, (playlist.targetDuration ?? 0) * 500))
        }

        /// How long the playlist may be served at most: forever for VOD, one target duration
        /// (at least the refresh interval) for live.
        public var maximumAge: Duration? {
            guard let refreshInterval else { return nil }
            return max(refreshInterval, .seconds(playlist.targetDuration ?? 0))
        }
    }

    private struct Entry {
        var loaded: LoadedPlaylist
        var lastUse: UInt64
    }

    private let maximumEntries: Int
    private let maximumReferences: Int
    /// The URIs named by the playlists in ``entries``: their parsed form is most of their memory.
    private(set) var keptReferences = 0
    private let now: @Sendable () -> ContinuousClock.Instant
    private var entries: [CacheKey: Entry] = [:]
    private var loading: [CacheKey: Task<LoadedPlaylist, any Error>] = [:]
    private var useCounter: UInt64 = 0

    /// Creates a loader.
    ///
    /// - Parameters:
    ///   - maximumEntries: Parsed playlists kept in memory; the least recently used go first.
    ///   - maximumReferences: The most URIs (segments, keys, variants) the kept playlists may name
    ///     together, so that a few very long ones cannot fill memory: a parsed VOD playlist of
    ///     50,000 segments takes about 30 MB. The playlist just used is kept whatever its size; a
    ///     VOD playlist dropped from memory is read again from the cache when asked for.
    ///   - now: The clock; tests pass their own.
    public init(maximumEntries: Int = 256, maximumReferences: Int = 50_000, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.maximumEntries = max(1, maximumEntries)
        self.maximumReferences = max(0, maximumReferences)
        self.now = now
    }

    /// The playlist of `resource`, from memory when fresh, else loaded.
    ///
    /// - Parameters:
    ///   - resource: The playlist's cached resource.
    ///   - origin: Its origin, for reloads of live playlists, which bypass the cache.
    /// - Throws: ``StreamCacheError``: `invalidPlaylist` when the bytes are not a playlist, or the
    ///   origin's errors when a load fails and no copy young enough is left.
    public func playlist(of resource: Resource, origin: any Origin) async throws -> LoadedPlaylist {
        let key = resource.key
        let previous = entries[key]
        let clock = self.now
        if let previous, previous.loaded.refreshInterval.map({ clock() - previous.loaded.loadedAt < $0 }) ?? true {
            return use(previous.loaded)
        }
        if let running = loading[key] { return try await running.value }
        let task = Task { try await Self.load(resource, origin: origin, reloading: previous != nil, now: clock) }
        loading[key] = task
        defer { loading[key] = nil }
        do {
            return use(try await task.value)
        } catch {
            // The old copy may still be served while younger than its maximum age.
            if let previous, let maximumAge = previous.loaded.maximumAge, clock() - previous.loaded.loadedAt < maximumAge {
                return use(previous.loaded)
            }
            if previous != nil, let error = error as? StreamCacheError {
                throw StreamCacheError(error.code, "The live playlist could not be reloaded, and the copy in memory is older than its target duration: \(error.message)",
                                       httpStatus: error.httpStatus, underlying: error)
            }
            throw error
        }
    }

    private func use(_ loaded: LoadedPlaylist) -> LoadedPlaylist {
        useCounter += 1
        keptReferences -= entries[loaded.key]?.loaded.playlist.references.count ?? 0
        entries[loaded.key] = Entry(loaded: loaded, lastUse: useCounter)
        keptReferences += loaded.playlist.references.count
        while entries.count > maximumEntries || (keptReferences > maximumReferences && entries.count > 1),
              let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key {
            keptReferences -= entries.removeValue(forKey: oldest)?.loaded.playlist.references.count ?? 0
        }
        return loaded
    }

    private static func load(_ resource: Resource, origin: any Origin, reloading: Bool, now: @Sendable () -> ContinuousClock.Instant) async throws -> LoadedPlaylist {
        let start = now()
        if !reloading {
            let (data, fromOrigin) = try await readThroughCache(resource)
            let playlist = try HLSPlaylist(data: data)
            if !playlist.isLive || fromOrigin { return LoadedPlaylist(key: resource.key, playlist: playlist, loadedAt: start) }
        }
        let data = try await fetch(from: origin)
        return LoadedPlaylist(key: resource.key, playlist: try HLSPlaylist(data: data), loadedAt: start)
    }

    /// The whole resource through the cache, and whether every byte came from the origin now.
    private static func readThroughCache(_ resource: Resource) async throws -> (Data, fromOrigin: Bool) {
        var data = Data()
        var fromOrigin = true
        for try await chunk in resource.read(ByteRange(0, Int64(HLSPlaylist.maximumSize) + 1)) {
            data.append(chunk.data)
            if chunk.source == .cache { fromOrigin = false }
            try checkSize(data)
        }
        return (data, fromOrigin)
    }

    /// The whole resource straight from the origin.
    private static func fetch(from origin: any Origin) async throws -> Data {
        let response = try await origin.open(OriginRequest(range: nil))
        var data = Data()
        for try await chunk in response.body {
            data.append(chunk)
            try checkSize(data)
        }
        return data
    }

    private static func checkSize(_ data: Data) throws {
        if data.count > HLSPlaylist.maximumSize {
            throw StreamCacheError(.invalidPlaylist, "The playlist is larger than \(HLSPlaylist.maximumSize >> 20) MiB; it is not an HLS playlist.")
        }
    }
}
