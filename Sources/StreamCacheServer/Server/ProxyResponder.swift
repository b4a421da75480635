#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HummingbirdCore
import HTTPTypes
import struct HTTPTypes.HTTPResponse
import Logging
import NIOCore
import StreamCache
import StreamCacheHLS

/// What a response depends on besides the request: the peer's address, which the control API
/// checks, and what body writers need of the connection.
struct ProxyRequestContext {
    let peerIsLoopback: Bool
    /// The connection's event loop, sendfile slots, departure and the polls of its loop (see
    /// ``RangeResponder/OutboundPacer``).
    let outbound: RangeResponder.OutboundPacer

    init(channel: any Channel, turns: EventLoopTurns? = nil) {
        peerIsLoopback = Self.isLoopback(channel.remoteAddress)
        outbound = RangeResponder.OutboundPacer(eventLoop: channel.eventLoop, fileRegions: FileRegionSlots.slots(for: channel),
                                                departure: ClientDeparture.byChannel.value(for: channel), turns: turns)
    }

    static func isLoopback(_ address: SocketAddress?) -> Bool {
        switch address {
        case .v4(let v4)?: return (UInt32(bigEndian: v4.address.sin_addr.s_addr) >> 24) == 127
        case .v6?: return address?.ipAddress == "::1" || (address?.ipAddress?.hasPrefix("::ffff:127.") ?? false)
        case .unixDomainSocket?: return true
        default: return false
        }
    }
}

/// Routes every request by its raw path, once its `Host` is one the server answers
/// (``ProxyServer/Configuration/allowedHostNames``), and lets the web pages the user allowed
/// read the answer (``CrossOriginSharing``); nothing else is served, and there is no route that
/// fetches a URL named by the client (the proxy is never an open proxy):
///
/// - `/api/…` → ``ControlAPIResponder``
/// - `/s/<id>/<file name>` → a registered resource
/// - `/<token>/<relative path>` → a file below a served folder
/// - `/<token>/<relative path>/` → the listing of a folder below a served folder that can be listed
/// - anything else → 404
struct ProxyResponder: Sendable {
    typealias Context = ProxyRequestContext

    let server: ServerCore
    let ranges: RangeResponder
    let playlists: PlaylistResponder
    let api: ControlAPIResponder
    let listings: FolderListingResponder
    let crossOrigin: CrossOriginSharing

    init(server: ServerCore) {
        self.server = server
        self.ranges = RangeResponder(logger: server.logger)
        self.playlists = PlaylistResponder(server: server)
        self.listings = FolderListingResponder(logger: server.logger)
        self.api = ControlAPIResponder(server: server)
        self.crossOrigin = CrossOriginSharing(allowing: server.configuration.allowedWebOrigins)
    }

    func respond(to request: Request, context: Context) async throws -> Response {
        guard server.configuration.acceptsHost(request.head.authority) else {
            return PlaylistResponder.plainText(.forbidden, "This server answers requests for 127.0.0.1 and localhost only (see ProxyServer.Configuration.allowedHostNames, `serve --allow-host`).")
        }
        if let preflight = crossOrigin.preflightResponse(to: request) { return preflight }
        var response = await route(request, context: context)
        crossOrigin.allow(&response, for: request)
        return response
    }

    private func route(_ request: Request, context: Context) async -> Response {
        let path = request.uri.path
        guard path.hasPrefix("/") else { return Self.notFound }
        let segments = path.dropFirst().split(separator: "/", maxSplits: 2, omittingEmptySubsequences: false)
        guard let first = segments.first else { return Self.notFound }
        switch first {
        case "api":
            let rest = path.dropFirst(5).split(separator: "/", omittingEmptySubsequences: true)
            return await api.respond(to: request, segments: rest[...], peerIsLoopback: context.peerIsLoopback)
        case "s":
            guard segments.count == 3, let stream = server.registry.stream(id: segments[1]),
                  segments[2].percentDecoded == stream.registration.fileName else { return Self.notFound }
            return await respond(to: request, stream: stream, context: context)
        default:
            guard let folder = server.registry.folder(token: first) else { return Self.notFound }
            guard segments.count >= 2 else {
                // The folder's own path without its `/`: a browser given it goes on to the listing.
                guard folder.listFolder != nil else { return Self.notFound }
                return Response(status: .movedPermanently, headers: [.location: "/\(first)/", .contentLength: "0"])
            }
            let encodedRest = path.dropFirst(first.count + 2)
            if let list = folder.listFolder, encodedRest.isEmpty || encodedRest.hasSuffix("/") {
                let folderPath = encodedRest.dropLast()
                var relative: RelativePath?
                if !folderPath.isEmpty {
                    guard let parsed = RelativePath(encoded: folderPath) else { return Self.notFound }
                    relative = parsed
                }
                return await listings.respond(to: request, folder: folder.mount, path: relative, list: list)
            }
            guard let relative = RelativePath(encoded: encodedRest) else { return Self.notFound }
            if let files = folder.resolvedFiles { return await respond(to: request, file: relative, of: files, token: first, context: context) }
            guard let baseURL = folder.mount.baseURL, let url = relative.url(below: baseURL) else { return Self.notFound }
            // A file below a folder is not registered: it gets a stream for this request only,
            // named by the folder's token, so it is served (and its playlists resolved) like one.
            let registration = StreamRegistration(id: String(first), fileName: relative.fileName, key: CacheKey(url: url), sourceDescription: "")
            let stream = StreamRegistry.Stream(registration: registration, origin: server.makeOrigin(url: url, headers: folder.headers, transport: folder.transport),
                                               location: HLSLocation(url: url, headers: folder.headers))
            return await respond(to: request, stream: stream, context: context)
        }
    }

    /// A file below a folder mounted with a resolver: looked up once, then served as a plain file.
    private func respond(to request: Request, file path: RelativePath, of files: ResolvedFolderFiles, token: Substring,
                         context: Context) async -> Response {
        let file: SourceStream
        do {
            file = try await files.file(at: path)
        } catch let error as StreamCacheError where error.code == .notFound {
            return Self.notFound
        } catch {
            server.logger.warning("A file below a mounted folder could not be looked up", metadata: ["error": "\(error)"])
            var response = Response(status: .badGateway, headers: [.contentType: "text/plain; charset=utf-8"],
                                    body: ResponseBody(byteBuffer: ByteBuffer(string: "The file could not be looked up: \(error)\n")))
            if let error = error as? StreamCacheError { response.headers[.streamCacheError] = "\(error.code)" }
            return response
        }
        let registration = StreamRegistration(id: String(token), fileName: path.fileName, key: file.key, sourceDescription: "")
        return await respond(to: request, stream: StreamRegistry.Stream(registration: registration, origin: file.origin, isPlaylist: false),
                             context: context)
    }

    /// A file: a playlist when its name or known type says so (or its stream was named as one);
    /// otherwise a range answer, which hands over to the playlist responder if the origin's type
    /// turns out to be a playlist's.
    private func respond(to request: Request, stream: StreamRegistry.Stream, context: Context) async -> Response {
        let resource = server.resource(for: stream)
        if server.isPlaylist(stream, resource: resource) {
            return await playlists.respond(method: request.method, resource: resource, origin: stream.origin, location: stream.location)
        }
        var playlistFallback: RangeResponder.PlaylistFallback?
        if stream.isPlaylist == nil {
            let method = request.method
            let (playlists, origin, location) = (playlists, stream.origin, stream.location)
            playlistFallback = { await playlists.respond(method: method, resource: resource, origin: origin, location: location) }
        }
        return await ranges.respond(to: request, resource: resource, fileName: stream.registration.fileName, outbound: context.outbound,
                                    playlistFallback: playlistFallback)
    }

    static var notFound: Response {
        Response(status: .notFound, headers: [.contentType: "text/plain; charset=utf-8"], body: ResponseBody(byteBuffer: ByteBuffer(string: "Not found.\n")))
    }
}
