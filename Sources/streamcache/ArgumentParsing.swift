import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Parsers for argument values several subcommands share.
enum ArgumentParsing {
    /// An absolute `http` or `https` URL.
    static func httpURL(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host?.isEmpty == false else {
            throw ValidationError("'\(text.prefix(200))' is not an http or https URL.")
        }
        return url
    }

    /// `-H 'Name: value'` options; the value is never echoed in errors, since it is often a secret.
    static func headers(_ options: [String]) throws -> HTTPHeaders {
        var result = HTTPHeaders()
        // RFC 9110 `tchar`: the unreserved characters of URIs (letters, digits, `-._~`) and these.
        let symbols = Set("!#$%&'*+^`|".utf8)
        let isTokenByte = { (byte: UInt8) in URICharacters.isUnreserved(byte) || symbols.contains(byte) }
        for header in options {
            guard let colon = header.firstIndex(of: ":") else { throw ValidationError("A header is not 'Name: value'.") }
            let name = header[..<colon].trimmingWhitespace()
            let value = header[header.index(after: colon)...].trimmingWhitespace()
            guard !name.isEmpty, name.utf8.allSatisfy(isTokenByte) else {
                throw ValidationError("Header name '\(name.prefix(40))' is not a valid HTTP field name.")
            }
            guard HTTPHeaders.isValidFieldValue(value) else {
                throw ValidationError("The value of header '\(name)' holds a line break or another control character.")
            }
            result.add(name: name, value: value)
        }
        return result
    }

    /// A size such as `2GB`, `500MB`, `1.5GiB`, `64k` or `1048576` (decimal units are powers of
    /// 1000, `i` units powers of 1024, a bare letter is a power of 1024 as in `du`).
    static func byteCount(_ text: String) throws -> Int64 {
        let bytes = try quantity(text, units: [
            "": 1, "b": 1,
            "k": 0x400, "kb": 1e3, "kib": 0x400,
            "m": 0x10_0000, "mb": 1e6, "mib": 0x10_0000,
            "g": 0x4000_0000, "gb": 1e9, "gib": 0x4000_0000,
            "t": 0x100_0000_0000, "tb": 1e12, "tib": 0x100_0000_0000,
        ], kind: "a size such as 2GB, 500MB or 1048576", below: 9e18, tooLarge: "too large")
        return Int64(bytes)
    }

    /// A length of time such as `90`, `90s`, `15m`, `2h`, `1.5d` or `0` (a bare number is seconds).
    static func duration(_ text: String) throws -> Duration {
        let seconds = try quantity(text, units: ["": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400],
                                   kind: "a length of time such as 90s, 15m, 2h or 1d", below: 1e12, tooLarge: "too long")
        return .milliseconds(Int64((seconds * 1000).rounded()))
    }

    /// A non-negative number followed by one of `units` (case-insensitive, spaces allowed between),
    /// in the units' base: the number times the unit's factor, which must stay below `limit`.
    private static func quantity(_ text: String, units: [String: Double], kind: String, below limit: Double, tooLarge: String) throws -> Double {
        let trimmed = text.trimmingWhitespace()
        let digits = trimmed.prefix { $0.isNumber || $0 == "." }
        let unit = trimmed.dropFirst(digits.count).trimmingWhitespace().lowercased()
        guard let number = Double(digits), number >= 0, let factor = units[unit] else {
            throw ValidationError("'\(text)' is not \(kind).")
        }
        let value = number * factor
        guard value < limit else { throw ValidationError("'\(text)' is \(tooLarge).") }
        return value
    }
}
