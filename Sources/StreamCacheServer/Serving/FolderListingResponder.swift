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

/// Answers `GET` and `HEAD` for a folder below a mounted folder that can be listed
/// (``ProxyServer/mountFolder(named:token:resolvingFiles:listingFolders:)``): an HTML index, JSON,
/// or an M3U playlist of its files.
///
/// The playlist is the default, since what asks for a folder's URL without naming HTML or JSON is
/// a player (mpv, VLC and ffplay send `Accept: */*`), and a player plays a playlist. Its entries
/// are absolute URLs built from the request's `Host`, as players resolve a playlist's relative
/// entries unevenly; the index and the JSON use paths from the root, as the HLS playlists do.
/// Folders come first, then files, each by name in the order a file manager shows them (as
/// `prefetch` takes a folder's files); the M3U lists the files first, then the folders. A folder's
/// size is not shown (services tell none, or 0). With `recursive=1` the M3U and the JSON list every
/// file below the folder instead, each named by its path below it, folder after folder (depth
/// first, in the same order): one flat playlist for a player that does not open the nested ones.
struct FolderListingResponder: Sendable {
    /// What a listing is answered as.
    enum Format: String, Sendable {
        case html, json, m3u

        /// The format a `format` query asks for, else the one the `Accept` header prefers.
        init(query: String?, accept: String?) {
            if let query, let asked = Format(rawValue: query.lowercased()) {
                self = asked
                return
            }
            let accept = accept?.lowercased() ?? ""
            if accept.contains("text/html") {
                self = .html
            } else if accept.contains("application/json") {
                self = .json
            } else {
                self = .m3u
            }
        }

        var contentType: String {
            switch self {
            case .html: "text/html; charset=utf-8"
            case .json: "application/json"
            case .m3u: "audio/x-mpegurl; charset=utf-8"
            }
        }
    }

    /// One entry of the JSON listing.
    struct JSONEntry: Encodable {
        var name: String
        var type: String
        var size: Int64?
        var path: String
    }

    /// The JSON listing.
    struct JSONListing: Encodable {
        var folder: String
        var path: String
        var entries: [JSONEntry]
    }

    let logger: Logger

    /// Lists the folder at `path` (`nil`: the mounted folder) of `folder` with `list`.
    func respond(to request: Request, folder mount: FolderMount, path: RelativePath?,
                 list: @Sendable (RelativePath?) async throws -> [FolderListingEntry]) async -> Response {
        guard request.method == .get || request.method == .head else {
            return Response(status: .methodNotAllowed, headers: [.allow: "GET, HEAD", .contentLength: "0"])
        }
        let format = Format(query: request.uri.queryParameters["format"].map(String.init), accept: request.headers[.accept])
        let recursive = format != .html && ["1", "true", "yes"].contains(request.uri.queryParameters["recursive"].map { $0.lowercased() } ?? "")
        let entries: [Listed]
        do {
            entries = recursive ? try await Self.files(below: path, list: list) : try await list(path).sorted(by: Self.inListingOrder).map { Listed(entry: $0) }
        } catch let error as StreamCacheError where error.code == .notFound {
            return ProxyResponder.notFound
        } catch {
            logger.warning("A folder below a mounted folder could not be listed", metadata: ["error": "\(error)"])
            var response = PlaylistResponder.plainText(.badGateway, "The folder could not be listed: \(error)")
            if let error = error as? StreamCacheError { response.headers[.streamCacheError] = "\(error.code)" }
            return response
        }
        let folderPath = path.map { mount.path(of: $0) + "/" } ?? "/\(mount.token)/"
        let title = path.map { "\(mount.name)/\($0)" } ?? mount.name
        let body: String
        switch format {
        case .html: body = Self.html(title: title, folderPath: folderPath, isTop: path == nil, entries: entries)
        case .json: body = Self.json(title: title, folderPath: folderPath, entries: entries)
        case .m3u: body = Self.m3u(base: Self.origin(host: request.head.authority), folderPath: folderPath, entries: entries)
        }
        // A listing changes when a file is added; a player or browser asks again each time.
        let headers: HTTPFields = [.contentType: format.contentType, .contentLength: String(body.utf8.count), .cacheControl: "no-cache"]
        if request.method == .head { return Response(status: .ok, headers: headers) }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: body)))
    }

    /// An entry of a listing, with the folders between the one listed and it: none but in a
    /// recursive listing.
    struct Listed {
        var entry: FolderListingEntry
        var folders: [String] = []

        /// Its name, or its path below the folder listed.
        var name: String { (folders + [entry.name]).joined(separator: "/") }
        var isFolder: Bool { entry.isFolder }
        var size: Int64? { entry.size }
    }

    /// Folders first, then files, each by name as a file manager shows them (`Track 2` before
    /// `Track 10`): a player plays an album's tracks in turn.
    static func inListingOrder(_ first: FolderListingEntry, _ second: FolderListingEntry) -> Bool {
        first.isFolder != second.isFolder ? first.isFolder : first.name.naturallyPrecedes(second.name)
    }

    /// The most levels below a folder a recursive listing goes, files it lists, and folders it asks
    /// to list: a bound on what one request costs the service.
    static let recursiveDepth = 16
    static let recursiveFiles = 10_000
    static let recursiveFolders = 2_000

    /// Every file below the folder at `path`, each named by its path below it: the folder's files,
    /// then each subfolder's, depth first, in listing order. A subfolder gone since its folder was
    /// listed is left out.
    static func files(below path: RelativePath?, list: @Sendable (RelativePath?) async throws -> [FolderListingEntry]) async throws -> [Listed] {
        var files: [Listed] = []
        var foldersListed = 0
        func walk(_ folder: RelativePath?, prefix: [String]) async throws {
            foldersListed += 1
            let entries = try await list(folder).sorted(by: inListingOrder)
            for entry in entries where !entry.isFolder && files.count < recursiveFiles {
                files.append(Listed(entry: entry, folders: prefix))
            }
            guard prefix.count < recursiveDepth else { return }
            for entry in entries where entry.isFolder {
                guard foldersListed < recursiveFolders, files.count < recursiveFiles,
                      let child = RelativePath(segments: (folder?.segments ?? []) + [entry.name]) else { continue }
                do {
                    try await walk(child, prefix: prefix + [entry.name])
                } catch let error as StreamCacheError where error.code == .notFound {
                    continue
                }
            }
        }
        try await walk(path, prefix: [])
        return files
    }

    /// The path of `listed` in the folder at `folderPath` (which ends with `/`), each segment
    /// encoded (a `/` in a name too); a folder's ends with `/`.
    static func path(of listed: Listed, in folderPath: String) -> String {
        folderPath + (listed.folders + [listed.entry.name]).map { $0.percentEncoded(allowing: URICharacters.isUnreserved) }.joined(separator: "/")
            + (listed.isFolder ? "/" : "")
    }

    /// `http://HOST` for a `Host` value that is a host name or address with an optional port;
    /// `""` (paths from the root) for anything else.
    static func origin(host: String?) -> String {
        guard let host, !host.isEmpty, host.utf8.count <= 255,
              host.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) || ".-:[]".utf8.contains($0) })
        else { return "" }
        return "http://\(host)"
    }

    /// The folder's files, then its subfolders, each a playlist of its own that a player opens
    /// when it comes to it (mpv and VLC do): given a folder of albums, a player plays them all.
    static func m3u(base: String, folderPath: String, entries: [Listed]) -> String {
        var text = "#EXTM3U\n"
        for entry in entries.filter({ !$0.isFolder }) + entries.filter(\.isFolder) {
            // A title on one line: a line break in a name would start an entry of its own.
            let title = String(entry.name.map { $0.isNewline ? " " : $0 }) + (entry.isFolder ? "/" : "")
            text += "#EXTINF:-1,\(title)\n\(base)\(path(of: entry, in: folderPath))\n"
        }
        return text
    }

    static func json(title: String, folderPath: String, entries: [Listed]) -> String {
        let listing = JSONListing(folder: title, path: folderPath, entries: entries.map {
            JSONEntry(name: $0.name, type: $0.isFolder ? "folder" : "file", size: $0.isFolder ? nil : $0.size, path: path(of: $0, in: folderPath))
        })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(listing)) ?? Data(), as: UTF8.self) + "\n"
    }

    static func html(title: String, folderPath: String, isTop: Bool, entries: [Listed]) -> String {
        var rows = isTop ? "" : "<li><a href=\"../\">../</a></li>\n"
        for entry in entries {
            let name = entry.name.htmlEscaped + (entry.isFolder ? "/" : "")
            let size = entry.isFolder ? "" : entry.size.map { " <small>\(ByteFormat.string($0))</small>" } ?? ""
            rows += "<li><a href=\"\(path(of: entry, in: folderPath).htmlEscaped)\">\(name)</a>\(size)</li>\n"
        }
        var playAll = entries.contains { !$0.isFolder } ? "<a href=\"\(folderPath.htmlEscaped)?format=m3u\">Play all (M3U)</a>" : ""
        if entries.contains(where: \.isFolder) {
            playAll += (playAll.isEmpty ? "" : " · ") + "<a href=\"\(folderPath.htmlEscaped)?format=m3u&amp;recursive=1\">Play all, subfolders too (M3U)</a>"
        }
        if !playAll.isEmpty { playAll = "<p>\(playAll)</p>\n" }
        return """
            <!DOCTYPE html>
            <html><head><meta charset="utf-8"><title>\(title.htmlEscaped)</title></head>
            <body><h1>\(title.htmlEscaped)</h1>
            \(playAll)<ul>
            \(rows)</ul></body></html>

            """
    }
}
