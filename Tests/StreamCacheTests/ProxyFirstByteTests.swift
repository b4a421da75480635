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
    /// a 206 cut off after its head: here the file was deleted (404), the credentials revoked
    /// (401, which the proxy answers 502: the player's own credentials cannot help) and the
    /// download refused for a reason the origin gives (403, 502 with the reason).
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

            // A refusal that says why (Google's quota on a shared file) tells the player why,
            // not "credentials": a new token cannot fix it. It said "rejected the credentials" before.
            origin.faults = { _, _, _, _ in
                .refusal(403, json: #"{"error": {"errors": [{"domain": "usageLimits", "reason": "downloadQuotaExceeded"}], "code": 403}}"#)
            }
            let refused = try await ProxyServerTests.curl(url, ["-r", "1500000-"])
            #expect(refused.status == 502)
            #expect(refused.text.contains("downloadQuotaExceeded") && !refused.text.contains("credentials"), "\(refused.text)")

            // The cached bytes are still served, and once the origin answers again so is the rest.
            let cached = try await ProxyServerTests.curl(url, ["-r", "0-99999"])
            #expect(cached.status == 206)
            origin.faults = nil
            let healed = try await ProxyServerTests.curl(url, ["-r", "1500000-1599999"])
            #expect(healed.status == 206)
            #expect(healed.body.count == 100_000)
        }
    }

    /// A request for several ranges whose first part is missing, of a file replaced at the
    /// origin: a multipart answer of the new version (its length in every part's range, its bytes).
    @Test func aMultiRangeRequestThatMeetsANewVersionIsAnsweredWithIt() async throws {
        let new = TestData.random(count: 2_900_000, seed: 337)
        try await Self.withPartlyCachedFile("/mix.mp3", old: TestData.random(count: 3_000_000, seed: 336), cached: ByteRange(0, 200_000),
                                            replacedBy: new) { url, _ in
            let answer = try await ProxyServerTests.curl(url, ["-r", "1000000-1000099,2000000-2000099"])
            #expect(answer.status == 206)
            #expect(answer.headers["etag"] == "\"v2\"")
            #expect(answer.headers["content-length"] == String(answer.body.count))
            let text = String(decoding: answer.body, as: UTF8.self)
            #expect(text.contains("Content-Range: bytes 1000000-1000099/2900000\r\n"))
            #expect(text.contains("Content-Range: bytes 2000000-2000099/2900000\r\n"))
            #expect(answer.body.range(of: new.subdata(in: 1_000_000..<1_000_100)) != nil)
            #expect(answer.body.range(of: new.subdata(in: 2_000_000..<2_000_100)) != nil)
        }
    }

    /// Each part of a multi-range answer is a read of its own. While a slow client takes the
    /// first part (cached), another request meets a new version of the same length; the second
    /// part, read after that, must not bring the new version's bytes under the old head: the
    /// body is cut off instead (the connection closes, with what was still queued of the first part).
    @Test func aMultiRangeAnswerNeverMixesVersions() async throws {
        let old = TestData.random(count: 10_000_000, seed: 338)
        // Every byte flipped: no stretch of the new version occurs in the old one by chance.
        let new = Data(old.map { ~$0 })
        try await Self.withPartlyCachedFile("/long.flac", old: old, cached: ByteRange(0, 8_500_000)) { url, origin in
            let port = try #require(url.port)
            // The first part is larger than the socket buffers, so the server is still sending
            // it when the version changes.
            let request = "GET \(url.path) HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=0-7999999,9000000-9000099\r\nConnection: close\r\n\r\n"
            let client = try RawHTTP.Connection(port: port, request: Data(request.utf8), timeout: TestTiming.time(.seconds(5)).timeInterval)
            let start = await client.read(upTo: 64 * 1024)
            let head = try #require(String(decoding: start, as: UTF8.self).components(separatedBy: "\r\n\r\n").first)
            #expect(head.hasPrefix("HTTP/1.1 206"))
            #expect(head.lowercased().contains("etag: \"v1\""))
            let promised = try #require(head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) })

            origin.setFile("/long.flac", data: new, entityTag: "\"v2\"", contentType: "audio/mpeg")
            let seek = try await ProxyServerTests.curl(url, ["-r", "9500000-9500099"])
            #expect(seek.headers["etag"] == "\"v2\"", "the seek met the new version")

            let whole = start + (await client.readToEnd())
            #expect(whole.count < head.utf8.count + 4 + promised, "the body was cut off")
            #expect(whole.count > 7_000_000, "the first part went out")
            #expect(whole.range(of: new.subdata(in: 9_000_000..<9_000_100)) == nil, "bytes of the new version under the old head")
        }
    }
}
