import Dispatch

/// A non-`Sendable` value that may travel between tasks but is used only on one serial queue.
///
/// Players hand requests that are not thread-safe to the bridge on the delegate queue; the
/// bridge's tasks carry them around and touch them only in blocks on that queue.
struct QueueConfined<Value>: @unchecked Sendable {
    // @unchecked: `value` is only reached through `withValue`, which checks it runs on `queue`.
    private let value: Value
    let queue: DispatchQueue

    init(_ value: Value, queue: DispatchQueue) {
        self.value = value
        self.queue = queue
    }

    func withValue<Result>(_ body: (Value) throws -> Result) rethrows -> Result {
        dispatchPrecondition(condition: .onQueue(queue))
        return try body(value)
    }
}
