#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension Data {
    /// The first occurrence of `pattern` within `bounds` (offsets from `startIndex`).
    ///
    /// FoundationEssentials has no `range(of:in:)`; patterns here are a few bytes long
    /// (multipart delimiters), so a plain scan with a first-byte filter is enough.
    package func firstRange(of pattern: Data, in bounds: Range<Int>) -> Range<Int>? {
        guard !pattern.isEmpty, bounds.count >= pattern.count else { return nil }
        return withUnsafeBytes { haystack -> Range<Int>? in
            pattern.withUnsafeBytes { needle -> Range<Int>? in
                let first = needle[0]
                var offset = bounds.lowerBound
                while offset <= bounds.upperBound - needle.count {
                    if haystack[offset] == first, haystack[offset..<(offset + needle.count)].elementsEqual(needle) {
                        return offset..<(offset + needle.count)
                    }
                    offset += 1
                }
                return nil
            }
        }
    }
}
