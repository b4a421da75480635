import StreamCache
import StreamCacheTestSupport
import Testing

/// What ``TestOrigin`` records, which many tests count: a request of a test's earlier step must
/// not count as one of its next step.
@Suite struct TestOriginRecordsTests {
    /// A request is recorded once its answer ends. An answer that ends after a reset, of a request
    /// that arrived before it, belongs to what came before the reset: a loaded machine ends
    /// answers late, after the client that asked has moved on.
    @Test func aRequestThatArrivedBeforeAResetIsNotRecordedAfterIt() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        origin.setFile("/song.mp3", data: TestData.random(count: 100_000, seed: 1))
        let released = Locked(false)
        origin.faults = { _, _, headers, _ in headers["Range"] == "bytes=0-9" ? .hold(until: { released.withLock { $0 } }) : nil }

        let early = Task { try await RawHTTP.get(port: origin.port, path: "/song.mp3", headers: ["Range: bytes=0-9"], timeout: 30) }
        try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(10)) { origin.requestsArrived < 1 }
        #expect(origin.requestsBeingAnswered == 1, "the early request is held at the origin")
        origin.resetRecords()
        released.withLock { $0 = true }
        #expect(try await early.value.status == 206)
        #expect(try await origin.waitUntilAnswersEnd())
        #expect(origin.requests.isEmpty, "recorded after the reset: \(origin.requests.map { $0.range ?? "-" })")

        // A request that arrives after the reset is recorded as before.
        #expect(try await RawHTTP.get(port: origin.port, path: "/song.mp3", headers: ["Range: bytes=10-19"], timeout: 30).status == 206)
        #expect(try await origin.waitUntilAnswersEnd())
        #expect(origin.requests.map(\.range) == ["bytes=10-19"])
        #expect(origin.requestsArrived == 2)
    }
}
