@testable import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import Testing

/// How the downloads of a range split across connections plan their next request, on a
/// resource whose downloads are set up by hand: nothing is sent, the plan alone is checked.
@Suite struct SplitPlanningTests {
    static let mebibyte: Int64 = 1 << 20

    /// A prefetch of a 30 MiB file across three connections, near its end: the first two parts
    /// have half a mebibyte left on the wire each, and the last part, which holds the rest of the
    /// file (6 MiB), plans its next request. It asks for a third of what the three still have to
    /// fetch (7 MiB), so that the others, done with theirs, take the rest beside it. Before, it
    /// asked for all 6 MiB (a part's requests may be 8 MiB long), and fetched them alone while
    /// the other two connections stood idle: three connections read the bench's 30 MB at
    /// 8 MB/s, two at 7.
    @Test func theLastPartAsksForAShareOfWhatIsLeftNotForAllOfIt() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        try await withTemporaryCache(configure: { configuration in
            configuration.parallelDownloads = 3
        }) { cache in
            let url = origin.url("/long.bin")
            let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: AsyncHTTPClientTransport.shared))
            let mebibyte = Self.mebibyte
            let request = try await resource.planNextRequest(of: 3, total: 30 * mebibyte, cached: [
                ByteRange(0, 7 * mebibyte + mebibyte / 2), ByteRange(8 * mebibyte, 15 * mebibyte + mebibyte / 2), ByteRange(16 * mebibyte, 24 * mebibyte),
            ], downloads: [
                // id, window, the end of its request on the wire
                (1, ByteRange(7 * mebibyte + mebibyte / 2, 8 * mebibyte), 8 * mebibyte),
                (2, ByteRange(15 * mebibyte + mebibyte / 2, 16 * mebibyte), 16 * mebibyte),
                (3, ByteRange(24 * mebibyte, 30 * mebibyte), 24 * mebibyte),
            ])
            let share = (7 * mebibyte + 2) / 3
            #expect(request == ByteRange(24 * mebibyte, 24 * mebibyte + share))
        }
    }
}

extension Resource {
    /// Sets the resource up as known (`total` bytes, ranges served), fetching at 4 MB/s with
    /// `cached` on disk and `planted` prefetches under way (each opened, the first one the
    /// reader's, the others parts), and returns what download `id` asks for next.
    fileprivate func planNextRequest(of id: Int, total: Int64, cached: [ByteRange],
                                     downloads planted: [(id: Int, window: ByteRange, requestEnd: Int64)]) throws -> ByteRange? {
        info = ResourceInfo(totalLength: total, mimeType: nil, acceptsByteRanges: true)
        connectionThroughput = 4_000_000
        for range in cached { available.insert(range) }
        for (index, plant) in planted.enumerated() {
            var download = Download(id: plant.id, start: plant.window.lowerBound, position: plant.window.lowerBound, limit: plant.window.upperBound,
                                    kind: .prefetch, segmentEnd: plant.requestEnd, rangeEnd: plant.requestEnd, segmentSize: 8 << 20,
                                    segmentStartPosition: plant.window.lowerBound)
            download.opened = true
            download.isParallelPart = index > 0
            downloads[plant.id] = download
        }
        defer { downloads = [:] }
        return try nextSegment(id: id)?.1.range
    }
}
