import Foundation
import StreamCache
import StreamCacheHLS
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// HLS through the proxy with real parts: streams made by ffmpeg, served by nginx, which requires
/// a token ffmpeg never sends, and played by ffmpeg through the proxy.
@Suite(.serialized) struct HLSProxyTests {
    static let token = "Bearer hls-origin-token-5e0a"

    /// A proxy on `cache` for the duration of `body`.
    static func withProxy(cache: StreamCache, _ body: (ProxyServer) async throws -> Void) async throws {
        let server = try ProxyServer(cache: cache)
        try await server.start()
        // A test counts the cache's entries: the warm-up's must be gone, however busy the machine.
        await server.warmUpLeftoversRemoved()
        do {
            try await body(server)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    static func play(_ url: URL, seconds: Int = 20) async throws -> ExternalTool.Result {
        try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-i", url.absoluteString, "-t", String(seconds), "-f", "null", "-"])
    }

    /// `POST /api/resources/{id}/prefetch?wait=1` with a JSON body, through curl.
    static func prefetch(_ registration: StreamRegistration, on server: ProxyServer, json: String) async throws -> Curl.Result {
        let api = try #require(URL(string: "/api/resources/\(registration.id)/prefetch?wait=1", relativeTo: server.baseURL))
        return try await Curl.fetch(api, ["-X", "POST", "-H", "Authorization: Bearer \(server.controlToken)",
                                          "-H", "Content-Type: application/json", "--data", json])
    }

    /// Opens the cache in `directory` in a new proxy, as a new process would, and plays the stream
    /// from it; the origin is stopped.
    static func playOffline(_ masterURL: URL, cacheDirectory: URL) async throws {
        let cache = try StreamCache(configuration: .init(directory: cacheDirectory))
        try await withProxy(cache: cache) { server in
            let master = server.url(for: server.register(url: masterURL, headers: ["Authorization": token]))
            let offline = try await play(master)
            #expect(offline.status == 0 && offline.stderr.isEmpty, "ffmpeg with the origin stopped: \(offline.stderr)")
        }
        await cache.shutdown()
    }

    /// The origin's log once no download is left running.
    static func settledLog(_ nginx: Nginx, _ cache: StreamCache) async -> [Nginx.LogEntry] {
        await cache.flush()
        return await nginx.settledAccessLog()
    }

    /// Acceptance 1 and 2: ffprobe and ffmpeg play 20 s of each kind of stream through the proxy,
    /// twice; the origin sends no byte of any file twice, and the second play sends no request at
    /// all. A third play, with the origin stopped, runs from the cache without an error.
    @Test(arguments: HLSTestMedia.Kind.allCases)
    func ffmpegPlaysTwiceAndTheOriginSendsEachByteOnce(kind: HLSTestMedia.Kind) async throws {
        try await withTemporaryDirectory { root in
            try await HLSTestMedia.make(kind, in: root)
            try await Nginx.serving(root: root, authorization: Self.token) { nginx in
                try await withTemporaryCache { cache in
                    try await Self.withProxy(cache: cache) { server in
                        let master = server.url(for: server.register(url: nginx.url("/\(kind)/master.m3u8"), headers: ["Authorization": Self.token]))
                        let probe = try await ExternalTool.run("ffprobe", ["-v", "error", "-show_streams", master.absoluteString], package: "ffmpeg")
                        #expect(probe.status == 0 && probe.output.contains("codec_type=video"), "ffprobe of \(kind): \(probe.stderr)")
                        let first = try await Self.play(master)
                        #expect(first.status == 0, "ffmpeg, first play of \(kind): \(first.stderr)")
                        let afterFirst = await Self.settledLog(nginx, cache)
                        let second = try await Self.play(master)
                        #expect(second.status == 0, "ffmpeg, second play of \(kind): \(second.stderr)")
                        let log = await Self.settledLog(nginx, cache)

                        #expect(log.allSatisfy { $0.status == 200 || $0.status == 206 }, "every origin request carried the token")
                        #expect(log.count == afterFirst.count, "the second play sent \(log.count - afterFirst.count) origin requests")
                        let sizes = try HLSTestMedia.files(of: kind, in: root)
                        for (path, size) in sizes {
                            let sent = log.filter { $0.path == path }.reduce(0) { $0 + $1.bodyBytes }
                            #expect(sent <= size, "\(path): the origin sent \(sent) bytes of a \(size)-byte file")
                        }
                        let mediaSent = log.filter { !$0.path.hasSuffix(".m3u8") }.reduce(0) { $0 + $1.bodyBytes }
                        let mediaSize = sizes.filter { !$0.key.hasSuffix(".m3u8") }.values.reduce(0, +)
                        #expect(mediaSent * 2 >= mediaSize, "ffmpeg fetched media through the proxy (\(mediaSent) of \(mediaSize) bytes)")
                        let fullest = sizes.map { path, size in Double(log.filter { $0.path == path }.reduce(0) { $0 + $1.bodyBytes }) / Double(max(size, 1)) }.max() ?? 0
                        print("hls \(kind): first play \(afterFirst.count) origin requests, second play \(log.count - afterFirst.count); "
                              + "largest origin bytes / file size over \(sizes.count) files: \(fullest)")

                        // What the player saw: proxy paths only, no origin address, no token.
                        let text = try await Curl.fetch(master).text
                        #expect(text.hasPrefix("#EXTM3U"))
                        #expect(!text.contains("127.0.0.1:\(nginx.port)") && !text.contains("hls-origin-token"))
                        let uris = text.split(separator: "\n").filter { !$0.hasPrefix("#") }
                        #expect(!uris.isEmpty && uris.allSatisfy { $0.hasPrefix("/s/") })

                        await nginx.stop()
                        let offline = try await Self.play(master)
                        #expect(offline.status == 0 && offline.stderr.isEmpty, "ffmpeg with the origin stopped, \(kind): \(offline.stderr)")
                    }
                }
            }
        }
    }

    /// Acceptance 1, offline: after a full prefetch through the control API, a new proxy on the
    /// same cache directory plays the stream with the origin stopped. The prefetch pinned every
    /// file it cached, the playlists too (`"pin": true`): eviction never removes the stream.
    @Test(arguments: [HLSTestMedia.Kind.transportStream, .fragmentedMP4])
    func aPrefetchedStreamPlaysWithTheOriginStopped(kind: HLSTestMedia.Kind) async throws {
        try await withTemporaryDirectory { root in
            try await HLSTestMedia.make(kind, in: root)
            try await Nginx.serving(root: root, authorization: Self.token) { nginx in
                let cacheDirectory = root.appendingPathComponent("cache")
                let masterURL = nginx.url("/\(kind)/master.m3u8")

                let cache = try StreamCache(configuration: .init(directory: cacheDirectory))
                try await Self.withProxy(cache: cache) { server in
                    let registration = server.register(url: masterURL, headers: ["Authorization": Self.token])
                    let answer = try await Self.prefetch(registration, on: server, json: #"{"variants":"all","pin":true}"#)
                    #expect(answer.status == 200, "prefetch: \(answer.text)")
                    let status = try JSONDecoder().decode(ControlAPI.ResourceStatus.self, from: answer.body)
                    let progress = try #require(status.hlsPrefetch)
                    #expect(status.prefetchError == nil)
                    #expect(progress.isComplete && progress.segments >= 2 * (HLSTestMedia.duration / 2))
                    let mediaFiles = try HLSTestMedia.files(of: kind, in: root).filter { !$0.key.hasSuffix(".m3u8") }
                    #expect(progress.files == mediaFiles.count, "every segment, map and key once")
                    #expect(progress.bytes == mediaFiles.values.reduce(0, +))
                    let entries = try await cache.store.entries()
                    let playlists = try HLSTestMedia.files(of: kind, in: root).keys.filter { $0.hasSuffix(".m3u8") }
                    #expect(entries.count == mediaFiles.count + playlists.count && entries.allSatisfy(\.pinned),
                            "\(entries.filter { !$0.pinned }.map(\.key)) of \(entries.count) not pinned")
                }
                await cache.shutdown()
                await nginx.stop()
                try await Self.playOffline(masterURL, cacheDirectory: cacheDirectory)
            }
        }
    }

    /// What `serve URL --prefetch` does (`ProxyServer.prefetch(_:variants:pinning:)`) takes a
    /// registered playlist with the files of its variants, as the control API's prefetch does,
    /// not the playlist's own bytes alone: the stream then plays with the origin stopped.
    @Test func aPlaylistTheServerPrefetchesPlaysWithTheOriginStopped() async throws {
        try await withTemporaryDirectory { root in
            try await HLSTestMedia.make(.transportStream, in: root)
            try await Nginx.serving(root: root, authorization: Self.token) { nginx in
                let cacheDirectory = root.appendingPathComponent("cache")
                let masterURL = nginx.url("/ts/master.m3u8")
                let cache = try StreamCache(configuration: .init(directory: cacheDirectory))
                try await Self.withProxy(cache: cache) { server in
                    let registration = server.register(url: masterURL, headers: ["Authorization": Self.token])
                    let prefetch = try #require(await server.prefetch(registration, variants: .all))
                    await prefetch.value
                }
                await cache.shutdown()
                await nginx.stop()
                try await Self.playOffline(masterURL, cacheDirectory: cacheDirectory)
            }
        }
    }

    /// A playlist's prefetch with a `rate` keeps its files to it together (at 20 kB/s, a few of
    /// the media playlist's 12 segments and key in a second, where loopback takes them all in
    /// milliseconds); asked for again (by the control API or ``ProxyServer/prefetch(_:variants:pinning:rate:)``)
    /// without one, the same prefetch goes on at full speed, and no byte is fetched twice.
    @Test func aPlaylistPrefetchKeepsToItsRate() async throws {
        try await withTemporaryDirectory { root in
            try await HLSTestMedia.make(.transportStream, in: root)
            try await Nginx.serving(root: root, authorization: Self.token) { nginx in
                try await withTemporaryCache { cache in
                    try await Self.withProxy(cache: cache) { server in
                        let registration = server.register(url: nginx.url("/ts/v0.m3u8"), headers: ["Authorization": Self.token])
                        let api = try #require(URL(string: "/api/resources/\(registration.id)/prefetch", relativeTo: server.baseURL))
                        let started = try await Curl.fetch(api, ["-X", "POST", "-H", "Authorization: Bearer \(server.controlToken)", "--data", #"{"rate":20000}"#])
                        #expect(started.status == 202, "\(started.text)")
                        try await Task.sleep(for: .seconds(1))
                        let status = try await Curl.fetch(try #require(URL(string: "/api/resources/\(registration.id)", relativeTo: server.baseURL)),
                                                          ["-H", "Authorization: Bearer \(server.controlToken)"])
                        let paced = try #require(try JSONDecoder().decode(ControlAPI.ResourceStatus.self, from: status.body).hlsPrefetch)
                        #expect(paced.files > 10 && paced.filesDone < paced.files / 2, "\(paced.filesDone) of \(paced.files) files in a second at 20 kB/s")

                        // The same prefetch asked for again goes on, at the rate asked for then.
                        let again = await server.prefetch(registration, rate: 20_000)
                        let unpaced = await server.prefetch(registration)
                        #expect(again != nil && again == unpaced, "the running prefetch was started anew")
                        let answer = try await Self.prefetch(registration, on: server, json: "{}")
                        let done = try #require(try JSONDecoder().decode(ControlAPI.ResourceStatus.self, from: answer.body).hlsPrefetch)
                        #expect(done.isComplete, "\(done)")
                        let log = await Self.settledLog(nginx, cache).filter { !$0.path.hasSuffix(".m3u8") }
                        #expect(Set(log.map(\.path)).count == done.files, "\(log.map(\.path))")
                        #expect(log.map(\.bodyBytes).reduce(0, +) == done.bytes, "no segment byte fetched twice: \(log.map { "\($0.path) \($0.bodyBytes)" })")
                    }
                }
            }
        }
    }

    /// The command line's way to the same: `streamcache prefetch --variants all --pin`, then a
    /// proxy plays the stream from that cache with the origin stopped; every file is pinned.
    @Test func theCommandLinePrefetchesAStreamForOfflinePlay() async throws {
        try await withTemporaryDirectory { root in
            try await HLSTestMedia.make(.byteRange, in: root)
            try await Nginx.serving(root: root, authorization: Self.token) { nginx in
                let cacheDirectory = root.appendingPathComponent("cache")
                let masterURL = nginx.url("/byterange/master.m3u8")
                let prefetch = try await CommandLineTool.run(["prefetch", masterURL.absoluteString, "-H", "Authorization: \(Self.token)",
                                                              "--variants", "all", "--pin", "--cache-dir", cacheDirectory.path])
                #expect(prefetch.status == 0, "streamcache prefetch: \(prefetch.stderr)")
                #expect(prefetch.output.hasPrefix("2 files (") && prefetch.output.contains(", pinned"), "one file per variant: \(prefetch.output)")
                let entries = try await CacheStore(inspecting: cacheDirectory).entries()
                #expect(entries.count == 5 && entries.allSatisfy(\.pinned), "\(entries.map { "\($0.key) \($0.pinned)" })")
                await nginx.stop()
                try await Self.playOffline(masterURL, cacheDirectory: cacheDirectory)
            }
        }
    }

    /// A prefetch of one variant's first segments fetches exactly those (and the key), nothing of
    /// the other variant.
    @Test func aPrefetchOfTheFirstSegmentsOfOneVariantFetchesOnlyThose() async throws {
        try await withTemporaryDirectory { root in
            try await HLSTestMedia.make(.transportStream, in: root)
            try await Nginx.serving(root: root, authorization: Self.token) { nginx in
                try await withTemporaryCache { cache in
                    try await Self.withProxy(cache: cache) { server in
                        let registration = server.register(url: nginx.url("/ts/master.m3u8"), headers: ["Authorization": Self.token])
                        let answer = try await Self.prefetch(registration, on: server, json: #"{"variants":"lowest","segments":3}"#)
                        #expect(answer.status == 200, "prefetch: \(answer.text)")
                        let log = await Self.settledLog(nginx, cache)
                        #expect(Set(log.map(\.path)) == ["/ts/master.m3u8", "/ts/v1.m3u8", "/ts/key.bin", "/ts/v1_000.ts", "/ts/v1_001.ts", "/ts/v1_002.ts"])

                        let badVariant = try await Self.prefetch(registration, on: server, json: #"{"variants":"7"}"#)
                        #expect(badVariant.status == 200)
                        let status = try JSONDecoder().decode(ControlAPI.ResourceStatus.self, from: badVariant.body)
                        #expect(status.prefetchError?.contains("there is no variant 7") == true)
                        let byteRange = try await Self.prefetch(registration, on: server, json: #"{"start":0,"end":10}"#)
                        #expect(byteRange.status == 400)
                    }
                }
            }
        }
    }
}
