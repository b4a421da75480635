#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import struct HTTPTypes.HTTPResponse
import HummingbirdCore
import NIOCore
import StreamCache
import StreamCacheHLS

/// Serves `/api/…`: registers, lists, removes and prefetches resources, and stops their
/// prefetches; pins, unpins and deletes the cache's entries by key (`/api/cache/{key}`, what
/// `streamcache cache pin`, `unpin` and `clear` do beside a running server); and tells the cache's
/// totals (`/api/stats`) and metrics (`/api/metrics`).
///
/// Every request needs `Authorization: Bearer <control token>` (401 otherwise) and, unless the
/// server allows remote control, a loopback peer (403 otherwise). Request bodies are JSON of at
/// most 64 KiB; malformed JSON is a 400 with a reason, never a crash.
struct ControlAPIResponder: Sendable {
    let server: ServerCore

    static let maximumBodySize = 64 * 1024

    func respond(to request: Request, segments: ArraySlice<Substring>, peerIsLoopback: Bool) async -> Response {
        guard peerIsLoopback || server.configuration.allowsRemoteControl else {
            return Self.error(.forbidden, "forbidden", "The control API answers loopback clients only.")
        }
        guard Self.isAuthorized(request.headers[.authorization], token: server.controlToken) else {
            var response = Self.error(.unauthorized, "unauthorized", "Send the control token as 'Authorization: Bearer <token>'.")
            response.headers[.wwwAuthenticate] = "Bearer realm=\"streamcache\""
            return response
        }
        var request = request
        switch (request.method, Array(segments)) {
        case (.get, ["resources"]):
            return await list()
        case (.post, ["resources"]):
            return await register(&request)
        case (.get, let path) where path.count == 2 && path[0] == "resources":
            guard let stream = server.registry.stream(id: path[1]) else { return Self.notFound() }
            return Self.json(.ok, await server.status(of: stream))
        case (.delete, let path) where path.count == 2 && path[0] == "resources":
            return await remove(id: path[1], purge: request.uri.queryParameters["purge"].map { $0 == "1" || $0 == "true" } ?? false)
        case (.post, let path) where path.count == 3 && path[0] == "resources" && path[2] == "prefetch":
            return await prefetch(id: path[1], request: &request)
        case (.delete, let path) where path.count == 3 && path[0] == "resources" && path[2] == "prefetch":
            guard let stream = server.registry.stream(id: path[1]) else { return Self.notFound() }
            let requestID = request.uri.queryParameters["requestID"].map(String.init)
            if let refusal = Self.refusal(ofRequestID: requestID) { return refusal }
            await server.prefetches.stop(stream.registration.id, requestID: requestID)
            return Self.json(.ok, await server.status(of: stream))
        case (.put, let path) where path.count == 3 && path[0] == "cache" && path[2] == "pin":
            return await setPinned(true, key: path[1])
        case (.delete, let path) where path.count == 3 && path[0] == "cache" && path[2] == "pin":
            return await setPinned(false, key: path[1])
        case (.post, let path) where path.count == 3 && path[0] == "cache" && path[2] == "verify":
            return await checkContent(key: path[1])
        case (.post, ["cache", "prune"]):
            return await prune(&request)
        case (.delete, let path) where path.count == 2 && path[0] == "cache":
            return await removeEntry(key: path[1])
        case (.delete, ["cache"]):
            return await removeAll()
        case (.get, ["stats"]):
            return await stats()
        case (.get, ["settings"]):
            return Self.json(.ok, settings)
        case (.put, ["settings"]):
            return await changeSettings(&request)
        case (.get, ["metrics"]):
            guard let exposition = server.configuration.metricsExposition else {
                return Self.error(.notFound, "notFound", "This server was started without metrics.")
            }
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8", .cacheControl: "no-store"],
                            body: ResponseBody(byteBuffer: ByteBuffer(bytes: exposition())))
        case (_, let path) where path == ["stats"] || path == ["metrics"] || path == ["settings"]
            || (["resources", "cache"].contains(path.first ?? "") && path.count <= 3):
            return Self.error(.methodNotAllowed, "methodNotAllowed", "This method is not allowed here.")
        default:
            return Self.notFound()
        }
    }

    static func isAuthorized(_ header: String?, token: String) -> Bool {
        guard let header, header.count > 7, header.prefix(7).lowercased() == "bearer " else { return false }
        return SecretToken.matches(header.dropFirst(7).trimmingWhitespace(), token)
    }

    private func list() async -> Response {
        var statuses: [ControlAPI.ResourceStatus] = []
        for stream in server.registry.streams { statuses.append(await server.status(of: stream)) }
        let folders = server.registry.folders.map { server.absoluteURL(path: "/\($0.token)/").absoluteString }
        return Self.json(.ok, ControlAPI.ResourceList(resources: statuses, folders: folders.sorted()))
    }

    private func stats() async -> Response {
        do {
            let cachedBytes = try await server.cache.store.totalCachedBytes()
            return Self.json(.ok, ControlAPI.CacheStats(statistics: server.cache.statistics, cachedBytes: cachedBytes,
                                                         maximumSize: server.cache.configuration.maximumSize))
        } catch {
            return Self.error(.internalServerError, "cacheIOFailed", "The cache index could not be read.")
        }
    }

    private var settings: ControlAPI.Settings {
        ControlAPI.Settings(backgroundDownloadRate: server.cache.backgroundDownloadRate)
    }

    private func changeSettings(_ request: inout Request) async -> Response {
        let change: ControlAPI.SettingsChange
        do {
            change = try await Self.decode(ControlAPI.SettingsChange.self, from: &request)
        } catch {
            return Self.error(.badRequest, "invalidRequest", "\(error)")
        }
        if let rate = change.backgroundDownloadRate {
            guard (rate ?? 0) >= 0 else { return Self.error(.badRequest, "invalidRequest", "backgroundDownloadRate must be 0 or more (bytes per second).") }
            server.cache.backgroundDownloadRate = rate
            server.logger.info("background download rate set", metadata: ["bytesPerSecond": "\(rate.map(String.init) ?? "none")"])
        }
        return Self.json(.ok, settings)
    }

    private func register(_ request: inout Request) async -> Response {
        let body: ControlAPI.RegisterRequest
        do {
            body = try await Self.decode(ControlAPI.RegisterRequest.self, from: &request)
        } catch {
            return Self.error(.badRequest, "invalidRequest", "\(error)")
        }
        if let source = body.source {
            guard body.url == nil else { return Self.error(.badRequest, "invalidRequest", "Give 'url' or 'source', not both.") }
            return await register(source: source, access: body.sourceAccess ?? ControlAPI.SourceAccess(), aliases: body.aliases ?? [])
        }
        guard body.aliases == nil else { return Self.error(.badRequest, "invalidRequest", "'aliases' name a 'source' file; a 'url' has its 'key'.") }
        guard let url = URL(string: body.url ?? ""), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            return Self.error(.badRequest, "invalidRequest", "'url' must be an absolute http or https URL.")
        }
        var headers = HTTPHeaders()
        for (name, value) in (body.headers ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard HTTPField.Name(name) != nil, HTTPHeaders.isValidFieldValue(value) else {
                return Self.error(.badRequest, "invalidRequest", "A header name or value is malformed.")
            }
            headers.add(name: name, value: value)
        }
        let registration = server.register(url: url, headers: headers, key: body.key.map { CacheKey($0) }, fileName: body.name)
        guard let stream = server.registry.stream(id: registration.id) else { return Self.notFound() }
        return Self.json(.created, await server.status(of: stream))
    }

    private func register(source reference: String, access: ControlAPI.SourceAccess, aliases: [String]) async -> Response {
        guard let resolver = server.configuration.sourceResolver else {
            return Self.error(.badRequest, "invalidRequest", "This server takes no source references; register a 'url'.")
        }
        let file: SourceStream
        do {
            file = try await resolver.resolve(reference, access: access)
        } catch let error as StreamCacheError {
            // The service's answer, not the control API's: a refused token is not this request's 401.
            let status: HTTPResponse.Status = switch error.code {
            case .invalidArgument: .badRequest
            case .notFound: .notFound
            default: .badGateway
            }
            return Self.error(status, "\(error.code)", error.message)
        } catch {
            return Self.error(.badGateway, "originUnavailable", "\(error)")
        }
        // A file found from the cache alone keeps the names it had; one the service found gets these too.
        if !file.isProvisional {
            for alias in aliases where alias != reference {
                // A hint, as every alias: an index that cannot write it costs an offline listing, not the file.
                try? await server.cache.setAlias(alias, for: file.key, fileName: file.fileName)
            }
        }
        let registration = server.register(origin: file.origin, key: file.key, fileName: file.fileName)
        guard let stream = server.registry.stream(id: registration.id) else { return Self.notFound() }
        return Self.json(.created, await server.status(of: stream))
    }

    private func remove(id: Substring, purge: Bool) async -> Response {
        guard let registration = server.registry.unregister(id: String(id)) else { return Self.notFound() }
        guard purge else {
            server.prefetches.cancel(registration.id)
            return Response(status: .noContent)
        }
        // Waited for: a prefetch's read, cancelled but not yet ended, keeps the resource in use,
        // and the bytes were kept with a 409 while the prefetch the caller meant to end with them
        // ended a moment later.
        await server.prefetches.stop(registration.id)
        do {
            try await server.cache.remove(registration.key)
        } catch {
            return Self.error(.conflict, "inUse", "Unregistered, but the cached bytes are in use and were kept: \(error)")
        }
        return Response(status: .noContent)
    }

    // MARK: The cache's entries, by key

    /// The cache key a path segment names: percent-encoded, since keys hold slashes.
    private static func key(_ segment: Substring) -> CacheKey? {
        guard let decoded = segment.percentDecoded, !decoded.isEmpty else { return nil }
        return CacheKey(decoded)
    }

    private func setPinned(_ pinned: Bool, key segment: Substring) async -> Response {
        guard let key = Self.key(segment) else { return Self.error(.badRequest, "invalidRequest", "The key is not percent-encoded UTF-8.") }
        do {
            guard try await server.cache.setPinned(pinned, for: key) else { return Self.noSuchKey(key) }
            return Self.json(.ok, ControlAPI.PinState(key: key.rawValue, pinned: pinned))
        } catch {
            return Self.error(.internalServerError, "cacheIOFailed", "The cache index could not be written: \(error)")
        }
    }

    private func checkContent(key segment: Substring) async -> Response {
        guard let key = Self.key(segment) else { return Self.error(.badRequest, "invalidRequest", "The key is not percent-encoded UTF-8.") }
        do {
            guard let result = try await server.cache.checkContent(of: key) else { return Self.noSuchKey(key) }
            return Self.json(.ok, ControlAPI.ContentCheck(key: key, result: result))
        } catch {
            return Self.error(.internalServerError, "cacheIOFailed", "The cached bytes could not be read: \(error)")
        }
    }

    private func removeEntry(key segment: Substring) async -> Response {
        guard let key = Self.key(segment) else { return Self.error(.badRequest, "invalidRequest", "The key is not percent-encoded UTF-8.") }
        do {
            guard try await server.cache.remove(key) else { return Self.noSuchKey(key) }
            return Response(status: .noContent)
        } catch let error as StreamCacheError where error.code == .invalidArgument {
            return Self.error(.conflict, "inUse", error.message)
        } catch {
            return Self.error(.internalServerError, "cacheIOFailed", "The cached bytes could not be deleted: \(error)")
        }
    }

    private func removeAll() async -> Response {
        do {
            let before = try await server.cache.entries().count
            let removed = try await server.cache.removeAll()
            // A resource a player has just begun to read may have no index row yet (its first
            // bytes are not committed): it is kept all the same.
            let kept = max(before - removed, server.cache.resourcesInUse)
            return Self.json(.ok, ControlAPI.Removal(removed: removed, kept: kept))
        } catch {
            return Self.error(.internalServerError, "cacheIOFailed", "The cache could not be cleared: \(error)")
        }
    }

    /// One eviction pass by the rules the request names, beside the server's own.
    private func prune(_ request: inout Request) async -> Response {
        let body: ControlAPI.PruneRequest
        do {
            body = try await Self.decode(ControlAPI.PruneRequest.self, from: &request)
        } catch {
            return Self.error(.badRequest, "invalidRequest", "\(error)")
        }
        // Checked before the age becomes a `Duration`: milliseconds past `Int64.max` (an age of
        // 1e300 seconds, say) would stop the server.
        guard [body.maximumSize, body.minimumFreeSpace].allSatisfy({ ($0 ?? 0) >= 0 }), body.maximumAgeSeconds.map({ $0.isFinite && $0 >= 0 && $0 < 1e15 }) ?? true else {
            return Self.error(.badRequest, "invalidRequest", "The rules must be zero or more (and the age finite, below 10^15 seconds).")
        }
        let rules = EvictionRules(maximumSize: body.maximumSize, maximumAge: body.maximumAgeSeconds.map { .milliseconds(Int64(($0 * 1000).rounded())) },
                                  minimumFreeSpace: body.minimumFreeSpace)
        guard !rules.isEmpty else {
            return Self.error(.badRequest, "invalidRequest", "Name at least one rule: maximumSize, maximumAgeSeconds or minimumFreeSpace.")
        }
        do {
            let evicted = try await server.cache.evict(rules, dryRun: body.dryRun ?? false)
            return Self.json(.ok, ControlAPI.Pruning(evicted, dryRun: body.dryRun ?? false))
        } catch {
            return Self.error(.internalServerError, "cacheIOFailed", "The cache could not be pruned: \(error)")
        }
    }

    private static func noSuchKey(_ key: CacheKey) -> Response {
        error(.notFound, "notFound", "The cache has no resource with key \(key).")
    }

    private func prefetch(id: Substring, request: inout Request) async -> Response {
        guard let stream = server.registry.stream(id: id) else { return Self.notFound() }
        return await server.prefetches.arriving(of: stream.registration.id) { arrival in
            await prefetch(stream, request: &request, arrival: arrival)
        }
    }

    private func prefetch(_ stream: StreamRegistry.Stream, request: inout Request, arrival: ServerPrefetches.Arrival) async -> Response {
        var arrival = arrival
        var body = ControlAPI.PrefetchRequest()
        if request.headers[.contentLength].map({ $0 != "0" }) ?? (request.headers[.transferEncoding] != nil) {
            do {
                body = try await Self.decode(ControlAPI.PrefetchRequest.self, from: &request)
            } catch {
                return Self.error(.badRequest, "invalidRequest", "\(error)")
            }
        }
        let wait = request.uri.queryParameters["wait"].map { $0 == "1" || $0 == "true" } ?? false
        // Checked before the type is known: telling a playlist may cost an origin request, and a
        // refused request fetches nothing.
        var range: ByteRange?
        if body.start != nil || body.end != nil {
            let start = body.start ?? 0
            let end = body.end ?? Int64.max
            guard start >= 0, end > start else { return Self.error(.badRequest, "invalidRequest", "'start' must be ≥ 0 and below 'end'.") }
            range = ByteRange(start, end)
        }
        guard body.rate.map({ $0 > 0 }) ?? true else { return Self.error(.badRequest, "invalidRequest", "'rate' must be above 0 (bytes per second).") }
        if let refusal = Self.refusal(ofRequestID: body.requestID) { return refusal }
        arrival = arrival.named(body.requestID)
        // A stop that named this start may have come first: then not even the playlist's question goes out.
        guard !server.prefetches.isStopped(arrival) else { return Self.cancelledStart }
        let task: Task<Void, Never>?
        if await server.isPlaylist(stream) {
            guard range == nil else {
                return Self.error(.badRequest, "invalidRequest", "An HLS playlist is prefetched by 'variants' and 'segments', not by byte range.")
            }
            guard let selection = HLSVariantSelection(body.variants ?? "highest") else {
                return Self.error(.badRequest, "invalidRequest", "'variants' must be all, highest, lowest or a variant index.")
            }
            guard body.segments.map({ $0 > 0 }) ?? true else { return Self.error(.badRequest, "invalidRequest", "'segments' must be above 0.") }
            guard let location = stream.location else {
                return Self.error(.notImplemented, "unsupported", "This playlist was registered without a URL, so the files it names cannot be located.")
            }
            task = await server.startPlaylistPrefetch(stream, location: location, variants: selection, segmentLimit: body.segments, pinning: body.pin ?? false,
                                                      rate: body.rate, arrival: arrival)
        } else {
            guard body.variants == nil, body.segments == nil else {
                return Self.error(.badRequest, "invalidRequest", "'variants' and 'segments' apply to HLS playlists only.")
            }
            task = await server.startPrefetch(stream, range: range, pinning: body.pin ?? false, rate: body.rate, arrival: arrival)
        }
        guard let task else { return Self.cancelledStart }
        if wait {
            await task.value
            return Self.json(.ok, await server.status(of: stream))
        }
        return Self.json(.accepted, await server.status(of: stream))
    }

    /// The answer to a start that a stop overtook.
    private static var cancelledStart: Response {
        error(.conflict, "cancelled", "A stop of this prefetch (or the resource's removal) came while it was starting, or named it before it came, so it did not start.")
    }

    /// The refusal of a prefetch's ``ControlAPI/PrefetchRequest/requestID`` that is empty or too long; `nil` for a good one or none.
    private static func refusal(ofRequestID requestID: String?) -> Response? {
        guard let requestID, requestID.isEmpty || requestID.count > ControlAPI.PrefetchRequest.longestRequestID else { return nil }
        return error(.badRequest, "invalidRequest", "'requestID' must be 1 to \(ControlAPI.PrefetchRequest.longestRequestID) characters.")
    }

    // MARK: JSON helpers

    static func decode<T: Decodable>(_ type: T.Type, from request: inout Request) async throws -> T {
        let buffer = try await request.collectBody(upTo: maximumBodySize)
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
        } catch let error as DecodingError {
            throw StreamCacheError(.invalidArgument, "The body is not the expected JSON: \(Self.describe(error))")
        }
    }

    private static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, _): "missing field '\(key.stringValue)'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            "wrong type at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        case .dataCorrupted: "not valid JSON"
        @unknown default: "not valid JSON"
        }
    }

    static func json(_ status: HTTPResponse.Status, _ value: some Encodable) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        var buffer = ByteBuffer(bytes: data)
        buffer.writeString("\n")
        return Response(status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"],
                        body: ResponseBody(byteBuffer: buffer))
    }

    static func error(_ status: HTTPResponse.Status, _ code: String, _ message: String) -> Response {
        json(status, ControlAPI.ErrorBody(error: code, message: message))
    }

    static func notFound() -> Response { error(.notFound, "notFound", "No such resource.") }
}
