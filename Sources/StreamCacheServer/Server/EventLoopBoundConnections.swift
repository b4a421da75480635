import HummingbirdCore
import Logging
import NIOCore

/// Runs each connection's request handling on the event loop that owns the connection's socket.
///
/// Hummingbird handles a connection in a task on Swift's global executor, so every request crossed
/// threads twice before a byte went out: the event loop read the request and woke a pool thread for
/// the handler, and the handler's writes woke the event loop again. On the test machine each of
/// those wake-ups cost 0.1–0.3 ms, most of the gap between the proxy's first byte and the origin's
/// own. With the connection's event loop as the handler's task executor, the request, the
/// responder, the engine calls it makes while the resource actor is free, and the response writes
/// run on one thread without a hand-off. Work the engine starts in tasks of its own (downloads,
/// origin requests, index writes) still runs on the global executor, so blocking file and
/// database calls stay off the event loops, except for reads of cached bytes, which come from the
/// page cache.
struct EventLoopBoundConnections<Connection: ServerChildChannel>: ServerChildChannel {
    typealias Value = Connection.Value

    let connection: Connection

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        connection.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await withTaskExecutorPreference(EventLoopTaskExecutor(value.channel.eventLoop)) {
            await connection.handle(value: value, logger: logger)
        }
    }
}

/// A task executor that runs jobs on one SwiftNIO event loop.
///
/// NIO's event loops are serial executors but not task executors, so they cannot be a task's
/// preferred executor by themselves. A job enqueued from the loop's own thread is appended to the
/// loop's queue without waking it.
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
