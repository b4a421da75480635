import NIOCore

/// A task executor that runs jobs on one SwiftNIO event loop.
///
/// NIO's event loops are serial executors but not task executors, so they cannot be a task's
/// preferred executor by themselves. A task that prefers this executor runs on the loop's
/// thread, and so do its child tasks and the default actors it calls while they are free: work
/// that reads or writes the loop's sockets stays on the thread that does the I/O. The proxy's
/// request handling runs on its server's loop this way, and the engine's downloads on the loop
/// that receives their bodies (``AsyncHTTPClientTransport/bodyExecutor``). A job enqueued from
/// the loop's own thread is appended to the loop's queue without waking it.
///
/// Task executors came with Swift 6 runtimes (macOS 15, iOS 18); on older Apple systems such
/// tasks run on the global executor instead.
@available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
public final class EventLoopTaskExecutor: TaskExecutor {
    /// The loop whose thread runs the jobs.
    public let eventLoop: any EventLoop

    /// Creates an executor that runs its jobs on `eventLoop`.
    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
