import HTTPTypes
import HummingbirdCore
import NIOHTTP1
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// An HTTP/1.1 server on HummingbirdCore: what the proxy and the demo's origin both run.
///
/// Hummingbird's `Application` would add a router, middleware and a `Date` header from a
/// Foundation date formatter; the proxy routes by itself, and that formatter (with the rest of
/// the Hummingbird module, which links the full Foundation on Linux) loads ICU and several MiB
/// of libraries into a process that has no other use for them. This adds the `Date` header with
/// ``CurrentHTTPDate`` and answers 500 for a responder that throws.
package enum HTTPService {
    /// Answers one request; `channel` is the connection it arrived on.
    package typealias Responder = @Sendable (Request, any Channel) async throws -> Response

    /// A server that answers with `respond` on `host` at `port` (0: a free one), its connections
    /// tracked in `connections`; run it with ``StoppableServer``, which serves and stops it.
    ///
    /// Every loop of `eventLoops` accepts connections and serves those it accepted
    /// (``LoopListener``). The sockets are bound here, so a port that cannot be bound fails at once.
    ///
    /// - Parameter onServerRunning: Called once, with the port, when every loop accepts.
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) when the address cannot be listened on.
    package static func make(host: String, port: Int, http1: HTTP1Channel.Configuration = .init(), connections: OpenConnections,
                             eventLoops: [any EventLoop], logger: Logger, respond: @escaping Responder,
                             onServerRunning: @escaping @Sendable (Int) async -> Void) throws -> any Service {
        let date = CurrentHTTPDate()
        var http1 = http1
        let handlers = http1.additionalChannelHandlers
        http1.additionalChannelHandlers = { [connections.handler()] + handlers() }
        let child = HTTP1Channel(responder: { request, writer, channel in
            var response: Response
            do {
                response = try await respond(request, channel)
            } catch let error as HTTPParserError {
                throw error
            } catch {
                logger.debug("the responder failed", metadata: ["error": "\(error)"])
                response = Response(status: .internalServerError, headers: [.contentLength: "0"])
            }
            response.headers[.date] = date.now
            do {
                try await writer.write(response: response.head, body: response.body)
            } catch is HTTPParserError {
                // The next request could not be parsed while this response was written. The
                // channel handler answers a parser error with a 400, which would land inside
                // this response; any other error closes the connection instead.
                throw ParseErrorWhileWritingResponse()
            }
        }, configuration: http1)
        let loops = eventLoops.isEmpty ? [MultiThreadedEventLoopGroup.singleton.next()] : eventLoops
        let sockets = try ListeningSocket.bind(host: host, port: port, count: loops.count)
        let running = RunningCount(sockets.count) { await onServerRunning(sockets[0].port) }
        return LoopListeners(listeners: zip(sockets, loops).map { socket, loop in
            LoopListener(socket: socket, eventLoop: loop, child: child, logger: logger, onRunning: { _ in await running.oneMore() })
        })
    }
}

/// The listeners of every loop, run side by side: the server ends once they all have.
private struct LoopListeners: Service {
    let listeners: [LoopListener<HTTP1Channel>]

    func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            for listener in listeners { group.addTask { try await listener.run() } }
        }
    }
}

/// Calls its action once `count` listeners accept.
private actor RunningCount {
    private var left: Int
    private let action: @Sendable () async -> Void

    init(_ count: Int, action: @escaping @Sendable () async -> Void) {
        left = count
        self.action = action
    }

    func oneMore() async {
        left -= 1
        if left == 0 { await action() }
    }
}

/// Thrown in place of a parser error that arrives while a response is written.
private struct ParseErrorWhileWritingResponse: Error {}
