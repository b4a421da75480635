@testable import StreamCache
import Testing

/// HTTP dates (RFC 9110, section 5.6.7): the form the proxy writes, the three forms a
/// `Retry-After` may come in, and the wait the retry policy takes from them.
@Suite struct HTTPDateTests {
    /// 2026-11-26 12:00:00 UTC, the "now" of these tests.
    static let now: Int64 = 1_795_694_400

    @Test(arguments: [
        ("Sun, 06 Nov 1994 08:49:37 GMT", Int64(784_111_777)),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 784_111_777),
        ("Sun Nov  6 08:49:37 1994", 784_111_777),
        ("  Thu, 01 Jan 1970 00:00:00 GMT ", 0),
        ("Wed, 31 Dec 1969 23:59:59 GMT", -1),
        ("Tue, 29 Feb 2028 12:00:00 GMT", 1_835_438_400),
        ("Thu, 26 Nov 2026 12:00:00 GMT", now),
        // A two-digit year is at most 50 years ahead of now: 76 is 2076, 77 is 1977.
        ("Thursday, 26-Nov-76 12:00:00 GMT", 3_373_617_600),
        ("Saturday, 26-Nov-77 12:00:00 GMT", 249_393_600),
    ])
    func readsEachForm(value: String, seconds: Int64) {
        #expect(HTTPDate.secondsSince1970(parsing: value, now: Self.now) == seconds)
    }

    @Test(arguments: ["", "soon", "120", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 31 Feb 1994 08:49:37 GMT",
                      "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 00 Nov 1994 08:49:37 GMT",
                      "Sun, 06 nov 1994 08:49:37 GMT", "Sun, +6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 994 08:49:37 GMT",
                      "Sun, 06 Nov 1994 8:49:37 GMT", "Sunday, 06-Nov 08:49:37 GMT", "Xyz Nov  6 08:49:37 1994", "Sun, 29 Feb 2026 00:00:00 GMT"])
    func rejectsWhatIsNoDate(value: String) {
        #expect(HTTPDate.secondsSince1970(parsing: value, now: Self.now) == nil)
    }

    /// What the proxy writes reads back as the same second, for dates from 1900 to 2400 (leap
    /// years, centuries, the 400-year rule) and the weekday is right.
    @Test func writesWhatItReads() {
        #expect(HTTPDate.format(secondsSince1970: 784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(secondsSince1970: -1) == "Wed, 31 Dec 1969 23:59:59 GMT")
        #expect(HTTPDate.format(secondsSince1970: 951_782_400) == "Tue, 29 Feb 2000 00:00:00 GMT")
        #expect(HTTPDate.format(secondsSince1970: 4_107_542_400) == "Mon, 01 Mar 2100 00:00:00 GMT")
        var seconds: Int64 = -2_208_988_800  // 1900-01-01
        var checked = 0
        while seconds < 13_569_465_600 {  // 2400-01-01
            let text = HTTPDate.format(secondsSince1970: seconds)
            #expect(HTTPDate.secondsSince1970(parsing: text, now: Self.now) == seconds, "\(text)")
            seconds += 86_400 * 29 + 3_607  // a month or so, at a different time of day each step
            checked += 1
        }
        #expect(checked > 6_000)
    }

    @Test func retryAfterGivesSecondsOrADate() {
        let policy = RetryPolicy(maxAttempts: 5, initialBackoff: .milliseconds(100), maxBackoff: .seconds(5))
        let now = Double(Self.now) + 0.25
        #expect(policy.wait(beforeAttempt: 2, retryAfter: "3", now: now) == .seconds(3))
        #expect(policy.wait(beforeAttempt: 2, retryAfter: "Thu, 26 Nov 2026 12:00:03 GMT", now: now) == .seconds(2.75))
        #expect(policy.wait(beforeAttempt: 2, retryAfter: "Thursday, 26-Nov-26 12:00:03 GMT", now: now) == .seconds(2.75))
        #expect(policy.wait(beforeAttempt: 2, retryAfter: "Thu Nov 26 12:00:03 2026", now: now) == .seconds(2.75))
        // Past: at once. Far ahead: no longer than the policy's longest wait.
        #expect(policy.wait(beforeAttempt: 2, retryAfter: "Thu, 26 Nov 2026 11:00:00 GMT", now: now) == .zero)
        #expect(policy.wait(beforeAttempt: 2, retryAfter: "Fri, 27 Nov 2026 12:00:00 GMT", now: now) == .seconds(5))
        #expect(policy.wait(beforeAttempt: 2, retryAfter: "600", now: now) == .seconds(5))
        // Nothing usable: the back-off.
        #expect(policy.wait(beforeAttempt: 3, retryAfter: "later", now: now) == .milliseconds(200))
        #expect(policy.wait(beforeAttempt: 3, retryAfter: nil, now: now) == .milliseconds(200))
    }
}
