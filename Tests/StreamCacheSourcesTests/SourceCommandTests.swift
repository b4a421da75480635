import Foundation
import StreamCache
import StreamCacheTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The sources through the `streamcache` binary, as a user runs it: `serve` and `get` with
/// source references, `ls`, credentials from the environment or a 0600 file.
@Suite(.serialized) struct SourceCommandTests {
    /// Starts `streamcache serve` with `arguments`, returns the first stream URL and the process.
    static func serve(_ arguments: [String], environment: [String: String], in work: URL) async throws -> (URL, ChildProcess) {
        let out = work.appendingPathComponent("stdout-\(UUID().uuidString)")
        let err = work.appendingPathComponent("stderr-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        let process = try CommandLineTool.start(["serve", "--verbose"] + arguments, stdout: try FileHandle(forWritingTo: out),
                                                stderr: try FileHandle(forWritingTo: err), environment: environment)
        for _ in 0..<300 {
            let text = (try? String(contentsOf: out, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first, let url = URL(string: String(line.split(separator: "\t")[0])) { return (url, process) }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.signal(SIGKILL)
        throw StreamCacheError(.originUnavailable, "serve printed no stream URL (exit \(process.isRunning ? -1 : process.terminationStatus))")
    }

    /// Writes each file at its path below `root`, making its folders.
    static func write(_ files: [String: Data], below root: URL) throws {
        for (path, data) in files {
            let file = root.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: file)
        }
    }

    static func stop(_ process: ChildProcess) async throws {
        process.signal(SIGTERM)
        try await waitWhile(tries: 200, every: .milliseconds(50)) { process.isRunning }
        process.signal(SIGKILL)
        process.waitUntilExit()
    }

    /// Acceptance 1: ffmpeg decodes a WebDAV-hosted MP3 through `streamcache serve` with a seek;
    /// a second run is served from the cache with zero origin requests.
    @Test func ffmpegPlaysAWebDAVFileThroughServeAndASecondRunNeedsNoOrigin() async throws {
        try await withTemporaryDirectory { root in
            let music = root.appendingPathComponent("music")
            try FileManager.default.createDirectory(at: music, withIntermediateDirectories: true)
            let made = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=330:duration=120",
                                                             "-c:a", "libmp3lame", "-b:a", "160k", music.appendingPathComponent("track.mp3").path])
            try #require(made.status == 0, "ffmpeg could not make the MP3: \(made.stderr)")
            let account = Nginx.WebDAVAccount(user: "listener", password: "webdav-cli-secret-27b9")
            try await Nginx.serving(root: root, webDAV: account) { nginx in
                let work = root.appendingPathComponent("work")
                try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
                let arguments = ["webdav://listener@127.0.0.1:\(nginx.port)/music/track.mp3", "--password-env", "WEBDAV_PASSWORD",
                                 "--cache-dir", work.appendingPathComponent("cache").path, "--control-token-file", work.appendingPathComponent("token").path]
                let environment = ["WEBDAV_PASSWORD": account.password]
                func play() async throws {
                    let (url, process) = try await Self.serve(arguments, environment: environment, in: work)
                    let decoded = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-ss", "60", "-i", url.absoluteString, "-t", "5",
                                                                        "-f", "null", "-"])
                    #expect(decoded.status == 0, "ffmpeg -ss 60: \(decoded.stderr)")
                    let probe = try await ExternalTool.run("ffprobe", ["-v", "error", "-show_streams", url.absoluteString], package: "ffmpeg")
                    #expect(probe.output.contains("codec_name=mp3"), "\(probe.stderr)")
                    try await Self.stop(process)
                }
                try await play()
                let firstRun = nginx.accessLog().filter { $0.path == "/music/track.mp3" }
                #expect(!firstRun.isEmpty)
                #expect(firstRun.allSatisfy { $0.status == 206 || $0.status == 200 }, "\(firstRun.map(\.status))")
                try await play()
                let secondRun = nginx.accessLog().filter { $0.path == "/music/track.mp3" }
                #expect(secondRun.count == firstRun.count, "the second run asked the WebDAV server \(secondRun.count - firstRun.count) times")

                // Acceptance 4 for WebDAV: neither the password nor the Basic credentials are in the
                // cache directory, the index or serve's verbose logs.
                let basic = Data("listener:\(account.password)".utf8).base64EncodedString()
                let files = FileManager.default.enumerator(at: work, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
                #expect(files.contains { $0.lastPathComponent.hasPrefix("stderr-") })
                for file in files {
                    guard let content = try? Data(contentsOf: file) else { continue }
                    for secret in [account.password, basic] where content.range(of: Data(secret.utf8)) != nil {
                        Issue.record("\(file.lastPathComponent) holds the WebDAV credentials")
                    }
                }
            }
        }
    }

    /// A cloud source behind `serve` downloads through the proxy's own transport: once its first
    /// read has been answered, a spare connection to the content host is open, so a seek's request
    /// goes out at once instead of waiting for a new connection (as for a plain URL).
    @Test func serveKeepsASpareConnectionToACloudSourcesContentHost() async throws {
        try await withTemporaryDirectory { work in
            let data = TestData.random(count: 3_000_000, seed: 83)
            try await CloudTestEnvironment.with { environment in
                environment.server.setFile("/Music/long.mp3", data: data, mimeType: "audio/mpeg")
                let variables = ["STREAMCACHE_ENDPOINT_YANDEX": environment.configuration.endpoints.yandex.absoluteString,
                                 "YANDEX_TOKEN": CloudTestEnvironment.accessToken]
                let arguments = ["yandex:/Music/long.mp3", "--token-env", "YANDEX_TOKEN", "--cache-dir", work.appendingPathComponent("cache").path,
                                 "--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(arguments, environment: variables, in: work)
                try await withAsyncCleanup {
                    let response = try await RawHTTP.get(port: url.port ?? 0, path: url.path, headers: ["Range: bytes=0-65535"])
                    #expect(response.status == 206, "\(response.head)")
                    #expect(TestData.sha256(response.body) == TestData.sha256(data.prefix(65536)))
                    let downloads = environment.server.records.filter(\.isDownload)
                    #expect(!downloads.isEmpty)
                    try await waitWhile(tries: 100, every: .milliseconds(20)) { environment.server.contentConnectionsUnused == 0 }
                    #expect(environment.server.contentConnectionsUnused >= 1, "every connection to the content host carried a request: no spare")
                } cleanup: {
                    try? await Self.stop(process)
                }
            }
        }
    }

    /// A whole Yandex.Disk file read through `serve`, as a player that plays it to the end does,
    /// while its download links expire after 700 kB each and the access token once mid-stream: the
    /// player gets the exact bytes, the content host sends each byte once, and the token is
    /// refreshed once. (The in-process tests of expiry read through the engine alone; this one
    /// goes through the binary's proxy and its transport.)
    @Test func serveReadsACloudFileWholeThroughExpiringLinksAndAnExpiringToken() async throws {
        try await withTemporaryDirectory { work in
            let data = TestData.random(count: 6_000_000, seed: 84)
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                server.setFile("/Music/long.mp3", data: data, mimeType: "audio/mpeg")
                let credentials = work.appendingPathComponent("credentials.json")
                try Data("{\"yandex\": {\"token\": \"\(CloudTestEnvironment.accessToken)\", \"refresh_token\": \"\(server.refreshToken)\", \"client_id\": \"\(server.clientID)\"}}".utf8)
                    .write(to: credentials)
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: credentials.path)
                let variables = ["STREAMCACHE_ENDPOINT_YANDEX": environment.configuration.endpoints.yandex.absoluteString,
                                 "STREAMCACHE_ENDPOINT_TOKEN_YANDEX": server.url(.api, "/oauth/token").absoluteString]
                let arguments = ["yandex:/Music/long.mp3", "--credentials-file", credentials.path, "--cache-dir", work.appendingPathComponent("cache").path,
                                 "--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(arguments, environment: variables, in: work)
                try await withAsyncCleanup {
                    server.expireLinks(afterBytes: 700_000)
                    server.expireTokens(afterBytes: 2_000_000)
                    let response = try await RawHTTP.get(port: url.port ?? 0, path: url.path, timeout: 30)
                    #expect(response.status == 200, "\(response.head)")
                    #expect(TestData.sha256(response.body) == TestData.sha256(data))
                } cleanup: {
                    try? await Self.stop(process)
                }
                #expect(server.downloadedBytes == Int64(data.count), "each byte once")
                #expect(server.linksIssued >= 3, "the links never expired: the test proves nothing")
                #expect(server.records.contains { $0.status == 401 }, "the token never expired: the test proves nothing")
                #expect(server.tokenGrants == 1)
            }
        }
    }

    /// A WebDAV server over HTTPS whose certificate the owner's own authority signed, as a
    /// Nextcloud at home often has: refused with a message that names `--cacert` until the
    /// authority is given, then listed, fetched (exact bytes) and served through the proxy.
    @Test func webDAVOverTLSWithAPrivateAuthorityNeedsItsAuthority() async throws {
        try await withTemporaryDirectory { root in
            let authority = try await TestCertificateAuthority.make(in: root)
            try FileManager.default.createDirectory(at: root.appendingPathComponent("music"), withIntermediateDirectories: true)
            let data = TestData.random(count: 1_500_000, seed: 85)
            try data.write(to: root.appendingPathComponent("music/a.mp3"))
            let account = Nginx.WebDAVAccount(user: "owner", password: "tls-secret-3e1f")
            try await Nginx.serving(root: root, webDAV: account, tls: authority) { nginx in
                let folder = "webdavs://owner@127.0.0.1:\(nginx.port)/music/"
                let environment = ["PW": account.password]
                let refused = try await CommandLineTool.run(["ls", folder, "--password-env", "PW"], environment: environment)
                #expect(refused.status != 0)
                #expect(refused.stderr.contains("not trusted") && refused.stderr.contains("--cacert"), "\(refused.stderr)")

                let trusted = ["--password-env", "PW", "--cacert", authority.certificate.path]
                let ls = try await CommandLineTool.run(["ls", folder] + trusted, environment: environment)
                #expect(ls.status == 0, "\(ls.stderr)")
                #expect(ls.output.hasPrefix("a.mp3\t1500000\t"), "\(ls.output)")

                let output = root.appendingPathComponent("a-copy.mp3")
                let got = try await CommandLineTool.run(["get", folder + "a.mp3", "-o", output.path, "--quiet", "--cache-dir", root.appendingPathComponent("get-cache").path]
                                                        + trusted, environment: environment)
                #expect(got.status == 0, "\(got.stderr)")
                #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data))

                let work = root.appendingPathComponent("work")
                try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
                let (url, process) = try await Self.serve([folder + "a.mp3", "--cache-dir", work.appendingPathComponent("cache").path,
                                                           "--control-token-file", work.appendingPathComponent("token").path] + trusted,
                                                          environment: environment, in: work)
                try await withAsyncCleanup {
                    for range in [ByteRange(1_000_000, 1_100_000), ByteRange(0, 200_000)] {
                        let response = try await RawHTTP.get(port: url.port ?? 0, path: url.path, headers: ["Range: bytes=\(range.lowerBound)-\(range.httpLast)"])
                        #expect(response.status == 206, "\(response.head)")
                        #expect(TestData.sha256(response.body) == TestData.sha256(data[Int(range.lowerBound)..<Int(range.upperBound)]))
                    }
                } cleanup: {
                    try? await Self.stop(process)
                }

                let unreadable = try await CommandLineTool.run(["ls", folder, "--password-env", "PW", "--cacert", root.appendingPathComponent("music/a.mp3").path],
                                                               environment: environment)
                #expect(unreadable.status != 0)
                #expect(unreadable.stderr.contains("--cacert") && unreadable.stderr.contains("holds no PEM certificate"), "\(unreadable.stderr)")
            }
        }
    }

    /// `ls` lists a WebDAV collection, by name as a file manager shows it (the server's own
    /// order is the directory's); `get` of a cloud reference writes the exact bytes; the token
    /// comes from a credentials file only its owner may read.
    @Test func lsAndGetWithSourceReferences() async throws {
        try await withTemporaryDirectory { root in
            try FileManager.default.createDirectory(at: root.appendingPathComponent("music/live"), withIntermediateDirectories: true)
            try TestData.random(count: 1234).write(to: root.appendingPathComponent("music/a.mp3"))
            for name in ["Track 10.mp3", "track 9.mp3"] { try Data("x".utf8).write(to: root.appendingPathComponent("music/\(name)")) }
            let account = Nginx.WebDAVAccount(user: "lister", password: "ls-secret-9d0d")
            try await Nginx.serving(root: root, webDAV: account) { nginx in
                let ls = try await CommandLineTool.run(["ls", "webdav://lister@127.0.0.1:\(nginx.port)/music/", "--password-env", "PW"],
                                                       environment: ["PW": account.password])
                #expect(ls.status == 0, "\(ls.stderr)")
                let lines = ls.output.split(separator: "\n").map(String.init)
                let base = "webdav://lister@127.0.0.1:\(nginx.port)/music/"
                #expect(lines == ["a.mp3\t1234\t\(base)a.mp3", "live/\t\t\(base)live/", "track 9.mp3\t1\t\(base)track 9.mp3",
                                  "Track 10.mp3\t1\t\(base)Track 10.mp3"], "\(lines)")

                let data = TestData.random(count: 2_000_000, seed: 71)
                try await CloudTestEnvironment.with { environment in
                    environment.server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
                    let endpoints = ["STREAMCACHE_ENDPOINT_YANDEX": environment.configuration.endpoints.yandex.absoluteString,
                                     "STREAMCACHE_ENDPOINT_TOKEN_YANDEX": environment.server.url(.api, "/oauth/token").absoluteString]
                    let credentials = root.appendingPathComponent("credentials.json")
                    try Data("{\"yandex\": {\"token\": \"expired-token\", \"refresh_token\": \"\(environment.server.refreshToken)\", \"client_id\": \"\(environment.server.clientID)\"}}".utf8)
                        .write(to: credentials)
                    let output = root.appendingPathComponent("song.mp3")
                    let arguments = ["get", "yandex:/Music/song.mp3", "--credentials-file", credentials.path, "-o", output.path,
                                     "--cache-dir", root.appendingPathComponent("cache").path, "--quiet"]
                    try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: credentials.path)
                    let refused = try await CommandLineTool.run(arguments, environment: endpoints)
                    #expect(refused.status != 0)
                    #expect(refused.stderr.contains("chmod 600"), "\(refused.stderr)")
                    #expect(!refused.stderr.contains(environment.server.refreshToken))

                    try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: credentials.path)
                    let got = try await CommandLineTool.run(arguments, environment: endpoints)
                    #expect(got.status == 0, "\(got.stderr)")
                    #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data))
                    #expect(environment.server.tokenGrants == 1, "the expired token is refreshed with the file's refresh token")
                }
            }
        }
    }

    /// `prefetch` of a cloud folder caches each of its files for offline play: every byte comes
    /// from the service once, a subfolder waits for `--recursive` (and the files cached before are
    /// not fetched again), and a `get` of each file afterwards needs no download.
    @Test(arguments: ["yandex", "dropbox", "gdrive", "onedrive", "box"])
    func prefetchOfACloudFolderCachesEachOfItsFiles(service: String) async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                let files = environment.putAlbum(sizes: [700_000, 500_000, 300_000], seed: 91)
                let variables = environment.variablesWithToken
                let options = ["--token-env", "TOKEN", "--cache-dir", work.appendingPathComponent("cache").path, "--quiet"]
                let folder = CloudTestEnvironment.folderReference(service, path: "/Music/Album")

                let first = try await CommandLineTool.run(["prefetch", folder] + options, environment: variables)
                #expect(first.status == 0, "\(first.stderr)")
                var lines = first.output.split(separator: "\n").map(String.init)
                #expect(lines.count == 3 && lines.prefix(2).allSatisfy { $0.contains(" cached for ") }, "\(lines)")
                #expect(lines.last?.hasPrefix("2 files (") == true && lines.last?.hasSuffix(") cached for \(folder); 1 folder left out (--recursive takes them)") == true,
                        "\(lines)")
                #expect(await server.downloadedBytes(awaiting: 1_200_000) == 1_200_000, "each byte of the two files once, none of the subfolder's")

                let second = try await CommandLineTool.run(["prefetch", folder, "--recursive"] + options, environment: variables)
                #expect(second.status == 0, "\(second.stderr) \(second.output)")
                lines = second.output.split(separator: "\n").map(String.init)
                #expect(lines.count == 4 && lines.last?.hasPrefix("3 files (") == true && lines.last?.hasSuffix(") cached for \(folder)") == true, "\(lines)")
                #expect(await server.downloadedBytes(awaiting: 1_500_000) == 1_500_000, "the files cached before are not fetched again")

                for (index, (path, data)) in files.enumerated() {
                    let output = work.appendingPathComponent("copy-\(index).mp3")
                    let got = try await CommandLineTool.run(["get", environment.reference(service, path: path), "-o", output.path] + options, environment: variables)
                    #expect(got.status == 0, "\(got.stderr)")
                    #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data), "\(path)")
                }
                #expect(await server.downloadedBytes(awaiting: 1_500_000) == 1_500_000, "the gets came from the cache")
            }
        }
    }

    /// A file of the folder that the service will not give is reported, the others are cached,
    /// and the exit tells the failure's kind; the next `prefetch` fetches only what is missing.
    @Test func prefetchOfAFolderGoesOnPastAFileThatFails() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                _ = environment.putAlbum(sizes: [400_000, 600_000], seed: 94)
                let variables = environment.variablesWithToken
                let arguments = ["prefetch", "yandex:/Music/Album", "--token-env", "TOKEN", "--cache-dir", work.appendingPathComponent("cache").path, "--quiet"]
                // Every attempt the retry policy makes for the first file.
                server.failDownloads(5, status: 503)
                let failed = try await CommandLineTool.run(arguments, environment: variables)
                #expect(failed.status == 3, "\(failed.stderr)")
                #expect(failed.stderr.contains("yandex:/Music/Album/01.mp3: ") && failed.stderr.contains("503"), "\(failed.stderr)")
                #expect(failed.output.hasSuffix("585.9 KiB cached for yandex:/Music/Album/02.mp3\n1 file (585.9 KiB) cached for yandex:/Music/Album; 1 failed\n"),
                        "\(failed.output)")
                #expect(await server.downloadedBytes(awaiting: 600_000) == 600_000)

                let again = try await CommandLineTool.run(arguments, environment: variables)
                #expect(again.status == 0, "\(again.stderr)")
                #expect(await server.downloadedBytes(awaiting: 1_000_000) == 1_000_000, "only the file that failed is fetched")
            }
        }
    }

    /// A folder's files are looked up one at a time, each when its download comes: the first
    /// file's download begins before the second file is looked up. Looked up all first, a folder
    /// of hundreds of files (a Yandex file is two API calls) began no download until every file was.
    @Test func prefetchOfAFolderLooksUpEachFileWhenItsTurnComes() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                let files = environment.putAlbum(sizes: [300_000, 200_000], seed: 112)
                let cacheDir = work.appendingPathComponent("cache")
                let prefetched = try await CommandLineTool.run(["prefetch", "yandex:/Music/Album", "--token-env", "TOKEN", "--cache-dir", cacheDir.path, "--quiet"],
                                                               environment: environment.variablesWithToken)
                #expect(prefetched.status == 0, "\(prefetched.stderr)")
                let arrivals = server.arrivals
                let firstDownload = try #require(arrivals.firstIndex { $0.host == .content })
                let secondLookedUp = try #require(arrivals.firstIndex { $0.host == .api && $0.query.contains("02.mp3") })
                #expect(firstDownload < secondLookedUp, "\(arrivals.map { "\($0.host) \($0.path)?\($0.query)" })")
                #expect(await server.downloadedBytes(awaiting: 500_000) == 500_000)
                let keys = Set(try await CacheStore(inspecting: cacheDir).entries().map(\.key))
                #expect(keys.count == files.count, "\(keys)")
            }
        }
    }

    /// `prefetch` of a WebDAV collection (with its trailing slash or without) caches its files
    /// from one `PROPFIND`, each byte once, and a file's reference still names the file; a
    /// reference to nothing is `notFound` (exit 5).
    @Test func prefetchOfAWebDAVCollection() async throws {
        try await withTemporaryDirectory { root in
            let a = TestData.random(count: 900_000, seed: 96), b = TestData.random(count: 300_000, seed: 97)
            try Self.write(["music/a.mp3": a, "music/b.mp3": b, "music/live/c.mp3": TestData.random(count: 1000, seed: 98)], below: root)
            let account = Nginx.WebDAVAccount(user: "keeper", password: "prefetch-secret-5c2a")
            try await Nginx.serving(root: root, webDAV: account) { nginx in
                let base = "webdav://keeper@127.0.0.1:\(nginx.port)/music"
                let options = ["--password-env", "PW", "--cache-dir", root.appendingPathComponent("cache").path, "--quiet"]
                let environment = ["PW": account.password]
                let single = try await CommandLineTool.run(["prefetch", base + "/b.mp3"] + options, environment: environment)
                #expect(single.status == 0, "\(single.stderr)")
                #expect(single.output.split(separator: "\n").count == 1 && single.output.contains("cached for \(base)/b.mp3"), "\(single.output)")
                for reference in [base, base + "/"] {
                    let folder = try await CommandLineTool.run(["prefetch", reference] + options, environment: environment)
                    #expect(folder.status == 0, "\(folder.stderr)")
                    #expect(folder.output.contains("cached for \(base)/a.mp3\n") && folder.output.contains("cached for \(base)/b.mp3\n"), "\(folder.output)")
                    #expect(folder.output.hasSuffix("cached for \(reference); 1 folder left out (--recursive takes them)\n"), "\(folder.output)")
                }
                let gets = nginx.accessLog().filter { $0.status == 200 || $0.status == 206 }
                #expect(Dictionary(grouping: gets, by: \.path).mapValues { $0.reduce(0) { $0 + $1.bodyBytes } } == ["/music/a.mp3": 900_000, "/music/b.mp3": 300_000],
                        "\(gets.map { ($0.path, $0.range, $0.bodyBytes) })")
                let missing = try await CommandLineTool.run(["prefetch", base + "/none.mp3"] + options, environment: environment)
                #expect(missing.status == 5, "\(missing.stderr)")
            }
        }
    }

    /// `serve` of a cloud folder serves each of its files (its subfolders' with `--recursive`),
    /// one line each, and `--prefetch` caches them all in the background: each byte once, and
    /// each stream URL plays its own file's bytes.
    @Test func serveOfACloudFolderServesAndPrefetchesEachOfItsFiles() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                let files = environment.putAlbum(sizes: [800_000, 400_000, 200_000], seed: 101)
                let variables = environment.variablesWithToken
                let out = work.appendingPathComponent("stdout"), err = work.appendingPathComponent("stderr")
                _ = FileManager.default.createFile(atPath: out.path, contents: nil)
                _ = FileManager.default.createFile(atPath: err.path, contents: nil)
                let process = try CommandLineTool.start(["serve", "yandex:/Music/Album", "--recursive", "--prefetch", "--token-env", "TOKEN",
                                                         "--cache-dir", work.appendingPathComponent("cache").path,
                                                         "--control-token-file", work.appendingPathComponent("token").path],
                                                        stdout: try FileHandle(forWritingTo: out), stderr: try FileHandle(forWritingTo: err),
                                                        environment: variables)
                try await withAsyncCleanup {
                    var lines: [Substring] = []
                    for _ in 0..<(300 * TestTiming.slowdown) {
                        guard lines.count < 3 && process.isRunning else { break }
                        try await Task.sleep(for: .milliseconds(50))
                        lines = ((try? String(contentsOf: out, encoding: .utf8)) ?? "").split(separator: "\n")
                    }
                    #expect(lines.map { $0.split(separator: "\t").last.map(String.init) ?? "" }
                            == files.map { "yandex:" + $0.0 }, "\(lines) \((try? String(contentsOf: err, encoding: .utf8)) ?? "")")
                    #expect(await server.downloadedBytes(awaiting: 1_400_000, timeout: TestTiming.time(.seconds(15))) == 1_400_000,
                            "the prefetch fetched each byte once")
                    for (line, (path, data)) in zip(lines, files) {
                        let url = try #require(URL(string: String(line.split(separator: "\t")[0])))
                        let response = try await RawHTTP.get(port: url.port ?? 0, path: url.path)
                        #expect(response.status == 200 && TestData.sha256(response.body) == TestData.sha256(data), "\(path): \(response.head)")
                    }
                    #expect(await server.downloadedBytes(awaiting: 1_400_000) == 1_400_000, "the plays came from the cache")
                } cleanup: {
                    try? await Self.stop(process)
                }
            }
        }
    }

    /// A `prefetch` of a cloud folder and a `get` of one of its files beside a `serve` that holds
    /// the cache directory hand their work to it, with the token they were given (the server has
    /// none of its own), instead of waiting for the directory: each byte comes from the service
    /// once, and the `get` writes the exact bytes from the server's cache.
    @Test func aPrefetchAndAGetOfASourceBesideAServerHandTheirWorkToIt() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                let files = environment.putAlbum(sizes: [600_000, 900_000], seed: 104)
                let cacheDir = work.appendingPathComponent("cache")
                let serve = try CommandLineTool.start(["serve", "--cache-dir", cacheDir.path, "--control-token-file", work.appendingPathComponent("token").path],
                                                      environment: environment.endpointVariables)
                try await withAsyncCleanup {
                    let record = cacheDir.appendingPathComponent("server.json")
                    try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(25)) { !FileManager.default.fileExists(atPath: record.path) }
                    let variables = environment.variablesWithToken
                    // No wait for the directory: a command that waited instead of handing over fails at once.
                    let options = ["--token-env", "TOKEN", "--cache-dir", cacheDir.path, "--wait-for-cache", "0", "--quiet"]
                    let prefetched = try await CommandLineTool.run(["prefetch", "yandex:/Music/Album"] + options, environment: variables)
                    #expect(prefetched.status == 0, "\(prefetched.stderr)")
                    #expect(prefetched.stderr.contains("in use by the server"), "\(prefetched.stderr)")
                    #expect(prefetched.output.contains("cached for yandex:/Music/Album/01.mp3\n") && prefetched.output.contains("cached for yandex:/Music/Album/02.mp3\n")
                            && prefetched.output.hasSuffix("\n2 files (1.4 MiB) cached for yandex:/Music/Album\n"), "\(prefetched.output)")
                    #expect(await server.downloadedBytes(awaiting: 1_500_000) == 1_500_000, "each byte once, by the server")
                    // The command lists the folder and looks up no file: the server's resolution of
                    // each, and the metadata that comes with its download link, are all (the
                    // command's own look-ups made three).
                    let lookUps = server.arrivals.filter { $0.host == .api && $0.path.hasSuffix("/disk/resources") && $0.query.contains("02.mp3") }
                    #expect(lookUps.count == 2, "\(server.arrivals.map { "\($0.host) \($0.path)?\($0.query)" })")

                    let output = work.appendingPathComponent("02.mp3")
                    let got = try await CommandLineTool.run(["get", "yandex:/Music/Album/02.mp3", "-o", output.path] + options, environment: variables)
                    #expect(got.status == 0, "\(got.stderr)")
                    #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(files[1].1))
                    #expect(await server.downloadedBytes(awaiting: 1_500_000) == 1_500_000, "the get came from the server's cache")

                } cleanup: {
                    try? await Self.stop(serve)
                }
            }
        }
    }

    /// What does not apply to what `prefetch` is given is refused before anything is fetched
    /// (exit 64, with the reason): headers, HLS options with a source, `--recursive` with a URL.
    @Test func prefetchRefusesOptionsThatDoNotApply() async throws {
        let cases: [([String], String)] = [
            (["yandex:/Music/Album", "-H", "Authorization: Bearer x"], "-H is for a URL"),
            (["yandex:/Music/Album", "--variants", "all"], "--variants and --segments are for an HLS URL"),
            (["https://example.com/a.mp3", "--recursive"], "--recursive is for a source folder"),
        ]
        for (arguments, reason) in cases {
            let refused = try await CommandLineTool.run(["prefetch"] + arguments)
            #expect(refused.status == 64 && refused.stderr.contains(reason), "\(arguments): \(refused.status) \(refused.stderr)")
        }
    }

    /// `serve --folder` of a cloud folder plays any file below it by its path, subfolders and
    /// names with spaces included, each looked up at its first request only (a second range of a
    /// file asks the service's API nothing); a path that names nothing, or a folder, is 404.
    @Test(arguments: ["yandex", "dropbox", "gdrive", "onedrive", "box"])
    func serveOfACloudFolderMountPlaysAnyFileBelowItByPath(service: String) async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                var files = environment.putAlbum(sizes: [300_000, 200_000, 100_000], seed: 106)
                let spaced = TestData.random(count: 150_000, seed: 109)
                environment.server.setFile("/Music/Album/Track 04.mp3", data: spaced, mimeType: "audio/mpeg")
                files.append(("/Music/Album/Track 04.mp3", spaced))
                let arguments = ["--folder", CloudTestEnvironment.folderReference(service, path: "/Music"), "--url-token", "music", "--token-env", "TOKEN",
                                 "--cache-dir", work.appendingPathComponent("cache").path, "--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(arguments, environment: environment.variablesWithToken, in: work)
                try await withAsyncCleanup {
                    #expect(url.absoluteString.hasSuffix("/music/"), "\(url)")
                    let port = url.port ?? 0
                    for (path, data) in files {
                        let relative = "/music" + path.dropFirst("/Music".count).replacingOccurrences(of: " ", with: "%20")
                        let whole = try await RawHTTP.get(port: port, path: relative)
                        #expect(whole.status == 200 && TestData.sha256(whole.body) == TestData.sha256(data), "\(relative): \(whole.head)")
                    }
                    let lookups = environment.server.records.filter { $0.host == .api }.count
                    let range = try await RawHTTP.get(port: port, path: "/music/Album/02.mp3", headers: ["Range: bytes=1000-1999"])
                    #expect(range.status == 206 && range.body == files[1].data[1000..<2000])
                    #expect(environment.server.records.filter { $0.host == .api }.count == lookups, "the second request for a file looked it up again")
                    #expect(await environment.server.downloadedBytes(awaiting: 750_000) == 750_000, "each byte once")
                    for missing in ["/music/Album/none.mp3", "/music/Album/CD2", "/music/Album/01.mp3/x"] {
                        let answer = try await RawHTTP.get(port: port, path: missing)
                        #expect(answer.status == 404, "\(missing): \(answer.head)")
                    }
                    // A file added after its folder was listed plays at once; a miss is not kept.
                    let added = TestData.random(count: 50_000, seed: 112)
                    environment.server.setFile("/Music/Album/none.mp3", data: added, mimeType: "audio/mpeg")
                    let late = try await RawHTTP.get(port: port, path: "/music/Album/none.mp3")
                    #expect(late.status == 200 && TestData.sha256(late.body) == TestData.sha256(added), "\(late.head)")
                    try await Self.expectListings(port: port)
                } cleanup: {
                    try? await Self.stop(process)
                }
            }
        }
    }

    /// A real player given a cloud album's folder URL plays its tracks in order (`2 Second`
    /// before `10 Tenth`, as a file manager lists them), its subfolder's after them: mpv takes
    /// the folder's M3U playlist (the subfolder a playlist of its own) and plays each file
    /// through the proxy, whose bytes come from the service once each.
    @Test func mpvPlaysACloudAlbumByItsFolderURL() async throws {
        try await withTemporaryDirectory { work in
            var tracks: [Data] = []
            for (index, frequency) in [330, 440, 550, 660].enumerated() {
                let file = work.appendingPathComponent("track\(index).mp3")
                let made = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=\(frequency):duration=4",
                                                                 "-c:a", "libmp3lame", "-b:a", "128k", file.path])
                try #require(made.status == 0, "ffmpeg could not make the MP3: \(made.stderr)")
                tracks.append(try Data(contentsOf: file))
            }
            try await CloudTestEnvironment.with { environment in
                environment.server.setFile("/Music/Album/1 First.mp3", data: tracks[0], mimeType: "audio/mpeg")
                environment.server.setFile("/Music/Album/10 Tenth.mp3", data: tracks[2], mimeType: "audio/mpeg")
                environment.server.setFile("/Music/Album/2 Second.mp3", data: tracks[1], mimeType: "audio/mpeg")
                environment.server.setFile("/Music/Album/CD2/1 Bonus.mp3", data: tracks[3], mimeType: "audio/mpeg")
                let arguments = ["--folder", "yandex:/Music", "--url-token", "music", "--token-env", "TOKEN",
                                 "--cache-dir", work.appendingPathComponent("cache").path, "--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(arguments, environment: environment.variablesWithToken, in: work)
                try await withAsyncCleanup {
                    let album = url.appendingPathComponent("Album").absoluteString + "/"
                    let played = try await ExternalTool.run("mpv", ["--no-config", "--ao=null", "--ao-null-untimed", "--vo=null",
                                                                    "--term-playing-msg=PLAYING ${filename}", album])
                    let output = String(decoding: played.stdout, as: UTF8.self)
                    #expect(played.status == 0, "mpv: \(played.stderr) \(output)")
                    #expect(output.components(separatedBy: "\n").filter { $0.hasPrefix("PLAYING ") } == ["PLAYING 1 First.mp3", "PLAYING 2 Second.mp3", "PLAYING 10 Tenth.mp3", "PLAYING 1 Bonus.mp3"],
                            "\(output)")
                    let total = Int64(tracks.map(\.count).reduce(0, +))
                    #expect(await environment.server.downloadedBytes(awaiting: total) == total, "each track's bytes once")
                } cleanup: {
                    try? await Self.stop(process)
                }
            }
        }
    }

    /// An HLS package stored in a cloud folder (a playlist naming its segments by relative
    /// paths) plays through `serve --folder` with ffmpeg: the playlist is served as the file it
    /// is, and the player finds each segment below the same folder, fetched from the service once.
    @Test func ffmpegPlaysAnHLSPackageStoredInACloudFolder() async throws {
        try await withTemporaryDirectory { work in
            let package = work.appendingPathComponent("package")
            try FileManager.default.createDirectory(at: package, withIntermediateDirectories: true)
            let made = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=96x72:rate=10",
                                                             "-t", "4", "-threads", "1", "-c:v", "mpeg2video", "-g", "10", "-f", "hls", "-hls_time", "1",
                                                             "-hls_playlist_type", "vod", "-hls_segment_filename", package.appendingPathComponent("seg%d.ts").path,
                                                             package.appendingPathComponent("index.m3u8").path])
            try #require(made.status == 0, "ffmpeg could not make the package: \(made.stderr)")
            try await CloudTestEnvironment.with { environment in
                var total: Int64 = 0
                for name in try FileManager.default.contentsOfDirectory(atPath: package.path) {
                    let data = try Data(contentsOf: package.appendingPathComponent(name))
                    total += Int64(data.count)
                    environment.server.setFile("/Video/Show/\(name)", data: data, mimeType: name.hasSuffix(".m3u8") ? "application/vnd.apple.mpegurl" : "video/mp2t")
                }
                let arguments = ["--folder", "yandex:/Video", "--url-token", "video", "--token-env", "TOKEN",
                                 "--cache-dir", work.appendingPathComponent("cache").path, "--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(arguments, environment: environment.variablesWithToken, in: work)
                try await withAsyncCleanup {
                    let playlist = url.appendingPathComponent("Show").appendingPathComponent("index.m3u8").absoluteString
                    let played = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-i", playlist, "-f", "null", "-"], timeout: 60)
                    #expect(played.status == 0, "ffmpeg: \(played.stderr)")
                    let segments = environment.server.records.filter { $0.isDownload }.count
                    #expect(segments >= 5, "the playlist and its segments: \(segments) downloads")
                    #expect(await environment.server.downloadedBytes(awaiting: total) == total, "each file's bytes once")
                } cleanup: {
                    try? await Self.stop(process)
                }
            }
        }
    }

    /// The listings of a folder mount (`Album` holds `01.mp3`, `02.mp3`, `none.mp3`,
    /// `Track 04.mp3` and the folder `CD2`): a player's request for a folder's URL gets an M3U
    /// playlist of its files by name (case aside), then its folders, whose URLs play; `format=json` and a browser's `Accept` get JSON and an
    /// HTML index; a folder's path without its `/` redirects; a folder that is not there, or a
    /// file asked for as a folder, is 404.
    static func expectListings(port: Int) async throws {
        let playlist = try await RawHTTP.get(port: port, path: "/music/Album/")
        #expect(playlist.status == 200 && playlist.head.lowercased().contains("content-type: audio/x-mpegurl"), "\(playlist.head)")
        let text = String(decoding: playlist.body, as: UTF8.self)
        let urls = text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map(String.init)
        let base = "http://127.0.0.1:\(port)/music/Album/"
        #expect(text.hasPrefix("#EXTM3U\n#EXTINF:-1,01.mp3\n") && urls == ["01.mp3", "02.mp3", "none.mp3", "Track%2004.mp3", "CD2/"].map { base + $0 }, "\(text)")
        let spaced = try await RawHTTP.get(port: port, path: String(urls[3].dropFirst("http://127.0.0.1:\(port)".count)))
        #expect(spaced.status == 200 && spaced.body.count == 150_000, "\(spaced.head)")

        let json = try await RawHTTP.get(port: port, path: "/music/Album/?format=json")
        struct Listing: Decodable {
            struct Entry: Decodable, Equatable { var name: String; var type: String; var size: Int64?; var path: String }
            var path: String
            var entries: [Entry]
        }
        let listing = try JSONDecoder().decode(Listing.self, from: json.body)
        #expect(listing.path == "/music/Album/" && listing.entries.first == Listing.Entry(name: "CD2", type: "folder", size: nil, path: "/music/Album/CD2/"),
                "\(listing)")
        #expect(listing.entries.dropFirst().map(\.name) == ["01.mp3", "02.mp3", "none.mp3", "Track 04.mp3"] && listing.entries[2].size == 200_000, "\(listing)")

        let index = try await RawHTTP.get(port: port, path: "/music/", headers: ["Accept: text/html,application/xhtml+xml"])
        let html = String(decoding: index.body, as: UTF8.self)
        #expect(index.status == 200 && html.contains("<a href=\"/music/Album/\">Album/</a>"), "\(html)")
        let top = try await RawHTTP.get(port: port, path: "/music")
        #expect(top.status == 301 && top.head.lowercased().contains("location: /music/"), "\(top.head)")
        for missing in ["/music/Nothing/", "/music/Album/01.mp3/"] {
            let answer = try await RawHTTP.get(port: port, path: missing)
            #expect(answer.status == 404, "\(missing): \(answer.head)")
        }
    }

    /// `serve --folder` of a WebDAV collection plays the files below it by their paths.
    @Test func serveOfAWebDAVFolderMountPlaysTheFilesBelowIt() async throws {
        try await withTemporaryDirectory { root in
            let a = TestData.random(count: 400_000, seed: 110), c = TestData.random(count: 90_000, seed: 111)
            try Self.write(["music/a.mp3": a, "music/live/c.mp3": c], below: root)
            let account = Nginx.WebDAVAccount(user: "mounter", password: "mount-secret-8e4b")
            try await Nginx.serving(root: root, webDAV: account) { nginx in
                let work = root.appendingPathComponent("work")
                try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
                let arguments = ["--folder", "webdav://mounter@127.0.0.1:\(nginx.port)/music/", "--password-env", "PW",
                                 "--cache-dir", work.appendingPathComponent("cache").path, "--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(arguments, environment: ["PW": account.password], in: work)
                try await withAsyncCleanup {
                    for (relative, data) in [("a.mp3", a), ("live/c.mp3", c)] {
                        let answer = try await RawHTTP.get(port: url.port ?? 0, path: url.path + "/" + relative)
                        #expect(answer.status == 200 && TestData.sha256(answer.body) == TestData.sha256(data), "\(relative): \(answer.head)")
                    }
                } cleanup: {
                    try? await Self.stop(process)
                }
            }
        }
    }

    /// A folder prefetched by a reference that names files by id (Drive, Box: `gdrive:FOLDER`
    /// lists `gdrive:FILE` references) plays offline below a mount of the same folder, by path:
    /// the prefetch also names each file by the folder's reference and its path below it, and so
    /// does a server the prefetch hands its work to (`aliases` in the control API).
    @Test(arguments: ["gdrive", "box"], [false, true])
    func aFolderPrefetchedByIdPlaysOfflineBelowAMountOfIt(service: String, besideAServer: Bool) async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let files = environment.putAlbum(sizes: [200_000, 100_000, 50_000], seed: 117)
                let folder = CloudTestEnvironment.folderReference(service, path: "/Music/Album")
                let cacheOptions = ["--cache-dir", work.appendingPathComponent("cache").path, "--token-env", "TOKEN"]
                let control = ["--control-token-file", work.appendingPathComponent("token").path]
                // A server of one of the files (it prints that file's URL once it serves, and fetches nothing until played).
                let running = besideAServer ? try await Self.serve([environment.reference(service, path: files[0].path)] + cacheOptions + control,
                                                                   environment: environment.variablesWithToken, in: work).1 : nil
                let prefetched = try await CommandLineTool.run(["prefetch", folder, "--recursive", "--quiet"] + cacheOptions, environment: environment.variablesWithToken)
                #expect(prefetched.status == 0, "\(prefetched.stderr)")
                if let running {
                    #expect(prefetched.stderr.contains("server"), "the prefetch was handed to the server: \(prefetched.stderr)")
                    try await Self.stop(running)
                }
                environment.server.failAPICalls(1_000, status: 503)
                let (url, process) = try await Self.serve(["--folder", folder, "--url-token", "album"] + cacheOptions + control,
                                                          environment: environment.variablesWithToken, in: work)
                try await withAsyncCleanup {
                    let port = url.port ?? 0
                    for (path, data) in files {
                        let relative = "/album" + path.dropFirst("/Music/Album".count)
                        let answer = try await RawHTTP.get(port: port, path: relative, timeout: 30)
                        #expect(answer.status == 200 && TestData.sha256(answer.body) == TestData.sha256(data), "\(relative): \(answer.head)")
                    }
                    let listing = String(decoding: try await RawHTTP.get(port: port, path: "/album/", timeout: 30).body, as: UTF8.self)
                    let urls = listing.split(separator: "\n").filter { !$0.hasPrefix("#") }
                    #expect(urls == ["01.mp3", "02.mp3", "CD2/"].map { "http://127.0.0.1:\(port)/album/\($0)"[...] }, "\(listing)")
                } cleanup: {
                    try? await Self.stop(process)
                }
                #expect(await environment.server.downloadedBytes(awaiting: 350_000) == 350_000, "nothing was fetched after the prefetch")
            }
        }
    }

    /// A folder mount whose service stops answering asks it once, then plays what the cache
    /// holds without asking again for a while: every question to a service out of reach waits out
    /// the retries first, and a player asks for each file several times (each range request
    /// looks it up again while it is found offline).
    @Test func aFolderMountAsksAServiceOutOfReachOnceInAWhile() async throws {
        try await Self.withPrefetchedAlbumMounted(seed: 116, serving: []) { server, files, port in
            server.failAPICalls(1_000, status: 503)
            // It waits out the retries against the failing service first.
            let first = try await RawHTTP.get(port: port, path: "/music/Album/01.mp3", timeout: 30)
            #expect(first.status == 200 && TestData.sha256(first.body) == TestData.sha256(files[0].data), "\(first.head)")
            let asked = server.arrivals.filter { $0.host == .api }.count
            for path in ["/music/Album/02.mp3", "/music/Album/", "/music/Album/01.mp3"] {
                let answer = try await RawHTTP.get(port: port, path: path, headers: ["Range: bytes=0-99"])
                #expect(answer.status == 200 || answer.status == 206, "\(path): \(answer.head)")
            }
            #expect(server.arrivals.filter { $0.host == .api }.count == asked, "the service was asked again within the interval")
        }
    }

    /// Once the interval is over, the request that asks a service found out of reach again
    /// does not wait for the answer when none comes (a network that drops the service's packets):
    /// the file plays from the cache while the question is still unanswered. When the answer
    /// comes, the service is known to be back, and the next request asks it at once; the listing
    /// the answer brought is kept.
    @Test func aFolderMountDoesNotWaitForAServiceStillOutOfReach() async throws {
        try await Self.withPrefetchedAlbumMounted(seed: 117, serving: ["--retry-offline-after", "1s"]) { server, files, port in
            server.failAPICalls(1_000, status: 503)
            let first = try await RawHTTP.get(port: port, path: "/music/Album/01.mp3", timeout: 30)
            #expect(first.status == 200 && TestData.sha256(first.body) == TestData.sha256(files[0].data), "\(first.head)")
            try await Task.sleep(for: .milliseconds(1_200))
            // The interval is over; the service's packets are now dropped.
            server.failAPICalls(0, status: 503)
            server.holdAPICalls()
            let asked = server.arrivals.filter { $0.host == .api }.count
            let second = try await RawHTTP.get(port: port, path: "/music/Album/02.mp3", timeout: 20)
            #expect(second.status == 200 && TestData.sha256(second.body) == TestData.sha256(files[1].data), "\(second.head)")
            // One question, still unanswered: the file played without its answer.
            #expect(server.apiCallsHeld == 1 && server.arrivals.filter { $0.host == .api }.count == asked,
                    "\(server.apiCallsHeld) questions held, \(server.arrivals.filter { $0.host == .api }.count - asked) answered")

            // The answer comes: the service is back, and asked at once, within the interval.
            server.releaseAPICalls()
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { server.apiCallsHeld > 0 }
            try await Task.sleep(for: .milliseconds(100))
            let answered = server.arrivals.filter { $0.host == .api }.count
            // What the late answer brought, the album's listing, is kept: the album lists with no question.
            let album = try await RawHTTP.get(port: port, path: "/music/Album/")
            #expect(album.status == 200 && String(decoding: album.body, as: UTF8.self).contains("02.mp3"), "\(album.head)")
            #expect(server.arrivals.filter { $0.host == .api }.count == answered, "the late answer's listing was asked for again")
            let third = try await RawHTTP.get(port: port, path: "/music/Album/01.mp3", headers: ["Range: bytes=0-99"])
            #expect(third.status == 206 && third.body == files[0].data.prefix(100), "\(third.head)")
            #expect(server.arrivals.filter { $0.host == .api }.count > answered, "the service, back, was not asked")
        }
    }

    /// `cache pin` and `unpin` take the references files were read by, as well as keys: a
    /// folder's reference pins every file cached below it, a file's its own, from the index
    /// alone (the service is not asked); a reference the cache never saw is a clear error.
    @Test func cachePinTakesAFolderOrAFileByItsReference() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                _ = environment.putAlbum(sizes: [100_000, 50_000], seed: 118)
                let cache = ["--cache-dir", work.appendingPathComponent("cache").path]
                let prefetched = try await CommandLineTool.run(["prefetch", "yandex:/Music/Album", "--quiet", "--token-env", "TOKEN"] + cache,
                                                               environment: environment.variablesWithToken)
                #expect(prefetched.status == 0, "\(prefetched.stderr)")
                let asked = environment.server.arrivals.count
                struct Row: Decodable { var key: String; var pinned: Bool }
                func pinnedCount() async throws -> Int {
                    let list = try await CommandLineTool.run(["cache", "list", "--json"] + cache)
                    let rows = try JSONDecoder().decode([Row].self, from: list.stdout)
                    return rows.filter(\.pinned).count
                }
                let album = try await CommandLineTool.run(["cache", "pin", "yandex:/Music/Album"] + cache)
                #expect(album.status == 0 && album.output.split(separator: "\n").filter { $0.hasPrefix("pinned ") }.count == 2, "\(album.output) \(album.stderr)")
                #expect(try await pinnedCount() == 2)
                let one = try await CommandLineTool.run(["cache", "unpin", "yandex:/Music/Album/01.mp3"] + cache)
                #expect(one.status == 0 && one.output.split(separator: "\n").count == 1, "\(one.output) \(one.stderr)")
                #expect(try await pinnedCount() == 1)
                // The path without its leading slash, as Yandex.Disk takes it too, names the same files.
                let spelled = try await CommandLineTool.run(["cache", "unpin", "yandex:Music/Album/"] + cache)
                #expect(spelled.status == 0 && spelled.output.split(separator: "\n").count == 2, "\(spelled.output) \(spelled.stderr)")
                #expect(try await pinnedCount() == 0)
                let nothing = try await CommandLineTool.run(["cache", "pin", "yandex:/Music/Other"] + cache)
                #expect(nothing.status == 2 && nothing.stderr.contains("no resource named yandex:/Music/Other"), "\(nothing.stderr)")
                #expect(environment.server.arrivals.count == asked, "the service was asked")
            }
        }
    }

    /// Runs `body` with a test service whose album (two files, of `seed`) was prefetched, and a
    /// `serve --folder yandex:/Music --url-token music` with `serving` options on that cache:
    /// `body` gets the service, the files and the server's port.
    static func withPrefetchedAlbumMounted(seed: UInt64, serving: [String],
                                           _ body: (CloudTestServer, [(path: String, data: Data)], Int) async throws -> Void) async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let files = environment.putAlbum(sizes: [200_000, 100_000], seed: seed)
                let cacheOptions = ["--cache-dir", work.appendingPathComponent("cache").path, "--token-env", "TOKEN"]
                let prefetched = try await CommandLineTool.run(["prefetch", "yandex:/Music/Album", "--quiet"] + cacheOptions, environment: environment.variablesWithToken)
                #expect(prefetched.status == 0, "\(prefetched.stderr)")
                let control = ["--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(["--folder", "yandex:/Music", "--url-token", "music"] + serving + cacheOptions + control,
                                                          environment: environment.variablesWithToken, in: work)
                try await withAsyncCleanup {
                    try await body(environment.server, files, url.port ?? 0)
                } cleanup: {
                    environment.server.releaseAPICalls()
                    try? await Self.stop(process)
                }
            }
        }
    }

    /// Files of a cloud folder prefetched for offline play play with the service out of reach:
    /// `get` by their reference, `serve` of the reference and a `serve --folder` above them, from
    /// the cache alone (the cache remembers which file each reference named), whose folders list
    /// the files cached below them; a file never cached fails as the service did.
    @Test func filesPrefetchedForOfflinePlayPlayWithTheirServiceOutOfReach() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let files = environment.putAlbum(sizes: [500_000, 300_000, 100_000], seed: 113)
                let cacheOptions = ["--cache-dir", work.appendingPathComponent("cache").path, "--token-env", "TOKEN"]
                let prefetched = try await CommandLineTool.run(["prefetch", "yandex:/Music/Album", "--quiet"] + cacheOptions, environment: environment.variablesWithToken)
                #expect(prefetched.status == 0, "\(prefetched.stderr)")

                // The service's address now refuses every connection.
                var offline = environment.variablesWithToken
                offline["STREAMCACHE_ENDPOINT_YANDEX"] = "http://127.0.0.1:1/yandex/v1/disk"
                let output = work.appendingPathComponent("01.mp3")
                let got = try await CommandLineTool.run(["get", "yandex:/Music/Album/01.mp3", "-o", output.path, "--quiet"] + cacheOptions, environment: offline)
                #expect(got.status == 0, "\(got.stderr)")
                #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(files[0].data))
                let never = try await CommandLineTool.run(["get", "yandex:/Music/Album/CD2/03.mp3", "-o", output.path, "--quiet"] + cacheOptions, environment: offline)
                #expect(never.status == 3, "\(never.stderr)")

                let control = ["--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await Self.serve(["yandex:/Music/Album/02.mp3"] + cacheOptions + control, environment: offline, in: work)
                try await withAsyncCleanup {
                    let answer = try await RawHTTP.get(port: url.port ?? 0, path: url.path)
                    #expect(answer.status == 200 && TestData.sha256(answer.body) == TestData.sha256(files[1].data), "\(answer.head)")
                } cleanup: {
                    try? await Self.stop(process)
                }
                let (folder, mounted) = try await Self.serve(["--folder", "yandex:/Music", "--url-token", "music"] + cacheOptions + control, environment: offline, in: work)
                try await withAsyncCleanup {
                    let port = folder.port ?? 0
                    for (path, data) in files.prefix(2) {
                        let answer = try await RawHTTP.get(port: port, path: "/music" + path.dropFirst("/Music".count))
                        #expect(answer.status == 200 && TestData.sha256(answer.body) == TestData.sha256(data), "\(path): \(answer.head)")
                    }
                    let uncached = try await RawHTTP.get(port: port, path: "/music/Album/CD2/03.mp3")
                    #expect(uncached.status == 502, "\(uncached.head)")
                    // The folders list what the cache holds of them, so a player given the album's URL plays it.
                    let album = try await RawHTTP.get(port: port, path: "/music/Album/", timeout: 30)
                    let urls = String(decoding: album.body, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("#") }
                    #expect(album.status == 200 && urls == ["01.mp3", "02.mp3"].map { "http://127.0.0.1:\(port)/music/Album/\($0)"[...] }, "\(album.head) \(urls)")
                    // With the sizes the cache knows, as the service's listing has them.
                    let sized = String(decoding: try await RawHTTP.get(port: port, path: "/music/Album/?format=json").body, as: UTF8.self)
                    #expect(sized.contains(#"{"name":"01.mp3","path":"/music/Album/01.mp3","size":500000,"type":"file"}"#)
                            && sized.contains(#"{"name":"02.mp3","path":"/music/Album/02.mp3","size":300000,"type":"file"}"#), "\(sized)")
                    let top = try await RawHTTP.get(port: port, path: "/music/?format=json", headers: ["Accept: application/json"])
                    #expect(String(decoding: top.body, as: UTF8.self).contains(#""entries":[{"name":"Album","path":"/music/Album/","type":"folder"}]"#),
                            "\(String(decoding: top.body, as: UTF8.self))")
                    let nothingCached = try await RawHTTP.get(port: port, path: "/music/Album/CD2/")
                    #expect(nothingCached.status == 502, "\(nothingCached.head)")
                } cleanup: {
                    try? await Self.stop(mounted)
                }
                #expect(await environment.server.downloadedBytes(awaiting: 800_000) == 800_000, "nothing was fetched after the prefetch")
            }
        }
    }
}
