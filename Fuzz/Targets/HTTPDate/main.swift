import StreamCache

/// HTTP dates (a `Retry-After` from any origin): what parses names a real second, which reads back
/// the same once written, and an IMF-fixdate names the very day and time it spells (only its
/// weekday, which the parser does not check, may differ).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTPDate(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    // 2026-11-26: the "now" that places two-digit years.
    guard let seconds = HTTPDate.secondsSince1970(parsing: text, now: 1_795_694_400) else { return 0 }
    let written = HTTPDate.format(secondsSince1970: seconds)
    precondition(HTTPDate.secondsSince1970(parsing: written, now: 1_795_694_400) == seconds, "\(text) → \(seconds) → \(written)")
    // An IMF-fixdate in its exact layout, "Sun, 06 Nov 1994 08:49:37 GMT" (a leap second reads as :59).
    let fixdate = Array(text.utf8)
    let digits = [5, 6, 12, 13, 14, 15, 17, 18, 20, 21, 23, 24], spaces = [4, 7, 11, 16, 25]
    if fixdate.count == 29, fixdate[3] == UInt8(ascii: ","), text.hasSuffix(" GMT"), !text.contains(":60 "),
       digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(fixdate[$0]) }), spaces.allSatisfy({ fixdate[$0] == UInt8(ascii: " ") }) {
        precondition(written.utf8.dropFirst(5).elementsEqual(fixdate.dropFirst(5)), "\(text) read as \(written)")
    }
    return 0
}
