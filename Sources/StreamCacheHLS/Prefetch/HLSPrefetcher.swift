#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Downloads an HLS stream into the cache for offline play: the playlists, then every
/// initialization section, key and segment of the chosen variants (or their first segments).
///
/// Files are fetched a few at a time, in playlist order, so the first minutes are playable
/// early; files already cached are skipped without a request, and byte-range segments fetch only
/// their ranges. A stream fetched whole this way plays with the origin gone.
///
/// ```swift
/// let prefetcher = HLSPrefetcher(cache: cache, loader: loader) { location in
///     HTTPOrigin(url: location.url, headers: location.headers, transport: AsyncHTTPClientTransport.shared)
/// }
/// let done = try await prefetcher.prefetch(master, variants: .highestBandwidth) { progress in
///     print("\(progress.filesDone)/\(progress.files) files")
/// }
/// ```
public struct HLSPrefetcher: Sendable {
    private let cache: StreamCache
    private let loader: HLSPlaylistLoader
    private let makeOrigin: @Sendable (HLSLocation) -> any Origin
    private let concurrency: Int

    /// Creates a prefetcher.
    ///
    /// - Parameters:
    ///   - cache: Where the files go.
    ///   - loader: Loads and keeps the playlists (share the server's, so playlists load once).
    ///   - concurrency: Files downloaded at once.
    ///   - makeOrigin: The origin of a location.
    public init(cache: StreamCache, loader: HLSPlaylistLoader, concurrency: Int = 4,
                makeOrigin: @escaping @Sendable (HLSLocation) -> any Origin) {
        self.cache = cache
        self.loader = loader
        self.concurrency = max(1, concurrency)
        self.makeOrigin = makeOrigin
    }

    /// Downloads the playlist at `location` and what it names.
    ///
    /// - Parameters:
    ///   - location: A master or media playlist.
    ///   - key: The playlist's cache key, when it is not derived from the URL.
    ///   - variants: For a master playlist, which variants to download.
    ///   - segmentLimit: Download only the first this many segments of each media playlist.
    ///   - pinning: Pin every file downloaded, playlists included, once it is cached
    ///     (``StreamCache/Resource/setPinned(_:)``), so that eviction never removes the stream
    ///     downloaded for offline play.
    ///   - pacer: A rate the segments' downloads keep to together, besides the cache's
    ///     background rate (``StreamCache/Resource/prefetch(_:pinning:pacedBy:)``); `nil` for none.
    ///   - progress: Called after each file.
    /// - Returns: The final progress.
    /// - Throws: ``StreamCacheError`` (`invalidPlaylist`, `invalidArgument` for a variant index
    ///   out of range, or the origin's errors), `CancellationError` when cancelled.
    @discardableResult
    public func prefetch(_ location: HLSLocation, key: CacheKey? = nil, variants: HLSVariantSelection = .highestBandwidth,
                         segmentLimit: Int? = nil, pinning: Bool = false, pacedBy pacer: DownloadPacer? = nil,
                         progress: @escaping @Sendable (HLSPrefetchProgress) -> Void = { _ in }) async throws -> HLSPrefetchProgress {
        var plan = Plan()
        let top = try await load(location, key: key ?? location.key, pinning: pinning)
        var mediaPlaylists: [(HLSLocation, HLSPlaylist)] = []
        if top.kind == .master {
            guard let chosen = variants.choose(from: top.variants) else {
                throw StreamCacheError(.invalidArgument, "The master playlist has \(top.variants.filter { !$0.isIFrameOnly }.count) variants; there is no variant \(variants).")
            }
            var groups: Set<[String]> = []
            for variant in chosen {
                for (type, group) in variant.renditionGroups { groups.insert([type, group]) }
            }
            var playlists = chosen.map(\.reference)
            playlists += top.renditions.filter { groups.contains([$0.type, $0.groupID]) }.compactMap(\.reference)
            for key in top.references where key.role == .sessionKey { plan.add(location.resolve(key.uri), range: nil) }
            for reference in playlists {
                guard let child = location.resolve(reference.uri) else { continue }
                if mediaPlaylists.contains(where: { $0.0.url == child.url }) { continue }
                mediaPlaylists.append((child, try await load(child, key: child.key, pinning: pinning)))
            }
        } else {
            mediaPlaylists = [(location, top)]
        }
        for (playlistLocation, playlist) in mediaPlaylists {
            for segment in playlist.segments.prefix(segmentLimit ?? Int.max) {
                for reference in [segment.initializationSection, segment.key].compactMap({ $0 }) {
                    plan.add(playlistLocation.resolve(reference.uri), range: reference.byteRange)
                }
                plan.add(playlistLocation.resolve(segment.reference.uri), range: segment.reference.byteRange)
                plan.segments += 1
            }
        }
        return try await download(plan, pinning: pinning, pacer: pacer, progress: progress)
    }

    private func load(_ location: HLSLocation, key: CacheKey, pinning: Bool) async throws -> HLSPlaylist {
        let origin = makeOrigin(location)
        let resource = cache.resource(for: key, origin: origin)
        let playlist = try await loader.playlist(of: resource, origin: origin).playlist
        // A live playlist is reloaded, not kept: only a VOD one is worth keeping offline.
        if pinning, !playlist.isLive { _ = try await resource.setPinned(true) }
        return playlist
    }

    private func download(_ plan: Plan, pinning: Bool, pacer: DownloadPacer?, progress: @escaping @Sendable (HLSPrefetchProgress) -> Void) async throws -> HLSPrefetchProgress {
        var state = HLSPrefetchProgress(files: plan.files.count, segments: plan.segments)
        progress(state)
        try await withThrowingTaskGroup(of: Int64.self) { group in
            var pending = plan.files.makeIterator()
            func startNext() -> Bool {
                guard let file = pending.next() else { return false }
                let resource = cache.resource(for: file.location.key, origin: makeOrigin(file.location))
                group.addTask {
                    guard let ranges = file.ranges else {
                        try await resource.prefetch(nil, pinning: pinning, pacedBy: pacer)
                        return resource.knownInfo?.totalLength ?? 0
                    }
                    for range in ranges.ranges { try await resource.prefetch(range, pacedBy: pacer) }
                    if pinning { _ = try await resource.setPinned(true) }
                    return ranges.coveredByteCount
                }
                return true
            }
            for _ in 0..<concurrency where !startNext() { break }
            while let bytes = try await group.next() {
                state.filesDone += 1
                state.bytes += bytes
                progress(state)
                _ = startNext()
            }
        }
        return state
    }

    /// The files to download, each once, in first-use order, with the ranges wanted of each.
    private struct Plan {
        struct File {
            var location: HLSLocation
            /// `nil` for the whole file.
            var ranges: RangeSet?
        }

        var files: [File] = []
        var segments = 0
        private var indexByKey: [CacheKey: Int] = [:]

        mutating func add(_ location: HLSLocation?, range: ByteRange?) {
            guard let location else { return }
            guard let index = indexByKey[location.key] else {
                indexByKey[location.key] = files.count
                files.append(File(location: location, ranges: range.map { RangeSet([$0]) }))
                return
            }
            if let range, files[index].ranges != nil {
                files[index].ranges?.insert(range)
            } else {
                files[index].ranges = nil
            }
        }
    }
}
