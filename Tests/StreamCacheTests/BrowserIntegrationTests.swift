import Foundation
import StreamCache
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// A real browser's web player reads streams through the proxy: Chromium (`chromium-headless-shell`,
/// which `.ci/run` installs) loads a page from a web app's server whose script fetches a range and
/// the whole file (one of them after a CORS preflight) and plays the file in an
/// `<audio crossorigin>` element, as a web player that draws a waveform or feeds Media Source
/// Extensions does; and Chromium's own HLS support plays an HLS stream through the proxy. The page
/// sends what it saw back to its server.
@Suite(.serialized) struct BrowserIntegrationTests {
    static let secret = "Bearer browser-test-secret-5d21"

    /// What the page does with the stream URL in its query, then reports to `/report?r=JSON`.
    static let page = """
        <!doctype html><html><body><script>
        const url = new URLSearchParams(location.search).get("u");
        const hex = b => Array.from(new Uint8Array(b)).map(x => x.toString(16).padStart(2, "0")).join("");
        (async () => {
          const out = {};
          try {
            const range = await fetch(url, {headers: {Range: "bytes=1000-1999"}});
            out.rangeStatus = range.status;
            out.contentRange = range.headers.get("Content-Range");
            out.rangeSHA = hex(await crypto.subtle.digest("SHA-256", await range.arrayBuffer()));
            const whole = await fetch(url, {headers: {"X-Player": "web"}});
            out.wholeStatus = whole.status;
            out.wholeSHA = hex(await crypto.subtle.digest("SHA-256", await whole.arrayBuffer()));
            const audio = new Audio();
            audio.crossOrigin = "anonymous";
            audio.preload = "auto";
            audio.src = url;
            out.duration = await new Promise((loaded, failed) => {
              audio.onloadedmetadata = () => loaded(audio.duration);
              audio.onerror = () => failed(new Error("media error " + (audio.error && audio.error.code)));
            });
          } catch (error) {
            out.error = String(error);
          }
          await fetch("/report?r=" + encodeURIComponent(JSON.stringify(out)));
        })();
        </script></body></html>
        """

    /// A page that plays the HLS stream in its query with the browser's own HLS support, at four
    /// times the speed, and reports how far it got.
    static let hlsPage = """
        <!doctype html><html><body><script>
        const url = new URLSearchParams(location.search).get("u");
        (async () => {
          const out = {canPlay: document.createElement("audio").canPlayType("application/vnd.apple.mpegurl")};
          try {
            const audio = new Audio();
            audio.src = url;
            audio.playbackRate = 4;
            await audio.play();
            await new Promise((ended, failed) => {
              audio.onended = ended;
              audio.onerror = () => failed(new Error("media error " + (audio.error && audio.error.code)));
            });
            out.duration = audio.duration;
            out.playedTo = audio.currentTime;
          } catch (error) {
            out.error = String(error);
          }
          await fetch("/report?r=" + encodeURIComponent(JSON.stringify(out)));
        })();
        </script></body></html>
        """

    /// A page that opens the stream in its query in an `<audio>` element, seeks to 150 s, plays
    /// a moment from there and reports where it was.
    static let seekPage = """
        <!doctype html><html><body><script>
        const url = new URLSearchParams(location.search).get("u");
        const event = (element, name) => new Promise((happened, failed) => {
          element.addEventListener(name, happened, {once: true});
          element.addEventListener("error", () => failed(new Error("media error " + (element.error && element.error.code))), {once: true});
        });
        (async () => {
          const out = {};
          try {
            const audio = new Audio();
            audio.preload = "metadata";
            audio.src = url;
            await event(audio, "loadedmetadata");
            out.duration = audio.duration;
            audio.currentTime = 150;
            await event(audio, "seeked");
            await audio.play();
            await new Promise(done => setTimeout(done, 1000));
            audio.pause();
            out.playedTo = audio.currentTime;
          } catch (error) {
            out.error = String(error);
          }
          await fetch("/report?r=" + encodeURIComponent(JSON.stringify(out)));
        })();
        </script></body></html>
        """

    struct PageDidNotReport: Error, CustomStringConvertible {
        var url: String
        var description: String { "Chromium opened \(url) but its page reported nothing within 60 s." }
    }

    struct Report: Decodable {
        var rangeStatus: Int?
        var contentRange: String?
        var rangeSHA: String?
        var wholeStatus: Int?
        var wholeSHA: String?
        var duration: Double?
        var playedTo: Double?
        var canPlay: String?
        var error: String?
    }

    /// Opens `pageURL` in Chromium and waits (at most 60 s) for the page's report to `app`.
    static func report(openingPage pageURL: String, reportingTo app: TestOrigin, profile: URL) async throws -> Report {
        // The browser itself, not Debian's wrapper script, which would outlive its signal and leave the browser running.
        let installed = URL(fileURLWithPath: "/usr/lib/chromium/chromium-headless-shell")
        let chromium = FileManager.default.isExecutableFile(atPath: installed.path) ? installed : try ExternalTool.require("chromium-headless-shell")
        let before = app.requests.count
        let browser = try ChildProcess.spawn(chromium, ["--no-sandbox", "--disable-gpu", "--no-first-run", "--autoplay-policy=no-user-gesture-required",
                                                        "--user-data-dir=\(profile.path)", pageURL])
        defer {
            browser.terminate()
            browser.waitUntilExit()
        }
        for _ in 0..<600 {
            if let arrived = app.requests.dropFirst(before).first(where: { $0.path.hasPrefix("/report?r=") }) {
                let json = try #require(arrived.path.dropFirst("/report?r=".count).removingPercentEncoding)
                return try JSONDecoder().decode(Report.self, from: Data(json.utf8))
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw PageDidNotReport(url: pageURL)
    }

    /// An origin that demands a token the page never has, serving `files` (path: bytes and
    /// type); the web app's server, serving `page` at `/player.html`; and a proxy in front of the
    /// origin, set up by `configure` (given the app's origin). All stopped after `body`.
    static func withOriginAppAndProxy(files: [String: (data: Data, type: String)], page: String,
                                      configure: (inout ProxyServer.Configuration, _ appOrigin: String) -> Void = { _, _ in },
                                      _ body: (_ server: ProxyServer, _ media: TestOrigin, _ app: TestOrigin) async throws -> Void) async throws {
        let media = try TestOrigin()
        defer { media.stop() }
        media.requiredHeaders = ["Authorization": secret]
        for (path, file) in files { media.setFile(path, data: file.data, contentType: file.type) }
        let app = try TestOrigin()
        defer { app.stop() }
        app.setFile("/player.html", data: Data(page.utf8), contentType: "text/html; charset=utf-8")
        try await withTemporaryCache { cache in
            var configuration = ProxyServer.Configuration()
            configure(&configuration, "http://127.0.0.1:\(app.port)")
            let server = try ProxyServer(cache: cache, configuration: configuration)
            try await server.start()
            do {
                try await body(server, media, app)
            } catch {
                await server.stop()
                throw error
            }
            await server.stop()
        }
    }

    /// The stream URL of `path` of `media` through `server` (with the origin's token), encoded for
    /// the player page's query.
    static func streamQuery(_ path: String, of media: TestOrigin, through server: ProxyServer) throws -> String {
        let stream = server.url(for: server.register(url: media.url(path), headers: ["Authorization": secret])).absoluteString
        return try #require(stream.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
    }

    /// Opens the app's player page on `host` with `query` and waits for its report.
    static func open(_ query: String, app: TestOrigin, host: String = "127.0.0.1", profile: URL) async throws -> Report {
        try await report(openingPage: "http://\(host):\(app.port)/player.html?u=\(query)", reportingTo: app, profile: profile)
    }

    /// The page of an allowed origin gets every byte as the origin has them, reads the range's
    /// `Content-Range`, passes the preflight of a request with a field of its own and plays the
    /// file in a media element that asks for CORS; the origin sends each byte once. The same page
    /// served under another origin (`localhost` instead of `127.0.0.1`) reads nothing.
    @Test func aWebPlayerOfAnAllowedOriginReadsAndPlaysAStream() async throws {
        try await withTemporaryDirectory { work in
            let file = work.appendingPathComponent("tone.mp3")
            let made = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=440:duration=4",
                                                             "-c:a", "libmp3lame", "-b:a", "128k", file.path])
            try #require(made.status == 0, "ffmpeg could not make the MP3: \(made.stderr)")
            let data = try Data(contentsOf: file)
            try await Self.withOriginAppAndProxy(files: ["/tone.mp3": (data, "audio/mpeg")], page: Self.page,
                                                 configure: { $0.allowedWebOrigins = [$1] }) { server, media, app in
                let query = try Self.streamQuery("/tone.mp3", of: media, through: server)
                let allowed = try await Self.open(query, app: app, profile: work.appendingPathComponent("profile-allowed"))
                #expect(allowed.error == nil, "\(allowed)")
                #expect(allowed.rangeStatus == 206 && allowed.contentRange == "bytes 1000-1999/\(data.count)"
                        && allowed.rangeSHA == TestData.sha256(data[1000..<2000]), "\(allowed)")
                #expect(allowed.wholeStatus == 200 && allowed.wholeSHA == TestData.sha256(data), "\(allowed)")
                #expect(abs((allowed.duration ?? 0) - 4) < 0.2, "the media element's duration: \(allowed)")
                try await waitWhile(tries: 50, every: .milliseconds(100)) { media.bodyBytesSent(for: "/tone.mp3") < Int64(data.count) }
                #expect(media.bodyBytesSent(for: "/tone.mp3") == Int64(data.count), "each byte from the origin once")

                let stranger = try await Self.open(query, app: app, host: "localhost", profile: work.appendingPathComponent("profile-other"))
                #expect(stranger.error?.contains("Failed to fetch") == true && stranger.rangeSHA == nil, "\(stranger)")
            }
        }
    }

    /// Chromium plays an HLS stream through the proxy with its own HLS support, as a web page's
    /// `<audio src>` does: the playlist comes rewritten to the proxy's URLs, each segment through
    /// it with the origin's token (which the page never has), each byte from the origin once.
    @Test func chromiumPlaysAnHLSStreamThroughTheProxy() async throws {
        try await withTemporaryDirectory { work in
            let package = work.appendingPathComponent("package")
            try FileManager.default.createDirectory(at: package, withIntermediateDirectories: true)
            let made = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=440:duration=4",
                                                             "-c:a", "aac", "-b:a", "96k", "-f", "hls", "-hls_time", "1", "-hls_playlist_type", "vod",
                                                             "-hls_segment_filename", package.appendingPathComponent("seg%d.ts").path,
                                                             package.appendingPathComponent("index.m3u8").path])
            try #require(made.status == 0, "ffmpeg could not make the package: \(made.stderr)")
            var files: [String: (data: Data, type: String)] = [:]
            let names = try FileManager.default.contentsOfDirectory(atPath: package.path)
            for name in names {
                files["/show/\(name)"] = (try Data(contentsOf: package.appendingPathComponent(name)), name.hasSuffix(".m3u8") ? "application/vnd.apple.mpegurl" : "video/mp2t")
            }
            let total = Int64(files.values.map(\.data.count).reduce(0, +))
            try await Self.withOriginAppAndProxy(files: files, page: Self.hlsPage) { server, media, app in
                let played = try await Self.open(try Self.streamQuery("/show/index.m3u8", of: media, through: server), app: app,
                                                 profile: work.appendingPathComponent("profile"))
                #expect(played.error == nil && played.canPlay?.isEmpty == false, "\(played)")
                #expect(abs((played.duration ?? 0) - 4) < 0.3 && (played.playedTo ?? 0) >= 3.7, "played to the end: \(played)")
                for name in names where name.hasSuffix(".ts") {
                    #expect(!media.dataRequests(for: "/show/\(name)").isEmpty, "\(name) came through the proxy")
                }
                try await waitWhile(tries: 50, every: .milliseconds(100)) { media.bodyBytesSent() < total }
                #expect(media.bodyBytesSent() == total, "each byte from the origin once: \(media.bodyBytesSent()) of \(total)")
            }
        }
    }

    /// Chromium seeks in an M4A whose `moov` box is at its end, through the proxy: it asks for
    /// the tail to find the index, then for the bytes at 150 s, and cuts the requests it no
    /// longer needs, as a browser does. It plays from there, and the origin sends no byte twice.
    @Test func chromiumSeeksInAFileWhoseIndexIsAtItsEnd() async throws {
        try await withTemporaryDirectory { work in
            let file = work.appendingPathComponent("moov-at-end.m4a")
            let made = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=440:duration=180",
                                                             "-c:a", "aac", "-b:a", "128k", file.path])
            try #require(made.status == 0, "ffmpeg could not make the M4A: \(made.stderr)")
            let data = try Data(contentsOf: file)
            let moov = try #require(data.range(of: Data("moov".utf8)))
            try #require(moov.lowerBound > data.count / 2, "the index must be at the end, so that the browser must ask for the tail")
            try await Self.withOriginAppAndProxy(files: ["/song.m4a": (data, "audio/mp4")], page: Self.seekPage) { server, media, app in
                // At a link's speed, as a remote origin sends. Unpaced on loopback, the origin put
                // a request's every byte into the sockets' buffers at once, while the proxy, slowed
                // by the sanitizer and a loaded machine, had taken in few of them; the seek to the
                // tail then cut that request where the tail begins and lost what was buffered past
                // it, by design (`StreamCache.Configuration.maximumJoinWait`): the tail came twice.
                media.bytesPerSecond = TestTiming.rate(8_000_000)
                let played = try await Self.open(try Self.streamQuery("/song.m4a", of: media, through: server), app: app,
                                                 profile: work.appendingPathComponent("profile"))
                #expect(played.error == nil && abs((played.duration ?? 0) - 180) < 1, "\(played)")
                #expect((played.playedTo ?? 0) >= 150 && (played.playedTo ?? 0) < 170, "played from the seek: \(played)")
                // A request is on record once answered; the idle read-ahead's may still run.
                #expect(try await media.waitUntilAnswersEnd(), "the origin's answers ended")
                let requests = media.dataRequests(for: "/song.m4a")
                #expect(requests.flatMap(\.servedRanges).contains { $0.upperBound == Int64(data.count) },
                        "the index at the end came through the proxy: \(requests.map { $0.range ?? "" })")
                #expect(try await ParallelDownloadTests.servedRangesAreDisjoint(media, path: "/song.m4a"), "no byte twice: \(requests.map(\.servedRanges))")
            }
        }
    }
}
