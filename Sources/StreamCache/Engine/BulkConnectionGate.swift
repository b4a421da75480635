/// Keeps the downloads no reader waits for (prefetches, background fills, `cache pin`, the extra
/// parts of a long read) within a number of connections per origin host, shared by every
/// resource of a cache, so that the transport's connections to that host always have room for a
/// reader's request.
///
/// A transport opens a few connections per host (8 for both bundled ones) and queues requests
/// beyond them in order of arrival. Without this gate, two files pinned at once, four parts each,
/// fill them all: a player's seek on the same host then waits until one of those requests ends,
/// which for a part of 8 MiB on a cloud connection of 4 MB/s is two seconds. With it, such
/// downloads wait here instead, and a reader's request finds a connection at once: readers come
/// first (media3's `PriorityTaskManager` makes the same choice for playback and downloads).
///
/// A download holds its place from its first request to its end. One that a reader comes to
/// wait for while it waits here is let through at once (``admitNow(_:)``); one that a reader comes
/// to once through gives its place back (``leave(_:)``): it is the reader's download from then on.
final class BulkConnectionGate: Sendable {
    /// A download's place in the gate.
    struct Ticket: Hashable, Sendable {
        /// The origin host (``OriginConnectionLimit/host``).
        let host: String
        /// How many downloads nobody waits for may hold a connection to it at once.
        let capacity: Int
        let id: Int
    }

    private struct Host {
        var admitted: Set<Int> = []
        var queue: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    private struct State {
        var hosts: [String: Host] = [:]
        var lastID = 0
    }

    private let state = Locked(State())

    /// A new ticket for a download from `host`, where `capacity` downloads may hold a connection.
    func makeTicket(host: String, capacity: Int) -> Ticket {
        state.withLock { state in
            state.lastID += 1
            return Ticket(host: host, capacity: max(1, capacity), id: state.lastID)
        }
    }

    /// Waits until the download may open a connection: fewer than the host's limit are held, and
    /// the downloads that came first have gone through.
    ///
    /// - Throws: `CancellationError` when the task is cancelled while it waits (it then holds no place).
    func enter(_ ticket: Ticket) async throws {
        try Task.checkCancellation()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Bool, CancellationError> = state.withLock { state in
                    var host = state.hosts[ticket.host] ?? Host()
                    // Let through before it came here (``admitNow(_:)``): a reader already waits.
                    if host.admitted.contains(ticket.id) { return .success(true) }
                    if host.queue.isEmpty, host.admitted.count < ticket.capacity {
                        host.admitted.insert(ticket.id)
                        state.hosts[ticket.host] = host
                        return .success(true)
                    }
                    // Cancelled before it got here: the handler below found nothing to resume.
                    guard !Task.isCancelled else { return .failure(CancellationError()) }
                    host.queue.append((ticket.id, continuation))
                    state.hosts[ticket.host] = host
                    return .success(false)
                }
                switch outcome {
                case .success(true): continuation.resume()
                case .success(false): break
                case .failure(let error): continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            // Not queued yet: the check above, under the same lock, sees the cancellation.
            let waiting = state.withLock { state -> CheckedContinuation<Void, any Error>? in
                guard let index = state.hosts[ticket.host]?.queue.firstIndex(where: { $0.id == ticket.id }) else { return nil }
                return state.hosts[ticket.host]?.queue.remove(at: index).continuation
            }
            waiting?.resume(throwing: CancellationError())
        }
    }

    /// Lets a download through at once, beyond the host's limit: a reader waits for it. One that
    /// has not reached ``enter(_:)`` yet (its task has not run) passes it without waiting; one
    /// that holds a place keeps it. Only for a download that has not ended: its end gives the
    /// place back (``leave(_:)``).
    func admitNow(_ ticket: Ticket) {
        let waiting = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            var host = state.hosts[ticket.host] ?? Host()
            defer { state.hosts[ticket.host] = host }
            host.admitted.insert(ticket.id)
            guard let index = host.queue.firstIndex(where: { $0.id == ticket.id }) else { return nil }
            return host.queue.remove(at: index).continuation
        }
        waiting?.resume()
    }

    /// Gives the download's place back when it ends, and lets the next waiting one through; a
    /// download that ends while it waits leaves the queue, and its wait throws
    /// `CancellationError`. Does nothing for a ticket that neither holds a place nor waits.
    func leave(_ ticket: Ticket) {
        var next: [CheckedContinuation<Void, any Error>] = []
        var dropped: CheckedContinuation<Void, any Error>?
        state.withLock { state in
            guard var host = state.hosts[ticket.host] else { return }
            if host.admitted.remove(ticket.id) == nil {
                guard let index = host.queue.firstIndex(where: { $0.id == ticket.id }) else { return }
                dropped = host.queue.remove(at: index).continuation
            }
            while !host.queue.isEmpty, host.admitted.count < ticket.capacity {
                let first = host.queue.removeFirst()
                host.admitted.insert(first.id)
                next.append(first.continuation)
            }
            state.hosts[ticket.host] = host.admitted.isEmpty && host.queue.isEmpty ? nil : host
        }
        dropped?.resume(throwing: CancellationError())
        for continuation in next { continuation.resume() }
    }

    /// How many downloads hold a place at `host`; for tests and diagnostics.
    func admittedCount(at host: String) -> Int {
        state.withLock { $0.hosts[host]?.admitted.count ?? 0 }
    }

    /// Whether the download of `ticket` waits for a place; for tests and diagnostics.
    func isQueued(_ ticket: Ticket) -> Bool {
        state.withLock { $0.hosts[ticket.host]?.queue.contains { $0.id == ticket.id } ?? false }
    }

    /// How many downloads wait for a place at `host`; for tests and diagnostics.
    func queuedCount(at host: String) -> Int {
        state.withLock { $0.hosts[host]?.queue.count ?? 0 }
    }
}
