import StreamCache

/// A parsed `Range` request header (RFC 9110 §14.1.2): one or more byte-range specifiers.
///
/// Parsing is strict and never traps: anything that is not a well-formed `bytes` range set gives
/// `nil`, and RFC 9110 says to ignore such a header and answer with the whole representation.
/// Numbers too large for `Int64` saturate, so `bytes=0-99999999999999999999` reads to the end.
public struct RangeHeader: Hashable, Sendable {
    /// One byte-range specifier.
    public enum Specifier: Hashable, Sendable {
        /// `first-last`, both inclusive.
        case bounded(first: Int64, last: Int64)
        /// `first-`: from `first` to the end.
        case from(first: Int64)
        /// `-length`: the last `length` bytes.
        case suffix(length: Int64)
    }

    /// The specifiers in the order the client sent them.
    public var specifiers: [Specifier]

    /// The most specifiers accepted in one header; a longer list is treated as malformed, which
    /// guards against range-based amplification (RFC 9110 §14.2).
    public static let maximumSpecifierCount = 64

    /// Creates a header from specifiers.
    public init(_ specifiers: [Specifier]) { self.specifiers = specifiers }

    /// Parses a header value such as `bytes=0-1`, `bytes=500-`, `bytes=-500` or `bytes=0-9, 20-29`.
    ///
    /// - Returns: `nil` when the value is not a well-formed byte range set.
    public init?(parsing value: some StringProtocol) {
        let utf8 = Array(value.utf8)
        guard utf8.count <= 8192, let equals = utf8.firstIndex(of: UInt8(ascii: "=")) else { return nil }
        let unit = utf8[..<equals].trimmingSpaces()
        guard unit.count == 5, String(decoding: unit, as: UTF8.self).lowercased() == "bytes" else { return nil }
        var specifiers: [Specifier] = []
        for element in utf8[(equals + 1)...].split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
            let part = element.trimmingSpaces()
            // RFC 9110 allows empty list elements ("bytes=0-1,,2-3"); a list of nothing is malformed.
            if part.isEmpty { continue }
            guard let dash = part.firstIndex(of: UInt8(ascii: "-")) else { return nil }
            let firstDigits = part[part.startIndex..<dash]
            let lastDigits = part[(dash + 1)...]
            if firstDigits.isEmpty {
                guard let length = Self.number(lastDigits) else { return nil }
                specifiers.append(.suffix(length: length))
            } else {
                guard let first = Self.number(firstDigits) else { return nil }
                if lastDigits.isEmpty {
                    specifiers.append(.from(first: first))
                } else {
                    guard let last = Self.number(lastDigits), last >= first else { return nil }
                    specifiers.append(.bounded(first: first, last: last))
                }
            }
            guard specifiers.count <= Self.maximumSpecifierCount else { return nil }
        }
        guard !specifiers.isEmpty else { return nil }
        self.specifiers = specifiers
    }

    /// A run of ASCII digits as a saturating `Int64`; `nil` for anything else.
    private static func number(_ digits: ArraySlice<UInt8>) -> Int64? {
        guard !digits.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
            value = overflow1 || overflow2 ? Int64.max : sum
        }
        return value
    }

    /// The offset a reader of this header starts at when the length is not known yet: the first
    /// specifier's start, or `nil` for a suffix (which needs the length).
    public var startWithoutLength: Int64? {
        switch specifiers.first {
        case .bounded(let first, _), .from(let first): first
        case .suffix, nil: nil
        }
    }

    /// The byte ranges this header asks for in a representation of `length` bytes, in the
    /// client's order with overlapping or adjacent ranges merged (RFC 9110 §14.2 lets a server
    /// coalesce them).
    ///
    /// - Returns: `nil` when no specifier is satisfiable (answer 416), otherwise at least one range.
    public func ranges(in length: Int64) -> [ByteRange]? {
        var satisfiable: [ByteRange] = []
        for specifier in specifiers {
            switch specifier {
            case .bounded(let first, let last):
                guard first < length else { continue }
                satisfiable.append(ByteRange(first, last == Int64.max ? length : min(last + 1, length)))
            case .from(let first):
                guard first < length else { continue }
                satisfiable.append(ByteRange(first, length))
            case .suffix(let count):
                guard count > 0, length > 0 else { continue }
                satisfiable.append(ByteRange(max(0, length - count), length))
            }
        }
        guard !satisfiable.isEmpty else { return nil }
        return Self.coalesce(satisfiable)
    }

    /// Merges ranges that overlap or touch; the result is ordered by offset unless the input was
    /// already disjoint, in which case the client's order is kept.
    static func coalesce(_ ranges: [ByteRange]) -> [ByteRange] {
        let sorted = ranges.sorted { $0.lowerBound < $1.lowerBound }
        var merged: [ByteRange] = []
        for range in sorted {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = ByteRange(last.lowerBound, max(last.upperBound, range.upperBound))
            } else {
                merged.append(range)
            }
        }
        return merged.count == ranges.count ? ranges : merged
    }
}

extension ArraySlice<UInt8> {
    fileprivate func trimmingSpaces() -> ArraySlice<UInt8> {
        var slice = self
        while let first = slice.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { slice = slice.dropFirst() }
        while let last = slice.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { slice = slice.dropLast() }
        return slice
    }
}
