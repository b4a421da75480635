import Foundation
import GRDB
import StreamCache
import StreamCacheTestSupport
import Testing

/// Complete files checked against the digest their origin publishes (here an HTTP origin's
/// `Repr-Digest`; the cloud services' in `ContentCheckSourceTests`): matching bytes are kept and
/// not hashed again, corrupted bytes are dropped and fetched again, and an origin whose bytes
/// never match is not downloaded without end.
@Suite struct ContentCheckTests {
    static let path = "/song.mp3"
    static let size = 1_500_000

    /// The headers an HTTP origin tells a whole file's digest in.
    enum DigestHeader: CaseIterable {
        case reprDigest, legacyDigest, ownCloudChecksum
    }

    static func origin(seed: UInt64, header: DigestHeader = .reprDigest) throws -> (TestOrigin, Data, ContentDigest) {
        let server = try TestOrigin()
        let data = TestData.random(count: size, seed: seed)
        let digest = ContentHasher.digest(header == .ownCloudChecksum ? .sha1 : .sha256, of: data)
        let base64 = Data(digest.bytes).base64EncodedString()
        let headers = switch header {
        case .reprDigest: ["Repr-Digest": "sha-256=:\(base64):"]
        case .legacyDigest: ["Digest": "SHA-256=\(base64)"]
        case .ownCloudChecksum: ["OC-Checksum": "SHA1:\(digest.hex)"]
        }
        server.setFile(path, data: data, extraHeaders: headers)
        return (server, data, digest)
    }

    static func resource(_ cache: StreamCache, _ server: TestOrigin) -> Resource {
        let url = server.url(path)
        return cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
    }

    /// Makes the answers whose `Range` starts at 0 (one per download of the whole file) send the
    /// byte at each listed offset inverted, the first answer the first offset and so on; `nil`
    /// leaves that answer alone, and answers past the list repeat its last entry.
    static func corruptWholeFileDownloads(_ server: TestOrigin, at offsets: [Int64?]) {
        let answers = Locked(0)
        server.faults = { _, _, headers, _ in
            guard headers["Range"]?.hasPrefix("bytes=0-") == true else { return nil }
            let number = answers.withLock { count in
                defer { count += 1 }
                return count
            }
            return offsets[min(number, offsets.count - 1)].map { .flipByte(at: $0) }
        }
    }

    /// A cache in `directory` for `body`, shut down afterwards: one process's run, of several
    /// on one directory.
    static func withCache<T>(in directory: URL, _ body: (StreamCache) async throws -> T) async throws -> T {
        let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
        return try await withAsyncCleanup { try await body(cache) } cleanup: { await cache.shutdown() }
    }

    /// Caches the whole file of `server` in a cache in `directory` (one process's run), and
    /// returns its key.
    static func prefetchWhole(from server: TestOrigin, into directory: URL) async throws -> CacheKey {
        try await withCache(in: directory) { cache in
            let song = resource(cache, server)
            try await song.prefetch()
            await song.flush()
            return song.key
        }
    }

    /// Inverts the byte at `offset` of `key`'s data file in the cache at `directory`, behind the
    /// cache's back (a disk that rotted, another program).
    static func invertByte(at offset: UInt64, inTheDataFileOf key: CacheKey, cachedIn directory: URL) throws {
        let file = try FileHandle(forUpdating: directory.appendingPathComponent("data/\(key.fileStem).data"))
        defer { try? file.close() }
        try file.seek(toOffset: offset)
        let byte = try #require(try file.read(upToCount: 1)?.first)
        try file.seek(toOffset: offset)
        try file.write(contentsOf: Data([byte ^ 0xFF]))
    }

    /// Whether `event` is a content mismatch.
    static func isMismatch(_ event: ResourceEvent) -> Bool {
        if case .contentMismatch = event { true } else { false }
    }

    @Test func completeBytesThatMatchTheOriginsDigestAreRecordedAndNotHashedAgain() async throws {
        let (server, data, digest) = try Self.origin(seed: 301)
        defer { server.stop() }
        try await withTemporaryDirectory { directory in
            try await Self.withCache(in: directory) { first in
                let song = Self.resource(first, server)
                let events = await song.events()
                try await song.prefetch()
                #expect(await song.info?.contentDigest == digest)
                #expect(first.statistics.contentMatches == 1)
                #expect(first.statistics.contentMismatches == 0)
                let seen = await collectEvents(events, within: .seconds(5)) { if case .contentMatched = $0 { true } else { false } }
                #expect(seen.last == .contentMatched(digest))
                await song.flush()
                #expect(try await first.store.entry(for: song.key)?.contentMatched == digest)
            }
            // The next run trusts the recorded match: a read of the whole file hashes nothing.
            try await Self.withCache(in: directory) { second in
                let song = Self.resource(second, server)
                let requests = server.requestsArrived
                #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
                try await song.prefetch()
                #expect(server.requestsArrived == requests)
                #expect(second.statistics.contentMatches == 0)
            }
        }
    }

    @Test(arguments: DigestHeader.allCases)
    func bytesCorruptedOnTheWayAreDroppedAndFetchedAgain(header: DigestHeader) async throws {
        let (server, data, digest) = try Self.origin(seed: 302, header: header)
        defer { server.stop() }
        Self.corruptWholeFileDownloads(server, at: [10, nil])
        try await withTemporaryCache { cache in
            let song = Self.resource(cache, server)
            let events = await song.events()
            try await song.prefetch()
            var corrupted = data
            corrupted[10] ^= 0xFF
            let seen = await collectEvents(events, within: .seconds(5)) { $0 == .contentMatched(digest) }
            #expect(seen.contains(.contentMismatch(expected: digest, found: ContentHasher.digest(digest.algorithm, of: corrupted))))
            #expect(seen.last == .contentMatched(digest))
            #expect(server.bodyBytesSent(for: Self.path) == Int64(2 * Self.size), "the file once corrupted, then once whole")
            let requests = server.requestsArrived
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
            #expect(server.requestsArrived == requests)
            #expect(cache.statistics.contentMismatches == 1)
            #expect(cache.statistics.contentMatches == 1)
        }
    }

    /// An origin that serves the same wrong bytes twice (its published digest is stale or wrong)
    /// keeps them after the second download, with an error event, instead of fetching forever; the
    /// index keeps the verdict, so the next process does not download them a third time.
    @Test func bytesThatFailTheDigestTwiceAlikeAreKeptWithAnError() async throws {
        let (server, data, digest) = try Self.origin(seed: 303)
        defer { server.stop() }
        Self.corruptWholeFileDownloads(server, at: [10])
        var corrupted = data
        corrupted[10] ^= 0xFF
        try await withTemporaryDirectory { directory in
            try await Self.withCache(in: directory) { first in
                let song = Self.resource(first, server)
                let events = await song.events()
                try await song.prefetch()
                let seen = await collectEvents(events, within: .seconds(5)) { if case .error = $0 { true } else { false } }
                #expect(seen.filter(Self.isMismatch).count == 1)
                if case .error(let code, _) = seen.last { #expect(code == "contentMismatch") } else { Issue.record("no error event: \(seen.suffix(3))") }
                #expect(server.bodyBytesSent(for: Self.path) == Int64(2 * Self.size))
                #expect(try await song.isComplete)
                let requests = server.requestsArrived
                try await song.prefetch()
                #expect(try await song.read(from: 0).collect() == corrupted, "what the origin serves")
                #expect(server.requestsArrived == requests, "not fetched a third time")
                #expect(first.statistics.contentMismatches == 1)
                await song.flush()
                #expect(try await first.store.entry(for: song.key)?.contentDisputed == digest)
            }
            try await Self.withCache(in: directory) { second in
                let song = Self.resource(second, server)
                let requests = server.requestsArrived
                try await song.prefetch()
                #expect(try await song.read(from: 0).collect() == corrupted)
                #expect(server.requestsArrived == requests, "the next process keeps them too")
                #expect(second.statistics.contentMismatches == 0)
            }
        }
    }

    @Test func bytesThatFailTheDigestTwiceDifferentlyFailThePrefetch() async throws {
        let (server, _, _) = try Self.origin(seed: 304)
        defer { server.stop() }
        Self.corruptWholeFileDownloads(server, at: [10, 20, nil])
        try await withTemporaryCache { cache in
            let song = Self.resource(cache, server)
            let failure = await #expect(throws: StreamCacheError.self) { try await song.prefetch() }
            #expect(failure?.code == .contentMismatch)
            let cached = try await song.cachedRanges
            #expect(cached.isEmpty, "the second download's bytes are dropped too")
            #expect(server.bodyBytesSent(for: Self.path) == Int64(2 * Self.size))
            #expect(cache.statistics.contentMismatches == 2)
        }
    }

    /// With ``StreamCache/Configuration/checksContentDigests`` off, nothing is hashed: corrupted
    /// bytes stay as they came, fetched once.
    @Test func checksCanBeTurnedOff() async throws {
        let (server, data, _) = try Self.origin(seed: 306)
        defer { server.stop() }
        Self.corruptWholeFileDownloads(server, at: [10])
        try await withTemporaryCache(configure: { $0.checksContentDigests = false }) { cache in
            let song = Self.resource(cache, server)
            try await song.prefetch()
            var corrupted = data
            corrupted[10] ^= 0xFF
            #expect(try await song.read(from: 0).collect() == corrupted)
            #expect(server.bodyBytesSent(for: Self.path) == Int64(Self.size))
            #expect(cache.statistics.contentMismatches == 0)
            #expect(cache.statistics.contentMatches == 0)
        }
    }

    /// A check asked for hashes bytes that matched before: a byte changed on the disk since is
    /// found, and the file is dropped and fetched again by the next read.
    @Test func aCheckAskedForFindsBytesChangedOnDiskSinceTheirMatch() async throws {
        let (server, data, digest) = try Self.origin(seed: 307)
        defer { server.stop() }
        try await withTemporaryDirectory { directory in
            let key = try await Self.withCache(in: directory) { cache in
                let song = Self.resource(cache, server)
                try await song.prefetch()
                #expect(try await cache.checkContent(of: song.key) == .matched(digest))
                #expect(try await cache.checkContent(of: CacheKey("test:unknown")) == nil)
                await song.flush()
                return song.key
            }
            try ContentCheckTests.invertByte(at: 700_000, inTheDataFileOf: key, cachedIn: directory)
            var rotted = data
            rotted[700_000] ^= 0xFF

            try await Self.withCache(in: directory) { cache in
                #expect(cache.statistics.contentMatches == 0, "the recorded match is trusted when the file opens")
                let result = try await cache.checkContent(of: key)
                #expect(result == .mismatched(expected: digest, found: ContentHasher.digest(.sha256, of: rotted)))
                #expect(try await cache.checkContent(of: key) == .incomplete)
                let sent = server.bodyBytesSent(for: Self.path)
                #expect(TestData.sha256(try await Self.resource(cache, server).read(from: 0).collect()) == TestData.sha256(data))
                #expect(server.bodyBytesSent(for: Self.path) == sent + Int64(Self.size))
            }
        }
    }

    /// A reader in the middle of bytes that a check then finds corrupted is told so at its next
    /// step (`contentMismatch`), not that the origin's version changed: what it was handed may be
    /// the corrupted bytes.
    @Test func aReaderInTheMiddleOfBytesThatFailTheirCheckIsToldSo() async throws {
        let (server, _, digest) = try Self.origin(seed: 308)
        defer { server.stop() }
        try await withTemporaryDirectory { directory in
            let key = try await Self.prefetchWhole(from: server, into: directory)
            try ContentCheckTests.invertByte(at: UInt64(Self.size - 1), inTheDataFileOf: key, cachedIn: directory)
            // Small steps, few held ahead: the read is still under way when the check ends.
            var configuration = StreamCache.Configuration(directory: directory)
            configuration.chunkSize = 64 << 10
            configuration.readBufferLimit = 64 << 10
            let cache = try StreamCache(configuration: configuration)
            try await withAsyncCleanup {
                let song = Self.resource(cache, server)
                var chunks = song.read(ByteRange(0, Int64(Self.size))).makeAsyncIterator()
                let first = try #require(try await chunks.next())
                #expect(first.offset == 0 && first.data.count < Self.size, "the read goes on in steps")
                guard case .mismatched(digest, _) = try #require(try await cache.checkContent(of: key)) else {
                    Issue.record("the check finds the inverted byte")
                    return
                }
                do {
                    while try await chunks.next() != nil {}
                    Issue.record("the read went on with dropped bytes")
                } catch let error as StreamCacheError {
                    #expect(error.code == .contentMismatch, "\(error)")
                }
            } cleanup: { await cache.shutdown() }
        }
    }

    /// Complete bytes whose check never ran (a process killed first) are hashed when the cache
    /// next opens them; here the data file also had a byte changed on disk meanwhile.
    @Test func completeBytesLeftUncheckedAreCheckedWhenTheCacheOpens() async throws {
        let (server, data, digest) = try Self.origin(seed: 305)
        defer { server.stop() }
        try await withTemporaryDirectory { directory in
            let key = try await Self.prefetchWhole(from: server, into: directory)
            try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).write { db in
                try db.execute(sql: #"UPDATE "resource" SET "contentMatched" = NULL"#)
            }
            try ContentCheckTests.invertByte(at: 5000, inTheDataFileOf: key, cachedIn: directory)

            try await Self.withCache(in: directory) { second in
                let song = Self.resource(second, server)
                let events = await song.events()
                let sent = server.bodyBytesSent(for: Self.path)
                _ = try await song.cachedRanges
                let seen = await collectEvents(events, within: .seconds(10), until: Self.isMismatch)
                #expect(seen.contains { Self.isMismatch($0) })
                #expect(try await song.cachedRanges.isEmpty)
                #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
                #expect(server.bodyBytesSent(for: Self.path) == sent + Int64(Self.size))
                let matched = await collectEvents(events, within: .seconds(10)) { $0 == .contentMatched(digest) }
                #expect(matched.last == .contentMatched(digest))
            }
        }
    }
}
