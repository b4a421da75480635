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
    /// The prefetches the API or the app started, and the starts on their way to one.
    let prefetches = ServerPrefetches()

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

    /// Starts filling a resource in the background, or returns the prefetch already running
    /// (then at `rate`), as ``ServerPrefetches/start(_:plan:rate:arrival:work:)`` tells.
    /// `rate`: the bytes per second the prefetch takes at most, besides the cache's background
    /// rate; `nil` for none.
    ///
    /// - Returns: the prefetch's task; `nil` when a stop came after `arrival`, and then the
    ///   read-ahead of the resource's downloads no reader needs is ended
    ///   (`Resource.endReadAheads()`), as the stop would have ended it had the prefetch started.
    func startPrefetch(_ stream: StreamRegistry.Stream, range: ByteRange?, pinning: Bool = false, rate: Int64? = nil,
                       arrival: ServerPrefetches.Arrival) async -> Task<Void, Never>? {
        let resource = resource(for: stream)
        let started = prefetches.start(stream.registration.id, plan: .bytes(range: range, pinning: pinning), rate: rate, arrival: arrival) { pacer, _ in
            try await resource.prefetch(range, pinning: pinning, pacedBy: pacer)
        }
        if started == nil { await resource.endReadAheads() }
        return started
    }

    /// Starts downloading an HLS stream for offline play, or returns the prefetch of the same
    /// plan already running (then at `rate`, as ``startPrefetch(_:range:pinning:rate:arrival:)``).
    /// `nil` when a stop came after `arrival`, as there.
    func startPlaylistPrefetch(_ stream: StreamRegistry.Stream, location: HLSLocation, variants: HLSVariantSelection, segmentLimit: Int?,
                               pinning: Bool = false, rate: Int64? = nil, arrival: ServerPrefetches.Arrival) async -> Task<Void, Never>? {
        let key = stream.registration.key
        let prefetcher = HLSPrefetcher(cache: cache, loader: playlists) { [transport, logger, originConfiguration] location in
            HTTPOrigin(url: location.url, headers: location.headers, transport: transport, configuration: originConfiguration, logger: logger)
        }
        let plan = ServerPrefetches.Plan.playlist(variants: variants, segmentLimit: segmentLimit, pinning: pinning)
        let started = prefetches.start(stream.registration.id, plan: plan, rate: rate, arrival: arrival) { pacer, report in
            try await prefetcher.prefetch(location, key: key, variants: variants, segmentLimit: segmentLimit, pinning: pinning, pacedBy: pacer,
                                          progress: report)
        }
        if started == nil { await resource(for: stream).endReadAheads() }
        return started
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
        let prefetch = prefetches.report(for: stream.registration.id)
        return ControlAPI.ResourceStatus(
            id: stream.registration.id, streamURL: absoluteURL(path: stream.registration.path).absoluteString,
            key: stream.registration.key.rawValue, source: stream.registration.sourceDescription, state: state,
            downloading: downloading, size: size, mimeType: info?.effectiveMIMEType, cachedBytes: cached,
            cachedRanges: ranges.ranges.map { ControlAPI.Span(start: $0.lowerBound, end: $0.upperBound) },
            bytesFromCache: statistics.bytesServedFromCache, bytesFromOrigin: statistics.bytesServedFromOrigin,
            originRequests: statistics.originRequests, prefetching: prefetch.running, prefetchError: prefetch.error,
            prefetchErrorCode: prefetch.errorCode, prefetchRate: prefetch.rate, hlsPrefetch: prefetch.playlist)
    }
}
