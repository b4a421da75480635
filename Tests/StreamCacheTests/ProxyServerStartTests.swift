import Foundation
import NIOCore
import NIOPosix
import StreamCache
import StreamCacheHTTPClient
@testable import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// The server's event loop as its tasks' executor, and the start-up warm-up that runs the
/// first request's code paths before a player comes.
@Suite struct ProxyServerStartTests {
    private actor Counter {
        var value = 0
        func increment() -> Int {
            value += 1
            return value
        }
    }

    /// A task that prefers an event loop runs on it, across suspensions, child tasks and calls
    /// into a default actor; without the preference it runs elsewhere.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    @Test func aTaskThatPrefersAnEventLoopRunsOnIt() async throws {
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        let counter = Counter()
        let checks = await withTaskExecutorPreference(EventLoopTaskExecutor(eventLoop)) { () async -> [Bool] in
            var checks = [eventLoop.inEventLoop]
            await Task.yield()
            checks.append(eventLoop.inEventLoop)
            _ = await counter.increment()
            checks.append(eventLoop.inEventLoop)
            try? await Task.sleep(for: .milliseconds(5))
            checks.append(eventLoop.inEventLoop)
            async let child = eventLoop.inEventLoop
            checks.append(await child)
            return checks
        }
        #expect(checks == [true, true, true, true, true])
        #expect(!eventLoop.inEventLoop, "without the preference the task is back on the global executor")
    }

    /// Starting the proxy warms both request paths (a registered stream and a folder's file,
    /// which goes through `HTTPOrigin` and the HTTP client) and leaves nothing behind: no cache
    /// entry, no data file, no stream or folder, no request to any origin.
    @Test func theWarmUpRunsBothPathsAndLeavesNothingBehind() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        try await withTemporaryCache { cache in
            let server = try ProxyServer(cache: cache)
            try await server.start()
            // The start's own warm-up gives up after 2 s per request (a sanitizer run on a busy
            // machine can take longer); a second one with time to spare must answer both.
            #expect(await server.warmUp(timeout: TestTiming.time(.seconds(30))) == 2)
            #expect(server.core.registry.folders.isEmpty)
            #expect(server.core.registry.streams.isEmpty)
            await cache.flush()
            #expect(try await cache.entries().isEmpty)
            let data = cache.configuration.directory.appendingPathComponent("data")
            let files = (try? FileManager.default.contentsOfDirectory(atPath: data.path)) ?? []
            #expect(files.isEmpty, "warm-up files left: \(files)")
            #expect(origin.requests.isEmpty)

            // The proxy serves normally afterwards, folder files included.
            let bytes = TestData.random(count: 100_000, seed: 77)
            origin.setFile("/media/a.bin", data: bytes)
            let mount = try server.mountFolder(origin.url("/media/"))
            let base = try #require(server.baseURL)
            let url = try #require(URL(string: base.absoluteString + "/\(mount.token)/a.bin"))
            let fetched = try await Curl.fetch(url)
            #expect(fetched.status == 200)
            #expect(TestData.sha256(fetched.body) == TestData.sha256(bytes))
            await server.stop()
        }
    }
    /// A warm-up resource still in use when the start stops waiting for it is removed once it is
    /// idle, by a task of its own. Before, it stayed in the cache for good (its key is random):
    /// on a fresh CI machine under the sanitizer, 10 s ran out, and the control API's listing and
    /// a prune's list of what it evicted named the warm-up's resources beside the test's own.
    @Test func aWarmUpResourceStillReadWhenTheWaitRunsOutIsRemovedOnceIdle() async throws {
        // A read of 2 MB handed over 64 KiB at a time stays open while the test holds it.
        try await withTemporaryCache(configure: { $0.readBufferLimit = 65_536; $0.chunkSize = 65_536 }) { cache in
            let server = try ProxyServer(cache: cache)
            try await server.start()
            let key = CacheKey("streamcache:warm-up:held")
            let data = TestData.random(count: 2_000_000, seed: 78)
            let resource = cache.resource(for: key, origin: MemoryOrigin(file: data))
            var reader = resource.read(from: 0).makeAsyncIterator()
            var received = try #require(try await reader.next()).data
            await cache.flush()
            #expect(try await cache.entries().map(\.key) == [key])

            await server.removeThrowaway([key], waitingAtMost: .milliseconds(100))
            let listed = try await cache.entries().map(\.key)
            #expect(listed == [key], "a resource being read stays until its read ends: \(listed)")
            while let chunk = try await reader.next() { received.append(chunk.data) }
            #expect(TestData.sha256(received) == TestData.sha256(data))
            await server.warmUpLeftoversRemoved()
            #expect(try await cache.entries().isEmpty)
            let files = (try? FileManager.default.contentsOfDirectory(atPath: cache.configuration.directory.appendingPathComponent("data").path)) ?? []
            #expect(files.isEmpty, "files left: \(files)")
            await server.stop()
        }
    }
}
