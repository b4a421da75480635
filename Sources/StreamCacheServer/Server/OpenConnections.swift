import NIOCore
import StreamCache

/// The connections a server accepted and has not closed, so that its stop can close those still
/// open after the grace period (see ``StoppableServer``).
///
/// Each connection's pipeline gets a ``handler()``, which adds the connection here as the
/// pipeline is set up (so a connection accepted but not yet taken by the server counts too) and
/// removes it when it closes. Once ``closeAll()`` ran, connections that are set up later are
/// closed as soon as their pipeline is ready.
package final class OpenConnections: Sendable {
    private struct State {
        var channels: [ObjectIdentifier: any Channel] = [:]
        var closing = false
    }

    private let state = Locked(State())

    package init() {}

    /// A handler for one connection's pipeline; it passes everything on untouched.
    package func handler() -> any RemovableChannelHandler {
        Tracker(connections: self)
    }

    /// Closes every open connection, and from now on each new one as soon as it is set up;
    /// returns how many were open.
    @discardableResult
    package func closeAll() -> Int {
        let channels = state.withLock { state in
            state.closing = true
            return Array(state.channels.values)
        }
        for channel in channels { channel.close(promise: nil) }
        return channels.count
    }

    /// Adds `channel`; returns `false` when it must close instead (``closeAll()`` ran).
    fileprivate func add(_ channel: any Channel) -> Bool {
        state.withLock { state in
            guard !state.closing else { return false }
            state.channels[ObjectIdentifier(channel)] = channel
            return true
        }
    }

    fileprivate func remove(_ channel: any Channel) {
        _ = state.withLock { $0.channels.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    private final class Tracker: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = Any

        let connections: OpenConnections

        init(connections: OpenConnections) {
            self.connections = connections
        }

        func handlerAdded(context: ChannelHandlerContext) {
            guard !connections.add(context.channel) else { return }
            // The pipeline is still being set up; the server takes the connection once it is,
            // and finds it closed.
            let channel = context.channel
            context.eventLoop.execute { channel.close(promise: nil) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            connections.remove(context.channel)
            context.fireChannelInactive()
        }

        // A connection closed before it became active is removed without going inactive.
        func handlerRemoved(context: ChannelHandlerContext) {
            connections.remove(context.channel)
        }
    }
}
