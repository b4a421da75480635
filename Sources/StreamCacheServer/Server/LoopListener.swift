import HummingbirdCore
import Logging
import NIOCore
import NIOExtras
import NIOPosix
import ServiceLifecycle
import StreamCacheHTTPClient

/// One event loop's share of a server: it accepts connections on its own listening socket (see
/// ``ListeningSocket``), and reads, answers and writes each on that loop alone.
///
/// The loop's tasks (this accept loop, each connection's handler) prefer the loop as their
/// executor (``EventLoopTaskExecutor``), so a request costs no thread wake-up between the socket
/// and the responder. Each loop accepting for itself, rather than one loop accepting for all and
/// handing connections on, keeps that true for every connection. This does what HummingbirdCore's
/// `Server` does for the one socket it binds, which cannot share its port with others: a graceful shutdown closes the listening socket,
/// asks each open connection to close after its request in progress (NIOExtras'
/// `ServerQuiescingHelper`), and `run()` returns once they are closed.
struct LoopListener<Child: ServerChildChannel>: Service {
    /// The socket this loop accepts on; its server channel owns and closes it.
    let socket: ListeningSocket
    let eventLoop: any EventLoop
    let child: Child
    let logger: Logger
    /// Called with the listening channel once it accepts.
    let onRunning: @Sendable (any Channel) async -> Void

    func run() async throws {
        try await withTaskExecutorPreference(EventLoopTaskExecutor(eventLoop)) {
            let quiescing = ServerQuiescingHelper(group: eventLoop)
            // The descriptor is the channel's from here on, failure or not: closing it again could
            // close whatever reused its number, often another SwiftNIO socket, which then traps.
            let server = try await ServerBootstrap(group: eventLoop)
                .serverChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                    }
                }
                .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
                .bind(socket.descriptor) { [child, logger] channel in child.setup(channel: channel, logger: logger) }
            await withGracefulShutdownHandler {
                await onRunning(server.channel)
                let (child, logger) = (child, logger)
                await withDiscardingTaskGroup { group in
                    do {
                        try await server.executeThenClose { connections in
                            for try await connection in connections {
                                group.addTask { await child.handle(value: connection, logger: logger) }
                            }
                        }
                    } catch {
                        logger.error("the server stopped accepting connections", metadata: ["error": "\(error)"])
                    }
                }
            } onGracefulShutdown: {
                quiescing.initiateShutdown(promise: nil)
            }
        }
    }
}
