import Logging
import NIOCore
import ServiceLifecycle
import StreamCache
import StreamCacheHTTPClient

/// A server running in a task of its own, stopped by ``stop()``, never by cancelling that task.
///
/// Cancelling the task that runs a SwiftNIO server traps when a connection was accepted in that
/// moment and not yet taken by the server ("Deinited NIOAsyncWriter without calling finish()",
/// apple/swift-nio#2813): a player that connected while the proxy stopped crashed the process
/// (`ProxyServerStopTests`, in every run with the cancelled task). So the stop is graceful: the
/// listening socket closes, the server takes every connection it accepted (idle ones close, and
/// requests in progress go on), and it ends once they are done. Requests still running after the
/// grace period are ended by closing their connections (``OpenConnections``), not by cancelling
/// the task, so a stop after any grace period, none included, leaves nothing for the server to
/// trap on, and a machine too busy to run the server's task for a while only makes the stop
/// slower.
package final class StoppableServer: Sendable {
    private let group: ServiceGroup
    private let connections: OpenConnections
    private let gracePeriod: Duration
    private let logger: Logger
    private let task: Task<Void, any Error>

    /// Makes the server with `makeService` and starts running it in a new task.
    ///
    /// - Parameters:
    ///   - gracePeriod: How long requests in progress may go on once a stop began.
    ///   - logger: Where the stop's trouble is told.
    ///   - eventLoop: Where the task runs, when it should run on the loop that serves the
    ///     connections (see ``ProxyServer/start()``); else on Swift's global executor.
    ///   - onExit: Called once the server ended, with the error it ended with, if any.
    ///   - makeService: Makes the server; each connection's pipeline must have the handler of the
    ///     ``OpenConnections`` it is given, which the stop closes once the grace period is over.
    package init(gracePeriod: Duration = .seconds(1), logger: Logger, eventLoop: (any EventLoop)? = nil,
                 onExit: @escaping @Sendable ((any Error)?) -> Void = { _ in },
                 makeService: (OpenConnections) throws -> any Service) rethrows {
        let connections = OpenConnections()
        let service = try makeService(connections)
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [.init(service: service)], logger: logger))
        self.group = group
        self.connections = connections
        self.gracePeriod = gracePeriod
        self.logger = logger
        let run: @Sendable () async throws -> Void = {
            do {
                try await group.run()
                onExit(nil)
            } catch {
                onExit(error)
                throw error
            }
        }
        if let eventLoop, #available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *) {
            task = Task(executorPreference: EventLoopTaskExecutor(eventLoop), operation: run)
        } else {
            task = Task(operation: run)
        }
    }

    /// Stops the server and returns once it has ended: at once when no request is in progress,
    /// at most the grace period later (plus the time the connections take to close) when one is.
    package func stop() async {
        await group.triggerGracefulShutdown()
        guard await !ends(within: gracePeriod) else { return }
        let open = connections.closeAll()
        logger.debug("closed the connections still open after the grace period", metadata: ["connections": "\(open)"])
        guard await !ends(within: Self.longestWaitForClosedConnections) else { return }
        // Only a responder that ignores its connection's close gets here; cancelling may trap
        // (see above), and waiting on would never end.
        logger.error("the server did not end once its connections were closed; cancelling it")
        task.cancel()
        await waitUntilEnded()
    }

    /// Returns once the server has ended, stopped or failed.
    package func waitUntilEnded() async {
        _ = await task.result
    }

    /// How long a stop waits for the server to end once it has closed the connections still open
    /// after the grace period: their responders end at their next write, or when they see the
    /// client leave (the proxy's `ClientDeparture`).
    static let longestWaitForClosedConnections: Duration = .seconds(10)

    /// Whether the server ends within `limit`.
    private func ends(within limit: Duration) async -> Bool {
        let task = self.task
        let outcome = await FirstAnswer.of({ _ = await task.result }, within: limit, timedOut: { StillRunning() })
        if case .success = outcome { return true }
        return false
    }

    private struct StillRunning: Error {}
}
