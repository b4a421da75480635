import Foundation
import StreamCache
import StreamCacheHLS
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// Live playlists, hostile or broken playlists and type detection, with a scripted loopback
/// origin (it can append segments and fail on cue) in front of the proxy.
@Suite(.serialized) struct HLSProxyEdgeTests {
    static let secret = "Bearer edge-secret-77f2"

    static func withOriginAndProxy(_ body: (TestOrigin, ProxyServer) async throws -> Void) async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.requiredHeaders = ["Authorization": secret]
        try await withTemporaryCache { cache in
            try await HLSProxyTests.withProxy(cache: cache) { server in try await body(origin, server) }
        }
    }

    static func livePlaylist(segments: Range<Int>, ended: Bool = false) -> Data {
        var text = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXT-X-MEDIA-SEQUENCE:\(segments.lowerBound)\n"
        for index in segments { text += "#EXTINF:1.0,\nseg\(index).ts\n" }
        if ended { text += "#EXT-X-ENDLIST\n" }
        return Data(text.utf8)
    }

    /// Acceptance 3 with a real player: ffmpeg follows a live stream whose origin appends a
    /// segment every 700 ms, and stops at `#EXT-X-ENDLIST`.
    @Test func ffmpegFollowsALiveStreamToItsEnd() async throws {
        try await withTemporaryDirectory { directory in
            let made = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=96x72:rate=10",
                                                             "-t", "10", "-threads", "1", "-c:v", "mpeg2video", "-g", "10", "-f", "hls", "-hls_time", "1",
                                                             "-hls_segment_filename", directory.appendingPathComponent("seg%d.ts").path,
                                                             directory.appendingPathComponent("made.m3u8").path])
            try #require(made.status == 0, "ffmpeg could not make the segments: \(made.stderr)")
            try await Self.withOriginAndProxy { origin, server in
                let count = 10
                for index in 0..<count {
                    origin.setFile("/live/seg\(index).ts", data: try Data(contentsOf: directory.appendingPathComponent("seg\(index).ts")), contentType: "video/mp2t")
                }
                origin.setFile("/live/index.m3u8", data: Self.livePlaylist(segments: 0..<3), entityTag: "\"3\"", contentType: "application/vnd.apple.mpegurl")
                let url = server.url(for: server.register(url: origin.url("/live/index.m3u8"), headers: ["Authorization": Self.secret]))
                let appender = Task {
                    for end in 4...count {
                        try await Task.sleep(for: .milliseconds(700))
                        origin.setFile("/live/index.m3u8", data: Self.livePlaylist(segments: 0..<end, ended: end == count), entityTag: "\"\(end)\"",
                                       contentType: "application/vnd.apple.mpegurl")
                    }
                }
                let played = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-i", url.absoluteString, "-f", "null", "-"], timeout: 60)
                appender.cancel()
                #expect(played.status == 0, "ffmpeg on the live stream: \(played.stderr)")
                // The origin records an answer once it ends, which may come after ffmpeg had its
                // last byte and left.
                #expect(try await origin.waitUntilAnswersEnd())
                // The first playlist named 3 segments; playing the last one needed a reload.
                #expect(origin.requests.filter { $0.path == "/live/index.m3u8" }.count >= 2, "the playlist was reloaded")
                #expect(!origin.dataRequests(for: "/live/seg\(count - 1).ts").isEmpty, "ffmpeg played up to the last segment")
                for index in 0..<count {
                    #expect(origin.bodyBytesSent(for: "/live/seg\(index).ts") <= Int64(try Data(contentsOf: directory.appendingPathComponent("seg\(index).ts")).count))
                }
            }
        }
    }

    /// Acceptance 3 at the HTTP level: a new segment shows within the refresh interval, and once
    /// the origin stops answering, the playlist turns into an error at one target duration.
    @Test func aLivePlaylistShowsNewSegmentsAndIsNeverServedStale() async throws {
        try await Self.withOriginAndProxy { origin, server in
            origin.setFile("/live/index.m3u8", data: Self.livePlaylist(segments: 0..<3), entityTag: "\"3\"", contentType: "application/vnd.apple.mpegurl")
            let url = server.url(for: server.register(url: origin.url("/live/index.m3u8"), headers: ["Authorization": Self.secret]))
            func segmentCount() async throws -> Int {
                let answer = try await Curl.fetch(url)
                #expect(answer.status == 200)
                #expect(answer.headers["cache-control"] == "no-cache")
                return answer.text.split(separator: "\n").filter { $0.hasPrefix("/s/") }.count
            }
            #expect(try await segmentCount() == 3)
            origin.setFile("/live/index.m3u8", data: Self.livePlaylist(segments: 0..<4), entityTag: "\"4\"", contentType: "application/vnd.apple.mpegurl")
            var seen = 3
            for _ in 0..<50 {
                guard seen == 3 else { break }
                try await Task.sleep(for: .milliseconds(100))
                seen = try await segmentCount()
            }
            #expect(seen == 4, "the appended segment appeared")

            origin.faults = { _, path, _, _ in path == "/live/index.m3u8" ? .status(404) : nil }
            try await Task.sleep(for: .milliseconds(1200))
            let stale = try await Curl.fetch(url)
            #expect(stale.status == 404, "the origin lost the playlist and the copy is past its target duration")
            #expect(stale.text.contains("older than its target duration"))
        }
    }

    @Test func aMalformedPlaylistIsABadGatewayWithTheReason() async throws {
        try await Self.withOriginAndProxy { origin, server in
            origin.setFile("/bad.m3u8", data: Data("#EXTM3U\n#EXT-X-TARGETDURATION:2\nseg1.ts\n".utf8))
            let url = server.url(for: server.register(url: origin.url("/bad.m3u8"), headers: ["Authorization": Self.secret]))
            let answer = try await Curl.fetch(url)
            #expect(answer.status == 502)
            #expect(answer.text.contains("line 3: a segment URI without #EXTINF"))
            // The server goes on serving.
            origin.setFile("/good.m3u8", data: Self.livePlaylist(segments: 0..<2, ended: true))
            let good = server.url(for: server.register(url: origin.url("/good.m3u8"), headers: ["Authorization": Self.secret]))
            #expect(try await Curl.fetch(good).status == 200)
        }
    }

    /// Signed segment URLs, absolute origin URLs and a CDN host: the player sees none of them, the
    /// segments on the playlist's host get its headers, and the CDN never gets the token.
    @Test func signedURLsAndCredentialsNeverReachThePlayerOrAnotherHost() async throws {
        let cdn = try TestOrigin()
        defer { cdn.stop() }
        let cdnSegment = TestData.random(count: 5000, seed: 5)
        cdn.setFile("/edge/seg2.ts", data: cdnSegment, contentType: "video/mp2t")
        try await Self.withOriginAndProxy { origin, server in
            let first = TestData.random(count: 7000, seed: 3)
            origin.setFile("/show/seg0.ts", data: first, contentType: "video/mp2t")
            origin.setFile("/show/seg1.ts", data: first, contentType: "video/mp2t")
            let playlist = """
            #EXTM3U
            #EXT-X-TARGETDURATION:2
            #EXTINF:2,
            seg0.ts?sig=signed-query-value-1
            #EXTINF:2,
            \(origin.url("/show/seg1.ts").absoluteString)?sig=signed-query-value-2
            #EXTINF:2,
            \(cdn.url("/edge/seg2.ts").absoluteString)?sig=signed-query-value-3
            #EXT-X-ENDLIST
            """
            origin.setFile("/show/index.m3u8", data: Data(playlist.utf8))
            let url = server.url(for: server.register(url: origin.url("/show/index.m3u8"), headers: ["Authorization": Self.secret]))
            let answer = try await Curl.fetch(url)
            #expect(answer.status == 200)
            for secret in ["signed-query-value", "127.0.0.1:\(origin.port)", "127.0.0.1:\(cdn.port)", "edge-secret"] {
                #expect(!answer.text.contains(secret), "the rewritten playlist exposes \(secret)")
            }
            let paths = answer.text.split(separator: "\n").filter { $0.hasPrefix("/s/") }
            #expect(paths.map { $0.split(separator: "/").last.map(String.init) } == ["seg0.ts", "seg1.ts", "seg2.ts"])
            let base = try #require(server.baseURL)
            var bodies: [Data] = []
            for path in paths { bodies.append(try await Curl.fetch(try #require(URL(string: String(path), relativeTo: base))).body) }
            #expect(bodies == [first, first, cdnSegment])
            #expect(cdn.requests.allSatisfy { $0.headers["Authorization"] == nil }, "the CDN got the origin's token")
            #expect(origin.requests.allSatisfy { $0.status != 401 }, "the playlist's own host got its headers")
        }
    }

    @Test func aPlaylistIsRecognizedByItsTypeWithoutTheExtension() async throws {
        try await Self.withOriginAndProxy { origin, server in
            origin.setFile("/stream", data: Self.livePlaylist(segments: 0..<2, ended: true), contentType: "application/x-mpegURL")
            let url = server.url(for: server.register(url: origin.url("/stream"), headers: ["Authorization": Self.secret]))
            let answer = try await Curl.fetch(url)
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"] == HLSPlaylist.mimeType)
            #expect(answer.text.split(separator: "\n").filter { $0.hasPrefix("/s/") }.count == 2)
        }
    }
}
