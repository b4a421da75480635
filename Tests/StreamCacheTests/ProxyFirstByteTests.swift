import Foundation
import StreamCache
@testable import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// A response's head goes out with its first byte: what the origin says on the way to that byte
/// (a new version, a failure) shapes the answer instead of cutting off a 206 whose head promised
/// the old bytes.
@Suite struct ProxyFirstByteTests {
    /// `old` served at `path` (ETag `"v1"`) through a proxy, `cached` of it in the cache, then
    /// `new` in its place (`"v2"`) when given; `body` gets the stream's URL and the origin.
    static func withPartlyCachedFile(_ path: String, old: Data, cached: ByteRange, replacedBy new: Data? = nil,
                                     _ body: (URL, TestOrigin) async throws -> Void) async throws {
        try await ProxyServerTests.withProxy { server, origin in
            origin.setFile(path, data: old, entityTag: "\"v1\"", contentType: "audio/mpeg")
            let registration = server.register(url: origin.url(path), headers: ["Authorization": ProxyServerTests.secret])
            try await #require(server.resource(for: registration)).prefetch(cached)
            if let new { origin.setFile(path, data: new, entityTag: "\"v2\"", contentType: "audio/mpeg") }
            try await body(server.url(for: registration), origin)
        }
    }

    /// A file cached in part, then replaced at the origin: a seek into the missing part gets the
    /// new version, with its own length and tag, and none of the old bytes.
    @Test func aSeekThatMeetsANewVersionIsAnsweredWithIt() async throws {
        let new = TestData.random(count: 2_900_000, seed: 332)
        try await Self.withPartlyCachedFile("/track.mp3", old: TestData.random(count: 3_000_000, seed: 331), cached: ByteRange(0, 200_000),
                                            replacedBy: new) { url, _ in
            let seek = try await ProxyServerTests.curl(url, ["-r", "1000000-1099999"])
            #expect(seek.status == 206)
            #expect(seek.headers["etag"] == "\"v2\"")
            #expect(seek.headers["content-range"] == "bytes 1000000-1099999/2900000")
            #expect(TestData.sha256(seek.body) == TestData.sha256(new.subdata(in: 1_000_000..<1_100_000)))
            // The old head is gone with the old version: the start is the new file's too.
            let start = try await ProxyServerTests.curl(url, ["-r", "0-99999"])
            #expect(start.headers["etag"] == "\"v2\"")
            #expect(start.body == new.prefix(100_000))
        }
    }

    /// The same with the whole file asked for (a player's first request after a restart), when
    /// its first byte is not cached: a 200 of the new version, whole.
    @Test func aWholeReadThatMeetsANewVersionIsAnsweredWithIt() async throws {
        let new = TestData.random(count: 3_100_000, seed: 334)
        // The cached part leaves gaps longer than the cache fills by itself on both sides.
        try await Self.withPartlyCachedFile("/talk.mp3", old: TestData.random(count: 3_000_000, seed: 333), cached: ByteRange(1_000_000, 1_200_000),
                                            replacedBy: new) { url, _ in
            let whole = try await ProxyServerTests.curl(url)
            #expect(whole.status == 200)
            #expect(whole.headers["content-length"] == "3100000")
            #expect(whole.headers["etag"] == "\"v2\"")
            #expect(TestData.sha256(whole.body) == TestData.sha256(new))
        }
    }

    /// An origin that refuses the bytes a seek needs gets the player a status that says so, not
    /// a 206 cut off after its head: here the file was deleted (404) and the credentials
    /// revoked (401, which the proxy answers 502: the player's own credentials cannot help).
    @Test func aSeekTheOriginRefusesGetsAStatusNotACutBody() async throws {
        try await Self.withPartlyCachedFile("/gone.mp3", old: TestData.random(count: 2_000_000, seed: 335), cached: ByteRange(0, 100_000)) { url, origin in
            origin.faults = { _, _, _, _ in .status(404) }
            let deleted = try await ProxyServerTests.curl(url, ["-r", "1500000-1599999"])
            #expect(deleted.status == 404)
            #expect(deleted.headers["content-range"] == nil)

            origin.faults = { _, _, _, _ in .status(401) }
            let revoked = try await ProxyServerTests.curl(url, ["-r", "1500000-"])
            #expect(revoked.status == 502)
            #expect(revoked.text.contains("credentials"))

            // The cached bytes are still served, and once the origin answers again so is the rest.
            let cached = try await ProxyServerTests.curl(url, ["-r", "0-99999"])
            #expect(cached.status == 206)
            origin.faults = nil
            let healed = try await ProxyServerTests.curl(url, ["-r", "1500000-1599999"])
            #expect(healed.status == 206)
            #expect(healed.body.count == 100_000)
        }
    }
}
