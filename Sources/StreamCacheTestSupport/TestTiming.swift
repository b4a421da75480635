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
