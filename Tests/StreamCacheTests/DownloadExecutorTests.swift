import Foundation
import NIOCore
import NIOPosix
import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import Testing

/// The engine runs each download on the executor its origin names (``Origin/downloadExecutor``):
/// with `AsyncHTTPClientTransport`, the event loop that receives the bodies, so each chunk is
/// written to the cache on the thread that read it.
@Suite struct DownloadExecutorTests {
    /// Serves `data` in 64 KiB chunks and notes, for each `open` and each chunk taken, whether
    /// the caller ran on `loop`.
    struct LoopOrigin: Origin {
        let data: Data
        let loop: any EventLoop
        /// Whether each call ran on the loop, in order.
        let onLoop = Locked<[Bool]>([])
        /// The requests opened.
        let opened = Locked(0)
        var logDescription: String { "loop origin" }

        @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
        var downloadExecutor: (any TaskExecutor)? { EventLoopTaskExecutor(loop) }

        func open(_ request: OriginRequest) async throws -> OriginResponse {
            onLoop.withLock { $0.append(loop.inEventLoop) }
            opened.withLock { $0 += 1 }
            let range = (request.range ?? ByteRange(0, Int64.max)).clamped(toLength: Int64(data.count))
            let info = ResourceInfo(totalLength: Int64(data.count), mimeType: "audio/mpeg", acceptsByteRanges: true,
                                    validator: Validator(entityTag: "\"v1\""))
            let body = HTTPBody(pulling: Chunks(data[Int(range.lowerBound)..<Int(range.upperBound)], origin: self))
            return OriginResponse(info: info, offset: range.lowerBound, length: range.count, body: body)
        }
    }

    final class Chunks: HTTPBodySource, @unchecked Sendable {
        // @unchecked: only the body's one consumer calls `next()`.
        private var rest: Data
        private let origin: LoopOrigin

        init(_ data: Data, origin: LoopOrigin) {
            rest = data
            self.origin = origin
        }

        func next() async throws -> Data? {
            origin.onLoop.withLock { $0.append(origin.loop.inEventLoop) }
            guard !rest.isEmpty else { return nil }
            // A real body's chunks come after a wait: each one resumes the download anew.
            await Task.yield()
            let chunk = rest.prefix(64 << 10)
            rest = rest.dropFirst(chunk.count)
            return Data(chunk)
        }

        func cancel() {}
    }

    /// A reader's download, and a prefetch split into parallel parts, open their requests and
    /// take every chunk on the origin's loop, and the bytes come out whole.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    @Test func downloadsRunOnTheExecutorTheirOriginNames() async throws {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let data = TestData.random(count: 3 << 20, seed: 92)
        try await withTemporaryCache(configure: { configuration in
            configuration.parallelPartSize = 1 << 20
            configuration.minimumParallelSpeedup = nil
            configuration.minimumParallelGain = nil
            configuration.parallelDownloadThroughputLimit = nil
        }) { cache in
            let readOrigin = LoopOrigin(data: data, loop: loop)
            let song = cache.resource(for: CacheKey("read on the loop"), origin: readOrigin)
            #expect(try await song.read(ByteRange(0, 1 << 20)).collect() == data.prefix(1 << 20))
            let readCalls = readOrigin.onLoop.withLock { $0 }
            #expect(!readCalls.isEmpty && readCalls.allSatisfy { $0 }, "calls on the loop: \(readCalls)")

            let prefetchOrigin = LoopOrigin(data: data, loop: loop)
            let album = cache.resource(for: CacheKey("prefetched on the loop"), origin: prefetchOrigin)
            try await album.prefetch()
            #expect(try await album.read(ByteRange(0, Int64(data.count))).collect() == data)
            #expect(prefetchOrigin.opened.withLock { $0 } > 1, "the prefetch was not split")
            let prefetchCalls = prefetchOrigin.onLoop.withLock { $0 }
            #expect(!prefetchCalls.isEmpty && prefetchCalls.allSatisfy { $0 }, "calls on the loop: \(prefetchCalls)")
        }
    }
}
