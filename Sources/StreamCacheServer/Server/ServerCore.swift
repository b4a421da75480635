#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import StreamCache
import StreamCacheHLS

/// The state every responder of one server shares: the cache, the registry, the background
/// prefetches and the address the server listens on.
final class ServerCore: Sendable {
    let cache: StreamCache
    let configuration: ProxyServer.Configuration
    let registry: StreamRegistry
    let transport: any HTTPTransport
    let controlToken: String
    let logger: Logger
    /// Parsed playlists, shared by every player and prefetch.
    let playlists = HLSPlaylistLoader()
    private let multipleRanges = MultipleRangesMemory()
    private let listeningURL = Locked<URL?>(nil)
    private let prefetches = Locked(Prefetches())

    private let prefetchSerials = Locked(0)

    /// The prefetches the API or the app started, and the starts on their way to one.
    private struct Prefetches {
        var states: [String: PrefetchState] = [:]
        /// Per registration, the starts that arrived and have not started their prefetch yet
        /// (telling a playlist may cost an origin request first), and the stops that came meanwhile.
        var arriving: [String: Arrivals] = [:]
        /// How often every prefetch was stopped (the server stopping).
        var everyStop = 0

        struct Arrivals {
            var count = 0
            var stops = 0
        }

        /// Whether a stop came for `arrival`'s registration, or for every one, after it arrived.
        func isStopped(since arrival: PrefetchArrival) -> Bool {
            everyStop != arrival.everyStop || (arriving[arrival.id]?.stops ?? 0) != arrival.stops
        }

        /// Records a stop of `id`'s prefetch: the running one is returned, to be cancelled, and
        /// the starts on their way do not start one.
        mutating func stop(_ id: String) -> PrefetchState? {
            arriving[id]?.stops += 1
            return states.removeValue(forKey: id)
        }
    }

    private struct PrefetchState {
        var task: Task<Void, Never>
        /// Which start this is: the task of a prefetch replaced by a newer one may still end, and
        /// must not mark the newer one finished or failed.
        let serial: Int
        var finished = false
        var error: String?
        var errorCode: String?
        var hls: HLSPrefetchProgress?
        /// Whether it pins what it downloads.
        var pins = false
        /// Its own rate, which a request for the same prefetch while it runs sets again.
        var pacer: DownloadPacer
        /// A playlist's: the variants and segments it downloads.
        var playlistPlan: PlaylistPlan?
    }

    /// What a playlist's prefetch downloads: asked for again while it runs, the same plan goes on
    /// (at the rate asked for), another replaces it.
    struct PlaylistPlan: Equatable {
        var variants: HLSVariantSelection
        var segmentLimit: Int?
        var pinning: Bool
    }

    /// Records how prefetch `serial` of `id` ended, unless a newer one replaced it.
    private static func finish(_ serial: Int, of id: String, with error: (any Error)?, in prefetches: Locked<Prefetches>) {
        prefetches.withLock { prefetches in
            guard prefetches.states[id]?.serial == serial else { return }
            prefetches.states[id]?.finished = true
            if let error {
                prefetches.states[id]?.error = "\(error)"
                prefetches.states[id]?.errorCode = (error as? StreamCacheError)?.code.description ?? (error is CancellationError ? "cancelled" : nil)
            }
        }
    }

    init(cache: StreamCache, configuration: ProxyServer.Configuration, transport: any HTTPTransport) {
        self.cache = cache
        self.configuration = configuration
        self.transport = transport
        self.controlToken = configuration.controlToken ?? SecretToken.make(bytes: 24)
        self.logger = configuration.logger
        let (logger, multipleRanges) = (configuration.logger, multipleRanges)
        registry = StreamRegistry { location in
            Self.makeOrigin(url: location.url, headers: location.headers, transport: transport, multipleRanges: multipleRanges, logger: logger)
        }
    }

    /// The server's base URL (`http://127.0.0.1:PORT`), once it listens.
    var baseURL: URL? {
        get { listeningURL.withLock { $0 } }
        set { listeningURL.withLock { $0 = newValue } }
    }

    func absoluteURL(path: String) -> URL {
        let base = baseURL?.absoluteString ?? "http://\(configuration.host):\(configuration.port)"
        return URL(string: base + path)!
    }

    func makeOrigin(url: URL, headers: HTTPHeaders, transport: (any HTTPTransport)? = nil) -> any Origin {
        Self.makeOrigin(url: url, headers: headers, transport: transport ?? self.transport, multipleRanges: multipleRanges, logger: logger)
    }

    private static func makeOrigin(url: URL, headers: HTTPHeaders, transport: any HTTPTransport, multipleRanges: MultipleRangesMemory,
                                   logger: Logger) -> any Origin {
        HTTPOrigin(url: url, headers: headers, transport: transport, configuration: originConfiguration(multipleRanges: multipleRanges), logger: logger)
    }

    /// One memory of which hosts serve several ranges per response, for every origin of the
    /// server: the files of a `--folder` share a host, which is then tried once.
    var originConfiguration: HTTPOrigin.Configuration { Self.originConfiguration(multipleRanges: multipleRanges) }

    private static func originConfiguration(multipleRanges: MultipleRangesMemory) -> HTTPOrigin.Configuration {
        var configuration = HTTPOrigin.Configuration()
        configuration.multipleRanges = multipleRanges
        return configuration
    }

    func register(url: URL, headers: HTTPHeaders, key: CacheKey?, fileName: String?) -> StreamRegistration {
        let name = fileName.flatMap { $0.isEmpty ? nil : $0 } ?? (url.lastPathComponent.isEmpty || url.lastPathComponent == "/" ? "stream" : url.lastPathComponent)
        let key = key ?? CacheKey(url: url)
        let origin = makeOrigin(url: url, headers: headers)
        return registry.register(key: key, fileName: name, sourceDescription: url.redactedDescription, origin: origin,
                                 location: HLSLocation(url: url, headers: headers), resource: cache.resource(for: key, origin: origin))
    }

    func register(origin: any Origin, key: CacheKey, fileName: String) -> StreamRegistration {
        registry.register(key: key, fileName: fileName, sourceDescription: origin.logDescription, origin: origin,
                          resource: cache.resource(for: key, origin: origin))
    }

    /// The stream of a file a playlist names.
    func registerDerived(_ location: HLSLocation, isPlaylist: Bool) -> StreamRegistration {
        registry.registerDerived(location, isPlaylist: isPlaylist)
    }

    /// Whether `stream` is served as an HLS playlist, as far as is known before its first byte.
    func isPlaylist(_ stream: StreamRegistry.Stream, resource: Resource) -> Bool {
        stream.isPlaylist ?? HLSPlaylist.isPlaylist(fileName: stream.registration.fileName, mimeType: resource.knownInfo?.mimeType)
    }

    func resource(for stream: StreamRegistry.Stream) -> Resource {
        cache.resource(for: stream.registration.key, origin: stream.origin)
    }

    /// Whether `stream` is an HLS playlist: as registered or named, else by the type its origin
    /// answers with (which may cost a request for its first byte).
    func isPlaylist(_ stream: StreamRegistry.Stream) async -> Bool {
        let resource = resource(for: stream)
        if isPlaylist(stream, resource: resource) { return true }
        guard stream.isPlaylist == nil, resource.knownInfo?.mimeType == nil, let info = try? await resource.loadInfo() else { return false }
        return HLSPlaylist.isPlaylist(fileName: nil, mimeType: info.mimeType)
    }

    // MARK: Prefetch

    /// When a request to start a prefetch arrived: a stop of the same registration's prefetch
    /// (or of every one) that comes after it, before the prefetch starts, wins.
    struct PrefetchArrival: Sendable {
        fileprivate let id: String
        fileprivate let stops: Int
        fileprivate let everyStop: Int
    }

    /// Runs `start` for a request to start `id`'s prefetch, with the arrival it hands to
    /// ``startPrefetch(_:range:pinning:rate:arrival:)`` or its playlist twin.
    ///
    /// Between a request's arrival and its prefetch's start, the server reads the body and may
    /// ask the origin whether the file is a playlist, a round trip or more. A stop that came
    /// meanwhile (`DELETE …/prefetch`, the registration removed, the server stopping) used to
    /// find nothing running, answer that the prefetch had stopped, and the prefetch then started
    /// and ran to the end of the file: Ctrl-C on `streamcache prefetch` beside a server, pressed
    /// in that moment, said the server had stopped it while the server downloaded on. Now the
    /// stop wins, as it would had the prefetch started at once.
    func arrivingPrefetch<Result>(of id: String, _ start: (PrefetchArrival) async throws -> Result) async rethrows -> Result {
        let arrival = prefetches.withLock { prefetches in
            prefetches.arriving[id, default: Prefetches.Arrivals()].count += 1
            return PrefetchArrival(id: id, stops: prefetches.arriving[id]?.stops ?? 0, everyStop: prefetches.everyStop)
        }
        defer {
            prefetches.withLock { prefetches in
                prefetches.arriving[id]?.count -= 1
                if prefetches.arriving[id]?.count == 0 { prefetches.arriving[id] = nil }
            }
        }
        return try await start(arrival)
    }

    /// Starts filling a resource in the background, or returns the prefetch already running
    /// (then at `rate`). `rate`: the bytes per second the prefetch takes at most, besides the
    /// cache's background rate; `nil` for none.
    ///
    /// - Returns: the prefetch's task; `nil` when a stop came after `arrival`, and then the
    ///   read-ahead of the resource's downloads no reader needs is ended
    ///   (`Resource.endReadAheads()`), as the stop would have ended it had the prefetch started.
    func startPrefetch(_ stream: StreamRegistry.Stream, range: ByteRange?, pinning: Bool = false, rate: Int64? = nil,
                       arrival: PrefetchArrival) async -> Task<Void, Never>? {
        let resource = resource(for: stream)
        let id = stream.registration.id
        let serial = prefetchSerials.withLock { $0 += 1; return $0 }
        let shared = prefetches  // the task's: inside the lock below, `prefetches` names the state
        let started = prefetches.withLock { prefetches -> Task<Void, Never>? in
            guard !prefetches.isStopped(since: arrival) else { return nil }
            if let running = prefetches.states[id], !running.finished, range == nil, running.pins || !pinning {
                // Asked again with another rate (or none): the prefetch goes on at that one.
                if running.pacer.bytesPerSecond != rate { running.pacer.bytesPerSecond = rate }
                return running.task
            }
            prefetches.states[id]?.task.cancel()
            let pacer = DownloadPacer(bytesPerSecond: rate)
            let task = Task {
                do {
                    try await resource.prefetch(range, pinning: pinning, pacedBy: pacer)
                    Self.finish(serial, of: id, with: nil, in: shared)
                } catch {
                    Self.finish(serial, of: id, with: error, in: shared)
                }
            }
            prefetches.states[id] = PrefetchState(task: task, serial: serial, pins: pinning, pacer: pacer)
            return task
        }
        if started == nil { await resource.endReadAheads() }
        return started
    }

    /// Starts downloading an HLS stream for offline play, or returns the prefetch of the same
    /// plan already running (then at `rate`, as ``startPrefetch(_:range:pinning:rate:arrival:)``).
    /// `nil` when a stop came after `arrival`, as there.
    func startPlaylistPrefetch(_ stream: StreamRegistry.Stream, location: HLSLocation, variants: HLSVariantSelection, segmentLimit: Int?,
                               pinning: Bool = false, rate: Int64? = nil, arrival: PrefetchArrival) async -> Task<Void, Never>? {
        let id = stream.registration.id
        let key = stream.registration.key
        let prefetcher = HLSPrefetcher(cache: cache, loader: playlists) { [transport, logger, originConfiguration] location in
            HTTPOrigin(url: location.url, headers: location.headers, transport: transport, configuration: originConfiguration, logger: logger)
        }
        let shared = prefetches  // the task's: inside the lock below, `prefetches` names the state
        let serial = prefetchSerials.withLock { $0 += 1; return $0 }
        let plan = PlaylistPlan(variants: variants, segmentLimit: segmentLimit, pinning: pinning)
        let pacer = DownloadPacer(bytesPerSecond: rate)
        let started = prefetches.withLock { prefetches -> Task<Void, Never>? in
            guard !prefetches.isStopped(since: arrival) else { return nil }
            if let running = prefetches.states[id], !running.finished, running.playlistPlan == plan {
                // Cancelled and started again, the files under way would lose the bytes on the wire.
                if running.pacer.bytesPerSecond != rate { running.pacer.bytesPerSecond = rate }
                return running.task
            }
            prefetches.states[id]?.task.cancel()
            let task = Task {
                do {
                    try await prefetcher.prefetch(location, key: key, variants: variants, segmentLimit: segmentLimit, pinning: pinning,
                                                  pacedBy: pacer) { progress in
                        shared.withLock { if $0.states[id]?.serial == serial { $0.states[id]?.hls = progress } }
                    }
                    Self.finish(serial, of: id, with: nil, in: shared)
                } catch {
                    Self.finish(serial, of: id, with: error, in: shared)
                }
            }
            prefetches.states[id] = PrefetchState(task: task, serial: serial, pacer: pacer, playlistPlan: plan)
            return task
        }
        if started == nil { await resource(for: stream).endReadAheads() }
        return started
    }

    /// Whether a prefetch the API started for `id` is under way, and at what rate of its own; how
    /// the last one failed.
    private func prefetchState(id: String) -> (running: Bool, error: String?, errorCode: String?, rate: Int64?) {
        prefetches.withLock { prefetches in
            guard let state = prefetches.states[id] else { return (false, nil, nil, nil) }
            return (!state.finished, state.error, state.errorCode, state.finished ? nil : state.pacer.bytesPerSecond)
        }
    }

    func playlistPrefetchProgress(id: String) -> HLSPrefetchProgress? { prefetches.withLock { $0.states[id]?.hls } }

    /// Stops the prefetch the API started for `id`, if one runs, and returns once it has ended:
    /// its downloads have been cut (see `Resource.endDownloadsOfEndedPrefetch(finished:)`), and
    /// what they fetched is in the cache. A start that arrived before the stop does not start one.
    func stopPrefetch(id: String) async {
        let task = prefetches.withLock { $0.stop(id) }?.task
        task?.cancel()
        await task?.value
    }

    /// Cancels the prefetch of `id`, if one runs or is starting, without waiting for it to end.
    func cancelPrefetch(id: String) {
        prefetches.withLock { $0.stop(id) }?.task.cancel()
    }

    /// Stops every prefetch, and the starts on their way, and returns once they have ended.
    func cancelAllPrefetches() async {
        let tasks = prefetches.withLock { prefetches -> [Task<Void, Never>] in
            defer { prefetches.states.removeAll() }
            prefetches.everyStop += 1
            return prefetches.states.values.map(\.task)
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    // MARK: Status

    func status(of stream: StreamRegistry.Stream) async -> ControlAPI.ResourceStatus {
        let resource = resource(for: stream)
        let ranges = (try? await resource.cachedRanges) ?? RangeSet()
        let info = await resource.info
        let statistics = await resource.statistics
        let downloading = await resource.isDownloading
        let size = info?.totalLength
        let cached = ranges.coveredByteCount
        let state = cached == 0 ? "empty" : (size.map { ranges.contains(ByteRange(0, $0)) } == true ? "complete" : "partial")
        let prefetch = prefetchState(id: stream.registration.id)
        return ControlAPI.ResourceStatus(
            id: stream.registration.id, streamURL: absoluteURL(path: stream.registration.path).absoluteString,
            key: stream.registration.key.rawValue, source: stream.registration.sourceDescription, state: state,
            downloading: downloading, size: size, mimeType: info?.effectiveMIMEType, cachedBytes: cached,
            cachedRanges: ranges.ranges.map { ControlAPI.Span(start: $0.lowerBound, end: $0.upperBound) },
            bytesFromCache: statistics.bytesServedFromCache, bytesFromOrigin: statistics.bytesServedFromOrigin,
            originRequests: statistics.originRequests, prefetching: prefetch.running, prefetchError: prefetch.error,
            prefetchErrorCode: prefetch.errorCode, prefetchRate: prefetch.rate, hlsPrefetch: playlistPrefetchProgress(id: stream.registration.id))
    }
}
