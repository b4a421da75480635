#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import struct HTTPTypes.HTTPResponse
import HummingbirdCore
import Logging
import NIOCore
import StreamCache
import StreamCacheHLS

/// Answers `GET` and `HEAD` for one cached resource with RFC 9110 range semantics, streaming the
/// body from the engine as it arrives.
///
/// - No `Range` (or one that does not parse, or an `If-Range` that does not match): 200 with the
///   whole representation.
/// - One satisfiable range: 206 with `Content-Range: bytes a-b/TOTAL`.
/// - Several ranges: merged where they overlap or touch; if more than one remains, 206
///   `multipart/byteranges` (see ``MultipartByteRanges``).
/// - No satisfiable range: 416 with `Content-Range: bytes */TOTAL`.
///
/// Every answer carries `Accept-Ranges: bytes`, an exact `Content-Length` and the real MIME type.
/// The head of a one-range answer goes out with the range's first byte, built from the info of
/// the version that byte belongs to, so what the origin says before it (a status, a new version)
/// is the answer; a multi-range answer's head waits for its first part's first byte, and its
/// later parts' bytes must be of that version too. The body is written chunk by chunk with the
/// socket's back-pressure; when the client goes away the write fails (or, while the body waits for
/// the origin, the connection's ``ClientDeparture`` ends the read) and the engine stops the read.
struct RangeResponder: Sendable {
    let logger: Logger

    /// Answers instead when the origin's type shows the file is an HLS playlist.
    typealias PlaylistFallback = @Sendable () async -> Response

    func respond(to request: Request, resource: Resource, fileName: String, outbound: OutboundPacer,
                 playlistFallback: PlaylistFallback? = nil) async -> Response {
        let isHead = request.method == .head
        guard isHead || request.method == .get else {
            return Response(status: .methodNotAllowed, headers: [.allow: "GET, HEAD", .contentLength: "0"])
        }
        let answer = Answer(
            request: request,
            // RFC 9110 §14.2: Range is defined for GET only.
            range: isHead ? nil : request.headers[.range].flatMap { RangeHeader(parsing: $0) },
            isHead: isHead, resource: resource, fileName: fileName,
            pacer: outbound, playlistFallback: playlistFallback)
        // The head goes out with the first byte, so a new version met on the way to that byte (in
        // its download's answer, or in the question a due revalidation asks) can still be answered
        // as the new version: the old head, promising the old bytes, was never sent. An origin
        // whose version changes on every answer gets a 503 after the third.
        var changesMet = 0
        while true {
            do {
                return try await answer.make()
            } catch let error as StreamCacheError where error.endsAReadOfDroppedBytes && changesMet < StartedRead.versionChangesAnsweredAnew {
                changesMet += 1
                logger.debug("the cached bytes were dropped before the first byte went out (a new version, or a failed digest); answering anew",
                             metadata: ["key": "\(resource.key)"])
            } catch {
                return Self.errorResponse(for: error, logger: logger, key: resource.key)
            }
        }
    }

    /// One attempt at answering a request; it throws what happened before the head would go out.
    private struct Answer: Sendable {
        let request: Request
        let range: RangeHeader?
        let isHead: Bool
        let resource: Resource
        let fileName: String
        let pacer: OutboundPacer
        let playlistFallback: PlaylistFallback?

        func make() async throws -> Response {
            // When the cache does not know the length yet, the read the request most likely needs
            // starts at once and its first region brings the length: one origin round trip, not two.
            var started: StartedRead?
            var info: ResourceInfo
            // A cached resource whose version is due for a check goes through the resource, which asks the origin first.
            if let known = resource.knownInfo, known.totalLength != nil, !resource.isRevalidationDue {
                info = known
            } else if let early = RangeResponder.rangeReadableBeforeLength(range) {
                let read = try await StartedRead(resource: resource, range: early)
                started = read
                if let version = read.first?.info, version.totalLength != nil {
                    info = version
                } else {
                    info = try await resource.loadInfo(near: early.lowerBound)
                }
            } else {
                info = try await resource.loadInfo(near: range?.startWithoutLength ?? 0)
            }
            if let playlistFallback, HLSPlaylist.isPlaylist(fileName: nil, mimeType: info.mimeType) {
                return await playlistFallback()
            }

            guard let total = info.totalLength else {
                // The origin sent no length: stream it whole (chunked). Players that need the length
                // (AVPlayer) fail either way; ffmpeg and browsers cope.
                var headers = head(for: info)
                headers[.acceptRanges] = "none"
                if isHead { return Response(status: .ok, headers: headers) }
                let (resource, pacer) = (resource, pacer)
                return Response(status: .ok, headers: headers, body: ResponseBody { writer in
                    try await RangeResponder.write(resource.regions(ByteRange(0, Int64.max)).makeAsyncIterator(), to: &writer, pacer: pacer)
                    try await writer.finish(nil)
                })
            }

            var ranges: [ByteRange]?
            if let range, RangeResponder.ifRangeAllowsPartial(request.headers[.ifRange], validator: info.validator) {
                guard let satisfiable = range.ranges(in: total) else {
                    var headers = head(for: info)
                    headers[.contentRange] = "bytes */\(total)"
                    headers[.contentLength] = "0"
                    return Response(status: .rangeNotSatisfiable, headers: headers)
                }
                ranges = satisfiable
            }

            switch ranges {
            case nil:
                if isHead {
                    var headers = head(for: info)
                    headers[.contentLength] = String(total)
                    return Response(status: .ok, headers: headers)
                }
                let (body, version) = try await openBody(ByteRange(0, total), of: info, started: started)
                var headers = head(for: version)
                headers[.contentLength] = String(total)
                return Response(status: .ok, headers: headers, body: body)
            case let ranges? where ranges.count == 1:
                let range = ranges[0]
                let (body, version) = try await openBody(range, of: info, started: started)
                var headers = head(for: version)
                headers[.contentRange] = "bytes \(range.lowerBound)-\(range.httpLast)/\(total)"
                headers[.contentLength] = String(range.count)
                return Response(status: .partialContent, headers: headers, body: body)
            case let ranges?:
                // The first part's first byte is in hand before the head, as for one range. Later
                // parts are read as the body goes out, each by a read of its own that may begin
                // after the origin's version changed: their bytes are checked against the head's
                // version, and a change cuts the body off rather than mixing versions.
                let first = try await open(ranges[0], of: info, started: nil)
                let version = first.version
                let multipart = MultipartByteRanges(ranges: ranges, total: total, contentType: version.effectiveMIMEType)
                var headers = head(for: version)
                headers[.contentType] = multipart.contentType
                headers[.contentLength] = String(multipart.contentLength)
                let (resource, pacer) = (resource, pacer)
                pacer.fileRegions?.sendTheNextHeadWithItsBody()
                return Response(status: .partialContent, headers: headers, body: ResponseBody(contentLength: Int(multipart.contentLength)) { writer in
                    try await writer.write(ByteBuffer(string: multipart.partHeader(0)))
                    try await first.write(to: &writer, pacer: pacer)
                    for index in ranges.indices.dropFirst() {
                        try await writer.write(ByteBuffer(string: multipart.partHeader(index)))
                        try await RangeResponder.write(resource.regions(ranges[index]).makeAsyncIterator(), to: &writer, pacer: pacer,
                                                       version: version)
                    }
                    try await writer.write(ByteBuffer(string: multipart.closingDelimiter))
                    try await writer.finish(nil)
                })
            }
        }

        /// The representation's headers, with the registration's file name when the origin gave none.
        private func head(for info: ResourceInfo) -> HTTPFields {
            var info = info
            if info.fileName == nil { info.fileName = fileName }
            return RangeResponder.representationHeaders(for: info)
        }

        /// The body of `range`, its first bytes in hand: returns it with the info of the version
        /// those bytes belong to, or throws what the origin said instead (see ``open(_:of:started:)``).
        private func openBody(_ range: ByteRange, of info: ResourceInfo, started: StartedRead?) async throws -> (ResponseBody, ResourceInfo) {
            guard !range.isEmpty else { return (ResponseBody(byteBuffer: ByteBuffer()), info) }
            let opened = try await open(range, of: info, started: started)
            // Small answers go out in one write with the head (Hummingbird's fast path): AVPlayer's
            // 2-byte probe, and short cached ranges such as a seek's first read.
            if opened.first.range == range, range.count <= RangeResponder.inlineLimit,
               let buffer = try? RangeResponder.buffer(from: opened.first) {
                return (ResponseBody(byteBuffer: buffer), opened.version)
            }
            let pacer = self.pacer
            pacer.fileRegions?.sendTheNextHeadWithItsBody()
            return (ResponseBody(contentLength: Int(range.count)) { writer in
                try await opened.write(to: &writer, pacer: pacer)
                try await writer.finish(nil)
            }, opened.version)
        }

        /// The read of a non-empty `range` with its first region taken: throws what the origin
        /// said instead of that region (a status for the player; `resourceChanged` when the bytes
        /// are of another version than `info`, which the head was about to promise).
        private func open(_ range: ByteRange, of info: ResourceInfo, started: StartedRead?) async throws -> OpenedRange {
            let read: StartedRead
            if let started, started.range.lowerBound == range.lowerBound,
               min(started.range.upperBound, info.totalLength ?? .max) == range.upperBound {
                read = started
            } else if let region = try await resource.cachedRegion(range) {
                // Wholly cached: one region, without a reader's planning.
                return OpenedRange(first: region, rest: nil, version: try RangeResponder.version(of: region, expected: info))
            } else {
                read = try await StartedRead(resource: resource, range: range)
            }
            guard let first = read.first else {
                throw StreamCacheError(.resourceChanged, "The resource ended before the range its length promised.", range: range)
            }
            return OpenedRange(first: first, rest: read.rest, version: try RangeResponder.version(of: first, expected: info))
        }
    }

    /// A range's read with its first region in hand, and the version of the bytes it brings.
    private struct OpenedRange: Sendable {
        let first: CachedRegion
        /// The rest of the read; `nil` when `first` is the whole range.
        let rest: RegionStream.Iterator?
        let version: ResourceInfo

        /// Writes the range's bytes as they come.
        func write(to writer: inout any ResponseBodyWriter, pacer: OutboundPacer) async throws {
            try await RangeResponder.write(first, to: &writer, pacer: pacer)
            if let rest { try await RangeResponder.write(rest, to: &writer, pacer: pacer) }
        }
    }

    /// The version `region` belongs to, when it is the one `expected` describes.
    static func version(of region: CachedRegion, expected: ResourceInfo) throws -> ResourceInfo {
        guard let version = region.info, version.isSameVersion(as: expected) else {
            throw StreamCacheError(.resourceChanged, "The resource changed on the origin: these bytes are of another version than the answer's head.",
                                   range: region.range)
        }
        return version
    }

    /// The bytes a request will most likely be answered with, when that does not depend on the
    /// length: the whole file, `a-b` or `a-`. Suffix and multi-range requests need the length first.
    static func rangeReadableBeforeLength(_ header: RangeHeader?) -> ByteRange? {
        guard let header else { return ByteRange(0, Int64.max) }
        guard header.specifiers.count == 1 else { return nil }
        switch header.specifiers[0] {
        case .bounded(let first, let last): return ByteRange(first, last == Int64.max ? Int64.max : last + 1)
        case .from(let first): return ByteRange(first, Int64.max)
        case .suffix: return nil
        }
    }

    /// Headers every answer about the representation carries.
    static func representationHeaders(for info: ResourceInfo) -> HTTPFields {
        var headers: HTTPFields = [.acceptRanges: "bytes", .contentType: info.effectiveMIMEType]
        // A weak tag is passed on as weak: clients must not use it in If-Range, and VLC strips the
        // W/ for If-Match, which this server ignores anyway.
        if let tag = info.validator.entityTag { headers[.eTag] = tag }
        if let modified = info.validator.lastModified { headers[.lastModified] = modified }
        return headers
    }

    /// RFC 9110 §13.1.5: a range applies only when `If-Range` names the current version, by a
    /// strong entity tag compared strongly or by the exact `Last-Modified` date.
    static func ifRangeAllowsPartial(_ ifRange: String?, validator: Validator) -> Bool {
        guard let ifRange = ifRange?.trimmingWhitespace() else { return true }
        if ifRange.hasPrefix("\"") || ifRange.hasPrefix("W/") {
            guard let tag = validator.entityTag, !validator.hasWeakEntityTag, !ifRange.hasPrefix("W/") else { return false }
            return ifRange == tag
        }
        return validator.lastModified == ifRange
    }

    /// The size of one socket write from the cache: large enough that per-write costs vanish,
    /// small enough that a slow client holds little memory.
    static let cacheWriteSize = 1024 * 1024

    /// The most cached bytes one `sendfile` moves (as nginx's `sendfile_max_chunk`); the event
    /// loop polls its sockets between two (see ``write(_:to:pacer:)``). With 4 MiB, a warm read
    /// on loopback went at 4.6 GB/s against 2.8 with 1 MiB (nginx 2.5–2.6 in both runs); requests
    /// beside two such reads were answered as fast with either (docs/benchmarks.md, *Requests beside
    /// streams*).
    static let sendfileSize = 4 << 20

    /// Answers up to this size that are wholly cached are read before the head is sent and go
    /// out with it in one write.
    static let inlineLimit: Int64 = 256 * 1024

    /// All of `region` in one buffer.
    static func buffer(from region: CachedRegion) throws -> ByteBuffer {
        try buffer(from: region, at: region.range.lowerBound, count: Int(region.range.count))
    }

    /// `count` bytes of `region` from `offset`, read straight into a new buffer.
    static func buffer(from region: CachedRegion, at offset: Int64, count: Int) throws -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        _ = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
            try region.read(into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<count]), at: offset)
        }
        return buffer
    }

    /// Sends cached bytes with `sendfile` where the connection can (see ``FileRegionSlots``): the
    /// kernel moves them from the page cache to the socket. Otherwise reads them straight into
    /// socket buffers: one copy fewer than a ``ReadStream``, which matters at gigabytes per second.
    ///
    /// No `sendfile` moves more than ``sendfileSize``, no buffer holds more than
    /// ``cacheWriteSize``, and the pacer lets the event loop poll its sockets after each write
    /// (see ``EventLoopTurns``). One `sendfile` of a whole cached file
    /// to a client that keeps up ran for as long as the file took (156 MB in one call of 72 ms),
    /// and no other connection of the loop was served meanwhile; nginx bounds it the same way,
    /// with `sendfile_max_chunk`.
    static func write(_ region: CachedRegion, to writer: inout any ResponseBodyWriter, pacer: OutboundPacer) async throws {
        var offset = region.range.lowerBound
        if let slots = pacer.fileRegions {
            while offset < region.range.upperBound, let descriptor = region.duplicateFileDescriptor() {
                let handle = NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: descriptor)
                let piece = ByteRange(offset, min(region.range.upperBound, offset + Int64(sendfileSize)))
                guard let marker = slots.marker(for: handle, range: piece) else {
                    try? handle.close()
                    break
                }
                try await pacer.write(marker, to: &writer)
                offset = piece.upperBound
            }
        }
        while offset < region.range.upperBound {
            let count = Int(min(Int64(cacheWriteSize), region.range.upperBound - offset))
            let buffer = try buffer(from: region, at: offset, count: count)
            offset += Int64(count)
            try await pacer.write(buffer, to: &writer)
        }
    }

    /// Writes each region of a read as it comes, each with the region writer above; with a
    /// `version`, a region of another version throws `resourceChanged` instead.
    ///
    /// The read ends as soon as the client leaves, even while it waits for the origin (see
    /// ``ClientDeparture``).
    static func write(_ read: RegionStream.Iterator, to writer: inout any ResponseBodyWriter, pacer: OutboundPacer,
                      version: ResourceInfo? = nil) async throws {
        let watch = pacer.departure?.whenLeft { [read] in read.cancel() }
        defer { watch?.end() }
        var read = read
        while let region = try await read.next() {
            if let version { _ = try RangeResponder.version(of: region, expected: version) }
            try await write(region, to: &writer, pacer: pacer)
        }
    }

    /// Keeps a body writer from running ahead of its socket, and from keeping its event loop
    /// from the other connections.
    ///
    /// Hummingbird's writer suspends only once the channel reports itself unwritable, and it
    /// learns that on the event loop, after the writes queued there have run; a producer on
    /// another thread (reading the cache at gigabytes per second) can queue many megabytes first.
    /// After each write the pacer waits until the connection's event loop has polled its sockets
    /// again (``EventLoopTurns``; one trip through the loop where the server gave no turns), by
    /// which time the write has reached the channel and its writability is current, so at most one
    /// buffer per connection is ever waiting. Measured with `Benchmarks/peak-rss-serve.sh` (16
    /// clients of a 200 MB file): 208–290 MiB of peak RSS without it, 82 MiB with it on the day
    /// (docs/benchmark-log.md), 30 MiB now (docs/benchmarks.md). Waiting for the poll, not only
    /// for a trip, is what lets the loop accept and read other connections between the writes.
    ///
    /// It also carries what else a body writer needs of its connection.
    struct OutboundPacer: Sendable {
        let eventLoop: any EventLoop
        /// The connection's zero-copy path, if it has one.
        var fileRegions: FileRegionSlots? = nil
        /// Ends a read waiting for the origin when the client leaves, if the connection is watched.
        var departure: ClientDeparture? = nil
        /// The polls of the server's event loop, when the connection is served on it.
        var turns: EventLoopTurns? = nil

        func write(_ buffer: ByteBuffer, to writer: inout any ResponseBodyWriter) async throws {
            try await writer.write(buffer)
            if let turns, turns.eventLoop === eventLoop {
                try await turns.next().get()
            } else {
                try await eventLoop.submit {}.get()
            }
        }
    }

    /// A plain-text error for a failure before any byte was sent. Origin credential failures are
    /// 502 (the player cannot fix them with its own credentials); the text never holds secrets.
    static func errorResponse(for error: any Error, logger: Logger, key: CacheKey) -> Response {
        let status: HTTPResponse.Status
        var message: String
        if let error = error as? StreamCacheError {
            message = error.message
            switch error.code {
            case .notFound: status = .notFound
            case .rangeNotSatisfiable: status = .rangeNotSatisfiable
            // A credential failure is the registered credentials' (or a refusal a new token
            // cannot fix, whose reason the message gives), so the player's own cannot help.
            case .originUnavailable, .tooManyRedirects, .authenticationFailed: status = .badGateway
            case .resourceChanged: status = .serviceUnavailable
            default: status = .badGateway
            }
        } else if error is CancellationError {
            status = .serviceUnavailable
            message = "The request was cancelled."
        } else {
            status = .internalServerError
            message = "Internal error."
        }
        logger.info("stream failed", metadata: ["key": "\(key)", "status": "\(status.code)", "error": "\(message)"])
        let body = ByteBuffer(string: message + "\n")
        var headers: HTTPFields = [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-store"]
        // The status alone folds several failures into 502; a client that acts on the kind
        // (`streamcache get` through a running server, for its exit code) reads it here.
        if let error = error as? StreamCacheError { headers[.streamCacheError] = error.code.description }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: body))
    }
}
