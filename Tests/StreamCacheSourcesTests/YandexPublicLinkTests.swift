import Foundation
import StreamCache
import StreamCacheHTTPClient
import StreamCacheSources
import StreamCacheTestSupport
import Testing

/// A Yandex.Disk public link (what an owner sends to share an album) plays, lists, mounts and
/// prefetches without an account, and none of the user's tokens goes to it.
struct YandexPublicLinkTests {
    @Test func publicLinksParseAsABrowserShowsThem() throws {
        let cases: [(String, (link: String, path: String)?)] = [
            ("https://disk.yandex.ru/d/AbC123", ("https://disk.yandex.ru/d/AbC123", "/")),
            ("https://yadi.sk/i/XyZ?utm=1#top", ("https://yadi.sk/i/XyZ", "/")),
            ("http://DISK.YANDEX.COM/d/AbC123/Album/01%20Intro.mp3", ("https://disk.yandex.com/d/AbC123", "/Album/01 Intro.mp3")),
            ("https://disk.360.yandex.ru/d/K/", ("https://disk.360.yandex.ru/d/K", "/")),
            ("https://disk.yandex.ru/d/", nil), ("https://disk.yandex.ru/client/disk", nil), ("https://example.com/d/AbC123", nil),
            ("https://disk.yandex.ru/d/K/../secret", nil), ("yandex:/Music", nil),
        ]
        for (text, expected) in cases {
            let parsed = YandexPublicSource.parse(text)
            #expect(parsed?.link == expected?.link && parsed?.path == expected?.path, "\(text): \(String(describing: parsed))")
            #expect(SourceReference.isSourceReference(text) == (expected != nil || text.hasPrefix("yandex:")), "\(text)")
        }
        let configuration = SourceConfiguration(transport: AsyncHTTPClientTransport.shared)
        let source = YandexPublicSource(link: "https://disk.yandex.ru/d/AbC123", path: "/Album/01 Intro #1.mp3", configuration: configuration)
        #expect(source.reference == "https://disk.yandex.ru/d/AbC123/Album/01%20Intro%20%231.mp3")
        #expect(YandexPublicSource.parse(source.reference)?.path == "/Album/01 Intro #1.mp3", "a reference reads back as the path it names")
    }

    @Test func aSharedAlbumListsPlaysMountsAndPrefetchesWithoutAnAccount() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let (files, spaced, link, variables) = Self.sharedAlbum(in: environment, sizes: [300_000, 200_000, 100_000], seed: 131, work: work)
                let cache = ["--cache-dir", work.appendingPathComponent("cache").path]

                let listed = try await CommandLineTool.run(["ls", link], environment: variables)
                #expect(listed.status == 0, "\(listed.stderr)")
                #expect(listed.output.split(separator: "\n").map(String.init) == [
                    "01.mp3\t300000\t\(link)/01.mp3", "02.mp3\t200000\t\(link)/02.mp3", "10 Last Song.mp3\t50000\t\(link)/10%20Last%20Song.mp3", "CD2/\t\t\(link)/CD2",
                ], "\(listed.output)")

                let output = work.appendingPathComponent("song.mp3")
                // A user with a Yandex account of their own: their token stays theirs.
                let got = try await CommandLineTool.run(["get", "\(link)/10%20Last%20Song.mp3", "-o", output.path, "--quiet", "--token-env", "TOKEN"] + cache,
                                                        environment: variables.merging(["TOKEN": CloudTestEnvironment.accessToken]) { $1 })
                #expect(got.status == 0, "\(got.stderr)")
                #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(spaced))

                let prefetched = try await CommandLineTool.run(["prefetch", link, "--recursive", "--quiet"] + cache, environment: variables)
                #expect(prefetched.status == 0 && prefetched.stdout.count > 0, "\(prefetched.stderr)")
                #expect(prefetched.output.contains("4 files"), "\(prefetched.output)")

                let control = ["--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await SourceCommandTests.serve(["--folder", link, "--url-token", "shared"] + cache + control, environment: variables, in: work)
                try await withAsyncCleanup {
                    let port = url.port ?? 0
                    let album = String(decoding: try await RawHTTP.get(port: port, path: "/shared/", timeout: 30).body, as: UTF8.self)
                    let entries = album.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0.split(separator: "/").last ?? "") }
                    #expect(entries == ["01.mp3", "02.mp3", "10%20Last%20Song.mp3", "CD2"], "files in turn, then CD2/: \(album)")
                    for (path, data) in files {
                        let answer = try await RawHTTP.get(port: port, path: "/shared" + path.dropFirst("/Music/Album".count), timeout: 30)
                        #expect(answer.status == 200 && TestData.sha256(answer.body) == TestData.sha256(data), "\(path): \(answer.head)")
                    }
                } cleanup: {
                    try? await SourceCommandTests.stop(process)
                }
                let total = Int64(files.map(\.data.count).reduce(0, +) + spaced.count)
                #expect(await environment.server.downloadedBytes(awaiting: total) == total, "each byte once: the mount played what the prefetch cached")
                #expect(environment.server.records.allSatisfy { $0.authorization == nil }, "no token went to a public link's calls")

                // A link whose owner forbids downloads: said as such, not as a token to renew.
                environment.server.failAPICalls(1, status: 403)
                let forbidden = try await CommandLineTool.run(["get", "\(link)/01.mp3", "-o", output.path, "--quiet", "--cache-dir",
                                                               work.appendingPathComponent("other-cache").path], environment: variables)
                #expect(forbidden.status != 0 && forbidden.stderr.contains("owner forbids downloads") && !forbidden.stderr.contains("token"),
                        "\(forbidden.status) \(forbidden.stderr)")

                // A link its owner withdrew: the file is not found, said as such.
                environment.server.unshareAll()
                let withdrawn = try await CommandLineTool.run(["get", "\(link)/01.mp3", "-o", output.path, "--quiet", "--cache-dir",
                                                              work.appendingPathComponent("other-cache").path], environment: variables)
                #expect(withdrawn.status != 0 && withdrawn.stderr.contains("no such file"), "\(withdrawn.status) \(withdrawn.stderr)")
            }
        }
    }
    /// A shared album prefetched for offline play lists each file once with the service out of
    /// reach, by the name it plays by. `prefetch` remembers a file of a public link by its
    /// reference (`…/10%20Last%20Song.mp3`) and by its path below the link (`…/10 Last Song.mp3`);
    /// the offline listing showed both, the first percent-encoded again.
    @Test func aSharedAlbumPrefetchedForOfflinePlayListsEachFileOnceWithItsServiceOutOfReach() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let (files, spaced, link, variables) = Self.sharedAlbum(in: environment, sizes: [30_000, 20_000, 10_000], seed: 137, work: work)
                environment.server.setFile("/Music/Album/CD 3/04.mp3", data: spaced, mimeType: "audio/mpeg")
                let cache = ["--cache-dir", work.appendingPathComponent("cache").path]
                let prefetched = try await CommandLineTool.run(["prefetch", link, "--recursive", "--quiet"] + cache, environment: variables)
                #expect(prefetched.status == 0 && prefetched.output.contains("5 files"), "\(prefetched.output)")

                // The service's address now refuses every connection.
                var offline = variables
                offline["STREAMCACHE_ENDPOINT_YANDEX"] = "http://127.0.0.1:1/yandex/v1/disk"
                let control = ["--control-token-file", work.appendingPathComponent("token").path]
                let (url, process) = try await SourceCommandTests.serve(["--folder", link, "--url-token", "shared"] + cache + control, environment: offline, in: work)
                try await withAsyncCleanup {
                    let port = url.port ?? 0
                    let album = try await RawHTTP.get(port: port, path: "/shared/", timeout: 30)
                    let urls = String(decoding: album.body, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("#") }.map(String.init)
                    #expect(album.status == 200 && urls == ["01.mp3", "02.mp3", "10%20Last%20Song.mp3", "CD%203/", "CD2/"].map { "http://127.0.0.1:\(port)/shared/\($0)" },
                            "\(album.head) \(urls)")
                    for url in urls where !url.hasSuffix("/") {
                        let answer = try await RawHTTP.get(port: port, path: String(url.dropFirst("http://127.0.0.1:\(port)".count)), timeout: 30)
                        #expect(answer.status == 200, "\(url): \(answer.head)")
                    }
                    let song = try await RawHTTP.get(port: port, path: "/shared/10%20Last%20Song.mp3", timeout: 30)
                    #expect(TestData.sha256(song.body) == TestData.sha256(spaced))
                    let folder = try await RawHTTP.get(port: port, path: "/shared/CD%203/?format=json", timeout: 30)
                    #expect(String(decoding: folder.body, as: UTF8.self).contains(#""entries":[{"name":"04.mp3","path":"/shared/CD%203/04.mp3","size":50000,"type":"file"}]"#),
                            "\(String(decoding: folder.body, as: UTF8.self))")
                } cleanup: {
                    try? await SourceCommandTests.stop(process)
                }
                let total = Int64(files.map(\.data.count).reduce(0, +) + 2 * spaced.count)
                #expect(await environment.server.downloadedBytes(awaiting: total) == total, "nothing was fetched after the prefetch")
            }
        }
    }
    /// An album shared by a public link, as a friend who got the link has it: `putAlbum`'s files
    /// of `sizes` below `/Music/Album` and `10 Last Song.mp3` (50,000 bytes), and the variables of
    /// a user with no Yandex token and no credentials file (their configuration in `work`).
    static func sharedAlbum(in environment: CloudTestEnvironment, sizes: [Int], seed: UInt64, work: URL)
        -> (files: [(path: String, data: Data)], spaced: Data, link: String, variables: [String: String]) {
        let files = environment.putAlbum(sizes: sizes, seed: seed)
        let spaced = TestData.random(count: 50_000, seed: seed + 3)
        environment.server.setFile("/Music/Album/10 Last Song.mp3", data: spaced, mimeType: "audio/mpeg")
        let link = environment.server.sharePublicly("/Music/Album")
        var variables = environment.endpointVariables
        variables["XDG_CONFIG_HOME"] = work.appendingPathComponent("config").path
        return (files, spaced, link, variables)
    }
}
