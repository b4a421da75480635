import Parsers
import StreamCache

/// `Content-Range` response headers: what parses is consistent (the range inside the complete
/// length) and survives a round trip through its own header value.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzContentRange(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let parsed = ContentRange(headerValue: text) else { return 0 }
    precondition(parsed.range != nil || parsed.completeLength != nil)
    if let range = parsed.range, let total = parsed.completeLength {
        precondition(range.upperBound <= total, "\(range) past the complete length \(total)")
    }
    precondition(ContentRange(headerValue: parsed.headerValue) == parsed, "round trip changed \(parsed)")
    return 0
}
