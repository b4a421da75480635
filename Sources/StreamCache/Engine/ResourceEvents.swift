/// What happens to a resource from the moment of ``Resource/events()`` on, as an asynchronous
/// sequence for one consumer.
///
/// A consumer that falls behind (a user interface whose main thread was busy while a fast
/// download reported each chunk) loses only progress it can do without: when more than
/// ``capacity`` events wait, the oldest ``ResourceEvent/bytesCached(_:totalCached:)`` or
/// ``ResourceEvent/committed(_:)`` goes, and the next one of its kind carries the totals anyway
/// (`totalCached`, the whole committed set). Every other event (the info, a version change,
/// downloads that start and end, errors) arrives, in order.
///
/// The subscription holds its resource in memory until the sequence and every iterator made
/// from it are gone, or the task iterating it is cancelled. Iterate it from one task at a time.
public struct ResourceEvents: AsyncSequence, Sendable {
    public typealias Element = ResourceEvent

    /// How many events wait for a consumer at most, besides events that are never dropped.
    public static let capacity = 256

    let subscription: Subscription

    /// Iterates the events; one at a time.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let subscription: Subscription

        /// The next event, waiting for it if none is due; `nil` once the iterating task is
        /// cancelled.
        public mutating func next() async -> ResourceEvent? {
            await subscription.mailbox.next()
        }
    }

    /// Makes the iterator.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(subscription: subscription)
    }

    /// One subscriber of a resource: ends the subscription when the last copy of the sequence
    /// and of its iterators goes.
    final class Subscription: Sendable {
        let mailbox: EventMailbox
        private let resource: Resource
        private let id: Int

        init(resource: Resource, id: Int, mailbox: EventMailbox) {
            self.resource = resource
            self.id = id
            self.mailbox = mailbox
        }

        deinit {
            mailbox.finish()
            let resource = resource, id = id
            Task { await resource.removeEventMailbox(id) }
        }
    }
}

/// The events that wait for one subscriber of a resource (see ``ResourceEvents``). The resource
/// posts from its actor; the subscriber takes from its own task.
final class EventMailbox: Sendable {
    private struct State {
        var waiting: [ResourceEvent] = []
        var consumer: CheckedContinuation<ResourceEvent?, Never>?
        var finished = false
    }

    private let state = Locked(State())

    /// Hands `event` to a consumer that waits, or keeps it, dropping the oldest progress event
    /// when ``ResourceEvents/capacity`` are waiting.
    func post(_ event: ResourceEvent) {
        let consumer = state.withLock { state -> CheckedContinuation<ResourceEvent?, Never>? in
            guard !state.finished else { return nil }
            if let consumer = state.consumer {
                state.consumer = nil
                return consumer
            }
            if state.waiting.count >= ResourceEvents.capacity, let oldest = state.waiting.firstIndex(where: \.isProgress) {
                state.waiting.remove(at: oldest)
            }
            state.waiting.append(event)
            return nil
        }
        consumer?.resume(returning: event)
    }

    /// The next event; waits while none is due, and gives `nil` once finished.
    func next() async -> ResourceEvent? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<ResourceEvent?, Never>) in
                let ready = state.withLock { state -> ResourceEvent?? in
                    if state.finished { return .some(nil) }
                    if !state.waiting.isEmpty { return .some(state.waiting.removeFirst()) }
                    precondition(state.consumer == nil, "ResourceEvents is iterated by two tasks at once")
                    state.consumer = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }

    /// Ends the subscription: a waiting consumer gets `nil`, and so does every later call.
    func finish() {
        let consumer = state.withLock { state -> CheckedContinuation<ResourceEvent?, Never>? in
            state.finished = true
            state.waiting = []
            defer { state.consumer = nil }
            return state.consumer
        }
        consumer?.resume(returning: nil)
    }
}

extension ResourceEvent {
    /// Whether a later event of the same kind stands for this one (see ``ResourceEvents``).
    var isProgress: Bool {
        switch self {
        case .bytesCached, .committed: true
        default: false
        }
    }
}
