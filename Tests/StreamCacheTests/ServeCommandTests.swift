import Foundation
import GRDB
import StreamCache
import StreamCacheServer
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `streamcache serve` and `streamcache demo`, run as a user runs them: the built binary as a
/// child process, its output read, its stream URLs fetched with curl, SIGTERM to stop it.
@Suite struct ServeCommandTests {
    static let secret = "Bearer serve-cli-secret-55aa"

    /// Waits (bounded) until `file` holds `count` lines, and returns them.
    static func lines(of file: URL, count: Int, process: ChildProcess) async throws -> [String] {
        for _ in 0..<300 {
            let text = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").map(String.init)
            if lines.count >= count { return lines }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StreamCacheError(.originUnavailable, "serve printed no stream URLs: \((try? String(contentsOf: file, encoding: .utf8)) ?? "")")
    }

    /// Starts `streamcache serve` with no URLs on a cache in `work`, and waits (bounded) until its
    /// `server.json` is written, so that commands beside it hand their work over.
    static func serveWithoutURLs(in work: URL) async throws -> (ChildProcess, cacheDirectory: URL) {
        let cacheDir = work.appendingPathComponent("cache")
        let server = try CommandLineTool.start(["serve", "--cache-dir", cacheDir.path, "--control-token-file", work.appendingPathComponent("token").path])
        let record = cacheDir.appendingPathComponent("server.json")
        try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(25)) { !FileManager.default.fileExists(atPath: record.path) }
        return (server, cacheDir)
    }

    static func terminate(_ process: ChildProcess, signal: Int32 = SIGTERM) async throws -> Int32 {
        process.signal(signal)
        try await waitWhile(tries: 200, every: .milliseconds(50)) { process.isRunning }
        process.signal(SIGKILL)
        process.waitUntilExit()
        return process.terminationStatus
    }

    @Test func servePrintsStreamURLsServesThemAndStopsCleanly() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.requiredHeaders = ["Authorization": Self.secret]
        let data = TestData.random(count: 2_500_000, seed: 501)
        origin.setFile("/music/one.mp3", data: data, contentType: "audio/mpeg")
        origin.setFile("/music/sub/two.mp3", data: data.prefix(100_000), contentType: "audio/mpeg")
        try await withTemporaryDirectory { work in
            let out = work.appendingPathComponent("stdout")
            let err = work.appendingPathComponent("stderr")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            _ = FileManager.default.createFile(atPath: err.path, contents: nil)
            let cacheDir = work.appendingPathComponent("cache")
            let tokenFile = work.appendingPathComponent("state/control-token")
            let process = try CommandLineTool.start([
                "serve", origin.url("/music/one.mp3").absoluteString, "-H", "Authorization: \(Self.secret)",
                "--folder", origin.url("/music/").absoluteString, "--url-token", "lib",
                "--cache-dir", cacheDir.path, "--control-token-file", tokenFile.path, "-vv", "--allow-host", "media.lan",
                "--allow-origin", "http://localhost:3000/",
            ], stdout: try FileHandle(forWritingTo: out), stderr: try FileHandle(forWritingTo: err))
            defer { process.signal(SIGKILL) }

            let lines = try await Self.lines(of: out, count: 2, process: process)
            let first = lines[0].split(separator: "\t").map(String.init)
            #expect(first.count == 2 && first[1] == origin.url("/music/one.mp3").absoluteString)
            let streamURL = try #require(URL(string: first[0]))
            #expect(streamURL.host == "127.0.0.1" && streamURL.path.hasPrefix("/s/") && streamURL.lastPathComponent == "one.mp3")
            let folderLine = lines[1].split(separator: "\t").map(String.init)
            #expect(folderLine.first?.hasSuffix("/lib/") == true)

            let whole = try await ExternalTool.run("curl", ["-s", "-f", streamURL.absoluteString])
            #expect(whole.status == 0)
            #expect(TestData.sha256(whole.stdout) == TestData.sha256(data))
            let nested = try await ExternalTool.run("curl", ["-s", "-f", "-r", "0-9", (folderLine.first ?? "") + "sub/two.mp3"])
            #expect(nested.stdout == data.prefix(10))
            // Another host name than loopback's is refused, but the one --allow-host names (a path
            // that names nothing, so no read counts: 404 once the name is accepted).
            let nothing = URL(string: "/nothing", relativeTo: streamURL)!.absoluteString
            for (host, expected) in [("media.lan", "404"), ("attacker.example", "403")] {
                let answer = try await ExternalTool.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: \(host)", nothing])
                #expect(answer.output == expected, "\(host): \(answer.output)")
            }
            // The web origin --allow-origin names may read the answers (CORS); another may not (again
            // a path that names nothing, so that no read counts).
            for (page, expected) in [("http://localhost:3000", "http://localhost:3000"), ("https://attacker.example", "")] {
                let answer = try await ExternalTool.run("curl", ["-s", "-o", "/dev/null", "-H", "Origin: \(page)",
                                                                 "-w", "%{http_code} %header{access-control-allow-origin}", nothing])
                #expect(answer.output == "404 \(expected)", "\(page): \(answer.output)")
            }

            // The control token: in a file only the user can read, and accepted by the API.
            var info = stat()
            #expect(stat(tokenFile.path, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600, "the token file's mode is \(String(info.st_mode & 0o777, radix: 8))")
            let token = try String(contentsOf: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            let api = URL(string: "/api/resources", relativeTo: streamURL)!.absoluteString
            let list = try await ExternalTool.run("curl", ["-s", "-f", "-H", "Authorization: Bearer \(token)", api])
            #expect(list.status == 0 && list.output.contains("\"state\":\"complete\""), "\(list.output)")
            let refused = try await ExternalTool.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", api])
            #expect(refused.output == "401")

            // Metrics for Prometheus, behind the same token.
            let metricsURL = URL(string: "/api/metrics", relativeTo: streamURL)!.absoluteString
            var samples: [String: Double] = [:]
            for _ in 0..<100 {
                let metrics = try await ExternalTool.run("curl", ["-s", "-f", "-H", "Authorization: Bearer \(token)", metricsURL])
                #expect(metrics.status == 0)
                #expect(metrics.output.contains("# TYPE streamcache_served_bytes_total counter"))
                samples = Self.prometheusSamples(metrics.output)
                // The nested file's download may still be finishing.
                if samples["streamcache_downloads_in_flight"] == 0 { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(samples["streamcache_served_bytes_total{source=\"origin\"}"] == 2_500_010)
            #expect(samples["streamcache_served_bytes_total{source=\"cache\"}"] == 0)
            #expect(samples["streamcache_reads_total"] == 2)
            #expect(samples["streamcache_downloaded_bytes_total"] == Double(origin.requests.map(\.bodyBytesSent).reduce(0, +)))
            // The folder's check at start (`GET /music/`) is the server's, not the cache's.
            #expect(samples["streamcache_origin_requests_total"] == Double(origin.requests.filter { $0.path != "/music/" }.count))
            #expect(samples["streamcache_first_byte_seconds_count{source=\"origin\"}"] == 2)
            let refusedMetrics = try await ExternalTool.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", metricsURL])
            #expect(refusedMetrics.output == "401")

            #expect(try await Self.terminate(process) == 0, "SIGTERM is a clean stop")
            let stderr = try String(contentsOf: err, encoding: .utf8)
            #expect(stderr.contains("stopping"))
            #expect(stderr.contains("served 2.5 MB in 2 reads (0.0 % from the cache); fetched 2.6 MB from origins in 3 requests"), "\(stderr)")
            #expect(!stderr.contains("serve-cli-secret"), "the origin's token is never printed, not even with -vv")
            // -vv: each read and each origin request the engine planned for it, with their ranges
            // (the proxy's warm-up request to itself at start has lines of its own).
            let logged = stderr.split(separator: "\n").filter { $0.contains(origin.url("/music/").absoluteString) }
            #expect(logged.filter { $0.contains("origin request") }.count == origin.requests.filter { $0.path != "/music/" }.count, "\(stderr)")
            #expect(logged.contains { $0.contains("read began") && $0.contains("two.mp3") && $0.contains("start=0 ") && $0.contains("end=10 ") }, "\(stderr)")
            // Each download's end, with the bytes it received: together, what the origin sent.
            let ended = logged.filter { $0.contains("download ended") }
            #expect(ended.count == logged.filter { $0.contains("download started") }.count, "\(stderr)")
            let received = ended.compactMap { line in line.split(separator: " ").first { $0.hasPrefix("received=") }.flatMap { Int64($0.dropFirst(9)) } }
            #expect(received.reduce(0, +) == origin.bodyBytesSent(for: "/music/one.mp3") + origin.bodyBytesSent(for: "/music/sub/two.mp3"), "\(stderr)")

            // Everything written before the stop is in the index.
            let store = try CacheStore(directory: cacheDir)
            let entry = try #require(try await store.entry(for: CacheKey(url: origin.url("/music/one.mp3"))))
            #expect(entry.spans.contains(ByteRange(0, Int64(data.count))))
        }
    }

    /// `serve --prefetch --pin --limit-rate`: the served file's prefetch keeps to the rate (at 20 kB/s,
    /// nowhere near the whole 4 MB file a loopback origin gives in milliseconds); a player that
    /// reads its first megabyte gets it at once, the prefetch's download with it, which then
    /// keeps to the rate again; `PUT /api/settings` lifts the rate and the prefetch ends, the
    /// file pinned. Every byte comes from the origin once.
    @Test func aServedPrefetchKeepsToTheRateAndAPlayerDoesNot() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let data = TestData.random(count: 4_000_000, seed: 507)
        origin.setFile("/music/album.flac", data: data, contentType: "audio/flac")
        try await withTemporaryDirectory { work in
            let out = work.appendingPathComponent("stdout")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            let tokenFile = work.appendingPathComponent("token")
            let process = try CommandLineTool.start([
                "serve", origin.url("/music/album.flac").absoluteString, "--prefetch", "--pin", "--limit-rate", "20KB",
                "--cache-dir", work.appendingPathComponent("cache").path, "--control-token-file", tokenFile.path,
            ], stdout: try FileHandle(forWritingTo: out))
            defer { process.signal(SIGKILL) }
            let lines = try await Self.lines(of: out, count: 1, process: process)
            let streamURL = try #require(lines.first?.split(separator: "\t").first.map(String.init))
            let token = try String(contentsOf: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            func api(_ path: String, _ extra: [String] = []) async throws -> ExternalTool.Result {
                let url = URL(string: path, relativeTo: URL(string: streamURL))!.absoluteString
                return try await ExternalTool.run("curl", ["-s", "-H", "Authorization: Bearer \(token)", url] + extra)
            }
            struct List: Decodable { var resources: [ControlAPI.ResourceStatus] }
            func cachedBytes() async throws -> Int64 {
                try JSONDecoder().decode(List.self, from: try await api("/api/resources").stdout).resources.first?.cachedBytes ?? 0
            }
            var cached: Int64 = 0
            for _ in 0..<(200 * TestTiming.slowdown) {
                cached = try await cachedBytes()
                if cached > 0 { break }
                try await Task.sleep(for: .milliseconds(25))
            }
            try await Task.sleep(for: .milliseconds(500))
            cached = try await cachedBytes()
            #expect(cached > 0 && cached < 2_000_000, "the prefetch had \(cached) bytes")

            let played = try await ExternalTool.run("curl", ["-s", "-f", "--max-time", "60", "-r", "0-999999", streamURL])
            #expect(played.status == 0, "the player's read was held back")
            #expect(played.stdout == data.prefix(1_000_000))
            cached = try await cachedBytes()
            #expect(cached < Int64(data.count), "the prefetch went on at the link's speed after the player's read")

            #expect(try await api("/api/settings").output.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"backgroundDownloadRate":20000}"#)
            let refused = try await api("/api/settings", ["-X", "PUT", "-d", #"{"backgroundDownloadRate":-5}"#, "-o", "/dev/null", "-w", "%{http_code}"])
            #expect(refused.output == "400")
            let lifted = try await api("/api/settings", ["-X", "PUT", "-d", #"{"backgroundDownloadRate":null}"#])
            #expect(lifted.output.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"backgroundDownloadRate":null}"#)
            for _ in 0..<(400 * TestTiming.slowdown) {
                guard cached < Int64(data.count) else { break }
                try await Task.sleep(for: .milliseconds(25))
                cached = try await cachedBytes()
            }
            #expect(cached == Int64(data.count), "the prefetch kept to the rate that was lifted")
            let whole = try await ExternalTool.run("curl", ["-s", "-f", streamURL])
            #expect(TestData.sha256(whole.stdout) == TestData.sha256(data))
            #expect(try await Self.terminate(process) == 0)
            // `--pin`: the file the server prefetched is pinned.
            let info = try await CommandLineTool.run(["cache", "info", CacheKey(url: origin.url("/music/album.flac")).rawValue,
                                                      "--cache-dir", work.appendingPathComponent("cache").path])
            #expect(info.output.contains("pinned:        true"), "\(info.output)")
            #expect(try await ParallelDownloadTests.servedRangesAreDisjoint(origin, path: "/music/album.flac")
                    && origin.bodyBytesSent(for: "/music/album.flac") == Int64(data.count), "\(origin.timeline(for: "/music/album.flac"))")
        }
    }

    /// A server has its cache directory to itself: a second server waits for it, and when its wait
    /// runs out it is refused (exit 7, naming the server's process) and changes nothing, while
    /// `cache list` shows what the server committed. A killed server leaves no claim behind, and
    /// its `server.json` misleads no one. Beside a process that is no server (a `get`), `cache
    /// clear` and `cache pin` wait their turn. (`get`, `prefetch` and the `cache` commands beside a
    /// server hand their work to it: ``aGetAndAPrefetchBesideAServerHandTheirWorkToIt()``.)
    @Test func aCacheDirectoryAServerUsesIsRefusedToOtherProcessesUntilItEnds() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let data = TestData.random(count: 1_500_000, seed: 511)
        origin.setFile("/song.mp3", data: data, contentType: "audio/mpeg")
        try await withTemporaryDirectory { work in
            let out = work.appendingPathComponent("stdout")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            let cacheDir = work.appendingPathComponent("cache")
            let url = origin.url("/song.mp3").absoluteString
            let server = try CommandLineTool.start(["serve", url, "--cache-dir", cacheDir.path], stdout: try FileHandle(forWritingTo: out))
            defer { server.signal(SIGKILL) }
            let streamURL = try #require(try await Self.lines(of: out, count: 1, process: server).first?.split(separator: "\t").first.map(String.init))
            let played = try await ExternalTool.run("curl", ["-s", "-f", streamURL])
            #expect(TestData.sha256(played.stdout) == TestData.sha256(data))

            // What the server committed, as another process sees it (bounded wait for its commit).
            struct Row: Decodable { var key: String; var cachedBytes: Int64 }
            var rows: [Row] = []
            for _ in 0..<100 {
                let list = try await CommandLineTool.run(["cache", "list", "--json", "--cache-dir", cacheDir.path])
                #expect(list.status == 0, "\(list.stderr)")
                rows = (try? JSONDecoder().decode([Row].self, from: list.stdout)) ?? []
                if rows.first?.cachedBytes == Int64(data.count) { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(rows.map(\.cachedBytes) == [Int64(data.count)])
            let dataFiles = { (try? FileManager.default.contentsOfDirectory(atPath: cacheDir.appendingPathComponent("data").path)) ?? [] }
            #expect(dataFiles().count == 1)

            let songRequests = origin.dataRequests(for: "/song.mp3").count
            let copy = work.appendingPathComponent("copy.mp3")
            let key = rows.first?.key ?? ""
            // A second server waits for the first; when its wait runs out it is refused, naming
            // the server's process, and changes nothing.
            let second = try await CommandLineTool.run(["serve", url, "--cache-dir", cacheDir.path, "--wait-for-cache", "0.5s",
                                                        "--control-token-file", work.appendingPathComponent("token-2").path])
            #expect(second.status == 7, "\(second.stderr)")
            #expect(second.stderr.contains("is in use by process \(server.processIdentifier) (streamcache)"), "\(second.stderr)")
            #expect(second.stderr.contains("Gave up after waiting 0.5 s (--wait-for-cache)."), "\(second.stderr)")
            #expect(dataFiles().count == 1 && origin.dataRequests(for: "/song.mp3").count == songRequests)

            // The killed server's record is left behind, and misleads no one: its process is gone.
            server.signal(SIGKILL)
            server.waitUntilExit()
            #expect(FileManager.default.fileExists(atPath: cacheDir.appendingPathComponent("server.json").path))

            // A download is no server: beside it, `cache clear` with no wait is refused, and a pin
            // with the default wait says whom it waits for, and runs once the download ended.
            let long = TestData.random(count: 4_000_000, seed: 512)
            origin.setFile("/long.flac", data: long, contentType: "audio/flac")
            origin.bytesPerSecond = TestTiming.rate(1_000_000)
            let holder = try CommandLineTool.start(["get", origin.url("/long.flac").absoluteString, "-o", work.appendingPathComponent("long.flac").path,
                                                    "--cache-dir", cacheDir.path])
            defer { holder.signal(SIGKILL) }
            try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(25)) { origin.requestsBeingAnswered == 0 }
            let refused = try await CommandLineTool.run(["cache", "clear", "--wait-for-cache", "0", "--cache-dir", cacheDir.path])
            #expect(refused.status == 7, "\(refused.stderr)")
            #expect(refused.stderr.contains("is in use by process \(holder.processIdentifier) (streamcache)"), "\(refused.stderr)")
            let pinErrors = work.appendingPathComponent("pin-stderr")
            _ = FileManager.default.createFile(atPath: pinErrors.path, contents: nil)
            let waiting = try CommandLineTool.start(["cache", "pin", key, "--cache-dir", cacheDir.path], stderr: try FileHandle(forWritingTo: pinErrors))
            defer { waiting.signal(SIGKILL) }
            let told = { String(decoding: (try? Data(contentsOf: pinErrors)) ?? Data(), as: UTF8.self) }
            try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(25)) { !told().contains("Waiting for it") }
            #expect(told().contains("is in use by process \(holder.processIdentifier) (streamcache)") && told().contains("Waiting for it"), "\(told())")
            let holderRuns = holder.isRunning
            #expect(waiting.isRunning || !holderRuns, "the pin waits while the download runs: \(told())")
            try await holder.exit(within: 60)
            #expect(holder.terminationStatus == 0)
            #expect(TestData.sha256(try Data(contentsOf: work.appendingPathComponent("long.flac"))) == TestData.sha256(long))
            try await waiting.exit(within: 30)
            #expect(waiting.terminationStatus == 0, "\(told())")
            let pinned = try await CommandLineTool.run(["cache", "info", key, "--json", "--cache-dir", cacheDir.path])
            #expect(pinned.output.contains("\"pinned\" : true"), "\(pinned.output)")
            origin.bytesPerSecond = nil

            let got = try await CommandLineTool.run(["get", url, "-o", copy.path, "--cache-dir", cacheDir.path], timeout: 60)
            #expect(got.status == 0 && !got.stderr.contains("server"), "\(got.stderr)")
            #expect(TestData.sha256(try Data(contentsOf: copy)) == TestData.sha256(data))
            #expect(origin.dataRequests(for: "/song.mp3").count == songRequests, "every byte came from the killed server's cache")
        }
    }

    /// A server may run for days, so `get` and `prefetch` beside it do not wait for it: they find
    /// it through `server.json` in the cache directory (mode 0600, since it holds the control
    /// token) and have it fetch into its cache, with the headers given to them. The origin sees
    /// each byte once; errors keep their exit codes (4 for rejected credentials, 5 for a missing
    /// file); the bytes are in the cache for a `get` with the origin gone once the server stopped,
    /// and a record of a server that is not there (its port closed) is ignored.
    @Test func aGetAndAPrefetchBesideAServerHandTheirWorkToIt() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.requiredHeaders = ["Authorization": Self.secret]
        let album = TestData.random(count: 3_000_000, seed: 521)
        let single = TestData.random(count: 1_200_000, seed: 522)
        let albumDigest = ContentHasher.digest(.sha256, of: album)
        origin.setFile("/album.flac", data: album, contentType: "audio/flac",
                       extraHeaders: ["Repr-Digest": "sha-256=:\(Data(albumDigest.bytes).base64EncodedString()):"])
        origin.setFile("/single.mp3", data: single, contentType: "audio/mpeg")
        origin.setFile("/other.mp3", data: single, contentType: "audio/mpeg")
        origin.setFile("/locked.mp3", data: single, contentType: "audio/mpeg")
        try await withTemporaryDirectory { work in
            let out = work.appendingPathComponent("stdout")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            let cacheDir = work.appendingPathComponent("cache")
            let server = try CommandLineTool.start(["serve", origin.url("/single.mp3").absoluteString, "-H", "Authorization: \(Self.secret)",
                                                    "--cache-dir", cacheDir.path, "--control-token-file", work.appendingPathComponent("token").path],
                                                   stdout: try FileHandle(forWritingTo: out))
            defer { server.signal(SIGKILL) }
            let singleStream = try #require(try await Self.lines(of: out, count: 1, process: server).first?.split(separator: "\t").first.map(String.init))
            let record = cacheDir.appendingPathComponent("server.json")
            try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(25)) { !FileManager.default.fileExists(atPath: record.path) }
            var info = stat()
            #expect(stat(record.path, &info) == 0 && info.st_mode & 0o777 == 0o600, "server.json holds the control token")
            #expect(try String(contentsOf: record, encoding: .utf8).contains("\"pid\":\(server.processIdentifier)"))
            let auth = ["-H", "Authorization: \(Self.secret)", "--cache-dir", cacheDir.path]

            let prefetched = try await CommandLineTool.run(["prefetch", origin.url("/album.flac").absoluteString] + auth, timeout: 60)
            #expect(prefetched.status == 0, "\(prefetched.stderr)")
            #expect(prefetched.stderr.contains("is in use by the server at http://127.0.0.1:"), "\(prefetched.stderr)")
            #expect(prefetched.stderr.contains("(process \(server.processIdentifier)); it does this prefetch."), "\(prefetched.stderr)")
            #expect(prefetched.output.contains("2.9 MiB cached for \(origin.url("/album.flac").absoluteString)"), "\(prefetched.output)")
            #expect(origin.bodyBytesSent(for: "/album.flac") == Int64(album.count), "the server fetched each byte once")

            // A get without headers of a file the server was given with its token uses that
            // registration as it is, and the player's stream keeps its token.
            let copy = work.appendingPathComponent("single.mp3")
            let got = try await CommandLineTool.run(["get", origin.url("/single.mp3").absoluteString, "-o", copy.path, "--cache-dir", cacheDir.path], timeout: 60)
            #expect(got.status == 0, "\(got.stderr)")
            #expect(got.stderr.contains("the file comes through it."), "\(got.stderr)")
            #expect(!got.stderr.contains("settings apply"), "no option was given: \(got.stderr)")
            #expect(TestData.sha256(try Data(contentsOf: copy)) == TestData.sha256(single))
            let played = try await ExternalTool.run("curl", ["-s", "-f", "-r", "5000-5999", singleStream])
            #expect(played.status == 0 && played.stdout == single[5000..<6000])
            let part = try await CommandLineTool.run(["get", origin.url("/album.flac").absoluteString, "--range", "1000-1999", "--revalidate-after", "90s"] + auth)
            #expect(part.status == 0 && part.stdout == album[1000..<2000], "\(part.stderr)")
            #expect(part.stderr.contains("the server's settings apply, not this command's --revalidate-after."), "\(part.stderr)")
            #expect(origin.bodyBytesSent(for: "/album.flac") == Int64(album.count), "the range came from the server's cache")

            // Errors keep their exit codes, and their reasons.
            let rejected = try await CommandLineTool.run(["get", origin.url("/other.mp3").absoluteString,
                                                          "-H", "Authorization: Bearer wrong", "--cache-dir", cacheDir.path])
            #expect(rejected.status == 4, "\(rejected.stderr)")
            let missing = try await CommandLineTool.run(["get", origin.url("/missing.mp3").absoluteString, "-o", work.appendingPathComponent("missing").path] + auth)
            #expect(missing.status == 5, "\(missing.stderr)")
            #expect(!FileManager.default.fileExists(atPath: work.appendingPathComponent("missing").path), "a failed get leaves no file")
            let refusedPrefetch = try await CommandLineTool.run(["prefetch", origin.url("/locked.mp3").absoluteString,
                                                                 "-H", "Authorization: Bearer wrong", "--cache-dir", cacheDir.path])
            #expect(refusedPrefetch.status == 4 && refusedPrefetch.stderr.contains("The server's prefetch failed"), "\(refusedPrefetch.stderr)")

            // The cache commands that write go through the server too: a pin, a key the cache
            // does not know (exit 2, as without a server), a clear of one key.
            let albumKey = CacheKey(url: origin.url("/album.flac")).rawValue
            let singleKey = CacheKey(url: origin.url("/single.mp3")).rawValue
            let directory = ["--cache-dir", cacheDir.path]
            let pinned = try await CommandLineTool.run(["cache", "pin", albumKey] + directory)
            #expect(pinned.status == 0 && pinned.output.contains("pinned \(albumKey)") && pinned.stderr.contains("; it does this."), "\(pinned.stderr)")
            let shown = try await CommandLineTool.run(["cache", "info", albumKey, "--json"] + directory)
            #expect(shown.output.contains("\"pinned\" : true"), "\(shown.output)")
            let verified = try await CommandLineTool.run(["cache", "verify", albumKey, "--json"] + directory)
            #expect(verified.status == 0 && verified.stderr.contains("; it does this."), "\(verified.stderr)")
            #expect(verified.output.contains("\"expected\" : \"\(albumDigest)\"") && verified.output.contains("\"result\" : \"matched\""),
                    "\(verified.output)")
            let unknownVerified = try await CommandLineTool.run(["cache", "verify", "http://127.0.0.1/none.mp3"] + directory)
            #expect(unknownVerified.status == 2, "\(unknownVerified.stderr)")
            let unknown = try await CommandLineTool.run(["cache", "unpin", "http://127.0.0.1/none.mp3"] + directory)
            #expect(unknown.status == 2 && unknown.stderr.contains("The cache has no resource named http://127.0.0.1/none.mp3"), "\(unknown.stderr)")
            let cleared = try await CommandLineTool.run(["cache", "clear", singleKey, "--json"] + directory)
            #expect(cleared.status == 0 && cleared.output.contains("\"removed\" : 1"), "\(cleared.output) \(cleared.stderr)")
            struct Row: Decodable { var key: String }
            let listed = try JSONDecoder().decode([Row].self, from: try await CommandLineTool.run(["cache", "list", "--json"] + directory).stdout)
            #expect(listed.map(\.key) == [albumKey], "the files whose fetch failed left no entry: \(listed)")
            // A prune too; a dry run, which leaves the album for the offline play below.
            let unpinned = try await CommandLineTool.run(["cache", "unpin", albumKey] + directory)
            #expect(unpinned.status == 0, "\(unpinned.stderr)")
            let pruned = try await CommandLineTool.run(["cache", "prune", "--max-cache-size", "1MB", "--dry-run", "--json"] + directory)
            #expect(pruned.status == 0 && pruned.stderr.contains("; it does this."), "\(pruned.stderr)")
            let pruning = try JSONDecoder().decode(ControlAPI.Pruning.self, from: pruned.stdout)
            #expect(pruning == ControlAPI.Pruning([EvictedResource(key: CacheKey(albumKey), bytes: Int64(album.count), reason: .size)], dryRun: true),
                    "\(pruned.output)")
            #expect(try await CacheStore(inspecting: cacheDir).entries().map(\.key.rawValue) == [albumKey], "a dry run evicts nothing")

            #expect(try await Self.terminate(server) == 0)
            #expect(!FileManager.default.fileExists(atPath: record.path), "a server that stops removes its record")
            origin.stop()
            let offline = work.appendingPathComponent("album.flac")
            let replayed = try await CommandLineTool.run(["get", origin.url("/album.flac").absoluteString, "-o", offline.path] + auth, timeout: 60)
            #expect(replayed.status == 0, "\(replayed.stderr)")
            #expect(TestData.sha256(try Data(contentsOf: offline)) == TestData.sha256(album))

            // A record whose server is gone (nothing listens at its port) is not believed: the
            // command waits for the directory as for any other process.
            let holder = try CacheStore(directory: cacheDir)
            let closedPort = try FreePort.find()
            try Data("{\"pid\":\(getpid()),\"token\":\"stale\",\"url\":\"http://127.0.0.1:\(closedPort)\"}\n".utf8).write(to: record)
            let waited = try await CommandLineTool.run(["get", origin.url("/single.mp3").absoluteString, "--wait-for-cache", "0.5s"] + auth)
            #expect(waited.status == 7 && waited.stderr.contains("Gave up after waiting 0.5 s"), "\(waited.stderr)")
            withExtendedLifetime(holder) {}
        }
    }

    /// A `get` beside a server whose stream ends before its `Content-Length` (the origin cut the
    /// body after the first bytes went out, then refused every retry) fails with exit 3 and says
    /// how far it got; the output file is not created from the part.
    @Test func aGetWhoseStreamFromTheServerEndsShortFails() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let size = 2_000_000
        origin.setFile("/broken.flac", data: TestData.random(count: size, seed: 524), contentType: "audio/flac")
        origin.faults = { _, _, _, index in index == 0 ? .dropAfter(bytes: 300_000) : .status(404) }
        try await withTemporaryDirectory { work in
            let (server, cacheDir) = try await Self.serveWithoutURLs(in: work)
            defer { server.signal(SIGKILL) }
            let output = work.appendingPathComponent("broken.flac")
            let got = try await CommandLineTool.run(["get", origin.url("/broken.flac").absoluteString, "-o", output.path, "--cache-dir", cacheDir.path], timeout: 60)
            #expect(got.stderr.contains("the file comes through it."), "\(got.stderr)")
            #expect(got.status == 3 && got.stderr.contains("The server ended the stream after") && got.stderr.contains("of \(size) bytes"),
                    "\(got.status): \(got.stderr)")
            #expect(!FileManager.default.fileExists(atPath: output.path), "a failed get leaves no file")
            #expect(try await Self.terminate(server) == 0)
        }
    }

    /// Ctrl-C on a `prefetch` that a running server does for it stops the server's prefetch too,
    /// as it stops one the command runs itself: exit 130, a line that says so, no request to the
    /// origin after it, and what came is in the server's cache.
    @Test func anInterruptedPrefetchBesideAServerStopsTheServersPrefetch() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let size = 6_000_000
        origin.setFile("/long.flac", data: TestData.random(count: size, seed: 523), contentType: "audio/flac")
        // Every answer stops after 700 kB until the end, so the prefetch cannot finish first.
        let released = Locked(false)
        defer { released.withLock { $0 = true } }
        origin.faults = { _, _, _, _ in .pause(afterBytes: 700_000, until: { released.withLock { $0 } }) }
        try await withTemporaryDirectory { work in
            let (server, cacheDir) = try await Self.serveWithoutURLs(in: work)
            defer { server.signal(SIGKILL) }
            let errors = work.appendingPathComponent("stderr")
            _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
            let prefetch = try CommandLineTool.start(["prefetch", origin.url("/long.flac").absoluteString, "--cache-dir", cacheDir.path],
                                                     stderr: try FileHandle(forWritingTo: errors))
            defer { prefetch.signal(SIGKILL) }
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { origin.bodyBytesSent(for: "/long.flac") + Int64(origin.requestsBeingAnswered) * 700_000 < 700_000 }
            #expect(origin.requestsBeingAnswered > 0, "the server's prefetch is under way")
            #expect(prefetch.isRunning)
            let interrupted = ContinuousClock.now
            prefetch.signal(SIGINT)
            try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(20)) { prefetch.isRunning }
            #expect(prefetch.terminationReason == .exit && prefetch.terminationStatus == 130)
            let said = try String(contentsOf: errors, encoding: .utf8)
            #expect(said.contains("the server stopped the prefetch; what came is in the cache."), "\(said)")
            // The command ended after the server's prefetch had: the origin's answers may go on
            // now, and no request comes after them.
            let stopped = ContinuousClock.now
            released.withLock { $0 = true }
            let late = try await origin.requests(arrivedSince: stopped).filter { $0.path == "/long.flac" }
            #expect(late.isEmpty, "\(late.map { $0.range ?? "-" }) came after the command ended: \(origin.timeline(for: "/long.flac")); interrupted at \(origin.secondsSinceFirstRequest(interrupted)) s, ended by \(origin.secondsSinceFirstRequest(stopped)) s")
            #expect(origin.bodyBytesSent(for: "/long.flac") < Int64(size))
            #expect(try await Self.terminate(server) == 0)
            let listed = try await CommandLineTool.run(["cache", "info", CacheKey(url: origin.url("/long.flac")).rawValue, "--json", "--cache-dir", cacheDir.path])
            #expect(listed.status == 0 && !listed.output.contains("\"complete\" : true"), "\(listed.output)")
        }
    }

    /// `prefetch --limit-rate` beside a server: the server's prefetch keeps to the command's rate
    /// (at 20 kB/s, nowhere near the 4 MB a loopback origin gives in milliseconds) though the
    /// server has none, and another prefetch beside it goes at the link's speed. The control
    /// API's prefetch takes a `rate`, refuses one of 0, and asked again for the running prefetch
    /// without one lets it go at full speed: the command then ends, every byte sent once.
    @Test func aPrefetchHandedToAServerKeepsToItsOwnRate() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let album = TestData.random(count: 4_000_000, seed: 525)
        let single = TestData.random(count: 2_000_000, seed: 526)
        origin.setFile("/album.flac", data: album, contentType: "audio/flac")
        origin.setFile("/single.flac", data: single, contentType: "audio/flac")
        try await withTemporaryDirectory { work in
            let (server, cacheDir) = try await Self.serveWithoutURLs(in: work)
            defer { server.signal(SIGKILL) }
            struct Record: Decodable { var url: String; var token: String }
            let record = try JSONDecoder().decode(Record.self, from: Data(contentsOf: cacheDir.appendingPathComponent("server.json")))
            func api(_ path: String, _ extra: [String] = []) async throws -> ExternalTool.Result {
                try await ExternalTool.run("curl", ["-s", "-H", "Authorization: Bearer \(record.token)", record.url + path] + extra)
            }
            struct List: Decodable { var resources: [ControlAPI.ResourceStatus] }
            let albumKey = CacheKey(url: origin.url("/album.flac")).rawValue
            func albumStatus() async throws -> ControlAPI.ResourceStatus? {
                try JSONDecoder().decode(List.self, from: try await api("/api/resources").stdout).resources.first { $0.key == albumKey }
            }
            let out = work.appendingPathComponent("stdout")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            let prefetch = try CommandLineTool.start(["prefetch", origin.url("/album.flac").absoluteString, "--limit-rate", "20KB",
                                                      "--cache-dir", cacheDir.path], stdout: try FileHandle(forWritingTo: out))
            defer { prefetch.signal(SIGKILL) }
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { origin.bodyBytesSent(for: "/album.flac") == 0 }
            // Its download, eviction and proxy options are the server's to set: it says so.
            let other = try await CommandLineTool.run(["prefetch", origin.url("/single.flac").absoluteString, "--connections", "2", "--max-cache-size", "1GB",
                                                       "--proxy", "none", "--cache-dir", cacheDir.path], timeout: 60)
            #expect(other.status == 0 && other.stderr.contains("it does this prefetch"), "\(other.stderr)")
            #expect(other.stderr.contains("the server's settings apply, not this command's --connections, --max-cache-size, --proxy."), "\(other.stderr)")
            #expect(origin.bodyBytesSent(for: "/single.flac") == Int64(single.count), "a prefetch without a rate was held back")
            try await Task.sleep(for: .milliseconds(300))
            let status = try #require(try await albumStatus())
            #expect(status.prefetching && status.cachedBytes < 2_000_000, "the server's prefetch kept to no rate: \(status.cachedBytes) bytes")
            #expect(status.prefetchRate == 20_000)
            #expect(prefetch.isRunning)

            let refused = try await api("/api/resources/\(status.id)/prefetch", ["-X", "POST", "-d", #"{"rate":0}"#, "-o", "/dev/null", "-w", "%{http_code}"])
            #expect(refused.output == "400")
            let lifted = try await api("/api/resources/\(status.id)/prefetch", ["-X", "POST", "-d", "{}", "-o", "/dev/null", "-w", "%{http_code}"])
            #expect(lifted.output == "202")
            try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(20)) { prefetch.isRunning }
            #expect(!prefetch.isRunning && prefetch.terminationReason == .exit && prefetch.terminationStatus == 0, "the prefetch kept to the rate that was lifted")
            let said = try String(contentsOf: out, encoding: .utf8)
            #expect(said.contains("3.8 MiB cached for \(origin.url("/album.flac").absoluteString)"), "\(said)")
            #expect(try await ParallelDownloadTests.servedRangesAreDisjoint(origin, path: "/album.flac")
                    && origin.bodyBytesSent(for: "/album.flac") == Int64(album.count), "\(origin.timeline(for: "/album.flac"))")
            #expect(try await Self.terminate(server) == 0)
        }
    }

    /// The samples of a Prometheus text exposition, by name with labels as printed.
    static func prometheusSamples(_ text: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    /// `serve --max-age` evicts, as it starts, what was not read for that long: a file two days
    /// old by the index goes under `--max-age 1d`, a pinned one of the same age and a file read
    /// today stay.
    @Test func serveEvictsWhatWasNotReadWithinTheMaximumAge() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let paths = ["/old.mp3", "/pinned.mp3", "/today.mp3"]
        for (index, path) in paths.enumerated() { origin.setFile(path, data: TestData.random(count: 50_000, seed: 510 + UInt64(index))) }
        try await withTemporaryDirectory { work in
            let cacheDir = work.appendingPathComponent("cache")
            do {
                let cache = try StreamCache(configuration: StreamCache.Configuration(directory: cacheDir))
                try await withAsyncCleanup {
                    for path in paths {
                        let url = origin.url(path)
                        try await cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url)).prefetch()
                    }
                    try await cache.setPinned(true, for: CacheKey(url: origin.url("/pinned.mp3")))
                    await cache.flush()
                } cleanup: { await cache.shutdown() }
            }
            try await DatabaseQueue(path: cacheDir.appendingPathComponent("index.sqlite").path).write { db in
                try db.execute(sql: #"UPDATE "resource" SET "lastAccessedAt" = ? WHERE "key" != ?"#,
                               arguments: [Date().timeIntervalSince1970 - 2 * 86_400, origin.url("/today.mp3").absoluteString])
            }
            let server = try CommandLineTool.start(["serve", "--max-age", "1d", "--cache-dir", cacheDir.path,
                                                    "--control-token-file", work.appendingPathComponent("token").path])
            defer { server.signal(SIGKILL) }
            // Up, so that SIGTERM stops it cleanly (its record is written once it serves).
            let record = cacheDir.appendingPathComponent("server.json")
            try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(25)) { !FileManager.default.fileExists(atPath: record.path) }
            let index = try CacheStore(inspecting: cacheDir)
            var keys = Set(try await index.entries().map(\.key))
            for _ in 0..<(200 * TestTiming.slowdown) {
                guard keys.count == 3 else { break }
                try await Task.sleep(for: .milliseconds(50))
                keys = Set(try await index.entries().map(\.key))
            }
            #expect(keys == Set(["/pinned.mp3", "/today.mp3"].map { CacheKey(url: origin.url($0)) }), "\(keys)")
            #expect(try await Self.terminate(server) == 0)
        }
    }

    @Test func serveJSONLines() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/a.mp3", data: TestData.random(count: 1000, seed: 502))
        try await withTemporaryDirectory { work in
            let out = work.appendingPathComponent("stdout")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            let process = try CommandLineTool.start(["serve", origin.url("/a.mp3").absoluteString, "--json", "--cache-dir", work.path,
                                                     "--control-token-file", work.appendingPathComponent("token").path],
                                                    stdout: try FileHandle(forWritingTo: out))
            defer { process.signal(SIGKILL) }
            let line = try await Self.lines(of: out, count: 1, process: process)[0]
            let object = try JSONDecoder().decode([String: String].self, from: Data(line.utf8))
            #expect(object["source"] == origin.url("/a.mp3").absoluteString)
            #expect(object["streamURL"]?.hasSuffix("/a.mp3") == true)
            #expect(try await Self.terminate(process, signal: SIGINT) == 0, "Ctrl-C is a clean stop")
        }
    }

    @Test(arguments: [
        ["serve", "--host", "0.0.0.0"],
        ["serve", "--url-token", "x"],
        ["serve", "--folder", "ftp://x/"],
        ["serve", "--max-cache-size", "lots"],
        ["serve", "--max-age", "forever"],
        ["serve", "--min-free-space", "some"],
        ["serve", "--port", "70000"],
        ["serve", "--allow-origin", "https://player.example/app"],
        ["serve", "--allow-origin", "player.example"],
    ])
    func serveRefusesBadArguments(arguments: [String]) async throws {
        try await withTemporaryDirectory { work in
            let result = try await CommandLineTool.run(arguments + ["--cache-dir", work.path])
            #expect(result.status == 64)
            #expect(result.stderr.hasPrefix("Error: "))
        }
    }

    @Test func demoPlaysItsScriptedSession() async throws {
        let result = try await CommandLineTool.run(["demo", "--seconds", "30"], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        let output = result.output
        for expected in ["Stream URLs", "a440.wav", "ffplay", "Scripted session", "seek to the middle", "replay", "Cached: ["] {
            #expect(output.contains(expected), "the demo's output lacks '\(expected)':\n\(output)")
        }
        #expect(output.contains("rejected 0 without the token"), "the proxy must always send the origin's token")
        #expect(!output.contains("failed"), "\(output)")
    }
}
