import Foundation

/// The bytes of a `multipart/byteranges` answer (RFC 9110 §14.6) without its boundaries and part
/// headers: the payload of each part, in order, as one body.
///
/// Every part must be the range asked for, in the order asked: a server may merge or reorder
/// ranges, and bytes that land anywhere but where they belong would corrupt the cache, so any
/// other part ends the body with ``StreamCacheError/Code/badResponse``. Payload chunks pass
/// through as the transport delivers them; only a chunk that holds a part's last bytes and the
/// next part's headers is split. After the last part the rest of the body (the closing
/// delimiter) is read, so the connection can be reused.
final class MultipartByteRangesBody: HTTPBodySource, @unchecked Sendable {
    // @unchecked: `next()` and `readFirstPartHead()` run in one task at a time (the body's
    // consumer); `cancel()` only touches `body`, which is Sendable.
    private let body: HTTPBody
    private var iterator: HTTPBody.Iterator
    private let delimiter: Data
    private let expected: [ByteRange]
    /// Received bytes not handed on yet: a part's head, or payload that came with one.
    private var buffer = Data()
    private var part = -1
    private var payloadLeft: Int64 = 0
    private var completeLength: Int64?

    /// The most bytes a part's head (delimiter and headers) or the closing epilogue may take.
    static let maximumHeadLength = 16 << 10

    /// Reads `body`, whose parts must be `expected`, separated by `boundary`.
    init(body: HTTPBody, boundary: String, expected: [ByteRange]) {
        self.body = body
        self.iterator = body.makeAsyncIterator()
        self.delimiter = Data("--\(boundary)".utf8)
        self.expected = expected
    }

    /// The `boundary` parameter of a `multipart/byteranges` content type, or `nil` for any other type.
    static func boundary(ofContentType contentType: String) -> String? {
        let fields = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard fields.first?.lowercased() == "multipart/byteranges" else { return nil }
        for field in fields.dropFirst() {
            let pair = field.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, pair[0].lowercased() == "boundary" else { continue }
            let value = pair[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            return value.isEmpty || value.count > 70 ? nil : value
        }
        return nil
    }

    /// Reads up to the first part's payload and returns the resource's length its
    /// `Content-Range` gives (`nil` when it says `*`). Call once, before ``next()``.
    func readFirstPartHead() async throws -> Int64? {
        try await readPartHead()
        return completeLength
    }

    func next() async throws -> Data? {
        while true {
            if payloadLeft > 0 {
                if buffer.isEmpty {
                    guard let chunk = try await iterator.next() else {
                        throw StreamCacheError(.badResponse, "The origin ended a multipart body \(payloadLeft) bytes into part \(part + 1).",
                                               range: expected[part])
                    }
                    buffer = chunk
                }
                if Int64(buffer.count) <= payloadLeft {
                    payloadLeft -= Int64(buffer.count)
                    defer { buffer = Data() }
                    return buffer
                }
                let payload = Data(buffer.prefix(Int(payloadLeft)))
                buffer = Data(buffer.dropFirst(Int(payloadLeft)))
                payloadLeft = 0
                return payload
            }
            if part + 1 == expected.count {
                try await readEpilogue()
                return nil
            }
            try await readPartHead()
        }
    }

    func cancel() {
        body.discard()
    }

    /// Reads the next delimiter and part headers and checks the part's range.
    private func readPartHead() async throws {
        part += 1
        while true {
            if let start = buffer.range(of: delimiter)?.upperBound,
               let headEnd = buffer.range(of: Data("\r\n\r\n".utf8), in: start..<buffer.endIndex) {
                let head = String(decoding: buffer[start..<headEnd.lowerBound], as: UTF8.self)
                buffer = Data(buffer[headEnd.upperBound...])
                try begin(head: head)
                return
            }
            if let start = buffer.range(of: delimiter)?.upperBound, buffer[start...].starts(with: Data("--".utf8)) {
                throw StreamCacheError(.badResponse, "The origin's multipart body has \(part) parts, \(expected.count) were asked.")
            }
            guard buffer.count <= Self.maximumHeadLength else {
                throw StreamCacheError(.badResponse, "The origin's multipart body has no part header where one was due.")
            }
            guard let chunk = try await iterator.next() else {
                throw StreamCacheError(.badResponse, "The origin's multipart body ended after \(part) of \(expected.count) parts.")
            }
            buffer.append(chunk)
        }
    }

    /// Checks a part's headers (the text after its delimiter) against the range it must carry.
    private func begin(head: String) throws {
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).dropFirst()
        let contentRange = lines.lazy.compactMap { line -> ContentRange? in
            guard let colon = line.firstIndex(of: ":"), line[..<colon].lowercased() == "content-range" else { return nil }
            return ContentRange(headerValue: String(line[line.index(after: colon)...]))
        }.first
        let want = expected[part]
        guard let delivered = contentRange?.range, delivered == want else {
            throw StreamCacheError(.badResponse, "The origin's multipart part \(part + 1) carries \(contentRange?.range.map(\.description) ?? "no valid range") when \(want) was asked.",
                                   range: want)
        }
        if let length = contentRange?.completeLength { completeLength = length }
        payloadLeft = want.count
    }

    /// Reads what follows the last part (the closing delimiter) to the end of the body.
    private func readEpilogue() async throws {
        var read = buffer.count
        buffer = Data()
        while let chunk = try await iterator.next() {
            read += chunk.count
            guard read <= Self.maximumHeadLength else {
                throw StreamCacheError(.badResponse, "The origin's multipart body goes on past its last part.")
            }
        }
    }
}
