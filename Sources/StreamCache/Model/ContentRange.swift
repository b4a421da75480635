#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A parsed `Content-Range` response header (RFC 9110 §14.4).
///
/// `bytes 0-99/1000` gives ``range`` `0..<100` and ``completeLength`` 1000; `bytes */1000` (in a
/// 416) gives no range; `bytes 0-99/*` gives no complete length. The total length of a resource
/// is taken from here, never from a 206's `Content-Length`.
public struct ContentRange: Hashable, Sendable {
    /// The bytes the response carries, or `nil` for the unsatisfied form `bytes */TOTAL`.
    public var range: ByteRange?
    /// The length of the whole representation, or `nil` when the origin wrote `*`.
    public var completeLength: Int64?

    /// Creates a content range.
    public init(range: ByteRange?, completeLength: Int64?) {
        self.range = range
        self.completeLength = completeLength
    }

    /// Parses a header value; returns `nil` for anything RFC 9110 does not allow, including a last
    /// byte before the first or at or past the complete length.
    public init?(headerValue: String) {
        let value = headerValue.trimmingWhitespace()
        guard value.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6).trimmingWhitespace()
        let parts = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let lengthPart = parts[1]
        var length: Int64?
        if lengthPart != "*" {
            guard let parsed = Int64(asciiDigits: lengthPart) else { return nil }
            length = parsed
        }
        if parts[0] == "*" {
            guard length != nil else { return nil }
            self.init(range: nil, completeLength: length)
            return
        }
        let bounds = parts[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Int64(asciiDigits: bounds[0]), let last = Int64(asciiDigits: bounds[1]),
              first <= last, last < Int64.max
        else { return nil }
        if let length, last >= length { return nil }
        self.init(range: ByteRange(httpFirst: first, last: last), completeLength: length)
    }

    /// The header value for this content range.
    public var headerValue: String {
        let total = completeLength.map(String.init) ?? "*"
        guard let range else { return "bytes */\(total)" }
        return "bytes \(range.lowerBound)-\(range.httpLast)/\(total)"
    }
}

extension Int64 {
    /// Parses a non-empty run of ASCII digits only (no sign, no spaces), without overflow.
    init?(asciiDigits text: Substring) {
        guard !text.isEmpty, text.count <= 18, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        self.init(text)
    }
}
