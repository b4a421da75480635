import NIOCore
import StreamCache

/// Tells a response that its client closed the connection, when the response is not writing.
///
/// A body learns its client left when a write fails. One waiting for the origin's next bytes
/// writes nothing, so a stalled origin kept a departed player's read, and with it the download,
/// until the origin answered or timed out. A player that leaves mid-response closes with bytes
/// still unread, so its kernel resets the connection and NIO closes the channel at once; the
/// ``ClientDepartureHandler`` sees that and ends the reads watching here.
///
/// A client that only shuts down its sending half (a FIN with nothing unread) has not left:
/// HTTP/1.1 lets it wait for its answer, and the server allows half-closed connections. The next
/// write finds out whether it still listens.
final class ClientDeparture: Sendable {
    private struct State {
        var hasLeft = false
        var nextID: UInt64 = 0
        var actions: [UInt64: @Sendable () -> Void] = [:]
    }

    private let state = Locked(State())

    /// Runs `action` once the client leaves, at once if it already has. End the returned watch
    /// when the response no longer needs it, so the action (and what it holds) is let go.
    func whenLeft(_ action: @escaping @Sendable () -> Void) -> Watch {
        let id: UInt64? = state.withLock { state in
            guard !state.hasLeft else { return nil }
            state.nextID += 1
            state.actions[state.nextID] = action
            return state.nextID
        }
        guard let id else {
            action()
            return Watch(departure: nil, id: 0)
        }
        return Watch(departure: self, id: id)
    }

    /// One action waiting for the client to leave.
    struct Watch: Sendable {
        fileprivate let departure: ClientDeparture?
        fileprivate let id: UInt64

        /// Stops watching; the action will not run.
        func end() {
            _ = departure?.state.withLock { $0.actions.removeValue(forKey: id) }
        }
    }

    fileprivate func leave() {
        let actions = state.withLock { state in
            state.hasLeft = true
            defer { state.actions = [:] }
            return Array(state.actions.values)
        }
        for action in actions { action() }
    }

    /// Each connection's departure, owned by its ``ClientDepartureHandler``.
    static let byChannel = ChannelRegistry<ClientDeparture>()
}

/// Watches one connection for its close (see ``ClientDeparture``). Everything passes it untouched.
final class ClientDepartureHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Any

    private let departure = ClientDeparture()

    func handlerAdded(context: ChannelHandlerContext) {
        ClientDeparture.byChannel.register(departure, for: context.channel)
    }

    func channelInactive(context: ChannelHandlerContext) {
        departure.leave()
        context.fireChannelInactive()
    }

    // A connection closed before it became active is removed without going inactive.
    func handlerRemoved(context: ChannelHandlerContext) {
        ClientDeparture.byChannel.unregister(context.channel)
        departure.leave()
    }
}
