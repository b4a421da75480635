import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import StreamCache
import StreamCacheServer

/// The loopback address a sign-in's browser comes back to (RFC 8252 §7.3): an HTTP server on
/// `127.0.0.1` or `::1` that hands each request to its path to a handler, until the handler says
/// the sign-in has ended. Requests to any other path (a browser's `/favicon.ico`) get a 404.
final class RedirectListener: Sendable {
    /// A page for the browser.
    struct Page: Sendable {
        var status: HTTPTypes.HTTPResponse.Status
        var text: String
    }

    /// What the handler makes of one request to the redirect path: the page for the browser, and
    /// the sign-in's end if this request ended it (`nil`: it goes on waiting).
    typealias Handler = @Sendable (_ query: [String: String]) async -> (page: Page, end: Result<Void, any Error>?)

    /// The port listened on.
    let port: Int
    private let server: StoppableServer
    private let answers: Answers

    /// Hands answers to the handler until one ends the sign-in; the end goes to ``ends``.
    private final class Answers: Sendable {
        let handler: Handler
        let finished = Locked(false)
        let ends: AsyncStream<Result<Void, any Error>>
        private let ended: AsyncStream<Result<Void, any Error>>.Continuation

        init(handler: @escaping Handler) {
            self.handler = handler
            (ends, ended) = AsyncStream<Result<Void, any Error>>.makeStream()
        }

        func deliver(_ query: [String: String]) async -> (page: Page, ended: Bool) {
            guard !finished.withLock({ $0 }) else { return (Page(status: .gone, text: "This sign-in has ended. You can close this tab."), true) }
            let (page, end) = await handler(query)
            guard let end, finished.withLock({ done in defer { done = true }; return !done }) else { return (page, false) }
            ended.yield(end)
            return (page, true)
        }
    }

    private init(port: Int, server: StoppableServer, answers: Answers) {
        self.port = port
        self.server = server
        self.answers = answers
    }

    /// Listens on `host` (`127.0.0.1` or `::1`) at `port` (0: a free one) for requests to `path`.
    static func start(host: String, port: Int, path: String, handler: @escaping Handler) async throws -> RedirectListener {
        let answers = Answers(handler: handler)
        let (ports, listening) = AsyncStream<Int>.makeStream()
        let logger = Logger(label: "streamcache.sign-in", factory: { _ in SwiftLogNoOpLogHandler() })
        let server = try StoppableServer(logger: logger, onExit: { _ in listening.finish() }) { connections in
            try HTTPService.make(
                address: .hostname(host, port: port),
                connections: connections,
                eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
                logger: logger,
                respond: { request, _ in
                    guard request.method == .get, request.uri.path == path else { return Self.response(Page(status: .notFound, text: "Not found.")) }
                    let query = Dictionary(request.uri.queryParameters.map { (String($0.key), String($0.value)) }, uniquingKeysWith: { first, _ in first })
                    return Self.response(await answers.deliver(query).page)
                },
                onServerRunning: { channel in listening.yield(channel.localAddress?.port ?? 0) }
            )
        }
        var bound = 0
        for await value in ports {
            bound = value
            break
        }
        guard bound != 0 else {
            await server.stop()
            throw StreamCacheError(.invalidArgument, "Cannot listen on \(host) port \(port) for the sign-in's answer (is the port in use?).")
        }
        return RedirectListener(port: bound, server: server, answers: answers)
    }

    /// Hands the query of an address the user pasted (the browser was on another machine) to the
    /// handler, as if the browser had brought it: the page it would have shown, and whether the
    /// sign-in has ended.
    func deliver(pasted query: [String: String]) async -> (page: Page, ended: Bool) {
        await answers.deliver(query)
    }

    /// Waits for the handler to end the sign-in, at most `limit`; returns or throws its end.
    func end(within limit: Duration) async throws {
        let ends = answers.ends
        let end = await withTaskGroup(of: Result<Void, any Error>?.self) { group in
            group.addTask {
                for await end in ends { return end }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        guard let end else {
            throw StreamCacheError(.authenticationFailed, "No answer came back from the sign-in page within \(limit.components.seconds) s; nothing was changed. Run the command again.")
        }
        try end.get()
    }

    /// Stops listening, letting the last page go out first.
    func stop() async {
        await server.stop()
    }

    private static func response(_ page: Page) -> Response {
        let html = "<!doctype html><meta charset=\"utf-8\"><title>streamcache</title><p>\(page.text.htmlEscaped)</p>\n"
        return Response(status: page.status,
                        headers: [.contentType: "text/html; charset=utf-8", .contentLength: String(html.utf8.count), .cacheControl: "no-store"],
                        body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
    }
}
