import NIOCore

/// A task executor that runs jobs on one SwiftNIO event loop.
///
/// NIO's event loops are serial executors but not task executors, so they cannot be a task's
/// preferred executor by themselves. A task that prefers this executor runs on the loop's
/// thread, and so do its child tasks and the default actors it calls while they are free: the
/// proxy's request handling stays on the thread that reads and writes its sockets. A job enqueued
/// from the loop's own thread is appended to the loop's queue without waking it.
///
/// Task executors came with Swift 6 runtimes (macOS 15, iOS 18); on older Apple systems the
/// server's tasks run on the global executor instead.
@available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
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
