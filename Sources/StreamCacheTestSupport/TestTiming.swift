import Foundation

/// How much slower than usual the tests run: `STREAMCACHE_TEST_SLOWDOWN` (default 1). CI sets it
/// for the ThreadSanitizer run, which makes the code 5–15 times slower. Tests that must observe
/// something *while* a transfer is under way divide their origin's rate by it, and stretch their
/// waits by it, so they keep proving the same thing instead of racing the sanitizer.
public enum TestTiming {
    /// The factor, at least 1.
    public static let slowdown: Int = {
        let value = ProcessInfo.processInfo.environment["STREAMCACHE_TEST_SLOWDOWN"].flatMap { Int($0) } ?? 1
        return max(1, value)
    }()

    /// `bytesPerSecond` divided by the slowdown.
    public static func rate(_ bytesPerSecond: Int) -> Int { max(1, bytesPerSecond / slowdown) }

    /// `duration` multiplied by the slowdown.
    public static func time(_ duration: Duration) -> Duration { duration * slowdown }
}

extension TestTiming {
    /// Waits until the tasks of this process run on time: until five 10 ms sleeps in a row each
    /// end within 20 ms of their due time, or `bound` has passed (stretched by ``slowdown``).
    /// Returns whether they did.
    ///
    /// For a test whose figure depends on the engine taking bytes in as they come, such as how
    /// many connections the origin saw at once: in the whole suite's first seconds every suite
    /// starts at once, and a task's sleep overran by up to 7 s (2 cores, 2026-12-04). A download
    /// then took its first request's bytes in seconds after they came, and the origin saw its
    /// requests one after another.
    public static func waitUntilTasksRunOnTime(within bound: Duration = .seconds(60)) async throws -> Bool {
        let deadline = ContinuousClock.now + time(bound)
        var onTime = 0
        while onTime < 5, ContinuousClock.now < deadline {
            let due = ContinuousClock.now + .milliseconds(10)
            try await Task.sleep(until: due)
            onTime = ContinuousClock.now - due < .milliseconds(20) ? onTime + 1 : 0
        }
        return onTime >= 5
    }
}
