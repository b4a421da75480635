import Parsers
import StreamCache

/// `Range` request headers (RFC 9110 §14.1.2): any bytes parse or are refused without a crash, and
/// what parses resolves to ranges inside the representation, non-empty, ordered and coalesced.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRangeHeader(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let header = RangeHeader(parsing: text) else { return 0 }
    precondition(!header.specifiers.isEmpty && header.specifiers.count <= RangeHeader.maximumSpecifierCount)
    for length: Int64 in [0, 1, 2, 1000, 1 << 40, Int64.max - 1] {
        guard let ranges = header.ranges(in: length) else { continue }
        precondition(!ranges.isEmpty, "satisfiable but empty")
        for range in ranges {
            precondition(range.lowerBound >= 0 && range.upperBound <= length && !range.isEmpty, "\(range) outside 0..<\(length)")
        }
        // Coalesced: in the client's order, but no two ranges overlap or touch.
        let sorted = ranges.sorted { $0.lowerBound < $1.lowerBound }
        for (left, right) in zip(sorted, sorted.dropFirst()) {
            precondition(left.upperBound < right.lowerBound, "\(left) and \(right) overlap or touch")
        }
    }
    _ = header.startWithoutLength
    return 0
}
