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
/// The body is written chunk by chunk with the socket's back-pressure; when the client goes away
/// the write fails, the read stream is dropped and the engine stops the read.
struct RangeResponder: Sendable {
    let logger: Logger

    /// Answers instead when the origin's type shows the file is an HLS playlist.
    typealias PlaylistFallback = @Sendable () async -> Response

    func respond(to request: Request, resource: Resource, fileName: String, eventLoop: any EventLoop,
                 fileRegions: FileRegionSlots? = nil, playlistFallback: PlaylistFallback? = nil) async -> Response {
        let pacer = OutboundPacer(eventLoop: eventLoop, fileRegions: fileRegions)
        let isHead = request.method == .head
        guard isHead || request.method == .get else {
            return Response(status: .methodNotAllowed, headers: [.allow: "GET, HEAD", .contentLength: "0"])
        }
        // RFC 9110 §14.2: Range is defined for GET only.
        let range = isHead ? nil : request.headers[.range].flatMap { RangeHeader(parsing: $0) }

        // When the cache does not know the length yet, the read the request most likely needs
        // starts at once and its first chunk brings the length: one origin round trip, not two.
        var started: StartedRead?
        var info: ResourceInfo
        do {
            // A cached resource whose version is due for a check goes through the resource, which asks the origin first.
            if let known = resource.knownInfo, known.totalLength != nil, !resource.isRevalidationDue {
                info = known
            } else if let early = Self.rangeReadableBeforeLength(range) {
                var iterator = resource.regions(early).makeAsyncIterator()
                let first = try await iterator.next()
                started = StartedRead(range: early, iterator: iterator, first: first)
                // The first chunk's download stored the info; the snapshot avoids an actor hop.
                if let known = resource.knownInfo, known.totalLength != nil {
                    info = known
                } else {
                    info = try await resource.loadInfo(near: early.lowerBound)
                }
            } else {
                info = try await resource.loadInfo(near: range?.startWithoutLength ?? 0)
            }
        } catch {
            return Self.errorResponse(for: error, logger: logger, key: resource.key)
        }
        if let playlistFallback, HLSPlaylist.isPlaylist(fileName: nil, mimeType: info.mimeType) {
            return await playlistFallback()
        }
        if info.fileName == nil { info.fileName = fileName }
        /// The body of `range`: the read already started when it covers exactly that, else a new one.
        func body(of range: ByteRange, total: Int64) async -> ResponseBody {
            let early = started.flatMap { $0.range.lowerBound == range.lowerBound && min($0.range.upperBound, total) == range.upperBound ? $0 : nil }
            // Small answers go out in one write with the head (Hummingbird's fast path): AVPlayer's
            // 2-byte probe, and short cached ranges such as a seek's first read.
            if let first = early?.first, first.range == range, range.count <= Self.inlineLimit,
               let buffer = try? Self.buffer(from: first) {
                return ResponseBody(byteBuffer: buffer)
            }
            if early == nil, range.count <= Self.inlineLimit, let region = try? await resource.cachedRegion(range),
               let buffer = try? Self.buffer(from: region) {
                return ResponseBody(byteBuffer: buffer)
            }
            return ResponseBody(contentLength: Int(range.count)) { writer in
                if early == nil, let region = try await resource.cachedRegion(range) {
                    try await Self.write(region, to: &writer, pacer: pacer)
                } else if let early {
                    if let first = early.first { try await Self.write(first, to: &writer, pacer: pacer) }
                    var iterator = early.iterator
                    while let region = try await iterator.next() { try await Self.write(region, to: &writer, pacer: pacer) }
                } else {
                    try await Self.write(resource.regions(range), to: &writer, pacer: pacer)
                }
                try await writer.finish(nil)
            }
        }

        var headers = Self.representationHeaders(for: info)
        guard let total = info.totalLength else {
            // The origin sent no length: stream it whole (chunked). Players that need the length
            // (AVPlayer) fail either way; ffmpeg and browsers cope.
            headers[.acceptRanges] = "none"
            if isHead { return Response(status: .ok, headers: headers) }
            return Response(status: .ok, headers: headers, body: ResponseBody { writer in
                try await Self.write(resource.regions(ByteRange(0, Int64.max)), to: &writer, pacer: pacer)
                try await writer.finish(nil)
            })
        }

        var ranges: [ByteRange]?
        if let range, Self.ifRangeAllowsPartial(request.headers[.ifRange], validator: info.validator) {
            guard let satisfiable = range.ranges(in: total) else {
                headers[.contentRange] = "bytes */\(total)"
                headers[.contentLength] = "0"
                return Response(status: .rangeNotSatisfiable, headers: headers)
            }
            ranges = satisfiable
        }

        switch ranges {
        case nil:
            headers[.contentLength] = String(total)
            if isHead { return Response(status: .ok, headers: headers) }
            return Response(status: .ok, headers: headers, body: await body(of: ByteRange(0, total), total: total))
        case let ranges? where ranges.count == 1:
            let range = ranges[0]
            headers[.contentRange] = "bytes \(range.lowerBound)-\(range.httpLast)/\(total)"
            headers[.contentLength] = String(range.count)
            return Response(status: .partialContent, headers: headers, body: await body(of: range, total: total))
        case let ranges?:
            let multipart = MultipartByteRanges(ranges: ranges, total: total, contentType: info.effectiveMIMEType)
            headers[.contentType] = multipart.contentType
            headers[.contentLength] = String(multipart.contentLength)
            return Response(status: .partialContent, headers: headers, body: ResponseBody(contentLength: Int(multipart.contentLength)) { writer in
                for (index, range) in ranges.enumerated() {
                    try await writer.write(ByteBuffer(string: multipart.partHeader(index)))
                    try await Self.write(resource.regions(range), to: &writer, pacer: pacer)
                }
                try await writer.write(ByteBuffer(string: multipart.closingDelimiter))
                try await writer.finish(nil)
            })
        }
    }

    /// A read begun before the length was known, with its first region already taken.
    struct StartedRead: Sendable {
        let range: ByteRange
        let iterator: RegionStream.Iterator
        let first: CachedRegion?
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
    static func write(_ region: CachedRegion, to writer: inout any ResponseBodyWriter, pacer: OutboundPacer) async throws {
        if let slots = pacer.fileRegions, let descriptor = region.duplicateFileDescriptor() {
            let handle = NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: descriptor)
            if let marker = slots.marker(for: handle, range: region.range) {
                try await pacer.write(marker, to: &writer)
                return
            }
            try? handle.close()
        }
        var offset = region.range.lowerBound
        while offset < region.range.upperBound {
            let count = Int(min(Int64(cacheWriteSize), region.range.upperBound - offset))
            let buffer = try buffer(from: region, at: offset, count: count)
            offset += Int64(count)
            try await pacer.write(buffer, to: &writer)
        }
    }

    /// Writes each region of a read as it comes, each with the region writer above.
    static func write(_ regions: RegionStream, to writer: inout any ResponseBodyWriter, pacer: OutboundPacer) async throws {
        for try await region in regions { try await write(region, to: &writer, pacer: pacer) }
    }

    /// Keeps a body writer from running ahead of its socket.
    ///
    /// Hummingbird's writer suspends only once the channel reports itself unwritable, and it
    /// learns that on the event loop, after the writes queued there have run; a producer on
    /// another thread (reading the cache at gigabytes per second) can queue many megabytes first.
    /// After each write the pacer waits for one trip through the connection's event loop, by
    /// which time the write has reached the channel and its writability is current, so at most one
    /// buffer per connection is ever waiting. Measured: 16 slow clients took the proxy from
    /// 133 MiB to (see docs/benchmarks.md) peak RSS.
    struct OutboundPacer: Sendable {
        let eventLoop: any EventLoop
        /// The connection's zero-copy path, if it has one.
        var fileRegions: FileRegionSlots? = nil

        func write(_ buffer: ByteBuffer, to writer: inout any ResponseBodyWriter) async throws {
            try await writer.write(buffer)
            try await eventLoop.submit {}.get()
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
            case .originUnavailable, .tooManyRedirects: status = .badGateway
            case .authenticationFailed:
                status = .badGateway
                message = "The origin rejected the credentials this stream was registered with."
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
        return Response(status: status, headers: [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-store"],
                        body: ResponseBody(byteBuffer: body))
    }
}
