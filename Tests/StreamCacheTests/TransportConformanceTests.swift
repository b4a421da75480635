import Foundation
import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import Testing

/// The behaviour every ``HTTPTransport`` must have. A new transport joins by adding a case to
/// ``TransportKind``; the same tests then run against it.
enum TransportKind: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case urlSession
    case asyncHTTPClient

    func make() -> any HTTPTransport {
        switch self {
        case .urlSession: URLSessionTransport()
        case .asyncHTTPClient: AsyncHTTPClientTransport()
        }
    }

    var testDescription: String { rawValue }

    /// Whether the transport stops reading the socket while its consumer is behind. URLSession on
    /// Linux cannot: `suspend()` only detaches the curl handle and in-flight data is still
    /// delivered, so its memory is bounded by the engine's request size (segments of at most
    /// `maximumSegmentSize`), not by the transport.
    var holdsBackTheConnection: Bool {
        switch self {
        case .asyncHTTPClient:
            true
        case .urlSession:
            #if canImport(FoundationNetworking)
            false
            #else
            true
            #endif
        }
    }
}

@Suite struct TransportConformanceTests {
    @Test(arguments: TransportKind.allCases)
    func rangeRequestWithCustomHeadersStreamsExactBytes(kind: TransportKind) async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: 700_000, seed: 31)
        server.setFile("/x", data: data)
        server.requiredHeaders = ["Authorization": "OAuth abc"]
        let transport = kind.make()
        let response = try await transport.send(HTTPRequest(url: server.url("/x"), headers: ["Authorization": "OAuth abc", "Range": "bytes=100-199999"]))
        #expect(response.status == 206)
        #expect(response.headers["content-range"] == "bytes 100-199999/700000")
        let body = try await response.body.collect(upTo: 1 << 30)
        #expect(body == data[100..<200_000])
        #expect(server.requests.first?.headers["Accept-Encoding"] == "identity")
    }

    @Test(arguments: TransportKind.allCases)
    func redirectsAreReturnedNotFollowed(kind: TransportKind) async throws {
        let server = try TestOrigin()
        server.faults = { _, _, _, _ in .redirect("/elsewhere") }
        let response = try await kind.make().send(HTTPRequest(url: server.url("/x")))
        #expect(response.status == 302)
        #expect(response.headers["Location"] == "/elsewhere")
        #expect(server.requests.count == 1)
    }

    @Test(arguments: TransportKind.allCases)
    func bodyStreamsBeforeTheResponseEnds(kind: TransportKind) async throws {
        let server = try TestOrigin()
        // Five seconds of body: the first chunk must arrive long before the end.
        server.setFile("/slow", data: TestData.random(count: 5_000_000, seed: 32))
        server.bytesPerSecond = TestTiming.rate(1_000_000)
        let response = try await kind.make().send(HTTPRequest(url: server.url("/slow")))
        var iterator = response.body.makeAsyncIterator()
        let first = try await iterator.next()
        #expect(first?.isEmpty == false)
        // The server records a request only once it has sent the whole body.
        #expect(server.requests.isEmpty)
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingTheTaskAbortsTheTransfer(kind: TransportKind) async throws {
        let server = try TestOrigin()
        let size = 40_000_000
        server.setFile("/big", data: TestData.random(count: size, seed: 33))
        server.bytesPerSecond = TestTiming.rate(2_000_000)  // half the file takes 10 s: room for a loaded CI machine (URLSession on Linux can take seconds to drop a connection there)
        let transport = kind.make()
        let (started, signal) = AsyncStream<Void>.makeStream()
        let task = Task {
            let response = try await transport.send(HTTPRequest(url: server.url("/big")))
            var received = 0
            for try await chunk in response.body {
                if received == 0 { signal.yield() }
                received += chunk.count
            }
            return received
        }
        // Cancel once bytes flow, so the abort happens mid-body.
        for await _ in started { break }
        task.cancel()
        await #expect(throws: CancellationError.self) { _ = try await task.value }
        for _ in 0..<(200 * TestTiming.slowdown) where server.requests.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
        let sent = try #require(server.requests.first).bodyBytesSent
        #expect(sent < Int64(size) / 2, "the server kept sending after the cancel: \(sent) bytes")
    }

    @Test(arguments: TransportKind.allCases)
    func abandoningTheBodyAbortsTheTransfer(kind: TransportKind) async throws {
        let server = try TestOrigin()
        let size = 40_000_000
        server.setFile("/big", data: TestData.random(count: size, seed: 34))
        server.bytesPerSecond = TestTiming.rate(2_000_000)  // half the file takes 10 s: room for a loaded CI machine (URLSession on Linux can take seconds to drop a connection there)
        do {
            let response = try await kind.make().send(HTTPRequest(url: server.url("/big")))
            for try await _ in response.body { break }
        }
        for _ in 0..<(200 * TestTiming.slowdown) where server.requests.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
        let sent = try #require(server.requests.first).bodyBytesSent
        #expect(sent < Int64(size) / 2, "the server kept sending after the body was dropped: \(sent) bytes")
    }

    @Test(arguments: TransportKind.allCases)
    func refusedConnectionIsOriginUnavailable(kind: TransportKind) async throws {
        // The port stays bound (not listening) during the request, so no parallel test can take it.
        try await FreePort.withRefusingPort { port in
            do {
                _ = try await kind.make().send(HTTPRequest(url: URL(string: "http://127.0.0.1:\(port)/x")!, timeout: .seconds(5)))
                Issue.record("a refused connection must throw")
            } catch let error as StreamCacheError {
                #expect(error.code == .originUnavailable)
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func slowConsumerPausesTheConnection(kind: TransportKind) async throws {
        let server = try TestOrigin()
        let size = 30_000_000
        let data = TestData.random(count: size, seed: 35)
        server.setFile("/big", data: data)
        let response = try await kind.make().send(HTTPRequest(url: server.url("/big")))
        var iterator = response.body.makeAsyncIterator()
        var received = Data()
        if let first = try await iterator.next() { received.append(first) }
        try await Task.sleep(for: .milliseconds(500))
        if kind.holdsBackTheConnection {
            // Held back: the server could not push the whole body while nobody read it.
            #expect(server.requests.isEmpty)
        }
        while let chunk = try await iterator.next() { received.append(chunk) }
        #expect(received == data)
    }
}
