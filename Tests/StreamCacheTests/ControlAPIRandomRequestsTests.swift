import Foundation
import StreamCache
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// The control API under requests drawn at random from its own routes, methods, queries and
/// bodies, mangled: what the `control-api` fuzz target does for the bodies' decoding alone, here
/// through the server's routing and checks. Every request is answered, none with a server error,
/// and afterwards the server still serves the file whole and answers its API.
@Suite struct ControlAPIRandomRequestsTests {
    /// What a request's path, method and query are drawn from besides the routes below: the
    /// API's own words, and junk a client could send in their place.
    static let segments = ["resources", "prefetch", "cache", "pin", "verify", "prune", "stats", "settings", "metrics", "api",
                           "", "..", "%2F", "%zz", "%00", "a%2Fb", String(repeating: "x", count: 300), "%F0%9F%8E%B5", "%C3%28"]
    static let methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    static let queries = ["", "?purge=1", "?purge=true", "?purge=", "?wait=0", "?x=%zz", "?purge=1&purge=0", "?=&&="]
    static let numbers = ["0", "-1", "1", "10", "1048576", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
                          "1e308", "1e400", "-0.0", "0.5", "null", "true", "\"7\"", "[]", "{}"]

    @Test(arguments: [UInt64(324), 325, 326])
    func randomRequestsGetAnswersAndLeaveTheServerWhole(seed: UInt64) async throws {
        try await ProxyServerTests.withProxy { server, origin in
            let data = TestData.random(count: 300_000, seed: 324)
            origin.setFile("/song.flac", data: data, contentType: "audio/flac")
            origin.setFile("/list.m3u8", data: Data("#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\nsong.flac\n#EXT-X-ENDLIST\n".utf8),
                           contentType: "application/vnd.apple.mpegurl")
            func registered() -> (song: StreamRegistration, list: StreamRegistration) {
                (server.register(url: origin.url("/song.flac"), headers: ["Authorization": ProxyServerTests.secret]),
                 server.register(url: origin.url("/list.m3u8"), headers: ["Authorization": ProxyServerTests.secret]))
            }
            let (song, list) = registered()
            let port = try #require(server.port)
            let keys = [song.key.rawValue, list.key.rawValue].map { $0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0 }
            // Bodies: the API's own, with numbers and strings swapped for odd ones, cut short, or
            // with a byte changed; URLs only of the loopback origin, so nothing leaves the machine.
            let urls = [origin.url("/song.flac").absoluteString, origin.url("/missing.mp3").absoluteString, "ftp://127.0.0.1/a", "not a url", ""]
            var generator = SeededGenerator(seed: seed)
            func pick<T>(_ items: [T]) -> T { items[Int(generator.next() % UInt64(items.count))] }
            /// One of the bodies below: mostly of `kinds`, the ones the route takes.
            func body(mostly kinds: [Int]) -> String {
                // Half of them small counts, which pass the decoding and meet the checks behind it.
                let number = { generator.next() % 2 == 0 ? String(generator.next() % 20) : pick(Self.numbers) }
                let bodies = [
                    #"{"start":\#(number()),"end":\#(number())}"#,
                    #"{"rate":\#(number()),"pin":\#(pick(["true", "false", "1", "null"]))}"#,
                    #"{"variants":\#(pick([#""all""#, #""highest""#, #""lowest""#, #""7""#, #""-1""#, "3", "null"])),"segments":\#(number())}"#,
                    #"{"url":"\#(pick(urls))","headers":{"\#(pick(["Authorization", "", "X Bad", "Host"]))":"\#(pick([ProxyServerTests.secret, "a\r\nb", ""]))"},"key":\#(pick(["null", #""k1""#, #""""#])),"name":\#(pick(["null", #""a.mp3""#, #"".."""#]))}"#,
                    #"{"source":"\#(pick(["webdav://me@127.0.0.1/a.mp3", "yandex:/a.mp3", ""]))","url":\#(pick(["null", #""x""#]))}"#,
                    #"{"maximumSize":\#(number()),"maximumAgeSeconds":\#(number()),"minimumFreeSpace":\#(number()),"dryRun":\#(pick(["true", "false", "null"]))}"#,
                    #"{"backgroundDownloadRate":\#(pick(["null", "0", "-5", "1000000000", "1e400"]))}"#,
                    "", "{", "[1,2", "null", String(repeating: "[", count: 2_000),
                ]
                var text = Array((kinds.isEmpty || generator.next() % 4 == 0 ? pick(bodies) : bodies[pick(kinds)]).utf8)
                switch generator.next() % 4 {
                case 0 where !text.isEmpty: text = Array(text.prefix(Int(generator.next() % UInt64(text.count))))
                case 1 where !text.isEmpty: text[Int(generator.next() % UInt64(text.count))] = UInt8(truncatingIfNeeded: generator.next())
                default: break
                }
                return String(decoding: text, as: UTF8.self)
            }
            // The API's routes, `{id}` and `{key}` filled in from above, with the bodies each takes
            // (by their place in `body(mostly:)`'s list); the prefetch comes more often than the
            // rest, as it has the most checks. Most requests take a route as it is, the rest with
            // another method or a segment swapped for junk.
            let routes: [(String, String, [Int])] = [
                ("GET", "resources", []), ("POST", "resources", [3, 4]), ("GET", "resources/{id}", []), ("DELETE", "resources/{id}", []),
                ("POST", "resources/{id}/prefetch", [0, 0, 1, 2]), ("POST", "resources/{id}/prefetch", [0, 0, 1, 2]),
                ("POST", "resources/{id}/prefetch", [0, 0, 1, 2]), ("DELETE", "resources/{id}/prefetch", []), ("PUT", "cache/{key}/pin", []),
                ("DELETE", "cache/{key}/pin", []), ("POST", "cache/{key}/verify", []), ("DELETE", "cache/{key}", []), ("DELETE", "cache", []),
                ("POST", "cache/prune", [5]), ("GET", "stats", []), ("GET", "settings", []), ("PUT", "settings", [6]), ("GET", "metrics", []),
            ]
            var statuses: [Int: Int] = [:]
            for round in 0..<600 {
                // Registered again each round (the same ids while they stay): a request may have removed them.
                let (song, list) = registered()
                let ids = [song.id, song.id, list.id, "nope"]
                var (method, route, kinds) = pick(routes)
                var path = route.split(separator: "/").map { segment -> String in
                    switch segment {
                    case "{id}": pick(ids)
                    case "{key}": pick(keys)
                    default: String(segment)
                    }
                }
                if generator.next() % 5 == 0 { method = pick(Self.methods) }
                if generator.next() % 5 == 0 { path[Int(generator.next() % UInt64(path.count))] = pick(Self.segments) }
                let payload = Data(body(mostly: kinds).utf8)
                var text = "\(method) /api/\(path.joined(separator: "/"))\(pick(Self.queries)) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
                if generator.next() % 10 != 0 { text += "Authorization: Bearer \(server.controlToken)\r\n" }
                if generator.next() % 3 != 0 { text += "Content-Type: application/json\r\n" }
                text += "Content-Length: \(payload.count)\r\n\r\n"
                // A generous wait, as the server's event loop is shared by every test's server.
                let answer = try await RawHTTP.exchange(port: port, request: Data(text.utf8) + payload, timeout: 30 * Double(TestTiming.slowdown))
                let status = try #require(answer.status, "round \(round): no answer to \(text.prefix(200))")
                #expect(status < 500, "round \(round): \(status) for \(text.prefix(200)): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
                statuses[status, default: 0] += 1
                // Every answer but a metrics scrape is JSON the client can read: an error says which.
                guard method != "HEAD", status != 204, !answer.head.contains("text/plain; version=0.0.4") else { continue }
                if status >= 400 {
                    let refusal = try? JSONDecoder().decode(ControlAPI.ErrorBody.self, from: answer.body)
                    #expect(refusal.map { !$0.error.isEmpty && !$0.message.isEmpty } == true,
                            "round \(round): \(status) for \(text.prefix(200)): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
                } else {
                    #expect((try? JSONSerialization.jsonObject(with: answer.body)) is [String: Any],
                            "round \(round): \(status) for \(text.prefix(200)): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
                }
            }
            // The requests reached past the routing, to the checks behind it.
            #expect(statuses[202] != nil && statuses[400] != nil && statuses[404] != nil && statuses[405] != nil, "\(statuses)")

            // The server still answers, and serves the file whole (registered again: a request
            // above may have removed it).
            #expect(TestData.sha256(try await Curl.fetch(server.url(for: registered().song)).body) == TestData.sha256(data))
            #expect(try await RawHTTP.get(port: port, path: "/api/stats", headers: ["Authorization: Bearer \(server.controlToken)"]).status == 200)
        }
    }
}
