import NIOCore
import StreamCache

/// Per-connection objects found by their connection.
///
/// Hummingbird hands a responder the connection's channel, not the handlers in its pipeline, and
/// the pipeline is only safe to search on the channel's event loop. A handler that owns such an
/// object registers it when it is added to the pipeline and unregisters it when it is removed
/// (which happens before the channel can be freed and its identity reused); a responder looks it
/// up from any thread.
final class ChannelRegistry<Value: AnyObject & Sendable>: Sendable {
    private let values = Locked([ObjectIdentifier: Value]())

    /// The object registered for `channel`, if its pipeline has the handler that owns one.
    func value(for channel: any Channel) -> Value? {
        values.withLock { $0[ObjectIdentifier(channel)] }
    }

    func register(_ value: Value, for channel: any Channel) {
        values.withLock { $0[ObjectIdentifier(channel)] = value }
    }

    func unregister(_ channel: any Channel) {
        _ = values.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }
}
