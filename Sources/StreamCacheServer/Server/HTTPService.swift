import HTTPTypes
import HummingbirdCore
import NIOHTTP1
import Logging
import NIOCore
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

    /// A server that answers with `respond`, its connections tracked in `connections`; run it
    /// with ``StoppableServer``, which binds, serves, and stops it.
    package static func make(address: BindAddress, http1: HTTP1Channel.Configuration = .init(), connections: OpenConnections,
                             eventLoopGroup: any EventLoopGroup, logger: Logger, respond: @escaping Responder,
                             onServerRunning: @escaping @Sendable (any Channel) async -> Void) throws -> any Service {
        let date = CurrentHTTPDate()
        var http1 = http1
        let handlers = http1.additionalChannelHandlers
        http1.additionalChannelHandlers = { [connections.handler()] + handlers() }
        return try HTTPServerBuilder.http1(configuration: http1).buildServer(
            configuration: ServerConfiguration(address: address, serverName: nil),
            eventLoopGroup: eventLoopGroup,
            logger: logger,
            responder: { request, writer, channel in
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
            },
            onServerRunning: onServerRunning
        )
    }
}

/// Thrown in place of a parser error that arrives while a response is written.
private struct ParseErrorWhileWritingResponse: Error {}
