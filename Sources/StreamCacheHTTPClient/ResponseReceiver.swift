import AsyncHTTPClient
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore
import NIOFoundationEssentialsCompat
import NIOHTTP1
import StreamCache
// StreamCache and NIOHTTP1 both define HTTPHeaders; the engine's type is meant throughout.
import struct StreamCache.HTTPHeaders

/// Receives one response for ``AsyncHTTPClientTransport`` on the connection's event loop: hands
/// the head to the task that sent the request, and pushes each part of the body straight into the
/// buffer the consumer reads, stamped with the time it came off the socket.
///
/// Why a delegate and not the client's `async` interface: that interface hands a body over only
/// to a task that iterates it, so a chunk could be stamped only once a task of the cooperative
/// pool got to it. On a busy pool that is late, and the bytes that came meanwhile are stamped
/// together right behind it: a transfer that starts late then measures fast, which is what the
/// engine's choice between one connection and several rests on (`ParallelGain`). The event loop
/// runs on a thread of its own, so its stamps follow the network, not the pool. It also saves a
/// hop per chunk: the pool's task that read the client's body and wrote it on is gone.
///
/// Back-pressure: a part that takes the buffer over its limit is answered with a future that
/// completes once the consumer has drained half of it; the client reads no more of the socket
/// until then. Dropping or cancelling the body cancels the request, which closes the connection.
///
/// The body's idle timeout is the receiver's, not the client's: it counts the origin's silence
/// only while the receiver wants bytes. The client's own timer also runs while a slow consumer
/// holds the connection back, and fails the request then: the bytes the origin had already sent
/// into the sockets are lost, and fetched again when the body resumes. On a loaded machine a
/// download whose every chunk waited seconds for the engine lost 3 MB of each 4 MiB part so.
final class ResponseReceiver: HTTPClientResponseDelegate {
    typealias Response = Void

    private struct State {
        /// The sender, until the head or an error reaches it.
        var head: CheckedContinuation<HTTPResponse, any Error>?
        /// The request, until it ends: what cancelling the body cancels.
        var task: HTTPClient.Task<Void>?
        /// Set when the sender was cancelled before the request existed.
        var cancelled = false
        /// Set when the request has ended (it may end before `execute` returns).
        var ended = false
        /// Fails the request if its head has not come in time.
        var headTimeout: Scheduled<Void>?
        /// The future the client waits on while the buffer is over its limit.
        var drain: EventLoopPromise<Void>?
        /// When the origin's silence fails the request; `nil` while no silence counts: before
        /// the head, while the consumer holds the body back, after the end.
        var idleDeadline: NIODeadline?
        /// The check that fails the request once `idleDeadline` has passed. It runs at the
        /// deadline as it stood when it was scheduled, and is not moved as bytes come (that cost
        /// a cancel and a new scheduled task per chunk): finding a later deadline, it schedules
        /// itself again.
        var idleCheck: Scheduled<Void>?
        /// Whether a check is scheduled or being scheduled (`idleCheck` is stored only once
        /// scheduling returns).
        var idleCheckPending = false
    }

    /// The body as the consumer reads it.
    let buffer: AsyncBuffer<HTTPBody.Chunk>
    private let state = Locked(State())
    /// Held until the response ends: a client shuts down when its owner is released, which would
    /// fail a body still being read.
    private let transport: AsyncHTTPClientTransport
    /// The longest silence of the origin, while the receiver wants bytes, before the request fails.
    private let idleReadTimeout: TimeAmount

    /// The proxy the request goes through, named in the errors it causes.
    private let proxy: OutboundProxy?

    init(bufferLimit: Int, idleReadTimeout: Duration, transport: AsyncHTTPClientTransport, proxy: OutboundProxy? = nil) {
        buffer = HTTPBody.makeBuffer(limit: bufferLimit)
        self.proxy = proxy
        self.idleReadTimeout = idleReadTimeout.timeAmount
        self.transport = transport
        buffer.setOnDrain { [weak self] in self?.resumeReading() }
        buffer.setOnCancel { [weak self] in self?.cancel() }
    }

    /// Sends `request` on `client` and returns once its head has arrived; `timeout` bounds the
    /// wait for the head. Cancelling the calling task meanwhile cancels the request.
    ///
    /// With a `bodyEventLoop`, the receiver runs there. That loop is the request's preference,
    /// not its requirement: the client opens new connections on it, and takes an idle one on
    /// another loop (hopping to the preferred one) rather than open another. Connections opened
    /// for a requirement are closed as soon as they are idle (AsyncHTTPClient keeps only the
    /// others for reuse): every request would pay for a new connection.
    func send(_ request: HTTPClient.Request, on client: HTTPClient, bodyEventLoop: (any EventLoop)?,
              headTimeout timeout: Duration) async throws -> HTTPResponse {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPResponse, any Error>) in
                state.withLock { $0.head = continuation }
                let task = client.execute(request: request, delegate: self, eventLoop: bodyEventLoop.map { .delegate(on: $0) } ?? .indifferent,
                                          deadline: nil, logger: nil)
                let timeout = task.eventLoop.scheduleTask(in: timeout.timeAmount) { [weak self] in
                    // Only a request still waiting for its head is failed here: the body has the
                    // client's idle read timeout.
                    guard let self, state.withLock({ $0.head != nil }) else { return }
                    task.fail(reason: HTTPClientError.deadlineExceeded)
                }
                let (ended, cancelledAlready) = state.withLock { state in
                    // The request may have ended already: a refused connection fails at once.
                    if !state.ended {
                        state.task = task
                        state.headTimeout = timeout
                    }
                    return (state.ended, state.cancelled)
                }
                if ended { timeout.cancel() } else if cancelledAlready { task.cancel() }
            }
        } onCancel: {
            cancel()
        }
    }

    /// Cancels the request: the sender was cancelled, or the consumer dropped the body.
    func cancel() {
        let task = state.withLock { state -> HTTPClient.Task<Void>? in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        var headers = HTTPHeaders()
        for field in head.headers { headers.add(name: field.name, value: field.value) }
        let response = HTTPResponse(status: Int(head.status.code), headers: headers, body: HTTPBody(buffer: buffer))
        let (sender, timeout) = state.withLock { state in
            defer { state.head = nil; state.headTimeout = nil }
            // The sender stores the request once `execute` returns, which may be after the head:
            // a drain restarts the idle count through it.
            if state.task == nil, !state.ended { state.task = task }
            return (state.head, state.headTimeout)
        }
        timeout?.cancel()
        restartIdleCount(for: task)
        sender?.resume(returning: response)
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ part: ByteBuffer) -> EventLoopFuture<Void> {
        let arrivedAt = ContinuousClock.now
        // The chunk shares the buffer's memory instead of copying it: a copy cost a fresh
        // allocation and its page faults for every chunk of a download.
        let data = part.getData(at: part.readerIndex, length: part.readableBytes, byteTransferStrategy: .noCopy) ?? Data()
        guard buffer.offer(HTTPBody.Chunk(data, arrivedAt: arrivedAt), weight: data.count) else {
            restartIdleCount(for: task)
            return task.eventLoop.makeSucceededVoidFuture()
        }
        let drain = task.eventLoop.makePromise(of: Void.self)
        // Paused: the consumer's turn, not the origin's, so no silence counts until it drains.
        state.withLock { state in
            state.drain = drain
            state.idleDeadline = nil
        }
        // The consumer may have drained the buffer between the offer and now, and found no
        // promise to complete.
        if !buffer.isPaused { resumeReading() }
        return drain.futureResult
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        end()
        buffer.finish()
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
        let translated = AsyncHTTPClientTransport.translate(error, proxy: proxy)
        let sender = end()
        sender?.resume(throwing: translated)
        buffer.finish(throwing: translated)
    }

    /// The request is over: lets go of it (it holds this receiver, its body's buffer holds this
    /// receiver's actions) and of what waits on it. Returns the sender if the head never came.
    @discardableResult
    private func end() -> CheckedContinuation<HTTPResponse, any Error>? {
        let (sender, timeout, drain, idleCheck) = state.withLock { state in
            defer {
                state.ended = true
                state.head = nil
                state.task = nil
                state.headTimeout = nil
                state.drain = nil
                state.idleDeadline = nil
                state.idleCheck = nil
            }
            return (state.head, state.headTimeout, state.drain, state.idleCheck)
        }
        timeout?.cancel()
        idleCheck?.cancel()
        // Every promise must be completed: the client may still hold the future.
        drain?.succeed()
        return sender
    }

    /// The consumer drained the buffer: the client may read the socket again, and the origin's
    /// silence counts again from now. Runs on the consumer's thread or the event loop.
    private func resumeReading() {
        let (drain, task) = state.withLock { state -> (EventLoopPromise<Void>?, HTTPClient.Task<Void>?) in
            defer { state.drain = nil }
            return (state.drain, state.task)
        }
        guard let drain else { return }
        if let task { restartIdleCount(for: task) }
        drain.succeed()
    }

    /// Counts the origin's silence from now (from any thread): the request fails with the
    /// client's `readTimeout` unless a body part or the end comes within the idle timeout, or the
    /// consumer holds the body back.
    private func restartIdleCount(for task: HTTPClient.Task<Void>) {
        let deadline = NIODeadline.now() + idleReadTimeout
        let schedule = state.withLock { state -> Bool in
            guard !state.ended else { return false }
            state.idleDeadline = deadline
            defer { state.idleCheckPending = true }
            return !state.idleCheckPending
        }
        if schedule { scheduleIdleCheck(at: deadline, for: task) }
    }

    /// Schedules the idle check on the request's event loop, and keeps it for ``end()`` to cancel.
    private func scheduleIdleCheck(at deadline: NIODeadline, for task: HTTPClient.Task<Void>) {
        let check = task.eventLoop.scheduleTask(deadline: deadline) { [weak self] () -> Void in
            self?.checkIdleDeadline(for: task)
        }
        let ended = state.withLock { state -> Bool in
            if !state.ended { state.idleCheck = check }
            return state.ended
        }
        // The request ended while this was being scheduled, and found nothing to cancel.
        if ended { check.cancel() }
    }

    /// Runs at the deadline the check was scheduled for: fails the request if no bytes came
    /// since, schedules the check again for the later deadline if some did, and stops if no
    /// silence counts now (a later restart schedules a new check).
    private func checkIdleDeadline(for task: HTTPClient.Task<Void>) {
        enum Next { case stop, fail, check(at: NIODeadline) }
        let next = state.withLock { state -> Next in
            guard !state.ended, let deadline = state.idleDeadline else {
                state.idleCheckPending = false
                state.idleCheck = nil
                return .stop
            }
            guard deadline > .now() else {
                state.idleCheckPending = false
                state.idleCheck = nil
                return .fail
            }
            return .check(at: deadline)
        }
        switch next {
        case .stop: break
        case .fail: task.fail(reason: HTTPClientError.readTimeout)
        case .check(let deadline): scheduleIdleCheck(at: deadline, for: task)
        }
    }
}
