/// HTTP's date format (RFC 9110, section 5.6.7), as whole seconds since 1970 (UTC).
///
/// Senders write IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`); recipients must also read the two
/// obsolete forms, RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and C's asctime
/// (`Sun Nov  6 08:49:37 1994`). Plain arithmetic on the proleptic Gregorian calendar: a Foundation
/// date formatter would load ICU's calendar data on Linux, several MiB of memory for one header.
package enum HTTPDate {
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// `seconds` since 1970 as an IMF-fixdate.
    package static func format(secondsSince1970 seconds: Int64) -> String {
        let days = floorDivide(seconds, 86_400)
        let second = seconds - days * 86_400
        let date = civilDate(daysSince1970: days)
        // 1970-01-01 was a Thursday.
        let weekday = Int(((days % 7) + 11) % 7)
        func twoDigits(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = String(date.year)
        return "\(weekdays[weekday]), \(twoDigits(date.day)) \(months[Int(date.month) - 1]) "
            + String(repeating: "0", count: max(0, 4 - year.count)) + year
            + " \(twoDigits(second / 3600)):\(twoDigits(second / 60 % 60)):\(twoDigits(second % 60)) GMT"
    }

    /// The seconds since 1970 that `value` names in any of the three forms, or `nil` when it is
    /// none of them or names no real time (31 February, 25 o'clock). A two-digit RFC 850 year is
    /// taken as the latest year with those digits that is at most 50 years after `now` (seconds
    /// since 1970), as RFC 9110 asks.
    package static func secondsSince1970(parsing value: some StringProtocol, now: Int64) -> Int64? {
        let trimmed = value.trimmingWhitespace()
        let fields: [Substring]
        if let comma = trimmed.firstIndex(of: ",") {
            // IMF-fixdate or RFC 850: the weekday, then day, month and year, separated by spaces
            // in one and by hyphens in the other.
            let rest = trimmed[trimmed.index(after: comma)...]
            let parts = rest.split(separator: " ", omittingEmptySubsequences: true)
            if parts.count == 5 {
                fields = [parts[0], parts[1], parts[2], parts[3], parts[4]]
            } else if parts.count == 3 {
                let date = parts[0].split(separator: "-", omittingEmptySubsequences: false)
                guard date.count == 3 else { return nil }
                fields = [date[0], date[1], date[2], parts[1], parts[2]]
            } else {
                return nil
            }
            guard fields[4] == "GMT" || fields[4] == "UTC" else { return nil }
        } else {
            // asctime: weekday, month, day (padded with a space), time, year.
            let parts = trimmed.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count == 5, weekdays.contains(String(parts[0])) else { return nil }
            fields = [parts[2], parts[1], parts[4], parts[3], "GMT"]
        }
        guard let day = number(fields[0]), fields[0].count <= 2,
              let monthIndex = months.firstIndex(of: String(fields[1])),
              var year = number(fields[2]), fields[2].count == 2 || fields[2].count == 4
        else { return nil }
        if fields[2].count == 2 {
            let currentYear = civilDate(daysSince1970: floorDivide(now, 86_400)).year
            year += currentYear - currentYear % 100
            if year > currentYear + 50 { year -= 100 }
        }
        let time = fields[3].split(separator: ":", omittingEmptySubsequences: false)
        guard time.count == 3, time.allSatisfy({ $0.count == 2 }),
              let hour = number(time[0]), let minute = number(time[1]), let second = number(time[2]),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        let month = Int64(monthIndex + 1)
        let days = daysSince1970(year: year, month: month, day: day)
        // A day past the month's end would roll over into the next month.
        guard day >= 1, civilDate(daysSince1970: days) == (year, month, day) else { return nil }
        return days * 86_400 + hour * 3600 + minute * 60 + min(second, 59)
    }

    /// Days from 1970-01-01 to the given date (proleptic Gregorian; H. Hinnant's algorithm).
    static func daysSince1970(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDivide(y, 400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date `days` after 1970-01-01 (the inverse of ``daysSince1970(year:month:day:)``).
    static func civilDate(daysSince1970 days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = floorDivide(shifted, 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// A field of ASCII digits only (no sign, no other script's digits) as a number.
    private static func number(_ field: Substring) -> Int64? {
        guard !field.isEmpty, field.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        return Int64(field)
    }

    private static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        value >= 0 ? value / divisor : -((-value + divisor - 1) / divisor)
    }
}
