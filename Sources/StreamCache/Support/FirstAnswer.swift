/// Runs an operation against a deadline and returns as soon as either settles, without waiting
/// for the loser.
///
/// A task group waits for every child before it returns, so a timeout built on one lasts as long
/// as the cancelled operation takes to wind down: a transport that is slow to give up (URLSession
/// on Linux on a loaded machine took seconds) would hold up whoever waits. Here the operation is
/// cancelled at the deadline and left to end on its own; both tasks end within the deadline or
/// at the operation's next cancellation check.
package enum FirstAnswer {
    /// The operation's result, or `timedOut` once `timeout` has passed.
    package static func of<Value: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Value,
        within timeout: Duration,
        timedOut: @escaping @Sendable () -> any Error
    ) async -> Result<Value, any Error> {
        let slot = Locked(Slot<Value>.waiting(nil))
        let settle: @Sendable (Result<Value, any Error>) -> Void = { result in
            // The first to settle wins; the waiter, if it waits already, is resumed outside the lock.
            let waiter = slot.withLock { state -> CheckedContinuation<Result<Value, any Error>, Never>? in
                guard case .waiting(let continuation) = state else { return nil }
                state = .settled(result)
                return continuation
            }
            waiter?.resume(returning: result)
        }
        let work = Task {
            do { settle(.success(try await operation())) } catch { settle(.failure(error)) }
        }
        let deadline = Task {
            try? await Task.sleep(for: timeout)
            settle(.failure(timedOut()))
        }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Value, any Error>, Never>) in
            let settled = slot.withLock { state -> Result<Value, any Error>? in
                if case .settled(let result) = state { return result }
                state = .waiting(continuation)
                return nil
            }
            if let settled { continuation.resume(returning: settled) }
        }
        work.cancel()
        deadline.cancel()
        return result
    }

    private enum Slot<Value: Sendable> {
        case waiting(CheckedContinuation<Result<Value, any Error>, Never>?)
        case settled(Result<Value, any Error>)
    }
}
