import NIOCore
import NIOPosix
import StreamCache
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Lets a response body wait until its event loop has looked at its sockets again.
///
/// A SwiftNIO event loop runs the tasks queued on it until none is left before it polls its
/// sockets once more, and a task queued while they run is run in the same pass. A body that writes
/// its next piece as soon as the last one is written (a cached file, to a client that empties its
/// socket as fast as the loop fills it) is such a chain, and two of them kept the proxy's loop from
/// its sockets for whole files: a new connection waited 50–80 ms to have its request read, on a
/// machine where nginx answers in 2–9 ms beside the same streams (`docs/benchmarks.md`, *Requests
/// beside streams*). A timer does not help: the other bodies' writes outlast it, so it is due
/// before the pass ends.
///
/// ``next()`` resolves at the loop's next poll: the first waiter of a pass writes a byte to a pipe
/// the loop watches, and the loop reads it (with every other socket that is ready) when it polls;
/// the waiters then run after that poll's reads and accepts. One pipe write and one read per pass
/// serve every connection of the loop. The turns end with ``close()``, after which ``next()``
/// resolves at once.
package final class EventLoopTurns: Sendable {
    /// The loop whose turns these are.
    package let eventLoop: any EventLoop
    private let state: NIOLoopBoundBox<State>

    private struct State {
        var pipe: (any Channel)?
        var waiters: [EventLoopPromise<Void>] = []
    }

    private init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        state = .makeBoxSendingValue(State(), eventLoop: eventLoop)
    }

    /// Opens the pipe on `eventLoop`.
    ///
    /// - Throws: ``StreamCacheError`` (`cacheIOFailed`) when the system gives no pipe.
    package static func start(on eventLoop: any EventLoop) async throws -> EventLoopTurns {
        var descriptors: [CInt] = [0, 0]
        guard pipe(&descriptors) == 0 else {
            throw StreamCacheError(.cacheIOFailed, "No pipe for the server's event loop (errno \(errno)).")
        }
        let turns = EventLoopTurns(eventLoop: eventLoop)
        let pipe: any Channel
        do {
            pipe = try await NIOPipeBootstrap(group: eventLoop)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(TurnHandler(turns: turns))
                    }
                }
                .takingOwnershipOfDescriptors(input: descriptors[0], output: descriptors[1])
                .get()
        } catch {
            closeDescriptor(descriptors[0])
            closeDescriptor(descriptors[1])
            throw StreamCacheError(.cacheIOFailed, "The server's event loop could not watch its pipe: \(error)")
        }
        try await eventLoop.submit { turns.state.value.pipe = pipe }.get()
        return turns
    }

    /// Resolves once the loop has polled its sockets again (at once after ``close()``).
    package func next() -> EventLoopFuture<Void> {
        guard eventLoop.inEventLoop else { return eventLoop.flatSubmit { self.next() } }
        guard let pipe = state.value.pipe else { return eventLoop.makeSucceededVoidFuture() }
        let promise = eventLoop.makePromise(of: Void.self)
        state.value.waiters.append(promise)
        if state.value.waiters.count == 1 {
            pipe.writeAndFlush(ByteBuffer(integer: UInt8(1)), promise: nil)
        }
        return promise.futureResult
    }

    /// Closes the pipe; waiters and later calls of ``next()`` resolve at once.
    package func close() async {
        let pipe = try? await eventLoop.submit { () -> (any Channel)? in
            defer { self.state.value.pipe = nil }
            return self.state.value.pipe
        }.get()
        try? await pipe?.close()
        try? await eventLoop.submit { self.turnCame() }.get()
    }

    /// The loop polled: every waiter of the pass goes on.
    fileprivate func turnCame() {
        let waiters = state.value.waiters
        state.value.waiters = []
        for waiter in waiters { waiter.succeed() }
    }

    /// Reads the pipe's bytes; each read is a poll of the loop.
    private final class TurnHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let turns: EventLoopTurns

        init(turns: EventLoopTurns) { self.turns = turns }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) { turns.turnCame() }

        func channelInactive(context: ChannelHandlerContext) {
            turns.turnCame()
            context.fireChannelInactive()
        }
    }
}

/// The C library's `close`, which ``EventLoopTurns/close()`` hides inside the type.
private func closeDescriptor(_ descriptor: CInt) {
    _ = close(descriptor)
}
