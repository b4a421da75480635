import Crypto
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
import NIOPosix
import StreamCache
import StreamCacheServer

/// The demo's stand-in for a cloud drive: an HTTP server on 127.0.0.1 that serves in-memory
/// files under `/music/` with byte ranges, but only to requests that carry its bearer token,
/// just as a real service would. It counts what it sends, so the demo can show what the cache
/// saved.
final class DemoOrigin: Sendable {
    struct Counters: Sendable {
        var requests = 0
        var bodyBytes: Int64 = 0
        var rejected = 0
    }

    let token: String
    private let files: [String: (data: Data, etag: String)]
    private let counters = Locked(Counters())
    private let listening = Locked<(port: Int?, server: StoppableServer?)>((nil, nil))

    init(files: [ToneGenerator.Track]) {
        self.token = "demo-" + UUID().uuidString.lowercased()
        var table: [String: (Data, String)] = [:]
        for file in files {
            let digest = SHA256.hash(data: file.data).prefix(8).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
            table[file.fileName] = (file.data, "\"\(digest)\"")
        }
        self.files = table
    }

    var snapshot: Counters { counters.withLock { $0 } }

    /// Starts listening on a free loopback port and returns the folder URL (`…/music/`).
    func start() async throws -> URL {
        let (stream, continuation) = AsyncStream<Int>.makeStream()
        let logger = Logger(label: "streamcache.demo-origin", factory: { _ in SwiftLogNoOpLogHandler() })
        let server = try StoppableServer(logger: logger, onExit: { _ in continuation.finish() }) { connections in
            try HTTPService.make(
                address: .hostname("127.0.0.1", port: 0),
                connections: connections,
                eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
                logger: logger,
                respond: { [self] request, _ in self.respond(to: request) },
                onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }
            )
        }
        var port = 0
        for await value in stream {
            port = value
            break
        }
        guard port != 0 else { throw StreamCacheError(.originUnavailable, "The demo's origin could not listen on 127.0.0.1.") }
        listening.withLock { $0 = (port, server) }
        return URL(string: "http://127.0.0.1:\(port)/music/")!
    }

    /// Stops gracefully (see ``StoppableServer``): the demo's proxy may still connect.
    func stop() async {
        await listening.withLock { $0.server }?.stop()
    }

    private func respond(to request: Request) -> Response {
        guard request.headers[.authorization] == "Bearer \(token)" else {
            counters.withLock { $0.rejected += 1 }
            return Response(status: .unauthorized, headers: [.wwwAuthenticate: "Bearer", .contentLength: "0"])
        }
        let path = request.uri.path
        guard path.hasPrefix("/music/"), let file = files[String(path.dropFirst("/music/".count))] else {
            return Response(status: .notFound, headers: [.contentLength: "0"])
        }
        let total = Int64(file.data.count)
        var headers: HTTPFields = [.acceptRanges: "bytes", .contentType: "audio/wav", .eTag: file.etag]
        var range = ByteRange(0, total)
        var status = HTTPResponse.Status.ok
        if request.method == .get, let value = request.headers[.range], let parsed = RangeHeader(parsing: value) {
            guard let ranges = parsed.ranges(in: total) else {
                headers[.contentRange] = "bytes */\(total)"
                headers[.contentLength] = "0"
                return Response(status: .rangeNotSatisfiable, headers: headers)
            }
            // Several ranges get the first one only, as many cloud storage hosts answer.
            if let first = ranges.first {
                range = first
                status = .partialContent
                headers[.contentRange] = "bytes \(range.lowerBound)-\(range.httpLast)/\(total)"
            }
        }
        headers[.contentLength] = String(range.count)
        counters.withLock { $0.requests += 1 }
        if request.method == .head { return Response(status: status, headers: headers) }
        let bytes = file.data
        let counters = self.counters
        let body = range
        return Response(status: status, headers: headers, body: ResponseBody(contentLength: Int(body.count)) { writer in
            var offset = Int(body.lowerBound)
            let end = Int(body.upperBound)
            while offset < end {
                let next = min(end, offset + 256 * 1024)
                try await writer.write(ByteBuffer(bytes: bytes[offset..<next]))
                counters.withLock { $0.bodyBytes += Int64(next - offset) }
                offset = next
            }
            try await writer.finish(nil)
        })
    }
}
