import Foundation
import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// The engine issue's acceptance against a real nginx on 127.0.0.1 that requires a Bearer token.
/// CI installs nginx (`.ci/run`); without it these tests fail with an explanation, never skip.
@Suite(.serialized) struct NginxIntegrationTests {
    static let token = "Bearer nginx-test-token-7f3a"
    static let size = 50_000_000

    /// A 50 MB file served by nginx, and its bytes.
    static func withNginx(_ body: (Nginx, Data) async throws -> Void) async throws {
        try await withTemporaryDirectory { root in
            let data = TestData.random(count: size, seed: 50)
            try data.write(to: root.appendingPathComponent("song.mp3"))
            try await Nginx.serving(root: root, authorization: token) { nginx in
                try await body(nginx, data)
            }
        }
    }

    static func bytes(_ log: [Nginx.LogEntry]) -> Int64 { log.filter { $0.path == "/song.mp3" }.reduce(0) { $0 + $1.bodyBytes } }

    /// Acceptance 1: `streamcache get` gives identical bytes; the second get makes zero origin
    /// requests and works with the origin stopped.
    @Test func getThroughTheCacheThenOffline() async throws {
        try await Self.withNginx { nginx, data in
            try await withTemporaryDirectory { work in
                let cacheDir = work.appendingPathComponent("cache").path
                let out = work.appendingPathComponent("out.mp3").path
                let url = nginx.url("/song.mp3").absoluteString
                let first = try await CommandLineTool.run(["get", url, "-H", "Authorization: \(Self.token)", "-o", out, "--cache-dir", cacheDir])
                #expect(first.status == 0, "\(first.stderr)")
                #expect(TestData.sha256(try Data(contentsOf: URL(fileURLWithPath: out))) == TestData.sha256(data))
                let log = await nginx.settledAccessLog()
                let ratio = Double(Self.bytes(log)) / Double(Self.size)
                #expect(ratio <= 1.0001, "first get: origin bytes / size = \(ratio)")

                let requestsBefore = log.count
                let second = try await CommandLineTool.run(["get", url, "-H", "Authorization: \(Self.token)", "-o", out, "--cache-dir", cacheDir])
                #expect(second.status == 0, "\(second.stderr)")
                #expect(await nginx.settledAccessLog().count == requestsBefore, "the second get must not reach the origin")

                await nginx.stop()
                try FileManager.default.removeItem(atPath: out)
                let offline = try await CommandLineTool.run(["get", url, "-H", "Authorization: \(Self.token)", "-o", out, "--cache-dir", cacheDir])
                #expect(offline.status == 0, "\(offline.stderr)")
                #expect(TestData.sha256(try Data(contentsOf: URL(fileURLWithPath: out))) == TestData.sha256(data))

                // A file not cached, from the origin that is gone (its port stays refusing, see
                // `Nginx.stop()`).
                let unreachable = try await CommandLineTool.run(["get", url + "?other", "-H", "Authorization: Bearer nope", "--cache-dir", cacheDir])
                #expect(unreachable.status == 3, "origin stopped: unreachable: \(unreachable.stderr)")
            }
        }
    }

    @Test func wrongTokenIsExitCode4AndOneLine() async throws {
        try await Self.withNginx { nginx, _ in
            try await withTemporaryDirectory { work in
                let result = try await CommandLineTool.run(["get", nginx.url("/song.mp3").absoluteString, "-H", "Authorization: Bearer wrong",
                                                            "--cache-dir", work.path])
                #expect(result.status == 4)
                #expect(result.stderr.split(separator: "\n").count == 1)
                #expect(result.stderr.contains("authenticationFailed"))
                #expect(!result.stderr.contains("wrong"))
                #expect(result.stdout.isEmpty)
            }
        }
    }

    /// Acceptance 2: 256 KiB at 0 %, 50 %, 10 %, 90 %, 30 %, then the whole file. nginx serves
    /// several ranges per response, so the whole read asks for all the gaps between the seeks'
    /// bytes in one request: every byte once, six requests in all. (The proxy's transport, whose
    /// requests are not capped at 4 MiB, and one connection, so the count does not depend on
    /// the machine's speed.)
    @Test func seekPatternAgainstNginx() async throws {
        try await Self.withNginx { nginx, data in
            try await withTemporaryCache(configure: {
                $0.parallelDownloads = 1
            }) { cache in
                let url = nginx.url("/song.mp3")
                let origin = HTTPOrigin(url: url, headers: ["Authorization": Self.token], transport: AsyncHTTPClientTransport.shared)
                let song = cache.resource(for: CacheKey(url: url), origin: origin)
                for percent in [0, 50, 10, 90, 30] {
                    let start = Self.size * percent / 100
                    let part = try await song.read(ByteRange(Int64(start), Int64(start + 262_144))).collect()
                    #expect(TestData.firstDifference(part, data[start..<start + 262_144]) == nil, "at \(percent) %")
                }
                let whole = try await song.read(from: 0).collect()
                #expect(TestData.sha256(whole) == TestData.sha256(data))
                await cache.shutdown()
                let log = await nginx.settledAccessLog().filter { $0.path == "/song.mp3" }
                let ratio = Double(Self.bytes(log)) / Double(Self.size)
                print("seek pattern: origin bytes / file size = \(ratio), \(log.count) requests")
                #expect(ratio <= 1.01, "origin bytes / file size = \(ratio)")
                #expect(log.count <= 8 && log.contains { $0.range.contains(",") }, "\(log.map(\.range))")
            }
        }
    }

    /// Acceptance 3: 8 concurrent readers of one uncached file.
    @Test func eightConcurrentReadersAgainstNginx() async throws {
        try await Self.withNginx { nginx, data in
            try await withTemporaryCache { cache in
                let url = nginx.url("/song.mp3")
                let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, headers: ["Authorization": Self.token]))
                let digests = try await withThrowingTaskGroup(of: String.self) { group in
                    for _ in 0..<8 { group.addTask { TestData.sha256(try await song.read(from: 0).collect()) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(Set(digests) == [TestData.sha256(data)] && digests.count == 8)
                await cache.shutdown()
                let ratio = Double(Self.bytes(await nginx.settledAccessLog())) / Double(Self.size)
                print("8 readers: origin bytes / file size = \(ratio)")
                #expect(ratio <= 1.02, "origin bytes / file size = \(ratio)")
            }
        }
    }
}
