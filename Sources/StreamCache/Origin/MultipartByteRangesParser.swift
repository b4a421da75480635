#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Parses a `multipart/byteranges` body (RFC 9110 §14.6) as it arrives, in any split: yields
/// the payload of each part, in order, without the boundaries and part headers. No I/O; the
/// origin's body reads through it (``MultipartByteRangesBody``).
///
/// Every part must be the range asked for, in the order asked: a server may merge or reorder
/// ranges, and bytes that land anywhere but where they belong would corrupt the cache, so any
/// other part is a ``StreamCacheError/Code/badResponse``. So is a part head or an epilogue
/// longer than ``maximumHeadLength``, and a body that ends before its last part does.
package struct MultipartByteRangesParser {
    private enum State {
        /// Reading the delimiter and headers of part `index`.
        case head(index: Int)
        /// Passing on part `index`'s payload, `left` bytes of it still to come.
        case payload(index: Int, left: Int64)
        /// After the last part: the closing delimiter, `read` bytes so far.
        case epilogue(read: Int)
    }

    private let delimiter: Data
    private let expected: [ByteRange]
    private var state: State = .head(index: 0)
    /// Received bytes of a part head not complete yet.
    private var head = Data()
    /// Where the delimiter in `head` ends, once found, and how much of `head` was searched
    /// already: a head that arrives a byte at a time is not searched again from its start each time.
    private var delimiterEnd: Int?
    private var searched = 0
    /// The resource's length, from the first part's `Content-Range` (`nil` when it says `*`).
    package private(set) var completeLength: Int64?

    /// The most bytes a part's head (delimiter and headers) or the epilogue may take.
    package static let maximumHeadLength = 16 << 10

    /// A parser for a body whose parts must be `expected` (at least one), separated by `boundary`.
    package init(boundary: String, expected: [ByteRange]) {
        precondition(!expected.isEmpty, "a multipart body carries at least one part")
        self.delimiter = Data("--\(boundary)".utf8)
        self.expected = expected
    }

    /// The `boundary` parameter of a `multipart/byteranges` content type, or `nil` for any other type.
    package static func boundary(ofContentType contentType: String) -> String? {
        let fields = contentType.split(separator: ";").map { $0.trimmingWhitespace() }
        guard fields.first?.lowercased() == "multipart/byteranges" else { return nil }
        for field in fields.dropFirst() {
            let pair = field.split(separator: "=", maxSplits: 1).map { $0.trimmingWhitespace() }
            guard pair.count == 2, pair[0].lowercased() == "boundary" else { continue }
            let value = pair[1].trimming(where: { $0 == "\"" })
            return value.isEmpty || value.count > 70 ? nil : value
        }
        return nil
    }

    /// Whether the first part's payload has begun (its head was read and checked).
    package var hasReadFirstPartHead: Bool {
        if case .head(index: 0) = state { return false }
        return true
    }

    /// Feeds the next bytes of the body; returns the payload bytes among them, in order (slices
    /// of `bytes`, no copies). Each returned piece belongs to one part.
    package mutating func parse(_ bytes: Data) throws -> [Data] {
        var input = bytes[...]
        var payload: [Data] = []
        while !input.isEmpty {
            switch state {
            case .payload(let index, let left):
                let piece = input.prefix(Int(clamping: left))
                payload.append(piece)
                input = input.dropFirst(piece.count)
                let rest = left - Int64(piece.count)
                state = rest > 0 ? .payload(index: index, left: rest) : index + 1 == expected.count ? .epilogue(read: 0) : .head(index: index + 1)
            case .head(let index):
                head.append(input)
                input = Data()
                if let afterHead = try readHead(of: index) { input = afterHead }
            case .epilogue(let read):
                guard read + input.count <= Self.maximumHeadLength else {
                    throw StreamCacheError(.badResponse, "The origin's multipart body goes on past its last part.")
                }
                state = .epilogue(read: read + input.count)
                input = Data()
            }
        }
        return payload
    }

    /// Checks that the body ended after its last part.
    package func finish() throws {
        switch state {
        case .epilogue:
            return
        case .head(let index), .payload(let index, _):
            throw StreamCacheError(.badResponse, "The origin's multipart body ended in part \(index + 1) of \(expected.count).", range: expected[index])
        }
    }

    /// Reads part `index`'s head from `head` once it is complete: checks its range, starts its
    /// payload and returns the bytes after the head; `nil` while more bytes are needed.
    private mutating func readHead(of index: Int) throws -> Data? {
        let tooLong = StreamCacheError(.badResponse, "The origin's multipart body has no part header where one was due.")
        if delimiterEnd == nil {
            // A delimiter may begin in the bytes searched before, up to its length less one back.
            delimiterEnd = head.firstRange(of: delimiter, in: max(0, searched - delimiter.count + 1)..<head.count)?.upperBound
            searched = delimiterEnd ?? head.count
        }
        if let start = delimiterEnd {
            if head.count - start >= 2, head[start...].starts(with: Data("--".utf8)) {
                throw StreamCacheError(.badResponse, "The origin's multipart body has \(index) parts, \(expected.count) were asked.")
            }
            if let end = head.firstRange(of: Data("\r\n\r\n".utf8), in: max(start, searched - 3)..<head.count) {
                guard end.upperBound <= Self.maximumHeadLength else { throw tooLong }
                let text = String(decoding: head[start..<end.lowerBound], as: UTF8.self)
                let rest = Data(head[end.upperBound...])
                head = Data()
                delimiterEnd = nil
                searched = 0
                try begin(part: index, head: text)
                return rest
            }
            searched = head.count
        }
        guard head.count <= Self.maximumHeadLength else { throw tooLong }
        return nil
    }

    /// Checks a part's headers (the text after its delimiter) against the range it must carry.
    private mutating func begin(part index: Int, head text: String) throws {
        let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false).dropFirst()
        let contentRange = lines.lazy.compactMap { line -> ContentRange? in
            guard let colon = line.firstIndex(of: ":"), line[..<colon].lowercased() == "content-range" else { return nil }
            return ContentRange(headerValue: String(line[line.index(after: colon)...]))
        }.first
        let want = expected[index]
        guard let delivered = contentRange?.range, delivered == want else {
            let got = contentRange?.range.map(\.description) ?? "no valid range"
            throw StreamCacheError(.badResponse, "The origin's multipart part \(index + 1) carries \(got) when \(want) was asked.", range: want)
        }
        if index == 0 { completeLength = contentRange?.completeLength }
        state = want.isEmpty ? (index + 1 == expected.count ? .epilogue(read: 0) : .head(index: index + 1)) : .payload(index: index, left: want.count)
    }
}
