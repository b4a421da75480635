import Foundation
import StreamCache
import StreamCacheHTTPClient
import StreamCacheSources
import StreamCacheTestSupport
import Testing

/// WebDAV against a real server: nginx with its DAV and dav-ext modules behind Basic auth
/// (`.ci/run` installs `nginx` and `libnginx-mod-http-dav-ext`).
@Suite(.serialized) struct WebDAVSourceTests {
    static let account = Nginx.WebDAVAccount(user: "tester", password: "dav-password-8c1e")

    static func withServer(_ body: (Nginx, URL) async throws -> Void) async throws {
        try await withTemporaryDirectory { root in
            let music = root.appendingPathComponent("music")
            try FileManager.default.createDirectory(at: music.appendingPathComponent("live"), withIntermediateDirectories: true)
            try await Nginx.serving(root: root, webDAV: account) { nginx in
                try await body(nginx, music)
            }
        }
    }

    static func source(_ nginx: Nginx, _ path: String, password: String = account.password) throws -> any Source {
        try SourceReference.parse("webdav://\(account.user)@127.0.0.1:\(nginx.port)\(path)", credentials: SourceCredentials(password: password),
                                  configuration: SourceConfiguration(transport: AsyncHTTPClientTransport.shared))
    }

    /// A WebDAV file whose server sends ownCloud's `OC-Checksum` (as Nextcloud and oCIS do for a
    /// file uploaded with one) is checked against it; one whose checksum is stale (another file's)
    /// is downloaded twice, then kept as the server serves it and not fetched again.
    @Test func ownCloudChecksumsCheckTheCompleteFile() async throws {
        let data = TestData.random(count: 1_500_000, seed: 63)
        // SHA-1 in hexadecimal, as ownCloud writes it.
        let sha1 = ContentHasher.digest(.sha1, of: data).hex
        let stale = ContentHasher.digest(.sha1, of: TestData.random(count: 1_500_000, seed: 64)).hex
        try await withTemporaryDirectory { root in
            let music = root.appendingPathComponent("music")
            try FileManager.default.createDirectory(at: music, withIntermediateDirectories: true)
            try data.write(to: music.appendingPathComponent("good.flac"))
            try data.write(to: music.appendingPathComponent("stale.flac"))
            let headers = ["/music/good.flac": ["OC-Checksum": "SHA1:\(sha1) MD5:00000000000000000000000000000000"],
                           "/music/stale.flac": ["OC-Checksum": "SHA1:\(stale)"]]
            try await Nginx.serving(root: root, webDAV: Self.account, headers: headers) { nginx in
                try await withTemporaryCache { cache in
                    let good = try await cache.resource(for: try Self.source(nginx, "/music/good.flac").resolve())
                    try await good.prefetch()
                    #expect(await good.info?.contentDigest?.hex == sha1)
                    #expect(cache.statistics.contentMatches == 1)

                    let staleFile = try await cache.resource(for: try Self.source(nginx, "/music/stale.flac").resolve())
                    try await staleFile.prefetch()
                    try await staleFile.prefetch()
                    #expect(TestData.sha256(try await staleFile.read(from: 0).collect()) == TestData.sha256(data))
                    #expect(cache.statistics.contentMismatches == 1)
                }
                let log = await nginx.settledAccessLog()
                let sent = { (path: String) in log.filter { $0.path == path }.reduce(Int64(0)) { $0 + $1.bodyBytes } }
                #expect(sent("/music/good.flac") == Int64(data.count))
                #expect(sent("/music/stale.flac") == Int64(2 * data.count), "twice, and not a third time")
            }
        }
    }

    @Test func propertiesListingAndBytes() async throws {
        try await Self.withServer { nginx, music in
            let data = TestData.random(count: 3_000_000, seed: 61)
            try data.write(to: music.appendingPathComponent("a song.mp3"))
            try TestData.random(count: 10).write(to: music.appendingPathComponent("live/b.mp3"))
            let source = try #require(try Self.source(nginx, "/music/a%20song.mp3") as? WebDAVSource)
            let properties = try await source.properties()
            #expect(properties.contentLength == Int64(data.count))
            // nginx's dav-ext module reports no getcontenttype; the extension decides then.
            #expect(properties.contentType == nil || properties.contentType == "audio/mpeg")
            #expect(properties.lastModified != nil)

            let entries = try await Self.source(nginx, "/music/").list()
            #expect(entries.map(\.name).sorted() == ["a song.mp3", "live"])
            // A collection is listed, not read as a file: its properties say what to do instead.
            let collection = try #require(try Self.source(nginx, "/music/live/") as? WebDAVSource)
            await #expect { try await collection.properties() } throws: { error in
                (error as? StreamCacheError)?.code == .invalidArgument && "\(error)".contains("is a collection; list it")
            }
            #expect(entries.first { $0.name == "live" }?.isFolder == true)
            #expect(entries.first { $0.name == "a song.mp3" }?.size == Int64(data.count))

            let file = try await source.resolve()
            #expect(file.key.rawValue == "webdav:tester@127.0.0.1:\(nginx.port)/music/a song.mp3")
            try await withTemporaryCache { cache in
                let bytes = try await cache.resource(for: file).read(from: 0).collect()
                #expect(TestData.sha256(bytes) == TestData.sha256(data))
            }
            let gets = nginx.accessLog().filter { $0.path == "/music/a song.mp3" && ($0.status == 206 || $0.status == 200) }
            #expect(gets.reduce(0) { $0 + $1.bodyBytes } == Int64(data.count))
        }
    }

    /// The reference a listing gives each file reads that file, whatever its name holds: `#` and
    /// `?` (which a URL takes for a fragment and a query), `%` (an escape), spaces.
    @Test func aListedReferenceReadsItsFileWhateverItsName() async throws {
        try await Self.withServer { nginx, music in
            let names = ["Track #1.mp3", "What?.mp3", "100% Hits.mp3", "a song.mp3", "caf\u{E9}.mp3"]
            var files: [String: Data] = [:]
            for (index, name) in names.enumerated() {
                files[name] = TestData.random(count: 20_000 + index, seed: 620 + UInt64(index))
                try files[name]!.write(to: music.appendingPathComponent(name))
            }
            let entries = try await Self.source(nginx, "/music/").list().filter { !$0.isFolder }
            #expect(entries.map(\.name).sorted() == names.sorted())
            for entry in entries {
                let source = try SourceReference.parse(entry.reference, credentials: SourceCredentials(password: Self.account.password),
                                                       configuration: SourceConfiguration(transport: AsyncHTTPClientTransport.shared))
                #expect(source.reference == entry.reference, "a reference parsed back names itself")
                let file = try await source.resolve()
                #expect(file.fileName == entry.name, "\(entry.reference)")
                try await withTemporaryCache { cache in
                    let bytes = try await cache.resource(for: file).read(from: 0).collect()
                    #expect(TestData.sha256(bytes) == TestData.sha256(files[entry.name] ?? Data()), "\(entry.reference)")
                }
            }
        }
    }

    @Test func aWrongPasswordIsAuthenticationFailed() async throws {
        try await Self.withServer { nginx, music in
            try TestData.random(count: 1000).write(to: music.appendingPathComponent("a.mp3"))
            let source = try #require(try Self.source(nginx, "/music/a.mp3", password: "not-it") as? WebDAVSource)
            await #expect(throws: StreamCacheError.self) { try await source.properties() }
            do {
                _ = try await source.properties()
            } catch let error as StreamCacheError {
                #expect(error.code == .authenticationFailed)
                #expect(!error.description.contains("not-it"))
            }
            let file = try await source.resolve()
            try await withTemporaryCache { cache in
                do {
                    _ = try await cache.resource(for: file).read(from: 0).collect()
                    Issue.record("a wrong password read the file")
                } catch let error as StreamCacheError {
                    #expect(error.code == .authenticationFailed)
                }
            }
        }
    }

    @Test func aMissingFileIsNotFound() async throws {
        try await Self.withServer { nginx, _ in
            let source = try #require(try Self.source(nginx, "/music/none.mp3") as? WebDAVSource)
            do {
                _ = try await source.properties()
                Issue.record("a missing file has properties")
            } catch let error as StreamCacheError {
                #expect(error.code == .notFound)
            }
        }
    }
}
