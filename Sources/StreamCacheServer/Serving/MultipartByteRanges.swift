import StreamCache

/// The framing of a `multipart/byteranges` answer (RFC 9110 §14.6) to a request for several
/// disjoint ranges.
///
/// Each part is `CRLF --BOUNDARY CRLF Content-Type CRLF Content-Range CRLF CRLF <bytes>`, and the
/// body ends with `CRLF --BOUNDARY-- CRLF`; the whole length is known before any byte is read,
/// so the answer has an exact `Content-Length`.
struct MultipartByteRanges: Sendable {
    let ranges: [ByteRange]
    let total: Int64
    let partContentType: String
    let boundary: String

    init(ranges: [ByteRange], total: Int64, contentType: String, boundary: String = "StreamCache-" + SecretToken.make(bytes: 12)) {
        self.ranges = ranges
        self.total = total
        self.partContentType = contentType
        self.boundary = boundary
    }

    /// The response's `Content-Type`.
    var contentType: String { "multipart/byteranges; boundary=\(boundary)" }

    /// The framing before part `index`'s bytes.
    func partHeader(_ index: Int) -> String {
        let range = ranges[index]
        return "\r\n--\(boundary)\r\nContent-Type: \(partContentType)\r\nContent-Range: bytes \(range.lowerBound)-\(range.httpLast)/\(total)\r\n\r\n"
    }

    /// The framing after the last part.
    var closingDelimiter: String { "\r\n--\(boundary)--\r\n" }

    /// The exact length of the body.
    var contentLength: Int64 {
        ranges.indices.reduce(Int64(closingDelimiter.utf8.count)) { sum, index in
            sum + Int64(partHeader(index).utf8.count) + ranges[index].count
        }
    }
}
