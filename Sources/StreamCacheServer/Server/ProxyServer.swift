#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import StreamCache
import StreamCacheHLS
import StreamCacheHTTPClient
// HummingbirdCore re-exports HTTPTypes.HTTPRequest; the engine's request type is meant here.
import struct StreamCache.HTTPRequest

/// A local HTTP/1.1 server that lets any player stream through the cache: mpv, ffmpeg, VLC,
/// GStreamer, browsers, and AVPlayer.
///
/// ```swift
/// let cache = try StreamCache(configuration: .init(directory: StreamCache.defaultDirectory()))
/// let server = try ProxyServer(cache: cache)
/// let song = server.register(url: songURL, headers: ["Authorization": "OAuth \(token)"])
/// try await server.start()
/// print(server.url(for: song))   // http://127.0.0.1:PORT/s/<random token>/song.mp3
/// // … play it …
/// await server.stop()
/// await cache.shutdown()
/// ```
///
/// Each registered resource gets an unguessable URL that keeps its file name; any other path is
/// 404, and no route fetches a URL the client names. The control API under `/api/` needs
/// ``controlToken``. The server binds 127.0.0.1 unless told otherwise.
public final class ProxyServer: Sendable {
    let core: ServerCore
    private let run = Locked<RunState>(.idle)
    /// The tasks that remove the warm-up's resources found still in use (``removeThrowaway(_:waitingAtMost:)``).
    private let leftoverRemovals = Locked<[Task<Void, Never>]>([])
    /// What the zero-copy path did (see ``FileRegionSlots``).
    let fileRegionStatistics = FileRegionSlots.Statistics()

    private enum RunState {
        case idle
        case running(StoppableServer, EventLoopTurns)
        case stopped
    }

    /// Creates a server; call ``start()`` to listen.
    ///
    /// - Parameters:
    ///   - cache: The cache the server reads and fills.
    ///   - configuration: Address, port and control-API settings.
    ///   - transport: The HTTP client for origins; by default AsyncHTTPClient with a spare
    ///     connection per origin host (`AsyncHTTPClientTransport.forDownloads`).
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) for a non-loopback host without
    ///   ``Configuration/allowsNonLoopbackHost``, a malformed control token, or a
    ///   ``Configuration/connectionSendBufferSize`` under 4 KiB.
    public init(cache: StreamCache, configuration: Configuration = Configuration(),
                transport: any HTTPTransport = AsyncHTTPClientTransport.forDownloads) throws {
        if !configuration.allowsNonLoopbackHost, !Configuration.isLoopbackHost(configuration.host) {
            throw StreamCacheError(.invalidArgument, "Binding \(configuration.host) would expose the cache to the network; allow it explicitly.")
        }
        if let token = configuration.controlToken, token.count < 16 || !SecretToken.isValid(token) {
            throw StreamCacheError(.invalidArgument, "The control token must be 16–128 URL-safe characters.")
        }
        if let size = configuration.connectionSendBufferSize, size < Configuration.smallestConnectionSendBufferSize {
            throw StreamCacheError(.invalidArgument, "The connection send buffer must be at least 4 KiB (nil keeps the system's).")
        }
        self.core = ServerCore(cache: cache, configuration: configuration, transport: transport)
    }

    /// The cache the server reads and fills.
    public var cache: StreamCache { core.cache }

    /// The bearer token the control API requires.
    public var controlToken: String { core.controlToken }

    /// `http://HOST:PORT` once the server listens, else `nil`.
    public var baseURL: URL? { core.baseURL }

    /// The port the server listens on, once it does.
    public var port: Int? { core.baseURL?.port }

    // MARK: Resources

    /// Registers an HTTP(S) resource and returns its stream registration. Registering a key again
    /// keeps its URL and replaces its headers.
    ///
    /// - Parameters:
    ///   - url: The resource's URL.
    ///   - headers: Headers for the origin, such as `Authorization`; never shown to clients.
    ///   - key: The cache key; by default derived from the URL (no user info, query digested).
    ///   - fileName: The name at the end of the stream URL; by default the URL's last path segment.
    @discardableResult
    public func register(url: URL, headers: HTTPHeaders = [:], key: CacheKey? = nil, fileName: String? = nil) -> StreamRegistration {
        core.register(url: url, headers: headers, key: key, fileName: fileName)
    }

    /// Registers a resource fetched from any ``Origin`` (a cloud source, for example).
    @discardableResult
    public func register(origin: any Origin, key: CacheKey, fileName: String) -> StreamRegistration {
        core.register(origin: origin, key: key, fileName: fileName)
    }

    /// Stops serving a registered resource; its cached bytes stay.
    @discardableResult
    public func unregister(_ registration: StreamRegistration) -> Bool {
        core.prefetches.cancel(registration.id)
        return core.registry.unregister(id: registration.id) != nil
    }

    /// Serves every file below `baseURL` at `/<token>/<relative path>`, fetched with `headers`.
    ///
    /// Paths are decoded and normalized per segment, and any path that would leave the folder
    /// (`..`, encoded slashes, empty segments) is 404. Each file is its own cached resource.
    ///
    /// - Parameter token: The first path segment; a fresh random token by default.
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) for a malformed or reserved token.
    @discardableResult
    public func mountFolder(_ baseURL: URL, headers: HTTPHeaders = [:], token: String? = nil) throws -> FolderMount {
        try core.registry.mount(baseURL, headers: headers, token: token ?? SecretToken.make())
    }

    /// Serves every file below a folder whose files `resolve` finds by their path (a cloud or
    /// WebDAV folder, which the server links no code for: see ``SourceResolving``) at
    /// `/<token>/<relative path>`.
    ///
    /// Paths are normalized as for ``mountFolder(_:headers:token:)``. A file is resolved at its
    /// first request and kept while the server runs, so a player's range requests for it cost
    /// one lookup (``StreamCacheError/Code/notFound`` answers 404, other failures 502, and are
    /// asked again next time). Its files are served as plain files, never as HLS playlists.
    ///
    /// With `list`, a `GET` of a folder's path ending with `/` (`/<token>/`, `/<token>/Album/`)
    /// lists it: an HTML index for a browser (its `Accept` names `text/html`), JSON for
    /// `Accept: application/json`, and otherwise an M3U playlist of its files and then its
    /// subfolders (playlists of their own), so a player given the folder's URL
    /// (`mpv http://127.0.0.1:8080/music/Album/`) plays them in order. A query
    /// `format=html`, `json` or `m3u` picks one. The path without its `/` redirects there.
    ///
    /// - Parameters:
    ///   - name: What the folder is, for people (a source reference, without secrets).
    ///   - token: The first path segment; a fresh random token by default.
    ///   - resolve: Finds the file at a path below the folder.
    ///   - list: Lists the folder at a path below the folder (`nil`: the mounted folder);
    ///     ``StreamCacheError/Code/notFound`` answers 404, other failures 502.
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) for a malformed or reserved token.
    @discardableResult
    public func mountFolder(named name: String, token: String? = nil,
                            resolvingFiles resolve: @escaping @Sendable (RelativePath) async throws -> SourceStream,
                            listingFolders list: (@Sendable (RelativePath?) async throws -> [FolderListingEntry])? = nil) throws -> FolderMount {
        try core.registry.mount(named: name, token: token ?? SecretToken.make(), resolvingFiles: resolve, listingFolders: list)
    }

    /// Asks the folder's origin whether it answers with these headers (a 1-byte `GET` of the
    /// folder URL), so `serve` can warn at start instead of at the first play; it also leaves the
    /// keep-alive connection the first stream will use in the client's pool (AsyncHTTPClient does
    /// not pool a connection after a `HEAD`, hence the `GET`).
    ///
    /// Call it before ``start()`` so the connection is ready when the first player comes.
    ///
    /// - Parameters:
    ///   - folder: A mounted folder.
    ///   - timeout: How long to wait for the origin's answer.
    /// - Returns: `nil` when the origin answered 2xx or 3xx, else a sentence for the user.
    public func checkOrigin(of folder: FolderMount, timeout: Duration = .seconds(10)) async -> String? {
        guard let mounted = core.registry.folder(token: folder.token) else { return "The folder is not mounted." }
        guard let baseURL = mounted.mount.baseURL else { return nil }
        var headers = mounted.headers
        headers["Range"] = "bytes=0-0"
        do {
            let response = try await core.transport.send(HTTPRequest(method: "GET", url: baseURL, headers: headers,
                                                                     timeout: timeout))
            // Read the (short) body to its end: that returns the connection to the pool for the
            // first stream, where discarding it would close it.
            _ = try? await response.body.collect(upTo: 256 * 1024)
            switch response.status {
            case 200..<400: return nil
            case 401: return "The origin rejected the credentials (HTTP 401) for \(baseURL.redactedDescription)."
            default:
                return "The origin answered HTTP \(response.status) for the folder URL \(baseURL.redactedDescription) itself; "
                    + "files below it may still be served."
            }
        } catch {
            return "The origin could not be reached at \(baseURL.redactedDescription): \(error)"
        }
    }

    /// Every registered resource.
    public var registrations: [StreamRegistration] { core.registry.streams.map(\.registration) }

    /// The URL a player opens for `registration` (valid once the server listens).
    public func url(for registration: StreamRegistration) -> URL { core.absoluteURL(path: registration.path) }

    /// The URL a player opens for `relativePath` below `folder`.
    public func url(for relativePath: String, in folder: FolderMount) -> URL? {
        RelativePath(encoded: relativePath.percentEncoded(allowing: URICharacters.isPathAllowed))
            .map { core.absoluteURL(path: folder.path(of: $0)) }
    }

    /// The resource behind a registration, for reading, prefetching or statistics.
    public func resource(for registration: StreamRegistration) -> Resource? {
        core.registry.stream(id: registration.id).map(core.resource(for:))
    }

    /// Downloads what `registration` names for offline play, in the background, as
    /// `POST /api/resources/{id}/prefetch` does: a file whole; an HLS playlist with the files
    /// of its `variants` (and the renditions they play with). The control API's status tells how
    /// it goes (`prefetching`, `hlsPrefetch`); `pinning` pins what it caches; `rate` holds it to
    /// that many bytes per second, besides the cache's background rate. Cancelling the task
    /// stops it; what came stays cached. `nil` for a registration the server no longer has,
    /// once the server has stopped (``stop()``), or when, while this call asked the origin
    /// whether it is a playlist, the registration was removed, its prefetch stopped through the
    /// control API, or the server stopped: the prefetch does not start after a stop that came
    /// after the call.
    @discardableResult
    public func prefetch(_ registration: StreamRegistration, variants: HLSVariantSelection = .highestBandwidth,
                         pinning: Bool = false, rate: Int64? = nil) async -> Task<Void, Never>? {
        // Checked before the arrival too: telling a playlist may cost an origin request.
        guard !core.prefetches.hasStopped, let stream = core.registry.stream(id: registration.id) else { return nil }
        return await core.prefetches.arriving(of: stream.registration.id) { [core] arrival in
            if await core.isPlaylist(stream), let location = stream.location {
                return await core.startPlaylistPrefetch(stream, location: location, variants: variants, segmentLimit: nil, pinning: pinning, rate: rate,
                                                        arrival: arrival)
            }
            return await core.startPrefetch(stream, range: nil, pinning: pinning, rate: rate, arrival: arrival)
        }
    }

    // MARK: Running

    /// Binds the address and starts serving; returns once the server listens.
    ///
    /// - Throws: The bind error (address in use, permission), or ``StreamCacheError``
    ///   (`invalidArgument`) when the server was already started.
    public func start() async throws {
        let listening = ListeningSignal()
        let core = self.core
        let configuration = core.configuration
        let fileRegionStatistics = self.fileRegionStatistics
        var serverLogger = configuration.logger
        serverLogger.logLevel = max(serverLogger.logLevel, .notice)
        let http1Configuration = HTTP1Channel.Configuration(
            additionalChannelHandlers: {
                var handlers: [any RemovableChannelHandler] = [ClientDepartureHandler()]
                if let size = configuration.connectionSendBufferSize { handlers.append(WriteTurnLimit(sendBufferSize: size)) }
                if configuration.sendsCachedBytesWithSendfile { handlers.append(FileRegionInstaller(statistics: fileRegionStatistics)) }
                return handlers
            }(),
            idleTimeout: .seconds(Int64(configuration.idleConnectionTimeout.components.seconds)),
            httpDecoderConfiguration: .init(maxHeaderFieldSize: configuration.maximumHeaderSize,
                                            maxHeaderListSize: configuration.maximumHeaderSize,
                                            maxHeaderFieldCount: 100))
        // One event loop accepts and serves every connection, and the server's tasks (the accept
        // loop, each connection's handler) run on it too. Hummingbird otherwise hands each new
        // connection to another loop, then to a task on Swift's global executor, and each
        // response back to the loop: four thread wake-ups per request, most of a cold first
        // byte's cost over the origin's on the test machine. Cached bytes go out with sendfile
        // and downloads, origin requests and index writes run in the engine's own tasks, so this
        // thread only parses, plans and writes. It is the group's first loop: the default
        // transport (`AsyncHTTPClientTransport.forDownloads`) receives its bodies, and runs the
        // downloads that write them, on the last, so with two or more threads the two never queue
        // behind each other.
        var loops = MultiThreadedEventLoopGroup.singleton.makeIterator()
        let eventLoop = loops.next() ?? MultiThreadedEventLoopGroup.singleton.next()
        let responder = ProxyResponder(server: core)
        // Created before the server, whose connections all wait on its turns; closed by `stop()`.
        let turns = try await EventLoopTurns.start(on: eventLoop)
        do {
            try run.withLock { state in
                guard case .idle = state else { throw StreamCacheError(.invalidArgument, "The server was already started.") }
                let server = try StoppableServer(gracePeriod: configuration.stopGracePeriod, logger: serverLogger, eventLoop: eventLoop, onExit: { error in
                    listening.fail(error ?? StreamCacheError(.invalidArgument, "The server stopped before it listened."))
                }) { connections in
                    try HTTPService.make(
                        address: .hostname(configuration.host, port: configuration.port),
                        http1: http1Configuration,
                        connections: connections,
                        eventLoopGroup: eventLoop,
                        logger: serverLogger,
                        respond: { request, channel in
                            try await responder.respond(to: request, context: ProxyRequestContext(channel: channel, turns: turns))
                        },
                        onServerRunning: { channel in
                            listening.succeed(channel.localAddress?.port ?? configuration.port)
                        }
                    )
                }
                state = .running(server, turns)
            }
        } catch {
            await turns.close()
            throw error
        }
        let port = try await listening.value()
        let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        core.baseURL = URL(string: "http://\(host):\(port)")
        await warmUp()
        configuration.logger.info("serving", metadata: ["address": "\(host):\(port)"])
    }

    /// How long the warm-up waits for its two throwaway resources to be idle, so it can remove
    /// them: at once on an idle machine, and never long enough to hold up a start for good on a
    /// busy one (those still in use are then removed later: ``removeThrowaway(_:waitingAtMost:)``).
    static let warmUpRemovalLimit: Duration = .seconds(10)

    /// Runs the index's write path and two requests through the server and the HTTP client, so a
    /// player's first request does not pay for one-time runtime work (type metadata and
    /// conformance lookups, lazily bound symbols, ICU's IDNA data that URL parsing loads on first
    /// use, connection-pipeline set-up): about 10 ms on this project's 2-core test machine,
    /// against a target of 2 ms over the origin's own time to first byte.
    ///
    /// The first request is a real 2-byte stream of a throwaway resource whose origin is in
    /// memory. The second asks for the same file below a throwaway folder mounted on this
    /// server's own URL, so it also runs what a folder's file adds: path normalization, URL
    /// parsing, ``HTTPOrigin`` and the HTTP client's request and response handling. Both
    /// resources are deleted afterwards, those still in use once they are idle. The requests go
    /// through the shared client, which keeps no spare connection: one to this server would be
    /// re-opened while the server stops, and NIO servers trap on a connection that arrives then.
    ///
    /// - Parameters:
    ///   - timeout: The limit of each request; the warm-up only saves time, so a slow machine
    ///     gives up rather than delay the start.
    ///   - removalLimit: How long the resources are waited for to be idle before the warm-up
    ///     returns (``removeThrowaway(_:waitingAtMost:)``).
    /// - Returns: How many of the two requests were answered with their 2 bytes.
    @discardableResult
    func warmUp(timeout: Duration = .seconds(2), removalLimit: Duration = warmUpRemovalLimit) async -> Int {
        var answered = 0
        await core.cache.store.warmUp()
        guard let base = core.baseURL else { return 0 }
        let key = CacheKey("streamcache:warm-up:\(SecretToken.make())")
        let registration = core.registry.register(key: key, fileName: "warm-up.bin", sourceDescription: "warm-up", origin: WarmUpOrigin())
        defer { core.registry.unregister(id: registration.id) }
        var requests = [(path: registration.path, key: key)]
        let folderToken = SecretToken.make()
        defer { core.registry.unmount(token: folderToken) }
        if let folderURL = URL(string: base.absoluteString + "/s/\(registration.id)/"),
           let mount = try? core.registry.mount(folderURL, headers: [:], token: folderToken, transport: AsyncHTTPClientTransport.shared),
           let relative = RelativePath(encoded: registration.fileName), let fileURL = relative.url(below: folderURL) {
            requests.append((mount.path(of: relative), CacheKey(url: fileURL)))
        }
        return await core.cache.withoutStatistics(for: requests.map(\.key)) {
            for request in requests {
                guard let url = URL(string: base.absoluteString + request.path),
                      let response = try? await AsyncHTTPClientTransport.shared.send(HTTPRequest(url: url, headers: ["Range": "bytes=0-1"], timeout: timeout))
                else { continue }
                if response.status == 206, (try? await response.body.collect(upTo: 4096))?.count == 2 { answered += 1 }
            }
            // The folder's file goes first, since its download reads the in-memory one.
            await removeThrowaway(requests.reversed().map(\.key), waitingAtMost: removalLimit)
            return answered
        }
    }

    /// Removes the resources of `keys`, in order, each once it is idle (its download ends as soon
    /// as its origin's body does, its reads once their connections are gone), waiting at most
    /// `limit` for all of them. Those still in use then are removed by a task of their own as soon
    /// as they are idle (``warmUpLeftoverLimit`` at most), which ``stop()`` cancels.
    ///
    /// The bound is a time, not a count of tries: under the sanitizer and the whole test suite, a
    /// hundred tries 5 ms apart ran out for both resources. Bounded alone, it still ran out there
    /// (10 s, a fresh CI machine), and the warm-up's two resources stayed in the cache's listing,
    /// its totals and a prune's list of what it evicted, for good: their keys are random.
    func removeThrowaway(_ keys: [CacheKey], waitingAtMost limit: Duration) async {
        let cache = core.cache
        var left = keys[...]
        let deadline = ContinuousClock.now + limit
        while let key = left.first, await Self.remove(key, from: cache, before: deadline, every: .milliseconds(5)) { left.removeFirst() }
        guard !left.isEmpty else { return }
        core.configuration.logger.debug("warm-up resources still in use; removing them once idle", metadata: ["count": "\(left.count)"])
        let removal = Task {
            let deadline = ContinuousClock.now + Self.warmUpLeftoverLimit
            for key in left where !(await Self.remove(key, from: cache, before: deadline, every: .milliseconds(50))) { return }
        }
        leftoverRemovals.withLock { $0.append(removal) }
    }

    /// Tries to remove `key` from `cache` every `interval` until it goes (`true`), or until
    /// `deadline` or a cancellation (`false`).
    private static func remove(_ key: CacheKey, from cache: StreamCache, before deadline: ContinuousClock.Instant,
                               every interval: Duration) async -> Bool {
        while true {
            if (try? await cache.remove(key)) != nil { return true }
            guard !Task.isCancelled, ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: interval)
        }
    }

    /// How long the warm-up's resources still in use when the start went on are waited for
    /// (``removeThrowaway(_:waitingAtMost:)``): a reader that stays longer is no warm-up's.
    static let warmUpLeftoverLimit: Duration = .seconds(600)

    /// Waits until the warm-up's resources that were still in use when ``start()`` returned are
    /// removed, or given up on; at once when there were none.
    package func warmUpLeftoversRemoved() async {
        for removal in leftoverRemovals.withLock({ $0 }) { await removal.value }
    }

    /// Stops listening, closes every connection and cancels prefetches started through the
    /// control API (and the removal of start-up warm-up resources still in use, which then stay
    /// cached like any others). Idle connections close at once; a request in progress may finish within
    /// ``Configuration/stopGracePeriod``, then it is cut. Cached bytes are kept; call
    /// ``StreamCache/shutdown()`` afterwards to record the last ones in the index.
    public func stop() async {
        let running = run.withLock { state -> (server: StoppableServer, turns: EventLoopTurns)? in
            defer { state = .stopped }
            if case .running(let server, let turns) = state { return (server, turns) }
            return nil
        }
        await running?.server.stop()
        await running?.turns.close()
        await core.prefetches.stopAll()
        for removal in leftoverRemovals.withLock({ removals in defer { removals = [] }; return removals }) {
            removal.cancel()
            await removal.value
        }
    }

    /// Runs until the task is cancelled, then stops.
    public func run() async throws {
        if baseURL == nil { try await start() }
        let server = run.withLock { state -> StoppableServer? in
            if case .running(let server, _) = state { return server }
            return nil
        }
        await withTaskCancellationHandler {
            await server?.waitUntilEnded()
        } onCancel: {
            Task { await server?.stop() }
        }
        await stop()
    }
}

/// Hands the bound port from the server's start callback to ``ProxyServer/start()``, once.
private final class ListeningSignal: Sendable {
    private let state = Locked<(Result<Int, any Error>?, CheckedContinuation<Int, any Error>?)>((nil, nil))

    func succeed(_ port: Int) { complete(.success(port)) }
    func fail(_ error: any Error) { complete(.failure(error)) }

    private func complete(_ result: Result<Int, any Error>) {
        let waiter = state.withLock { state -> CheckedContinuation<Int, any Error>? in
            guard state.0 == nil else { return nil }
            state.0 = result
            defer { state.1 = nil }
            return state.1
        }
        waiter?.resume(with: result)
    }

    func value() async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state -> Result<Int, any Error>? in
                if let result = state.0 { return result }
                state.1 = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}

/// The origin of the start-up warm-up request: a small resource in memory.
private struct WarmUpOrigin: Origin {
    static let length: Int64 = 64 * 1024

    var logDescription: String { "warm-up" }

    func open(_ request: OriginRequest) async throws -> OriginResponse {
        let range = (request.range ?? ByteRange(0, Self.length)).clamped(toLength: Self.length)
        let info = ResourceInfo(totalLength: Self.length, mimeType: "application/octet-stream", acceptsByteRanges: true,
                                validator: Validator(entityTag: "\"warm-up\""))
        return OriginResponse(info: info, offset: range.lowerBound, length: range.count, body: HTTPBody(chunks: [Data(count: Int(range.count))]))
    }
}
