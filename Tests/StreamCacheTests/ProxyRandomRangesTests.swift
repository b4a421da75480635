import Foundation
import StreamCache
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// A player's range requests at random, through the proxy, while the file fills from the origin
/// around them: single ranges, open ones, suffixes, several at once (overlapping, out of order,
/// some past the end), with `If-Range` or without, `GET` or `HEAD` (which is answered whole, as
/// the server defines no range for it). Every answer is checked
/// against the origin's bytes by what it states: a 206's `Content-Range` (each part's, for
/// several), a 200's whole file, a 416's `bytes */LENGTH`; a plain `first-last` range inside the
/// file must come back as exactly that range. Afterwards the cache holds the file whole.
@Suite struct ProxyRandomRangesTests {
    static let size = 1_500_000

    /// One byte-range spec of a `Range` header, drawn so that most are satisfiable and some are
    /// not: past the end, backwards, a zero suffix.
    static func spec(_ generator: inout SeededGenerator) -> String {
        let size = UInt64(Self.size)
        let first = generator.next() % 10 == 0 ? size + generator.next() % 1000 : generator.next() % size
        switch generator.next() % 8 {
        case 0: return "\(first)-"
        case 1: return "-\(generator.next() % 10 == 0 ? 0 : 1 + generator.next() % 400_000)"
        case 2: return "\(first)-\(first + generator.next() % 3_000_000)"
        case 3: return "\(first)-\(first &- 1 &- generator.next() % 5)"  // backwards: the header is invalid
        default: return "\(first)-\(first + generator.next() % 70_000)"
        }
    }

    @Test(arguments: [UInt64(331), 332])
    func randomRangesGetTheOriginsBytes(seed: UInt64) async throws {
        try await ProxyServerTests.withProxy { server, origin in
            let data = TestData.random(count: Self.size, seed: seed)
            origin.setFile("/clip.mp3", data: data, entityTag: "\"v1\"", contentType: "audio/mpeg")
            let registration = server.register(url: origin.url("/clip.mp3"), headers: ["Authorization": ProxyServerTests.secret])
            let port = try #require(server.port)
            let path = server.url(for: registration).path
            var generator = SeededGenerator(seed: seed)
            var statuses: [Int: Int] = [:]
            for round in 0..<250 {
                let specs = (0..<(generator.next() % 4 == 0 ? 2 + generator.next() % 3 : 1)).map { _ in Self.spec(&generator) }
                let isHead = generator.next() % 10 == 0
                let ifRange = [nil, nil, nil, "\"v1\"", "\"v0\"", "W/\"v1\""][Int(generator.next() % 6)]
                var text = "\(isHead ? "HEAD" : "GET") \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\nRange: bytes=\(specs.joined(separator: ","))\r\n"
                if let ifRange { text += "If-Range: \(ifRange)\r\n" }
                // A generous wait: an answer ends the wait once the server closes, and in a full
                // run the server's event loop, which every test's server shares, can be busy for
                // seconds (a 206 waited 4.7 s for its first byte once).
                let answer = try await RawHTTP.exchange(port: port, request: Data((text + "\r\n").utf8), timeout: 30 * Double(TestTiming.slowdown))
                let context = "round \(round): \(text.replacingOccurrences(of: "\r\n", with: " | "))"
                let status = try #require(answer.status, "\(context): no answer")
                statuses[status, default: 0] += 1
                let head = Self.headers(answer.head)
                // A range applies to a GET only (RFC 9110 §14.2: HEAD defines no range handling),
                // with no If-Range or one naming this version by a strong tag.
                let partialAllowed = !isHead && (ifRange == nil || ifRange == "\"v1\"")
                switch status {
                case 200:
                    #expect(head["content-length"] == String(Self.size), "\(context)")
                    if !isHead { #expect(TestData.sha256(answer.body) == TestData.sha256(data), "\(context): not the file") }
                    #expect(!(partialAllowed && specs.count == 1 && Self.isValid(specs)), "\(context): one valid range got the whole file")
                case 206:
                    #expect(partialAllowed, "\(context): a partial answer to a HEAD, or to an If-Range of another version")
                    if let contentRange = head["content-range"] {
                        let range = try #require(Self.contentRange(contentRange), "\(context): \(contentRange)")
                        if !isHead { #expect(answer.body == data[range], "\(context): wrong bytes for \(contentRange)") }
                        if specs.count == 1, let asked = Self.firstLast(specs[0]) {
                            #expect(range == asked.first..<min(asked.last + 1, Self.size), "\(context): \(contentRange)")
                        }
                    } else {
                        let contentType = try #require(head["content-type"], "\(context)")
                        let boundary = try #require(contentType.components(separatedBy: "boundary=").last, "\(context): \(contentType)")
                        if !isHead {
                            let parts = try #require(Self.parts(of: answer.body, boundary: boundary), "\(context): a multipart body that does not parse")
                            #expect(parts.count >= 2, "\(context)")
                            for (range, bytes) in parts { #expect(bytes == data[range], "\(context): wrong bytes in part \(range)") }
                        }
                    }
                case 416:
                    #expect(head["content-range"] == "bytes */\(Self.size)", "\(context)")
                    #expect(partialAllowed && Self.isValid(specs) && !Self.isSatisfiable(specs), "\(context): refused a range it should have served or ignored")
                default:
                    Issue.record("\(context): answered \(status)")
                }
            }
            #expect(statuses[206] != nil && statuses[200] != nil && statuses[416] != nil, "\(statuses)")
            // The file whole through the proxy, from what the requests left and the rest.
            #expect(TestData.sha256(try await Curl.fetch(server.url(for: registration)).body) == TestData.sha256(data))
        }
    }

    /// The header fields of a response head, names lower-cased.
    static func headers(_ head: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in head.components(separatedBy: "\r\n").dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return fields
    }

    /// `bytes FIRST-LAST/LENGTH` as the file's indices, when LENGTH is the file's.
    static func contentRange(_ value: String) -> Range<Int>? {
        let scanner = value.split(whereSeparator: { " -/".contains($0) })
        guard scanner.count == 4, scanner[0] == "bytes", let first = Int(scanner[1]), let last = Int(scanner[2]), scanner[3] == "\(size)",
              first <= last, last < size else { return nil }
        return first..<(last + 1)
    }

    /// A spec's `first-last`, when it has both and they make a range that starts inside the file.
    static func firstLast(_ spec: String) -> (first: Int, last: Int)? {
        let parts = spec.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let first = Int(parts[0]), let last = Int(parts[1]), first <= last, first < size else { return nil }
        return (first, last)
    }

    /// Whether every spec is well formed (RFC 9110 §14.1.1: a last below its first is not).
    static func isValid(_ specs: [String]) -> Bool {
        specs.allSatisfy { spec in
            let parts = spec.split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 2 else { return false }
            if parts[0].isEmpty { return Int(parts[1]) != nil }
            guard let first = Int(parts[0]) else { return false }
            return parts[1].isEmpty || Int(parts[1]).map { $0 >= first } == true
        }
    }

    /// Whether any spec names a byte of the file (§14.1.1: a first inside it, or a suffix above 0).
    static func isSatisfiable(_ specs: [String]) -> Bool {
        specs.contains { spec in
            let parts = spec.split(separator: "-", omittingEmptySubsequences: false)
            if parts[0].isEmpty { return (Int(parts[1]) ?? 0) > 0 }
            return (Int(parts[0]) ?? size) < size
        }
    }

    /// The parts of a `multipart/byteranges` body: each one's range and bytes; `nil` when the
    /// body does not follow the layout.
    static func parts(of body: Data, boundary: String) -> [(Range<Int>, Data)]? {
        var parts: [(Range<Int>, Data)] = []
        let delimiter = Data("\r\n--\(boundary)".utf8)
        var position = body.startIndex
        while let found = body.range(of: delimiter, in: position..<body.endIndex) {
            if body[found.upperBound...].starts(with: Data("--".utf8)) { return parts }
            guard let headEnd = body.range(of: Data("\r\n\r\n".utf8), in: found.upperBound..<body.endIndex) else { return nil }
            let head = String(decoding: body[found.upperBound..<headEnd.lowerBound], as: UTF8.self)
            guard let value = headers("\r\n" + head.trimmingCharacters(in: .whitespacesAndNewlines))["content-range"],
                  let range = contentRange(value), headEnd.upperBound + range.count <= body.endIndex else { return nil }
            parts.append((range, body[headEnd.upperBound..<(headEnd.upperBound + range.count)]))
            position = headEnd.upperBound + range.count
        }
        return nil
    }
}
