import Logging
import ServiceLifecycle

/// A server that stops gracefully: run it in a task, and ``stop()`` it instead of cancelling that
/// task.
///
/// Cancelling the task that runs a SwiftNIO server traps when a connection was accepted in that
/// moment and not yet taken by the server ("Deinited NIOAsyncWriter without calling finish()",
/// apple/swift-nio#2813): a player that connected while the proxy stopped crashed the process
/// (`ProxyServerStopTests`, in every run with the cancelled task). A graceful shutdown closes the
/// listening socket, hands every connection it accepted to the server (idle ones close, requests
/// in progress go on) and ends once they are done. Requests still running after the grace period
/// are cancelled, so a player streaming a long file does not hold the stop up; a connection
/// accepted but not yet taken by then (a machine too busy to run the server's task for that long)
/// traps as before.
package struct StoppableService: Sendable {
    private let group: ServiceGroup

    /// - Parameter gracePeriod: How long requests in progress may go on once a stop began.
    package init(_ service: any Service, gracePeriod: Duration = .seconds(1), logger: Logger) {
        var configuration = ServiceGroupConfiguration(services: [.init(service: service)], logger: logger)
        configuration.maximumGracefulShutdownDuration = gracePeriod
        group = ServiceGroup(configuration: configuration)
    }

    /// Serves until ``stop()`` (or until the task is cancelled, which is what the stop avoids).
    package func run() async throws {
        try await group.run()
    }

    /// Begins the graceful stop; ``run()`` returns once it is over.
    package func stop() async {
        await group.triggerGracefulShutdown()
    }
}
