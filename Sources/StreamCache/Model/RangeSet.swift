/// A set of byte offsets stored as sorted, disjoint, non-touching ``ByteRange``s.
///
/// `RangeSet` records which bytes of a resource are on disk, which a download will fetch, and
/// which a reader still misses. Ranges that overlap or touch are merged on insertion, so the
/// representation of a set is unique and `==` compares sets, not histories.
///
/// Look-ups (``contains(_:)-(Int64)``, ``range(containing:)``, ``firstLowerBound(atOrAfter:)``) are
/// binary searches, `O(log n)`. ``insert(_:)`` and ``remove(_:)`` are `O(log n + k)` where `k` is
/// the number of stored ranges they touch. ``coveredByteCount`` is kept up to date, `O(1)`.
///
/// ```swift
/// var cached = RangeSet([ByteRange(0, 100), ByteRange(300, 1000)])
/// cached.insert(ByteRange(19, 150))
/// cached.ranges        // [0..<150, 300..<1000]
/// cached.gaps(in: ByteRange(0, 1200))  // [150..<300, 1000..<1200]
/// ```
public struct RangeSet: Hashable, Sendable, Codable, CustomStringConvertible, Sequence {
    /// The stored ranges: sorted, disjoint, and never touching.
    public private(set) var ranges: [ByteRange]
    /// The number of bytes covered by the set.
    public private(set) var coveredByteCount: Int64

    /// Creates an empty set.
    public init() {
        ranges = []
        coveredByteCount = 0
    }

    /// Creates the union of `ranges`, which may overlap and come in any order.
    public init(_ ranges: some Sequence<ByteRange>) {
        self.init()
        for range in ranges { insert(range) }
    }

    /// Whether the set covers no byte.
    public var isEmpty: Bool { ranges.isEmpty }

    /// The first covered offset and the offset just past the last one, or `nil` when empty.
    public var bounds: ByteRange? {
        guard let first = ranges.first, let last = ranges.last else { return nil }
        return ByteRange(first.lowerBound, last.upperBound)
    }

    /// The index of the first stored range whose `upperBound` is greater than `offset`.
    private func firstIndex(endingAfter offset: Int64) -> Int {
        var low = 0
        var high = ranges.count
        while low < high {
            let mid = (low + high) / 2
            if ranges[mid].upperBound <= offset { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Whether the byte at `offset` is in the set.
    public func contains(_ offset: Int64) -> Bool {
        range(containing: offset) != nil
    }

    /// Whether every byte of `range` is in the set. An empty range is always contained.
    public func contains(_ range: ByteRange) -> Bool {
        if range.isEmpty { return true }
        guard let run = self.range(containing: range.lowerBound) else { return false }
        return run.upperBound >= range.upperBound
    }

    /// The stored range that holds `offset`, or `nil` when `offset` is not in the set.
    public func range(containing offset: Int64) -> ByteRange? {
        let index = firstIndex(endingAfter: offset)
        guard index < ranges.count, ranges[index].lowerBound <= offset else { return nil }
        return ranges[index]
    }

    /// The smallest covered offset that is `offset` or after it, or `nil` when there is none.
    ///
    /// This is "the next cached byte": a download that starts at a gap stops there.
    public func firstLowerBound(atOrAfter offset: Int64) -> Int64? {
        let index = firstIndex(endingAfter: offset)
        guard index < ranges.count else { return nil }
        return Swift.max(ranges[index].lowerBound, offset)
    }

    /// Adds every byte of `range` to the set, merging with ranges it overlaps or touches.
    public mutating func insert(_ range: ByteRange) {
        guard !range.isEmpty else { return }
        // First stored range that overlaps or touches `range` (its upperBound >= range.lowerBound).
        var low = 0
        var high = ranges.count
        while low < high {
            let mid = (low + high) / 2
            if ranges[mid].upperBound < range.lowerBound { low = mid + 1 } else { high = mid }
        }
        var end = low
        var merged = range
        while end < ranges.count, ranges[end].lowerBound <= range.upperBound {
            let existing = ranges[end]
            coveredByteCount -= existing.count
            merged = ByteRange(Swift.min(merged.lowerBound, existing.lowerBound), Swift.max(merged.upperBound, existing.upperBound))
            end += 1
        }
        ranges.replaceSubrange(low..<end, with: CollectionOfOne(merged))
        coveredByteCount += merged.count
    }

    /// Adds every range of `other` to the set.
    public mutating func formUnion(_ other: RangeSet) {
        for range in other.ranges { insert(range) }
    }

    /// Removes every byte of `range` from the set, splitting a stored range when needed.
    public mutating func remove(_ range: ByteRange) {
        guard !range.isEmpty else { return }
        let start = firstIndex(endingAfter: range.lowerBound)
        var end = start
        var replacement: [ByteRange] = []
        while end < ranges.count, ranges[end].lowerBound < range.upperBound {
            let existing = ranges[end]
            coveredByteCount -= existing.count
            if existing.lowerBound < range.lowerBound {
                replacement.append(ByteRange(existing.lowerBound, range.lowerBound))
            }
            if existing.upperBound > range.upperBound {
                replacement.append(ByteRange(range.upperBound, existing.upperBound))
            }
            end += 1
        }
        for piece in replacement { coveredByteCount += piece.count }
        ranges.replaceSubrange(start..<end, with: replacement)
    }

    /// Removes every byte at or after `length`; used when a resource turns out shorter than assumed.
    public mutating func truncate(toLength length: Int64) {
        guard let bounds, bounds.upperBound > length else { return }
        remove(ByteRange(Swift.max(0, length), bounds.upperBound))
    }

    /// The parts of `range` that are **not** in the set, in ascending order.
    public func gaps(in range: ByteRange) -> [ByteRange] {
        guard !range.isEmpty else { return [] }
        var result: [ByteRange] = []
        var cursor = range.lowerBound
        var index = firstIndex(endingAfter: range.lowerBound)
        while cursor < range.upperBound {
            guard index < ranges.count, ranges[index].lowerBound < range.upperBound else {
                result.append(ByteRange(cursor, range.upperBound))
                break
            }
            let stored = ranges[index]
            if stored.lowerBound > cursor { result.append(ByteRange(cursor, stored.lowerBound)) }
            cursor = Swift.max(cursor, stored.upperBound)
            index += 1
        }
        return result
    }

    /// The parts of `range` that are in the set, in ascending order.
    public func intersection(_ range: ByteRange) -> RangeSet {
        var result = RangeSet()
        var index = firstIndex(endingAfter: range.lowerBound)
        while index < ranges.count, ranges[index].lowerBound < range.upperBound {
            if let shared = ranges[index].intersection(range) { result.ranges.append(shared); result.coveredByteCount += shared.count }
            index += 1
        }
        return result
    }

    /// The number of bytes of `range` that are in the set.
    public func coveredByteCount(in range: ByteRange) -> Int64 {
        intersection(range).coveredByteCount
    }

    public func makeIterator() -> IndexingIterator<[ByteRange]> { ranges.makeIterator() }

    public var description: String { "[" + ranges.map(\.description).joined(separator: ", ") + "]" }

    private enum CodingKeys: String, CodingKey { case ranges }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try container.decode([ByteRange].self, forKey: .ranges))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(ranges, forKey: .ranges)
    }
}
