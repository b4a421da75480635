/// A half-open range of byte offsets, `[lowerBound, upperBound)`, inside one resource.
///
/// Byte ranges are the unit of everything the cache does: what is on disk, what a download
/// covers, what a reader asked for. They are half-open so that adjacent ranges compose without
/// off-by-one arithmetic: `0..<100` and `100..<200` touch and merge into `0..<200`.
///
/// HTTP uses inclusive ranges (`bytes=0-99`); convert with ``init(httpFirst:last:)`` and
/// ``httpLast``.
///
/// ```swift
/// let head = ByteRange(0, 100)        // bytes 0 through 99
/// head.count                           // 100
/// head.httpLast                        // 99
/// ```
public struct ByteRange: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The first byte offset in the range.
    public let lowerBound: Int64
    /// The offset just past the last byte in the range.
    public let upperBound: Int64

    /// Creates the range `[lowerBound, upperBound)`.
    ///
    /// - Precondition: `0 <= lowerBound <= upperBound`.
    public init(_ lowerBound: Int64, _ upperBound: Int64) {
        precondition(lowerBound >= 0 && lowerBound <= upperBound, "invalid byte range \(lowerBound)..<\(upperBound)")
        self.lowerBound = lowerBound
        self.upperBound = upperBound
    }

    /// The longest resource the cache handles: the largest length an origin's `Content-Range` or
    /// `Content-Length` can state here (18 digits), far past what any file system holds. A read
    /// that starts at or past it is past the end of any resource, and is refused before any
    /// offset arithmetic: a player's `Range: bytes=9223372036854775000-` once overflowed the
    /// planning of its download and stopped the process.
    public static let largestLength: Int64 = 999_999_999_999_999_999

    /// Whether `length` can be a resource's length here: from zero to ``largestLength``. A length
    /// from elsewhere than the origin's headers (a cloud service's metadata, a caller's
    /// ``Resource/expectVersion(_:totalLength:)``) is checked with it before the cache keeps it:
    /// a negative one once reached a range and stopped the process.
    public static func isPossibleLength(_ length: Int64) -> Bool {
        length >= 0 && length <= largestLength
    }

    /// `length` when it ``isPossibleLength(_:)``; otherwise `nil`, a length not known.
    public static func possibleLength(_ length: Int64?) -> Int64? {
        length.flatMap { isPossibleLength($0) ? $0 : nil }
    }

    /// Creates a range from a Swift half-open range.
    public init(_ range: Range<Int64>) {
        self.init(range.lowerBound, range.upperBound)
    }

    /// Creates a range from the inclusive `first-last` pair HTTP uses in `Range` and `Content-Range`.
    public init(httpFirst first: Int64, last: Int64) {
        self.init(first, last + 1)
    }

    /// Creates the range `[offset, offset + length)`.
    public init(offset: Int64, length: Int64) {
        self.init(offset, offset + length)
    }

    /// The number of bytes in the range.
    public var count: Int64 { upperBound - lowerBound }

    /// Whether the range holds no byte.
    public var isEmpty: Bool { lowerBound == upperBound }

    /// The inclusive last offset, as HTTP writes it; `lowerBound - 1` for an empty range.
    public var httpLast: Int64 { upperBound - 1 }

    /// Whether `offset` lies inside the range.
    public func contains(_ offset: Int64) -> Bool { offset >= lowerBound && offset < upperBound }

    /// Whether every byte of `other` lies inside this range. An empty range is contained by any range.
    public func contains(_ other: ByteRange) -> Bool {
        other.isEmpty || (other.lowerBound >= lowerBound && other.upperBound <= upperBound)
    }

    /// Whether the two ranges share at least one byte.
    public func overlaps(_ other: ByteRange) -> Bool {
        lowerBound < other.upperBound && other.lowerBound < upperBound
    }

    /// The bytes both ranges share, or `nil` when they share none.
    public func intersection(_ other: ByteRange) -> ByteRange? {
        let lower = Swift.max(lowerBound, other.lowerBound)
        let upper = Swift.min(upperBound, other.upperBound)
        return lower < upper ? ByteRange(lower, upper) : nil
    }

    /// The range cut to end no later than `limit` (and to start no later than it).
    public func clamped(toLength limit: Int64) -> ByteRange {
        ByteRange(Swift.min(lowerBound, limit), Swift.min(upperBound, limit))
    }

    /// The range as a Swift half-open range.
    public var range: Range<Int64> { lowerBound..<upperBound }

    public var description: String { "\(lowerBound)..<\(upperBound)" }
}
