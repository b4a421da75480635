import Foundation
import StreamCache
import StreamCacheHLS
import Testing

@Suite struct HLSPlaylistTests {
    static let master = """
    #EXTM3U
    #EXT-X-VERSION:7
    #EXT-X-INDEPENDENT-SEGMENTS
    #EXT-X-SESSION-KEY:METHOD=AES-128,URI="https://keys.example/session.key"
    #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aud",NAME="English, main",LANGUAGE="en",DEFAULT=YES,URI="audio/en.m3u8"
    #EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID="cc",NAME="CC1",INSTREAM-ID="CC1"
    #EXT-X-STREAM-INF:BANDWIDTH=1280000,RESOLUTION=1280x720,CODECS="avc1.4d401f,mp4a.40.2",AUDIO="aud"
    720p/index.m3u8?token=abc
    # a comment

    #EXT-X-STREAM-INF:BANDWIDTH=320000,AUDIO="aud"
    https://cdn.example/240p/index.m3u8
    #EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=80000,URI="iframes.m3u8"
    #EXT-X-CONTENT-STEERING:SERVER-URI="https://steer.example/manifest.json"
    """

    @Test func aMasterPlaylistListsVariantsRenditionsAndEveryURI() throws {
        let playlist = try HLSPlaylist(parsing: Self.master)
        #expect(playlist.kind == .master)
        #expect(!playlist.isLive)
        #expect(playlist.variants.map(\.bandwidth) == [1_280_000, 320_000, 80_000])
        #expect(playlist.variants.map(\.isIFrameOnly) == [false, false, true])
        #expect(playlist.variants[0].renditionGroups == ["AUDIO": "aud"])
        #expect(playlist.variants[0].codecs == "avc1.4d401f,mp4a.40.2")
        #expect(playlist.renditions.map(\.name) == ["English, main", "CC1"])
        #expect(playlist.renditions[1].reference == nil)
        #expect(playlist.references.map(\.uri) == ["https://keys.example/session.key", "audio/en.m3u8", "720p/index.m3u8?token=abc",
                                                   "https://cdn.example/240p/index.m3u8", "iframes.m3u8"])
        #expect(playlist.references.map(\.role) == [.sessionKey, .renditionPlaylist, .variantPlaylist, .variantPlaylist, .iFramePlaylist])
    }

    @Test func rewritingReplacesOnlyURIsAndDropsContentSteering() throws {
        let playlist = try HLSPlaylist(parsing: Self.master)
        let rewritten = playlist.rewritten { "/s/\($0.role.rawValue)/\($0.line)" }
        #expect(rewritten == """
        #EXTM3U
        #EXT-X-VERSION:7
        #EXT-X-INDEPENDENT-SEGMENTS
        #EXT-X-SESSION-KEY:METHOD=AES-128,URI="/s/sessionKey/4"
        #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aud",NAME="English, main",LANGUAGE="en",DEFAULT=YES,URI="/s/renditionPlaylist/5"
        #EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID="cc",NAME="CC1",INSTREAM-ID="CC1"
        #EXT-X-STREAM-INF:BANDWIDTH=1280000,RESOLUTION=1280x720,CODECS="avc1.4d401f,mp4a.40.2",AUDIO="aud"
        /s/variantPlaylist/8
        # a comment
        #EXT-X-STREAM-INF:BANDWIDTH=320000,AUDIO="aud"
        /s/variantPlaylist/12
        #EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=80000,URI="/s/iFramePlaylist/13"

        """)
        // Keeping every URI writes the playlist back as it was (less blank lines and steering).
        let kept = playlist.rewritten { _ in nil }
        #expect(kept.contains("720p/index.m3u8?token=abc\n"))
        #expect(!kept.contains("steer.example"))
    }

    @Test func aMediaPlaylistHasSegmentsWithTheirKeysMapsAndByteRanges() throws {
        let playlist = try HLSPlaylist(parsing: """
        #EXTM3U\r
        #EXT-X-TARGETDURATION:6\r
        #EXT-X-MEDIA-SEQUENCE:42\r
        #EXT-X-MAP:URI="init.mp4",BYTERANGE="720@0"\r
        #EXT-X-KEY:METHOD=AES-128,URI="k1.bin",IV=0x0123\r
        #EXTINF:5.96,first title, with comma\r
        #EXT-X-BYTERANGE:1000@720\r
        media.mp4\r
        #EXTINF:6.0,\r
        #EXT-X-BYTERANGE:2000\r
        media.mp4\r
        #EXT-X-KEY:METHOD=NONE\r
        #EXTINF:4,\r
        tail.m4s\r
        """)
        #expect(playlist.kind == .media)
        #expect(playlist.targetDuration == 6)
        #expect(playlist.mediaSequence == 42)
        #expect(playlist.isLive)
        #expect(playlist.segments.map(\.duration) == [5.96, 6.0, 4])
        #expect(playlist.segments.map(\.reference.byteRange) == [ByteRange(720, 1720), ByteRange(1720, 3720), nil])
        #expect(playlist.segments.map { $0.key?.uri } == ["k1.bin", "k1.bin", nil])
        #expect(playlist.segments.allSatisfy { $0.initializationSection?.byteRange == ByteRange(0, 720) })
        #expect(playlist.references.map(\.role) == [.initializationSection, .key, .segment, .segment, .segment])
        #expect(playlist.rewritten { "/s/\($0.line)" } == """
        #EXTM3U
        #EXT-X-TARGETDURATION:6
        #EXT-X-MEDIA-SEQUENCE:42
        #EXT-X-MAP:URI="/s/4",BYTERANGE="720@0"
        #EXT-X-KEY:METHOD=AES-128,URI="/s/5",IV=0x0123
        #EXTINF:5.96,first title, with comma
        #EXT-X-BYTERANGE:1000@720
        /s/8
        #EXTINF:6.0,
        #EXT-X-BYTERANGE:2000
        /s/11
        #EXT-X-KEY:METHOD=NONE
        #EXTINF:4,
        /s/14

        """)
    }

    @Test func endListAndVODTypeMakeAPlaylistStatic() throws {
        let ended = try HLSPlaylist(parsing: "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\na.ts\n#EXT-X-ENDLIST\n")
        let vod = try HLSPlaylist(parsing: "#EXTM3U\n#EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\na.ts\n")
        let event = try HLSPlaylist(parsing: "#EXTM3U\n#EXT-X-PLAYLIST-TYPE:EVENT\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\na.ts\n")
        #expect(!ended.isLive)
        #expect(!vod.isLive)
        #expect(event.isLive)
    }

    @Test func variablesAreSubstitutedInURIs() throws {
        let playlist = try HLSPlaylist(parsing: """
        #EXTM3U
        #EXT-X-DEFINE:NAME="base",VALUE="https://media.example/show"
        #EXT-X-TARGETDURATION:2
        #EXTINF:2,
        {$base}/seg1.ts
        """)
        #expect(playlist.segments.map(\.reference.uri) == ["https://media.example/show/seg1.ts"])
    }

    static let malformed: [(String, String)] = [
        ("", "empty"),
        ("<html>not a playlist</html>", "first line is not #EXTM3U"),
        ("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\n", "not followed by a URI"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n", "not followed by a segment URI"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\nseg.ts\n", "without #EXTINF"),
        ("#EXTM3U\n#EXTINF:2,\nseg.ts\n", "needs #EXT-X-TARGETDURATION"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:two\n", "not a number of seconds"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:abc,\nseg.ts\n", "is not a number"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-KEY:METHOD=AES-128,URI=\"k\n", "no closing"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-KEY:METHOD=AES-128\n", "needs a URI"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-MAP:BYTERANGE=\"1@0\"\n", "needs a URI"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n#EXT-X-BYTERANGE:100\nseg.ts\n", "must follow a byte range"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n#EXT-X-BYTERANGE:-5@0\nseg.ts\n", "length[@offset]"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n#EXT-X-BYTERANGE:9223372036854775807@9\nseg.ts\n", "largest offset"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-MAP:URI=\"init.mp4\",BYTERANGE=\"9223372036854775807@9\"\n#EXTINF:2,\nseg.ts\n", "largest offset"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-STREAM-INF:BANDWIDTH=1\na.m3u8\n", "mixes master"),
        ("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\na.m3u8\n#EXTINF:2,\nseg.ts\n", "no #EXT-X-STREAM-INF introduces"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n{$nope}/seg.ts\n", "not defined"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nseg\u{0}.ts\n", "control character"),
        ("#EXTM3U\n#EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID=\"c\",URI=\"x\"\n", "cannot have a URI"),
    ]

    @Test(arguments: malformed) func aMalformedPlaylistIsAClearError(text: String, reason: String) {
        #expect {
            _ = try HLSPlaylist(parsing: text)
        } throws: { error in
            guard let error = error as? StreamCacheError else { return false }
            return error.code == .invalidPlaylist && error.message.contains(reason)
        }
    }

    @Test func bytesThatAreNotUTF8OrTooLargeAreRefused() {
        #expect(throws: StreamCacheError.self) { try HLSPlaylist(data: Data([0x23, 0x45, 0xFF, 0xFE])) }
        let huge = Data("#EXTM3U\n".utf8) + Data(repeating: 0x23, count: HLSPlaylist.maximumSize)
        #expect { try HLSPlaylist(data: huge) } throws: { ($0 as? StreamCacheError)?.message.contains("larger than") == true }
    }

    @Test func attributeListsKeepTheirSpellingAndQuotedCommas() throws {
        var list = try HLSAttributeList(parsing: #"METHOD=AES-128,URI="a,b=c.bin",IV=0x1F"#)
        #expect(list["URI"] == "a,b=c.bin")
        #expect(list["IV"] == "0x1F")
        list.setQuotedString("/s/x/k", for: "URI")
        #expect(list.description == #"METHOD=AES-128,URI="/s/x/k",IV=0x1F"#)
        #expect(throws: HLSSyntaxError.self) { try HLSAttributeList(parsing: #"URI="x"junk"#) }
        #expect(throws: HLSSyntaxError.self) { try HLSAttributeList(parsing: "NOVALUE") }
    }

    @Test func locationsResolveRelativeURIsAndSendHeadersOnlyToTheirOwnOrigin() throws {
        let master = HLSLocation(url: URL(string: "https://media.example/show/master.m3u8?sig=1")!, headers: ["Authorization": "Bearer t"])
        let variant = try #require(master.resolve("720p/index.m3u8"))
        #expect(variant.url.absoluteString == "https://media.example/show/720p/index.m3u8")
        #expect(variant.headers["Authorization"] == "Bearer t")
        #expect(master.resolve("/other/seg.ts")?.url.absoluteString == "https://media.example/other/seg.ts")
        #expect(master.resolve("https://media.example:443/a.ts")?.headers["Authorization"] == "Bearer t")
        let cdn = try #require(master.resolve("https://cdn.example/seg.ts"))
        #expect(cdn.headers.fields.isEmpty)
        #expect(master.resolve("http://media.example/seg.ts")?.headers.fields.isEmpty == true)
        #expect(master.resolve("skd://key-42") == nil)
        #expect(master.resolve("data:text/plain,abc") == nil)
    }

    @Test func variantSelectionsChooseByBandwidthOrIndex() throws {
        let playlist = try HLSPlaylist(parsing: Self.master)
        #expect(HLSVariantSelection("all") == .all)
        #expect(HLSVariantSelection("2") == .index(2))
        #expect(HLSVariantSelection("best") == nil)
        #expect(HLSVariantSelection("-1") == nil)
        #expect(HLSVariantSelection.highestBandwidth.choose(from: playlist.variants)?.map(\.bandwidth) == [1_280_000])
        #expect(HLSVariantSelection.lowestBandwidth.choose(from: playlist.variants)?.map(\.bandwidth) == [320_000])
        #expect(HLSVariantSelection.all.choose(from: playlist.variants)?.count == 2)
        #expect(HLSVariantSelection.index(1).choose(from: playlist.variants)?.map(\.bandwidth) == [320_000])
        #expect(HLSVariantSelection.index(2).choose(from: playlist.variants) == nil)
    }
}
