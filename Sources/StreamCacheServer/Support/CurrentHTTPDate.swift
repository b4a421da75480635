#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import StreamCache

/// The `Date` header's value (``HTTPDate``'s IMF-fixdate) for the current second, made once a
/// second however many responses carry it.
package final class CurrentHTTPDate: Sendable {
    private let cache = Locked<(second: Int, value: String)>((-1, ""))

    package init() {}

    /// The current time as an IMF-fixdate.
    package var now: String {
        let second = time(nil)
        return cache.withLock { cache in
            if cache.second != second {
                cache = (second, HTTPDate.format(secondsSince1970: Int64(second)))
            }
            return cache.value
        }
    }
}
