#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import struct HTTPTypes.HTTPRequest
import struct HTTPTypes.HTTPResponse
import HummingbirdCore
import Logging
import NIOCore
import StreamCache
import StreamCacheHLS

/// Answers `GET` and `HEAD` for an HLS playlist: the origin's playlist with every URI it names
/// replaced by the proxy URL of that file.
///
/// Each variant playlist, rendition, key, initialization section and segment becomes a stream
/// of its own (`/s/<random id>/<file name>`), fetched through the cache with the playlist's
/// headers when it is on the playlist's origin (see ``HLSLocation``). Paths are root-relative, so
/// they work whichever host name the player used for the proxy. The answer holds neither the
/// origin's URLs, nor its query strings (signed URLs), nor its headers.
///
/// VOD playlists are cached like any file; live ones are reloaded as ``HLSPlaylistLoader``
/// describes, and sent with `Cache-Control: no-cache`. The whole playlist is always sent (200):
/// a `Range` header is ignored, as RFC 9110 allows, since the rewritten text has no stable bytes.
struct PlaylistResponder: Sendable {
    let server: ServerCore

    func respond(method: HTTPRequest.Method, resource: Resource, origin: any Origin, location: HLSLocation?) async -> Response {
        guard method == .get || method == .head else {
            return Response(status: .methodNotAllowed, headers: [.allow: "GET, HEAD", .contentLength: "0"])
        }
        guard let location else {
            return Self.plainText(.notImplemented,
                                  "This stream is an HLS playlist, but it was registered without a URL, so the files it names cannot be located. Register it by URL.")
        }
        let loaded: HLSPlaylistLoader.LoadedPlaylist
        do {
            loaded = try await server.playlists.playlist(of: resource, origin: origin)
        } catch {
            return RangeResponder.errorResponse(for: error, logger: server.logger, key: resource.key)
        }
        let text = loaded.playlist.rewritten { reference in
            guard let child = location.resolve(reference.uri) else { return nil }
            return server.registerDerived(child, isPlaylist: reference.role.isPlaylist).path
        }
        var headers: HTTPFields = [.contentType: HLSPlaylist.mimeType, .contentLength: String(text.utf8.count)]
        // A live playlist changes every target duration; a player's HTTP cache must not keep it.
        headers[.cacheControl] = loaded.playlist.isLive ? "no-cache" : "max-age=3600"
        if method == .head { return Response(status: .ok, headers: headers) }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func plainText(_ status: HTTPResponse.Status, _ message: String) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-store"],
                 body: ResponseBody(byteBuffer: ByteBuffer(string: message + "\n")))
    }
}
