import Foundation
@testable import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import Testing

/// How long origin requests are: they double whatever the link's speed (each one costs a round
/// trip and counts against a cloud API's quota), and a read far ahead inside a request in flight
/// gets a request of its own instead of waiting for it, the one in flight being cut there.
@Suite struct RequestLengthTests {
    static let path = "/long.bin"

    static func resource(_ cache: StreamCache, _ server: TestOrigin) -> Resource {
        let url = server.url(path)
        return cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: AsyncHTTPClientTransport.shared))
    }

    /// The first offset and the length that a `Range: bytes=a-b` header asks for.
    static func requested(_ request: TestOrigin.RecordedRequest) -> (first: Int64, length: Int64)? {
        guard let header = request.range, header.hasPrefix("bytes=") else { return nil }
        let bounds = header.dropFirst(6).split(separator: "-")
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]) else { return nil }
        return (first, last - first + 1)
    }

    /// One connection, no split seeks: the requests depend on the engine's rules alone.
    static func oneConnection(_ configuration: inout StreamCache.Configuration) {
        configuration.parallelDownloads = 1
        configuration.minimumParallelGain = nil
    }

    /// A 3.5 MB read at 2 MB/s costs two requests (1 MiB, then the rest: after 2 MiB, 354 kB would
    /// be left, less than a quarter of the request, not worth a round trip of its own). Requests
    /// bounded to half a second of transfer cost four here, and on a 30 MB file at 10 MB/s nine
    /// instead of five; a request for the last 354 kB was the third. The rate is not divided under the thread sanitizer: nothing here watches the
    /// transfer, and a slower link only made the old rule cost more requests.
    @Test func aLongReadOnASlowLinkCostsFewRequests() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 3_500_000, seed: 91)
        server.setFile(Self.path, data: data)
        server.bytesPerSecond = 2_000_000
        try await withTemporaryCache(configure: Self.oneConnection) { cache in
            let song = Self.resource(cache, server)
            let whole = try await song.read(from: 0).collect()
            #expect(TestData.sha256(whole) == TestData.sha256(data))
            // The origin logs a request once it has written it whole.
            try await waitWhile(tries: 500, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < Int64(data.count) }
            let requests = server.dataRequests(for: Self.path)
            #expect(requests.compactMap(Self.requested).map(\.length) == [1 << 20, Int64(data.count) - (1 << 20)],
                    "\(requests.map { $0.range ?? "" })")
            #expect(server.bodyBytesSent(for: Self.path) == Int64(data.count))
        }
    }

    /// A reader streams from 0 at 1 MB/s; while its second request (1 MiB to 3 MiB) is in flight,
    /// a seek lands at 2 MiB, almost a second of transfer ahead of it (past a join distance of
    /// 256 KiB). The seek gets its own request at once instead of joining the one in flight, and
    /// the engine takes no byte of the request in flight past the seek (or past where its reader
    /// left): it writes each byte once. Every byte is exact.
    ///
    /// Once the seek's request has come, the origin sends the rest of the request in flight at
    /// once: the chunks pile up while the download writes, and a run of them used to be written
    /// whole past the cut (three chunks under the whole suite; up to 1 MiB with this burst).
    ///
    /// What the origin had already sent past the cut is lost; how much depends on the socket
    /// buffers between it and a loaded machine, so the origin's count is bounded loosely. The
    /// seek must come while the request in flight is still far from it, however late the test's
    /// reader sees its bytes: the origin holds that request after 128 KiB until the seek's own
    /// request has arrived (or 10 s have passed since it paused, so an engine that wrongly joins it
    /// fails, not hangs). At 1 MB/s alone, a reader seen late under the whole suite let the request in
    /// flight reach the seek first, and the seek joined it (once in about 60 runs).
    @Test func aSeekFarIntoALongRequestInFlightGetsItsOwnRequest() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let size = 3 << 20
        let data = TestData.random(count: size, seed: 92)
        server.setFile(Self.path, data: data)
        server.bytesPerSecond = TestTiming.rate(1_000_000)
        let seekAt = 2 << 20
        let seekArrived = Locked(false)
        server.faults = { _, _, headers, _ in
            let range = headers["Range"] ?? ""
            if range.hasPrefix("bytes=\(seekAt)-") { seekArrived.withLock { $0 = true } }
            guard range.hasPrefix("bytes=\(1 << 20)-") else { return nil }
            // 10 s from when the pause begins: counted from the test's start, a slow machine busy
            // with the whole suite used them up before the request got there, and the seek joined.
            let pausedSince = Locked<ContinuousClock.Instant?>(nil)
            return .rushAfterPause(afterBytes: 128 << 10, until: {
                let since = pausedSince.withLock { since in
                    if since == nil { since = .now }
                    return since!
                }
                return seekArrived.withLock { $0 } || ContinuousClock.now - since > TestTiming.time(.seconds(10))
            })
        }
        try await withTemporaryCache(configure: {
            Self.oneConnection(&$0)
            $0.joinDistance = 256 << 10
        }) { cache in
            let song = Self.resource(cache, server)
            var streamed = Data()
            do {
                var stream = song.read(from: 0).makeAsyncIterator()
                // Into the second request: the first one (1 MiB) told the connection's speed.
                while streamed.count < (1 << 20) + 65_536, let chunk = try await stream.next() { streamed.append(chunk.data) }
                let seek = try await song.read(ByteRange(Int64(seekAt), Int64(seekAt + 65_536))).collect()
                #expect(seek == data[seekAt..<seekAt + 65_536])
            }
            #expect(streamed == data.prefix(streamed.count))
            // The origin logs a request once it stops writing it; the seek's asks for a quarter of
            // a first segment (256 KiB).
            func seekRequest() -> TestOrigin.RecordedRequest? {
                server.dataRequests(for: Self.path).first { Self.requested($0)?.first == Int64(seekAt) }
            }
            try await waitWhile(tries: 500, every: .milliseconds(20)) { seekRequest() == nil }
            #expect(seekRequest() != nil, "the seek has a request of its own: \(server.dataRequests(for: Self.path).map { $0.range ?? "" })")
            await cache.shutdown()
            let downloaded = await song.statistics.bytesDownloaded
            let cached = try await song.cachedRanges.coveredByteCount
            #expect(downloaded == cached, "downloaded \(downloaded) bytes for \(cached) cached")
            try await waitWhile(tries: 500, every: .milliseconds(20)) { server.dataRequests(for: Self.path).count < 3 }
            let sent = server.bodyBytesSent(for: Self.path)
            #expect(sent <= Int64(size) + (1 << 20), "origin bytes \(sent) for a \(size)-byte file")
        }
    }
}
