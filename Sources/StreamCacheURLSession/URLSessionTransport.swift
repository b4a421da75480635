import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import StreamCache

/// An ``HTTPTransport`` on Foundation's `URLSession`, for every platform.
///
/// It uses one long-lived session with a data delegate: on Linux `URLSession.bytes(for:)` does not
/// exist, and creating and invalidating sessions per request races libcurl's teardown. Bodies
/// stream through a bounded buffer; when the consumer falls behind, the data task is suspended
/// until the buffer drains, so a slow reader never makes the process hold a whole file.
///
/// Redirects are not followed (the 3xx response is returned), caches and cookies are off, and
/// `Accept-Encoding: identity` is sent unless the request sets another value.
public final class URLSessionTransport: HTTPTransport {
    private let session: URLSession
    private let delegate: SessionDelegate
    private let bufferLimit: Int
    /// The most connections opened to one host at once.
    public let maximumConnectionsPerHost: Int?

    /// Creates a transport.
    ///
    /// - Parameters:
    ///   - maximumConnectionsPerHost: The most connections opened to one host at once.
    ///   - bufferLimit: Bytes of a body held in memory before the connection is paused.
    public init(maximumConnectionsPerHost: Int = 8, bufferLimit: Int = 1 << 20) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        configuration.httpCookieAcceptPolicy = .never
        configuration.httpShouldSetCookies = false
        configuration.httpMaximumConnectionsPerHost = maximumConnectionsPerHost
        configuration.timeoutIntervalForResource = 7 * 24 * 3600
        let delegate = SessionDelegate()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        self.delegate = delegate
        self.session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
        self.bufferLimit = bufferLimit
        self.maximumConnectionsPerHost = maximumConnectionsPerHost
    }

    /// `false` on Linux, where a data task cannot be suspended safely (see `TaskControl`).
    public var holdsBackSlowConsumers: Bool {
        #if canImport(FoundationNetworking)
        false
        #else
        true
        #endif
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        urlRequest.httpBody = request.body
        urlRequest.timeoutInterval = request.timeout.timeInterval
        urlRequest.cachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        for field in request.headers { urlRequest.addValue(field.value, forHTTPHeaderField: field.name) }
        if !request.headers.contains("Accept-Encoding") { urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding") }
        if !request.headers.contains("User-Agent") { urlRequest.setValue("StreamCache/1", forHTTPHeaderField: "User-Agent") }

        let task = session.dataTask(with: urlRequest)
        let buffer = HTTPBody.makeBuffer(limit: bufferLimit)
        let control = TaskControl()
        buffer.setOnCancel { [weak task] in if let task { control.cancel(task) } }
        buffer.setOnDrain { [weak task] in if let task { control.resumeIfDrained(task, buffer: buffer) } }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPResponse, any Error>) in
                delegate.register(task, state: TaskState(buffer: buffer, control: control, head: continuation))
                control.start(task)
            }
        } onCancel: {
            control.cancel(task)
        }
    }
}

/// What the delegate tracks for one data task.
private final class TaskState: @unchecked Sendable {
    // @unchecked: touched only on the session's serial delegate queue, after registration under the delegate's lock.
    let buffer: AsyncBuffer<HTTPBody.Chunk>
    let control: TaskControl
    var head: CheckedContinuation<HTTPResponse, any Error>?

    init(buffer: AsyncBuffer<HTTPBody.Chunk>, control: TaskControl, head: CheckedContinuation<HTTPResponse, any Error>) {
        self.buffer = buffer
        self.control = control
        self.head = head
    }
}

/// Starts, pauses, cancels and declines redirects for one data task, keeping `suspend()` and
/// `resume()` balanced and these from racing one another.
///
/// On Linux (swift-corelibs-foundation) suspending a running data task is unsafe: it can trap in
/// `_NativeProtocol.stopLoading()` or deadlock its work queue, and data in flight is delivered
/// anyway. There the switch never pauses; memory per request is then bounded by the request's
/// size, which ``HTTPOrigin`` caps (``HTTPOrigin/maximumRequestLength``).
///
/// The same library traps ("Received callback for HTTP redirection, but we're not waiting for
/// it") when a redirect's completion handler reaches a task that a cancel has already stopped.
/// So a task that is cancelled never has its redirect declined (the cancel ends it), and a task
/// whose redirect was declined is never cancelled (it completes with the 3xx by itself).
private final class TaskControl: Sendable {
    private struct State {
        var started = false
        var suspended = false
        var cancelled = false
        var redirectDeclined = false
    }

    private let state = Locked(State())

    func pauseIfFull(_ task: URLSessionTask, buffer: AsyncBuffer<HTTPBody.Chunk>) {
        #if !canImport(FoundationNetworking)
        state.withLock { state in
            guard !state.suspended, !state.cancelled, buffer.isPaused else { return }
            state.suspended = true
            task.suspend()
        }
        #endif
    }

    /// Starts the task once the delegate knows it, or cancels it if its request was cancelled
    /// before: its completion then reaches a registered task (one that completed unregistered
    /// would leave the caller waiting for ever).
    func start(_ task: URLSessionTask) {
        state.withLock { state in
            state.started = true
            if state.cancelled { task.cancel() } else { task.resume() }
        }
    }

    /// Cancels the task; a suspended task is resumed first, or libcurl would keep its connection.
    func cancel(_ task: URLSessionTask) {
        state.withLock { state in
            guard !state.cancelled else { return }
            state.cancelled = true
            guard state.started, !state.redirectDeclined else { return }
            if state.suspended {
                state.suspended = false
                task.resume()
            }
            task.cancel()
        }
    }

    /// Tells the session not to follow a redirect, unless the task was cancelled meanwhile.
    func declineRedirect(_ completionHandler: @Sendable (URLRequest?) -> Void) {
        state.withLock { state in
            guard !state.cancelled else { return }
            state.redirectDeclined = true
            completionHandler(nil)
        }
    }

    func resumeIfDrained(_ task: URLSessionTask, buffer: AsyncBuffer<HTTPBody.Chunk>) {
        state.withLock { state in
            guard state.suspended, !state.cancelled, !buffer.isPaused else { return }
            state.suspended = false
            task.resume()
        }
    }
}

private final class SessionDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: `tasks` is guarded by `Locked`; the rest is immutable.
    private let tasks = Locked([Int: TaskState]())

    func register(_ task: URLSessionTask, state: TaskState) {
        tasks.withLock { $0[task.taskIdentifier] = state }
    }

    private func state(of task: URLSessionTask) -> TaskState? {
        tasks.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // Every task is registered before it starts; one without state has completed, and a
        // completion handler called now would trap.
        state(of: task)?.control.declineRedirect(completionHandler)
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        guard let state = state(of: dataTask), let head = state.head, let http = response as? HTTPURLResponse else {
            completionHandler(.cancel)
            return
        }
        state.head = nil
        var headers = HTTPHeaders()
        for (name, value) in http.allHeaderFields {
            headers.add(name: "\(name)", value: "\(value)")
        }
        head.resume(returning: HTTPResponse(status: http.statusCode, headers: headers, body: HTTPBody(buffer: state.buffer)))
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let state = state(of: dataTask) else { return }
        if state.buffer.offer(HTTPBody.Chunk(data), weight: data.count) {
            state.control.pauseIfFull(dataTask, buffer: state.buffer)
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let state = tasks.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        let failure = error.map(URLSessionTransport.translate)
        if let head = state.head {
            state.head = nil
            if let failure {
                head.resume(throwing: failure)
            } else if let http = task.response as? HTTPURLResponse {
                // A redirect that was not followed completes without a `didReceive response` on some platforms.
                var headers = HTTPHeaders()
                for (name, value) in http.allHeaderFields { headers.add(name: "\(name)", value: "\(value)") }
                state.buffer.finish()
                head.resume(returning: HTTPResponse(status: http.statusCode, headers: headers, body: HTTPBody(buffer: state.buffer)))
            } else {
                head.resume(throwing: StreamCacheError(.originUnavailable, "The origin closed the connection without a response.", connectionFailure: .lost))
            }
            return
        }
        state.buffer.finish(throwing: failure)
    }
}

extension URLSessionTransport {
    static func translate(_ error: any Error) -> any Error {
        let nsError = error as NSError
        if nsError.domain == NSURLErrorDomain, nsError.code == NSURLErrorCancelled { return CancellationError() }
        let reason: String
        var failure: StreamCacheError.ConnectionFailure?
        switch nsError.code {
        case NSURLErrorTimedOut: (reason, failure) = ("The origin did not answer in time.", .timedOut)
        case NSURLErrorCannotConnectToHost: (reason, failure) = ("The origin refused the connection.", .refused)
        case NSURLErrorNetworkConnectionLost: (reason, failure) = ("The connection to the origin was lost.", .lost)
        case NSURLErrorCannotFindHost: reason = "The origin's host name could not be resolved."
        case NSURLErrorNotConnectedToInternet: reason = "There is no network connection."
        case NSURLErrorServerCertificateUntrusted, NSURLErrorServerCertificateHasUnknownRoot, NSURLErrorServerCertificateHasBadDate,
             NSURLErrorServerCertificateNotYetValid:
            // Trust for a private authority comes from the system here (a configuration profile
            // on Apple platforms); AsyncHTTPClientTransport takes one itself.
            (reason, failure) = ("The origin's TLS certificate is not trusted (or is out of its dates).", .certificateRejected)
        default: reason = "The request to the origin failed (\(nsError.domain) \(nsError.code))."
        }
        return StreamCacheError(.originUnavailable, reason, underlying: SendableErrorDescription(domain: nsError.domain, code: nsError.code, description: nsError.localizedDescription),
                                connectionFailure: failure)
    }
}
