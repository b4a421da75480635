import Foundation
@testable import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// One cache at a time uses a cache directory (``CacheStore``): a second one would delete the
/// first one's unindexed files when it reconciles, evict files the first writes to, and mix two
/// versions of a changed file in one data file. The process-level view (`serve` holding the
/// directory against `get` and `cache clear`) is in ``ServeCommandTests``.
@Suite struct CacheDirectoryClaimTests {
    static let path = "/song.mp3"

    /// An origin that serves a random file of `count` bytes at ``path``, and a cache in `directory`
    /// that has read all of it (checked against the origin's bytes).
    static func cacheThatReadAFile(count: Int, seed: UInt64, in directory: URL) async throws -> (TestOrigin, Data, StreamCache, Resource) {
        let server = try TestOrigin()
        let data = TestData.random(count: count, seed: seed)
        server.setFile(path, data: data)
        let url = server.url(path)
        do {
            let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
            return (server, data, cache, song)
        } catch {
            server.stop()
            throw error
        }
    }

    /// A released claim lets the next store in at once, even while a copy of the lock file's
    /// descriptor is still open: a child process forked beside the release holds one until it
    /// calls exec, and the lock belongs to the open file, not to the descriptor.
    @Test func aReleasedClaimIsFreeWhileAForkedCopyOfItsFileIsStillOpen() async throws {
        try await withTemporaryDirectory { directory in
            let claim = try CacheDirectoryLock(directory: directory)
            let copy = try #require(claim.descriptor.withLock { $0 }.map { dup($0) })
            defer { close(copy) }
            #expect(copy >= 0)
            claim.release()
            let next = try CacheDirectoryLock(directory: directory)
            next.release()
        }
    }

    /// A cache that was shut down sends no request, also for a resource first asked for after
    /// the shutdown: its directory may be another cache's by then. What it had cached still reads.
    @Test func aCacheShutDownSendsNoRequestForAResourceAskedForAfterwards() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 300_000, seed: 957)
        server.setFile(Self.path, data: data)
        server.setFile("/later.mp3", data: TestData.random(count: 300_000, seed: 958))
        try await withTemporaryDirectory { directory in
            let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            let url = server.url(Self.path)
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
            await cache.shutdown()
            let requests = server.requestsArrived

            let laterURL = server.url("/later.mp3")
            let later = cache.resource(for: CacheKey(url: laterURL), origin: HTTPOrigin(url: laterURL))
            await #expect(throws: CancellationError.self) { _ = try await later.read(ByteRange(0, 1000)).collect() }
            #expect(try await song.read(ByteRange(1000, 2000)).collect() == data[1000..<2000])
            #expect(server.requestsArrived == requests, "\(server.requests.map { $0.path })")
        }
    }

    /// A cache that was shut down changes nothing in its directory, which may be the next
    /// cache's by then. Before, a removal through it deleted the next cache's row and data file
    /// (the bytes that cache's index still listed), and a pin or a recorded use changed that
    /// cache's index.
    @Test func aCacheShutDownChangesNothingInTheDirectoryTheNextCacheOpened() async throws {
        try await withTemporaryDirectory { directory in
            let (server, data, first, song) = try await Self.cacheThatReadAFile(count: 300_000, seed: 959, in: directory)
            defer { server.stop() }
            let url = server.url(Self.path)
            await first.shutdown()
            let next = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            let before = try #require(try await next.store.entry(for: song.key))
            let dataPath = next.store.dataPath(for: song.key)

            for change in 0..<4 {
                await #expect {
                    switch change {
                    case 0: _ = try await first.remove(song.key)
                    case 1: _ = try await first.removeAll()
                    case 2: _ = try await first.setPinned(true, for: song.key)
                    default: try await first.store.touch(song.key)
                    }
                } throws: { error in
                    (error as? StreamCacheError)?.code == .cacheInUse
                }
            }
            // What the first one cached still reads through it.
            #expect(try await song.read(ByteRange(1000, 2000)).collect() == data[1000..<2000])
            await first.flush()

            let after = try #require(try await next.store.entry(for: song.key))
            #expect(after.spans == before.spans && !after.pinned && after.lastAccessedAt == before.lastAccessedAt)
            #expect(FileManager.default.contents(atPath: dataPath) == data)
            let requests = server.requestsArrived
            let again = next.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            #expect(TestData.sha256(try await again.read(from: 0).collect()) == TestData.sha256(data))
            #expect(server.requestsArrived == requests, "the next cache has every byte")
            await next.shutdown()
        }
    }

    @Test func aSecondCacheOnADirectoryIsRefusedAndChangesNothingUntilTheFirstShutsDown() async throws {
        try await withTemporaryDirectory { directory in
            let (server, data, first, song) = try await Self.cacheThatReadAFile(count: 700_000, seed: 951, in: directory)
            defer { server.stop() }
            let url = server.url(Self.path)
            await first.flush()
            let dataPath = first.store.dataPath(for: song.key)

            for attempt in 0..<2 {
                #expect {
                    if attempt == 0 {
                        _ = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
                    } else {
                        _ = try CacheStore(directory: directory)
                    }
                } throws: { error in
                    (error as? StreamCacheError)?.code == .cacheInUse && "\(error)".contains("already open in this process")
                }
            }

            // A look at the directory shows what the first one committed, and cannot change it.
            let inspector = try CacheStore(inspecting: directory)
            let entry = try #require(try await inspector.entry(for: song.key))
            #expect(entry.spans == RangeSet([ByteRange(0, Int64(data.count))]) && !entry.pinned)
            for change in 0..<2 {
                await #expect {
                    if change == 0 { _ = try await inspector.remove(song.key) } else { _ = try await inspector.setPinned(true, for: song.key) }
                } throws: { error in
                    (error as? StreamCacheError)?.code == .cacheInUse
                }
            }
            #expect(FileManager.default.contents(atPath: dataPath) == data)
            #expect(try await first.store.entry(for: song.key)?.pinned == false)

            // The first one goes on serving its bytes; once it is shut down, the next one opens
            // the directory and has them, with no request.
            let requests = server.requestsArrived
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
            await first.shutdown()
            let next = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            let again = next.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            #expect(TestData.sha256(try await again.read(from: 0).collect()) == TestData.sha256(data))
            #expect(server.requestsArrived == requests)
            await next.shutdown()
        }
    }

    /// A look never claims the directory: a cache that opens while one is open is not turned
    /// away (`cache list` polled beside a starting `get` once made it exit 7).
    @Test func aLookAtADirectoryDoesNotKeepACacheFromOpeningIt() async throws {
        try await withTemporaryDirectory { (directory: URL) async throws -> Void in
            let first = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            await first.shutdown()
            let inspector = try CacheStore(inspecting: directory)
            let next = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            #expect(try await inspector.entries().isEmpty)
            await next.shutdown()
        }
    }

    @Test func inspectingADirectoryWithNoCacheIsAClearError() async throws {
        try await withTemporaryDirectory { (directory: URL) async throws -> Void in
            #expect {
                _ = try CacheStore(inspecting: directory.appendingPathComponent("nothing"))
            } throws: { error in
                (error as? StreamCacheError)?.code == .cacheIOFailed && "\(error)".contains("There is no cache at")
            }
        }
    }
}
