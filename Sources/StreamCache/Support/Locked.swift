import Foundation

/// A value guarded by a lock, for state shared with callbacks that cannot `await`
/// (URLSession delegates, stream termination handlers).
///
/// `Synchronization.Mutex` would do, but it needs macOS 15 / iOS 18; this works on every
/// platform the package supports.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: every access to `value` goes through `lock`.
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) { self.value = value }

    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
