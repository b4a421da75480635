import StreamCache
import StreamCacheTestSupport
import Testing

@Suite struct RangeSetTests {
    @Test func seedDesignInsertExample() {
        var set = RangeSet([ByteRange(0, 100), ByteRange(300, 1000)])
        set.insert(ByteRange(19, 150))
        #expect(set.ranges == [ByteRange(0, 150), ByteRange(300, 1000)])
        #expect(set.coveredByteCount == 850)
    }

    @Test func seedDesignGapsExample() {
        let set = RangeSet([ByteRange(100, 300), ByteRange(500, 10000), ByteRange(20000, 50000)])
        let gaps = set.gaps(in: ByteRange(400, 1_000_000))
        #expect(gaps == [ByteRange(400, 500), ByteRange(10000, 20000), ByteRange(50000, 1_000_000)])
    }

    @Test func touchingRangesMerge() {
        var set = RangeSet()
        set.insert(ByteRange(0, 100))
        set.insert(ByteRange(100, 200))
        #expect(set.ranges == [ByteRange(0, 200)])
    }

    @Test func removeSplitsAndLookupsWork() {
        var set = RangeSet([ByteRange(0, 1000)])
        set.remove(ByteRange(100, 200))
        #expect(set.ranges == [ByteRange(0, 100), ByteRange(200, 1000)])
        #expect(set.contains(99) && !set.contains(100) && set.contains(200))
        #expect(set.contains(ByteRange(200, 1000)) && !set.contains(ByteRange(50, 250)))
        #expect(set.firstLowerBound(atOrAfter: 150) == 200)
        #expect(set.firstLowerBound(atOrAfter: 1000) == nil)
        #expect(set.range(containing: 500) == ByteRange(200, 1000))
        #expect(set.coveredByteCount == 900)
    }

    /// Random operations on a small universe, checked against a plain bitmap.
    ///
    /// The checks are plain comparisons gathered into one list, asserted once per case: an
    /// `#expect` per byte made this test hold both of a two-core machine's cooperative threads
    /// for ten seconds in a debug build, and every test waiting on a timer meanwhile waited too
    /// (a refused connection's 1 ms back-off took 9.7 s in a full run).
    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func matchesBitmapModel(seed: UInt64) {
        var generator = SeededGenerator(seed: seed)
        let universe = 300
        var bitmap = [Bool](repeating: false, count: universe)
        var set = RangeSet()
        var mismatches: [String] = []
        func randomRange() -> ByteRange {
            let a = Int64.random(in: 0..<Int64(universe), using: &generator)
            let length = Int64.random(in: 0...40, using: &generator)
            return ByteRange(a, min(Int64(universe), a + length))
        }
        for step in 0..<400 {
            let range = randomRange()
            let inserting = Bool.random(using: &generator)
            if inserting {
                set.insert(range)
                for i in range.range { bitmap[Int(i)] = true }
            } else {
                set.remove(range)
                for i in range.range { bitmap[Int(i)] = false }
            }
            func check(_ holds: Bool, _ what: @autoclosure () -> String) {
                if !holds { mismatches.append("step \(step) (\(inserting ? "insert" : "remove") \(range)): \(what())") }
            }
            // Representation: sorted, disjoint, not touching, non-empty.
            check(zip(set.ranges, set.ranges.dropFirst()).allSatisfy { $0.upperBound < $1.lowerBound }, "ranges not sorted apart: \(set.ranges)")
            check(set.ranges.allSatisfy { !$0.isEmpty }, "an empty range: \(set.ranges)")
            check(set.coveredByteCount == Int64(bitmap.filter { $0 }.count), "coveredByteCount \(set.coveredByteCount)")
            let probe = randomRange()
            for offset in probe.range { check(set.contains(offset) == bitmap[Int(offset)], "contains(\(offset))") }
            check(set.contains(probe) == probe.range.allSatisfy { bitmap[Int($0)] }, "contains(\(probe))")
            let expectedGaps = probe.range.filter { !bitmap[Int($0)] }.count
            let gaps = set.gaps(in: probe)
            check(gaps.reduce(0) { $0 + $1.count } == Int64(expectedGaps), "gaps(in: \(probe)) = \(gaps)")
            for gap in gaps { check(gap.range.allSatisfy { !bitmap[Int($0)] }, "gap \(gap) holds cached bytes") }
            check(set.coveredByteCount(in: probe) == Int64(probe.count) - Int64(expectedGaps), "coveredByteCount(in: \(probe))")
            let next = set.firstLowerBound(atOrAfter: probe.lowerBound)
            let expectedNext = (Int(probe.lowerBound)..<universe).first { bitmap[$0] }.map(Int64.init)
            check(next == expectedNext, "firstLowerBound(atOrAfter: \(probe.lowerBound)) = \(String(describing: next)), not \(String(describing: expectedNext))")
        }
        #expect(mismatches.count == 0, "the first: \(mismatches.prefix(5))")
    }
}

@Suite struct ContentRangeTests {
    @Test func parsesTheThreeForms() {
        #expect(ContentRange(headerValue: "bytes 0-99/1000") == ContentRange(range: ByteRange(0, 100), completeLength: 1000))
        #expect(ContentRange(headerValue: "bytes */1000") == ContentRange(range: nil, completeLength: 1000))
        #expect(ContentRange(headerValue: "bytes 10-19/*") == ContentRange(range: ByteRange(10, 20), completeLength: nil))
    }

    @Test(arguments: ["", "bytes", "bytes 5-4/10", "bytes 0-10/10", "bytes -1-5/10", "bytes a-b/c", "items 0-1/2", "bytes */*", "bytes 0-99999999999999999999/5"])
    func rejectsMalformed(value: String) {
        #expect(ContentRange(headerValue: value) == nil)
    }

    @Test func roundTrips() {
        let value = ContentRange(range: ByteRange(5, 10), completeLength: 20)
        #expect(value.headerValue == "bytes 5-9/20")
        #expect(ContentRange(headerValue: value.headerValue) == value)
    }
}

@Suite struct MediaTypeTests {
    @Test func mimeTypeWins() {
        #expect(MediaType.uniformTypeIdentifier(mimeType: "audio/mpeg; charset=x", fileName: "a.m4a") == "public.mp3")
    }

    @Test func genericOrMissingMimeFallsBackToExtension() {
        #expect(MediaType.uniformTypeIdentifier(mimeType: "application/octet-stream", fileName: "/music/a.M4A") == "com.apple.m4a-audio")
        #expect(MediaType.uniformTypeIdentifier(mimeType: nil, fileName: "song.mp3") == "public.mp3")
        #expect(MediaType.uniformTypeIdentifier(mimeType: nil, fileName: "noext") == "public.data")
    }

    @Test func sniffsMagicBytes() {
        #expect(MediaType.sniff(Data("ID3\u{3}".utf8)) == "public.mp3")
        #expect(MediaType.sniff(Data([0, 0, 0, 0x20]) + Data("ftypM4A ".utf8)) == "com.apple.m4a-audio")
        #expect(MediaType.sniff(Data("RIFF\0\0\0\0WAVE".utf8)) == "com.microsoft.waveform-audio")
        #expect(MediaType.sniff(Data("fLaC".utf8)) == "org.xiph.flac")
    }

    @Test func infoUsesFallbackUTI() {
        let info = ResourceInfo(totalLength: 10, mimeType: "application/octet-stream", fileName: "x.mp3", acceptsByteRanges: true)
        #expect(info.uniformTypeIdentifier == "public.mp3")
        #expect(info.effectiveMIMEType == "audio/mpeg")
    }
}

@Suite struct CacheKeyTests {
    @Test func urlKeysDropSecrets() {
        let key = CacheKey(url: URL(string: "https://me:pw@CDN.example/a.mp3?sig=secret&exp=1")!)
        #expect(!key.rawValue.contains("secret") && !key.rawValue.contains("pw"))
        #expect(key.rawValue.hasPrefix("https://cdn.example/a.mp3?#"))
        #expect(key == CacheKey(url: URL(string: "https://cdn.example/a.mp3?sig=secret&exp=1")!))
        #expect(key != CacheKey(url: URL(string: "https://cdn.example/a.mp3?sig=other")!))
    }

    /// Keys of URLs are what earlier versions derived with `URLComponents`, so caches made by them
    /// are found again.
    @Test func urlKeysKeepTheirEarlierForm() {
        let cases = [
            ("http://127.0.0.1:18080/media/a%20b.bin", "http://127.0.0.1:18080/media/a%20b.bin"),
            ("http://[::1]:8080/x/y#frag", "http://[::1]:8080/x/y"),
            ("HTTP://Example.COM", "http://example.com"),
            ("http://example.com/", "http://example.com/"),
            ("http://user@host:80/p;q#y", "http://host:80/p;q"),
            ("http://host/a?", "http://host/a"),
        ]
        for (url, key) in cases {
            #expect(CacheKey(url: URL(string: url)!).rawValue == key)
        }
    }

    @Test func fileStemIsAHashThatCannotEscape() {
        let key = CacheKey("../../etc/passwd")
        #expect(key.fileStem.count == 64)
        #expect(key.fileStem.allSatisfy { $0.isHexDigit })
    }
}

import Foundation
