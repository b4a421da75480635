#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import StreamCache

/// The `Date` header's value, RFC 9110's IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), made once a
/// second.
///
/// Written with `gmtime_r` rather than a Foundation date formatter: on Linux those load ICU and its
/// calendar data, several MiB of resident memory for one header.
package final class HTTPDate: Sendable {
    private let cache = Locked<(second: Int, value: String)>((-1, ""))

    package init() {}

    /// The current time as an IMF-fixdate.
    package var now: String {
        let second = time(nil)
        return cache.withLock { cache in
            if cache.second != second {
                cache = (second, Self.format(secondsSince1970: second))
            }
            return cache.value
        }
    }

    /// `seconds` since 1970 as an IMF-fixdate.
    package static func format(secondsSince1970 seconds: Int) -> String {
        var time = seconds
        var parts = tm()
        gmtime_r(&time, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func twoDigits(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = String(parts.tm_year + 1900)
        return "\(days[Int(parts.tm_wday)]), \(twoDigits(parts.tm_mday)) \(months[Int(parts.tm_mon)]) "
            + String(repeating: "0", count: max(0, 4 - year.count)) + year
            + " \(twoDigits(parts.tm_hour)):\(twoDigits(parts.tm_min)):\(twoDigits(parts.tm_sec)) GMT"
    }
}
