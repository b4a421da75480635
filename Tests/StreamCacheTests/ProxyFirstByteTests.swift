import Foundation
import StreamCache
@testable import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// A response's head goes out with its first byte: what the origin says on the way to that byte
/// (a new version, a failure) shapes the answer instead of cutting off a 206 whose head promised
/// the old bytes.
@Suite struct ProxyFirstByteTests {
    /// A file cached in part, then replaced at the origin: a seek into the missing part gets the
    /// new version, with its own length and tag, and none of the old bytes.
    @Test func aSeekThatMeetsANewVersionIsAnsweredWithIt() async throws {
        try await ProxyServerTests.withProxy { server, origin in
            let old = TestData.random(count: 3_000_000, seed: 331)
            let new = TestData.random(count: 2_900_000, seed: 332)
            origin.setFile("/track.flac", data: old, entityTag: "\"v1\"", contentType: "audio/flac")
            let registration = server.register(url: origin.url("/track.flac"), headers: ["Authorization": ProxyServerTests.secret])
            let resource = try #require(server.resource(for: registration))
            try await resource.prefetch(ByteRange(0, 200_000))
            origin.setFile("/track.flac", data: new, entityTag: "\"v2\"", contentType: "audio/flac")

            let seek = try await ProxyServerTests.curl(server.url(for: registration), ["-r", "1000000-1099999"])
            #expect(seek.status == 206)
            #expect(seek.headers["etag"] == "\"v2\"")
            #expect(seek.headers["content-range"] == "bytes 1000000-1099999/2900000")
            #expect(TestData.sha256(seek.body) == TestData.sha256(new.subdata(in: 1_000_000..<1_100_000)))
            // The old head is gone with the old version: the start is the new file's too.
            let start = try await ProxyServerTests.curl(server.url(for: registration), ["-r", "0-99999"])
            #expect(start.headers["etag"] == "\"v2\"")
            #expect(start.body == new.prefix(100_000))
        }
    }

    /// The same with the whole file asked for (a player's first request after a restart), when
    /// its first byte is not cached: a 200 of the new version, whole.
    @Test func aWholeReadThatMeetsANewVersionIsAnsweredWithIt() async throws {
        try await ProxyServerTests.withProxy { server, origin in
            let old = TestData.random(count: 3_000_000, seed: 333)
            let new = TestData.random(count: 3_100_000, seed: 334)
            origin.setFile("/talk.mp3", data: old, entityTag: "\"v1\"", contentType: "audio/mpeg")
            let registration = server.register(url: origin.url("/talk.mp3"), headers: ["Authorization": ProxyServerTests.secret])
            let resource = try #require(server.resource(for: registration))
            try await resource.prefetch(ByteRange(1_000_000, 1_200_000))
            origin.setFile("/talk.mp3", data: new, entityTag: "\"v2\"", contentType: "audio/mpeg")

            let whole = try await ProxyServerTests.curl(server.url(for: registration))
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
        try await ProxyServerTests.withProxy { server, origin in
            origin.setFile("/gone.bin", data: TestData.random(count: 2_000_000, seed: 335))
            let registration = server.register(url: origin.url("/gone.bin"), headers: ["Authorization": ProxyServerTests.secret])
            let resource = try #require(server.resource(for: registration))
            try await resource.prefetch(ByteRange(0, 100_000))
            let url = server.url(for: registration)

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
