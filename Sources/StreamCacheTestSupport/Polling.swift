/// Waits while `condition` holds: checks it up to `tries` times, `interval` apart, and returns as
/// soon as it no longer holds (or the tries are spent: the test's own expectation then says what
/// was not reached).
///
/// What the tests wrote as `for _ in 0..<tries where condition { sleep }` did not stop there: a
/// `where` clause only skips the loop's body, so once the condition no longer held, the loop went
/// on asking it without sleeping until the count ran out. A thousand or more back-to-back checks
/// (a byte count under a lock, an actor's cached ranges, a parse of `/proc/net/tcp`) took a thread
/// of the two-core machine's cooperative pool from the tests beside it; in the sanitized suite,
/// with counts stretched by ``TestTiming/slowdown``, that was enough to starve other tests' origins
/// into timeouts.
///
/// - Returns: whether `condition` stopped holding within the tries.
@discardableResult
public func waitWhile(tries: Int, every interval: Duration, _ condition: () async throws -> Bool) async throws -> Bool {
    for _ in 0..<tries {
        guard try await condition() else { return true }
        try await Task.sleep(for: interval)
    }
    return try await !condition()
}
