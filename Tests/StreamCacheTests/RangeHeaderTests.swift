import Foundation
import StreamCache
@testable import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// RFC 9110 range parsing and resolution, path normalization, and multipart framing.
@Suite struct RangeHeaderTests {
    @Test(arguments: [
        ("bytes=0-1", [RangeHeader.Specifier.bounded(first: 0, last: 1)]),
        ("bytes=500-", [.from(first: 500)]),
        ("bytes=-500", [.suffix(length: 500)]),
        ("BYTES = 0-9 , 20-29", [.bounded(first: 0, last: 9), .bounded(first: 20, last: 29)]),
        ("bytes=0-9,,20-", [.bounded(first: 0, last: 9), .from(first: 20)]),
        ("bytes=0-99999999999999999999999", [.bounded(first: 0, last: Int64.max)]),
    ])
    func parsesWellFormedHeaders(value: String, expected: [RangeHeader.Specifier]) {
        #expect(RangeHeader(parsing: value)?.specifiers == expected)
    }

    @Test(arguments: ["", "bytes", "bytes=", "bytes=-", "bytes=5-4", "bytes=a-b", "items=0-1", "bytes=0-1-2", "bytes=--1", "bytes=1--2",
                      "bytes=+1-2", "bytes=0x10-20", "bytes= - ", "bytes=,", "bytes=0-1;", "bytes=٣-٤", "bytes=0-1,bytes=2-3"])
    func rejectsMalformedHeaders(value: String) {
        #expect(RangeHeader(parsing: value) == nil)
    }

    /// At most 64 ranges in one header: a longer list counts as malformed (a 200 with the whole
    /// representation), so that no client makes one request cost the origin hundreds of parts.
    @Test func aHeaderWithMoreRangesThanTheLimitIsRefused() {
        func header(_ count: Int) -> String { "bytes=" + (0..<count).map { "\($0 * 10)-\($0 * 10 + 4)" }.joined(separator: ",") }
        #expect(RangeHeader(parsing: header(RangeHeader.maximumSpecifierCount))?.specifiers.count == 64)
        #expect(RangeHeader(parsing: header(RangeHeader.maximumSpecifierCount + 1)) == nil)
    }

    @Test func resolvesAgainstTheLength() throws {
        let total: Int64 = 1000
        #expect(RangeHeader(parsing: "bytes=0-1")?.ranges(in: total) == [ByteRange(0, 2)])
        #expect(RangeHeader(parsing: "bytes=990-2000")?.ranges(in: total) == [ByteRange(990, 1000)], "last clamps to length-1")
        #expect(RangeHeader(parsing: "bytes=-100")?.ranges(in: total) == [ByteRange(900, 1000)])
        #expect(RangeHeader(parsing: "bytes=-5000")?.ranges(in: total) == [ByteRange(0, 1000)], "a suffix longer than the file is the file")
        #expect(RangeHeader(parsing: "bytes=1000-")?.ranges(in: total) == nil, "first ≥ length is unsatisfiable")
        #expect(RangeHeader(parsing: "bytes=-0")?.ranges(in: total) == nil)
        #expect(RangeHeader(parsing: "bytes=0-")?.ranges(in: 0) == nil, "nothing in an empty file is satisfiable")
        #expect(RangeHeader(parsing: "bytes=5000-6000,0-9")?.ranges(in: total) == [ByteRange(0, 10)], "unsatisfiable parts are dropped")
        #expect(RangeHeader(parsing: "bytes=0-99999999999999999999")?.ranges(in: total) == [ByteRange(0, 1000)])
    }

    @Test func mergesOverlappingAndAdjacentRanges() {
        #expect(RangeHeader(parsing: "bytes=0-9,10-19,5-7")?.ranges(in: 100) == [ByteRange(0, 20)])
        #expect(RangeHeader(parsing: "bytes=50-59,0-9")?.ranges(in: 100) == [ByteRange(50, 60), ByteRange(0, 10)], "disjoint ranges keep the client's order")
    }

    @Test func ifRangeComparesStronglyOrByExactDate() {
        let strong = Validator(entityTag: "\"v1\"", lastModified: "Sun, 22 Nov 2026 05:30:38 GMT")
        #expect(RangeResponder.ifRangeAllowsPartial(nil, validator: strong))
        #expect(RangeResponder.ifRangeAllowsPartial("\"v1\"", validator: strong))
        #expect(!RangeResponder.ifRangeAllowsPartial("\"v2\"", validator: strong))
        #expect(!RangeResponder.ifRangeAllowsPartial("W/\"v1\"", validator: strong), "a weak tag never matches")
        #expect(RangeResponder.ifRangeAllowsPartial("Sun, 22 Nov 2026 05:30:38 GMT", validator: strong))
        #expect(!RangeResponder.ifRangeAllowsPartial("Sun, 22 Nov 2026 05:30:39 GMT", validator: strong))
        #expect(!RangeResponder.ifRangeAllowsPartial("W/\"v1\"", validator: Validator(entityTag: "W/\"v1\"")))
    }

    @Test func relativePathsNeverLeaveTheFolder() throws {
        #expect(RelativePath(encoded: "a/b%20c.mp3")?.segments == ["a", "b c.mp3"])
        #expect(RelativePath(encoded: "%C3%A9t%C3%A9.flac")?.fileName == "été.flac")
        for hostile in ["", "..", "../x", "a/../../x", "%2e%2e/x", "a/%2E%2E/b", "a/.", "a//b", "a/", "..%2fx", "a%2fb", "a%5cb",
                        "a%00b", "%zz", "a/%0a"] {
            #expect(RelativePath(encoded: hostile) == nil, "\(hostile) must be refused")
        }
        let base = try #require(URL(string: "http://127.0.0.1:8080/music"))
        let path = try #require(RelativePath(encoded: "Some%20Album/01%20%23one%3F.mp3"))
        #expect(path.url(below: base)?.absoluteString == "http://127.0.0.1:8080/music/Some%20Album/01%20%23one%3F.mp3")
    }

    @Test func multipartLengthIsExact() {
        let ranges = [ByteRange(0, 10), ByteRange(100, 110), ByteRange(500, 1000)]
        let framing = MultipartByteRanges(ranges: ranges, total: 1000, contentType: "audio/mpeg", boundary: "B")
        var body = ""
        for index in ranges.indices {
            body += framing.partHeader(index) + String(repeating: "x", count: Int(ranges[index].count))
        }
        body += framing.closingDelimiter
        #expect(Int64(body.utf8.count) == framing.contentLength)
        #expect(framing.partHeader(1).contains("Content-Range: bytes 100-109/1000"))
    }

    @Test func randomHeadersNeverTrap() {
        var generator = SeededGenerator(seed: 77)
        let alphabet = Array("bytes=-,0123456789 \t;xX".utf8)
        for _ in 0..<20_000 {
            let length = Int.random(in: 0..<40, using: &generator)
            let bytes = (0..<length).map { _ in alphabet.randomElement(using: &generator)! }
            let value = String(decoding: bytes, as: UTF8.self)
            if let header = RangeHeader(parsing: value), let ranges = header.ranges(in: Int64.random(in: 0..<10_000, using: &generator)) {
                #expect(ranges.allSatisfy { !$0.isEmpty && $0.lowerBound >= 0 })
            }
        }
    }
}
