import Foundation
@testable import StreamCache
import StreamCacheTestSupport
import StreamCacheURLSession
import Testing

/// The engine against a real loopback origin: exact bytes, origin request and byte counts.
@Suite struct EngineTests {
    static let path = "/f.bin"

    /// The length a `Range: bytes=a-b` header asks for.
    static func requestedLength(_ header: String) -> Int64? {
        let bounds = header.dropFirst("bytes=".count).split(separator: "-")
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]) else { return nil }
        return last - first + 1
    }

    /// The first byte a `Range: bytes=a-…` header asks for.
    static func requestedStart(_ header: String) -> Int64? {
        Int64(header.dropFirst("bytes=".count).prefix { $0 != "-" })
    }

    func makeOrigin(size: Int, seed: UInt64 = 7) throws -> (TestOrigin, Data) {
        let server = try TestOrigin()
        let data = TestData.random(count: size, seed: seed)
        server.setFile(Self.path, data: data)
        return (server, data)
    }

    /// The resource of the test file at `server`. With `waitsOutHeldAnswers`, the origin waits
    /// for a silent answer as long as ``TestClients/heldAnswerTimeout``: the test holds one on
    /// purpose until its reader or prefetch got somewhere, which on a starved machine took longer
    /// than the default 30 s, after which the body goes on from the same byte in a new request
    /// that the hold does not stop.
    func resource(_ cache: StreamCache, _ server: TestOrigin, headers: HTTPHeaders = [:], credentials: (any CredentialProvider)? = nil,
                  waitsOutHeldAnswers: Bool = false) -> Resource {
        let url = server.url(Self.path)
        var configuration = HTTPOrigin.Configuration()
        if waitsOutHeldAnswers { configuration.timeout = TestClients.heldAnswerTimeout }
        configuration.retry = RetryPolicy(maxAttempts: 4, initialBackoff: .milliseconds(20))
        return cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, headers: headers, credentials: credentials, configuration: configuration))
    }

    @Test func readGivesOriginBytesAndSecondReadComesFromCache() async throws {
        let (server, data) = try makeOrigin(size: 3_000_000)
        try await withTemporaryCache { cache in
            let song = resource(cache, server)
            let first = try await song.read(from: 0).collect()
            #expect(TestData.sha256(first) == TestData.sha256(data))
            let requests = server.requestsArrived
            var sources: Set<ChunkSource> = []
            var second = Data()
            for try await chunk in song.read(from: 0) {
                sources.insert(chunk.source)
                second.append(chunk.data)
            }
            #expect(second == data)
            #expect(sources == [.cache])
            #expect(server.requestsArrived == requests)
            let info = try #require(await song.info)
            #expect(info.totalLength == Int64(data.count))
            #expect(info.acceptsByteRanges)
            #expect(info.validator.entityTag == "\"v1\"")
        }
    }

    /// The seed design's example: 10-20 and 50-60 cached, a read of 0-100 is five ordered segments.
    /// Written bytes reach the index within the commit interval even while their download is
    /// held up by the origin and nothing else arrives: a process killed during the stall keeps them.
    @Test func theBytesOfAStalledDownloadAreRecordedWithinTheCommitInterval() async throws {
        let (server, data) = try makeOrigin(size: 2_000_000, seed: 71)
        defer { server.stop() }
        let released = Locked(false)
        server.faults = { _, _, _, index in index == 0 ? .pause(afterBytes: 600_000, until: { released.withLock { $0 } }) : nil }
        try await withTemporaryCache { cache in
            let song = resource(cache, server, waitsOutHeldAnswers: true)
            let read = Task { try await song.read(ByteRange(0, 2_000_000)).collect() }
            var recorded: Int64 = 0
            for _ in 0..<500 {
                guard recorded < 600_000 else { break }
                try await Task.sleep(for: .milliseconds(20))
                recorded = try await cache.store.entry(for: song.key)?.spans.coveredByteCount ?? 0
            }
            #expect(recorded == 600_000, "the bytes before the stall are in the index while it lasts")
            released.withLock { $0 = true }
            #expect(TestData.sha256(try await read.value) == TestData.sha256(data))
        }
    }

    @Test func readOfPartlyCachedRangeIsFiveOrderedSegments() async throws {
        let (server, data) = try makeOrigin(size: 1000)
        // The holes must still be there when the read comes (see the next test).
        try await withTemporaryCache(configure: { $0.fillsSmallGaps = false }) { cache in
            let song = resource(cache, server)
            try await song.prefetch(ByteRange(10, 20))
            try await song.prefetch(ByteRange(50, 60))
            // The origin records a request once its answer ends, which a loaded machine's origin
            // did after the client had the bytes (a sanitized run saw the read's first two
            // requests only): before the records are reset and before they are read.
            #expect(try await server.waitUntilAnswersEnd())
            server.resetRecords()
            var segments: [(ChunkSource, ByteRange)] = []
            var bytes = Data()
            for try await chunk in song.read(ByteRange(0, 100)) {
                bytes.append(chunk.data)
                if let last = segments.last, last.0 == chunk.source, last.1.upperBound == chunk.offset {
                    segments[segments.count - 1].1 = ByteRange(last.1.lowerBound, chunk.range.upperBound)
                } else {
                    segments.append((chunk.source, chunk.range))
                }
            }
            #expect(bytes == data[0..<100])
            #expect(segments.map(\.0) == [.origin, .cache, .origin, .cache, .origin])
            #expect(segments.map(\.1) == [ByteRange(0, 10), ByteRange(10, 20), ByteRange(20, 50), ByteRange(50, 60), ByteRange(60, 100)])
            #expect(try await server.waitUntilAnswersEnd())
            let ranges = server.dataRequests(for: Self.path).compactMap(\.range)
            let snapshot = await song.debugSnapshot()
            #expect(ranges.count == 3, "\(server.requests.map { "\($0.status) \($0.range ?? "-") \($0.bodyBytesSent)" }) \(snapshot)")
            // The first request asks for every gap (the origin may serve several ranges); this
            // one sends the first range only, and is asked for one range at a time from then on.
            #expect(ranges.first?.hasPrefix("bytes=0-9,20-49,60-") == true, "\(ranges)")
            #expect(ranges.dropFirst().first == "bytes=20-49", "\(ranges)")
            #expect(ranges.last?.hasPrefix("bytes=60-") == true && ranges.last?.contains(",") == false, "\(ranges)")
        }
    }

    /// Regions follow each other without gaps, hold the origin's bytes, come while the download
    /// runs (not after it), and count as what they were when the read began.
    @Test func regionsOfAPartlyCachedRangeArriveInOrderAsTheyAreDownloaded() async throws {
        let (server, data) = try makeOrigin(size: 1_500_000)
        // The hole after the cached stretch must wait for the read (see the five-segment test).
        try await withTemporaryCache(configure: { $0.fillsSmallGaps = false }) { cache in
            let song = resource(cache, server, waitsOutHeldAnswers: true)
            try await song.prefetch(ByteRange(500_000, 550_000))
            server.bytesPerSecond = TestTiming.rate(1_000_000)
            // The read's second request (for the gap after the cached stretch) stops after
            // 100 kB until the reader has had two regions: the first gap's and the cached
            // stretch. On a loaded machine the reader's task may not run for longer than the whole
            // download takes (a full test run starved it for 18-23 s), and every byte would then
            // come in one region after the end.
            let regionsSeen = Locked(0)
            let requestsSeen = Locked(0)
            server.faults = { _, path, _, _ in
                guard path == Self.path, requestsSeen.withLock({ $0 += 1; return $0 }) == 2 else { return nil }
                return .pause(afterBytes: 100_000, until: { regionsSeen.withLock { $0 } >= 2 })
            }
            var position: Int64 = 0
            var bytes = Data()
            var regionsBeforeTheEnd = 0
            for try await region in song.regions(ByteRange(0, Int64.max)) {
                regionsSeen.withLock { $0 += 1 }
                #expect(region.range.lowerBound == position)
                position = region.range.upperBound
                var buffer = Data(count: Int(region.range.count))
                let count = try buffer.withUnsafeMutableBytes { try region.read(into: $0, at: region.range.lowerBound) }
                #expect(count == buffer.count)
                bytes.append(buffer)
                let cached = try await song.cachedRanges
                if !cached.contains(ByteRange(0, 1_500_000)) { regionsBeforeTheEnd += 1 }
            }
            #expect(TestData.sha256(bytes) == TestData.sha256(data))
            #expect(regionsBeforeTheEnd >= 2, "regions should come as the download writes them")
            #expect(requestsSeen.withLock { $0 } >= 2, "the read made a second request, held until the reader had two regions: \(server.timeline(for: Self.path))")
            // The origin records a request once its last byte is written, which may be after it arrived.
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < 1_500_000 }
            #expect(server.bodyBytesSent(for: Self.path) == 1_500_000, "each byte is fetched once")
            let statistics = await song.statistics
            #expect(statistics.bytesServedFromCache == 50_000)
            #expect(statistics.bytesServedFromOrigin == 1_450_000)
        }
    }

    /// Once nobody reads, a hole of at most `joinDistance` after cached bytes is fetched, each
    /// once; the start of the file and larger holes are left to readers.
    @Test func smallHolesAfterCachedBytesAreFilledOnceNobodyReads() async throws {
        let (server, data) = try makeOrigin(size: 1000)
        try await withTemporaryCache(configure: { $0.joinDistance = 100 }) { cache in
            let song = resource(cache, server)
            try await song.prefetch(ByteRange(10, 20))
            try await song.prefetch(ByteRange(50, 60))
            try await song.prefetch(ByteRange(600, 700))
            for _ in 0..<200 {
                let filled = try await song.cachedRanges.contains(ByteRange(20, 50))
                if filled, await !song.isDownloading { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            // [20, 50) is filled; [0, 10) starts the file, [60, 600) is over 100 bytes, [700, 1000) too.
            let cached = try await song.cachedRanges
            #expect(cached == RangeSet([ByteRange(10, 60), ByteRange(600, 700)]))
            let ranges = server.dataRequests(for: Self.path).compactMap(\.range)
            #expect(ranges.filter { $0 == "bytes=20-49" }.count == 1, "\(ranges)")
            var read = Data()
            for try await chunk in song.read(ByteRange(10, 60)) { read.append(chunk.data) }
            #expect(read == data[10..<60])
            #expect(server.dataRequests(for: Self.path).count == ranges.count, "the filled hole is read from the cache")
        }
    }

    /// Acceptance 2 at unit scale: 256 KiB at 0 %, 50 %, 10 %, 90 %, 30 %, then the whole file.
    /// Each seek costs two requests (its bytes, then its read-ahead), and the whole read fills the
    /// five gaps with requests sized from the speed the seeks showed, not with a ramp from 1 MiB
    /// in each; over a transport that cannot hold back a slow consumer, requests stay at 4 MiB.
    @Test(arguments: TransportKind.allCases)
    func seekPatternFetchesEachByteOnceInFewRequests(kind: TransportKind) async throws {
        let size = 40_000_000
        let (server, data) = try makeOrigin(size: size)
        let transport = kind.make()
        // Seeks in one request each, reads on one connection, and (over URLSession) requests
        // not bounded by the join wait: how fast a loaded machine moves bytes does not matter
        // (splitting slow seeks and long reads has tests of its own).
        try await withTemporaryCache(configure: {
            $0.maximumJoinWait = .seconds(3600)
            $0.minimumParallelGain = nil
            $0.parallelDownloads = 1
        }) { cache in
            let url = server.url(Self.path)
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport))
            for (index, percent) in [0, 50, 10, 90, 30].enumerated() {
                let start = Int64(size * percent / 100)
                let part = try await song.read(ByteRange(start, start + 262_144)).collect()
                #expect(part == data[Int(start)..<Int(start) + 262_144])
                try await waitUntilNoDownload(of: song, within: .seconds(60))
                #expect(server.dataRequests(for: Self.path).count <= 2 * (index + 1), "seek \(index + 1) at \(percent) %")
            }
            let whole = try await song.read(from: 0).collect()
            #expect(TestData.sha256(whole) == TestData.sha256(data))
            await cache.shutdown()
            let ratio = Double(server.bodyBytesSent(for: Self.path)) / Double(size)
            #expect(ratio <= 1.02, "origin bytes / file size = \(ratio)")
            let fill = server.dataRequests(for: Self.path).dropFirst(10).compactMap { $0.range.flatMap(Self.requestedLength) }
            if transport.holdsBackSlowConsumers {
                // Five gaps of 2.7 to 14.7 MB, one request each (the first one asked for all of
                // them together, and this origin sent the first range only).
                #expect(fill.count <= 6, "\(fill.count) requests for the rest: \(fill)")
            } else {
                #expect(fill.allSatisfy { $0 <= 4 << 20 }, "\(fill)")
            }
        }
    }

    /// An iterator's `cancel()` from another task ends a read that waits for the origin: the
    /// waiting `next()` throws `CancellationError` and the resource has no reader left.
    @Test(arguments: [false, true])
    func cancellingAnIteratorEndsAReadThatWaitsForTheOrigin(regions: Bool) async throws {
        let (server, data) = try makeOrigin(size: 2_000_000)
        let released = Locked(false)
        defer { released.withLock { $0 = true } }
        // The pause ends by itself at a deadline, so a cancel that does nothing fails, not hangs.
        let deadline = ContinuousClock.now + TestTiming.time(.seconds(60))
        server.faults = { _, _, _, _ in .pause(afterBytes: 64 << 10, until: { released.withLock { $0 } || ContinuousClock.now > deadline }) }
        try await withTemporaryCache { cache in
            let song = resource(cache, server)
            let range = ByteRange(0, Int64(data.count))
            let waiting: Task<Int64, any Error>
            let cancel: @Sendable () -> Void
            if regions {
                var iterator = song.regions(range).makeAsyncIterator()
                cancel = { [iterator] in iterator.cancel() }
                waiting = Task {
                    var count: Int64 = 0
                    while let region = try await iterator.next() { count += region.range.count }
                    return count
                }
            } else {
                var iterator = song.read(range).makeAsyncIterator()
                cancel = { [iterator] in iterator.cancel() }
                waiting = Task {
                    var count: Int64 = 0
                    while let chunk = try await iterator.next() { count += Int64(chunk.data.count) }
                    return count
                }
            }
            // The read has all the origin will send before it pauses, and waits for more.
            try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(10)) { try await song.cachedRanges.coveredByteCount < 64 << 10 }
            #expect(await !song.readers.isEmpty)
            cancel()
            await #expect(throws: CancellationError.self) { try await waiting.value }
            // The read leaves the resource on its own task, soon after.
            try await waitWhile(tries: 200 * TestTiming.slowdown, every: .milliseconds(10)) { await !song.readers.isEmpty }
            #expect(await song.readers.isEmpty)
        }
    }

    /// A download whose reader left is not cut mid-request: every byte the origin sent ends up in
    /// the cache, so none is fetched twice when the next reader comes. Nor does the grace period's
    /// watch cut it: it cancels only a download that made no progress during the period.
    @Test func aDownloadNobodyNeedsFinishesItsRequestInsteadOfWastingIt() async throws {
        let (server, data) = try makeOrigin(size: 12_000_000)
        // A first request (256 KiB: a 100 kB read asks for a quarter of the first segment) takes
        // about a second, so the grace period ends while it is under way.
        server.bytesPerSecond = 250_000
        try await withTemporaryCache(configure: { $0.idleDownloadGracePeriod = .milliseconds(300) }) { cache in
            let song = resource(cache, server)
            for start in [0, 6_000_000] {
                let part = try await song.read(ByteRange(Int64(start), Int64(start) + 100_000)).collect()
                #expect(part == data[start..<start + 100_000])
            }
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(30)))
            let cached = try await song.cachedRanges.coveredByteCount
            // The origin counts a request's bytes once its answer is written.
            try await waitWhile(tries: 100, every: .milliseconds(50)) { server.bodyBytesSent(for: Self.path) < cached }
            let sent = server.bodyBytesSent(for: Self.path)
            #expect(sent == cached, "the origin sent \(sent) bytes, the cache kept \(cached)")
            #expect(sent < 12_000_000 / 2)
            let ranges = try await song.cachedRanges
            #expect(ranges.contains(ByteRange(0, 256 << 10)) && ranges.contains(ByteRange(6_000_000, 6_000_000 + (256 << 10))),
                    "each first request came whole: \(ranges)")
        }
    }

    /// Nor does the watch take a download for stalled whose task runs late (a busy machine)
    /// while its transport holds bytes it has not written: cancelled, it would throw away what
    /// the origin sent, for the next reader to fetch again.
    @Test func aDownloadWhoseTaskRunsLateWithBytesWaitingIsNotTakenForStalled() async throws {
        let (server, data) = try makeOrigin(size: 4_000_000)
        // The first request (256 KiB) arrives in about 0.26 s, in small chunks; its download
        // takes 128 KiB, which ends the read, and the rest 0.9 s later: the second watch (0.4 s
        // each) begins and ends meanwhile, and comes 0.8 s after the last bytes arrived, within
        // the three watches that bytes may wait.
        server.bytesPerSecond = 1_000_000
        try await withTemporaryCache(configure: { $0.idleDownloadGracePeriod = .milliseconds(400) }) { cache in
            let url = server.url(Self.path)
            let transport = LateConsumerTransport(wrapping: URLSessionTransport.shared, before: 128 << 10, hold: .milliseconds(900))
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport))
            #expect(try await song.read(ByteRange(0, 100_000)).collect() == data[0..<100_000])
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(30)))
            let cached = try await song.cachedRanges
            // The origin counts a request's bytes once its answer is written.
            try await waitWhile(tries: 100, every: .milliseconds(50)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            let sent = server.bodyBytesSent(for: Self.path)
            #expect(sent == cached.coveredByteCount, "the origin sent \(sent) bytes, the cache kept \(cached)")
            #expect(cached.contains(ByteRange(0, 256 << 10)), "the first request came whole: \(cached)")
        }
    }

    /// A read that begins within bytes the transport of a download has already received, whose
    /// task has not written them yet (a busy machine), waits for that download: it does not cut
    /// the download's request there, which would throw away what the origin sent past the cut,
    /// and ask for it again. Counted from what the download wrote, the read was 1.5 MiB ahead, on
    /// a connection that brings 1 MB within the longest wait.
    @Test func aReadWithinBytesADownloadsTransportHoldsWaitsForThem() async throws {
        let (server, data) = try makeOrigin(size: 8_000_000)
        server.bytesPerSecond = 2_000_000
        let released = Locked(false)
        try await withTemporaryCache(configure: { configuration in
            configuration.initialSegmentSize = 4 << 20
            configuration.parallelDownloads = 1
        }) { cache in
            let url = server.url(Self.path)
            // The answer to the read from 0 (one request of 4 MiB) comes late after 256 KiB.
            let transport = LateConsumerTransport(wrapping: URLSessionTransport.shared, before: 256 << 10,
                                                  hold: .seconds(30), until: { released.withLock { $0 } })
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport))
            // A first read measures the connection: 2 MB/s.
            #expect(try await song.read(ByteRange(6_000_000, 6_100_000)).collect() == data[6_000_000..<6_100_000])
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(30)))
            let sentBefore = server.bodyBytesSent(for: Self.path)
            let whole = Task { try await song.read(ByteRange(0, 4 << 20)).collect() }
            // The origin sends on while the download's task takes nothing past 256 KiB.
            let seek: Int64 = (256 << 10) + (3 << 19)
            try await waitWhile(tries: 300, every: .milliseconds(10)) { server.bodyBytesSent(for: Self.path) - sentBefore < seek + 100_000 }
            #expect(server.bodyBytesSent(for: Self.path) - sentBefore >= seek + 100_000, "the origin sent past the read")
            let part = Task { try await song.read(ByteRange(seek, seek + 100_000)).collect() }
            // Once it waits, it has either joined the download or started its own.
            for _ in 0..<500 {
                if await song.waiters.values.contains(where: { $0.offset == seek }) { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            released.withLock { $0 = true }
            #expect(try await part.value == data[Int(seek)..<Int(seek) + 100_000])
            #expect(try await whole.value == data[0..<(4 << 20)])
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(30)))
            #expect(!server.requests.contains { $0.range.flatMap(Self.requestedStart) == seek }, "\(server.requests.map { $0.range ?? "-" })")
            let cached = try await song.cachedRanges
            try await waitWhile(tries: 100, every: .milliseconds(50)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            #expect(server.bodyBytesSent(for: Self.path) == cached.coveredByteCount, "no byte fetched twice: \(cached)")
        }
    }

    /// A request's speed is timed by when its bytes arrived, not by when a download whose task
    /// runs late took them in: held for a second after 256 KiB of a first request of 1 MiB that
    /// the loopback origin sends at once, the download measured the hold.
    @Test func aRequestsSpeedIsTimedByItsBytesArrivalNotByALateTask() async throws {
        let (server, data) = try makeOrigin(size: 2_000_000)
        try await withTemporaryCache { cache in
            let url = server.url(Self.path)
            let hold = TestTiming.time(.seconds(1))
            let transport = LateConsumerTransport(wrapping: URLSessionTransport.shared, before: 256 << 10, hold: hold)
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport))
            #expect(try await song.read(ByteRange(0, 1 << 20)).collect() == data[0..<(1 << 20)])
            let measured = try #require(await song.connectionThroughput)
            // Timed by the task, at most a mebibyte a second; by arrival, far more on loopback.
            let byTheTask = Double(1 << 20) / hold.timeInterval
            #expect(measured > 4 * byTheTask, "\(measured) B/s")
        }
    }

    /// A download that stops its read-ahead a little short of cached bytes closes the hole: a
    /// player replaying the stretch (and reading a little further, since cached bytes come faster)
    /// would otherwise need the origin for it. Nothing is fetched twice.
    ///
    /// The resource's own filling of small holes is off: it closes the same hole once the
    /// download has ended, and with it on the test passed with the read-ahead stopping where it
    /// was told to.
    @Test func aReadAheadThatStopsShortOfCachedBytesClosesTheHole() async throws {
        let (server, data) = try makeOrigin(size: 4_000_000)
        try await withTemporaryCache(configure: { configuration in
            configuration.initialSegmentSize = 256 << 10
            configuration.idleReadAhead = 512 << 10
            configuration.fillsSmallGaps = false
            // The read-aheads, not the clock, must end the downloads (see the probe test below).
            configuration.idleDownloadGracePeriod = .seconds(300)
        }) { cache in
            let song = resource(cache, server)
            // Cached first: a stretch from 1.3 MB (its own read-ahead runs past it).
            #expect(try await song.read(ByteRange(1_300_000, 1_400_000)).collect() == data[1_300_000..<1_400_000])
            try await waitUntilNoDownload(of: song, within: .seconds(60))
            // A read at the start: its read-ahead (512 KiB past where it left, at most 256 KiB in)
            // ends at most 768 KiB in, less than `joinDistance` (1 MiB) short of 1.3 MB.
            #expect(try await song.read(ByteRange(0, 100_000)).collect() == data[0..<100_000])
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(60)))
            let cached = try await song.cachedRanges
            #expect(cached.contains(ByteRange(0, 1_400_000)), "cached: \(cached)")
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            #expect(server.bodyBytesSent(for: Self.path) == cached.coveredByteCount, "no byte fetched twice")
        }
    }

    /// A player's 2-byte probe costs one short request and the minimum read-ahead, not megabytes.
    @Test(arguments: [Int64(0), 1 << 20])
    func aProbeCostsAShortRequestAndTheMinimumReadAhead(minimum: Int64) async throws {
        let (server, data) = try makeOrigin(size: 8_000_000)
        // A grace period no run reaches: under the thread sanitizer, with the whole suite running,
        // the read-ahead's request (after its 50 ms skimming hold) once brought no byte within
        // the default 5 s, and the reaper stopped it.
        try await withTemporaryCache(configure: { configuration in
            configuration.minimumIdleReadAhead = minimum
            configuration.idleDownloadGracePeriod = .seconds(300)
        }) { cache in
            let song = resource(cache, server)
            #expect(try await song.read(ByteRange(0, 2)).collect() == data[0..<2])
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(60)))
            let cached = try await song.cachedRanges
            // The origin records a request once its answer is written.
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            #expect(server.bodyBytesSent(for: Self.path) == cached.coveredByteCount)
            if minimum == 0 {
                #expect(server.dataRequests(for: Self.path).count == 1)
                #expect(cached.coveredByteCount == 256 << 10)
            } else {
                // From where the download was when the probe left (2 bytes to 256 KiB in).
                #expect(cached.contains(ByteRange(0, minimum + 2)), "cached: \(cached)")
                #expect(cached.coveredByteCount <= minimum + (256 << 10), "cached: \(cached)")
                #expect(server.dataRequests(for: Self.path).count <= 3)
            }
        }
    }

    /// A hold that no loaded machine outlasts between two reads issued back to back, and no split
    /// of a read into parts (a loaded machine can make loopback look slow).
    static func holdingReadAheadsLong(_ configuration: inout StreamCache.Configuration) {
        configuration.skimmingWindow = .seconds(300)
        configuration.minimumParallelGain = nil
    }

    /// A player that asks for a few hundred KB here and at once for a few hundred KB elsewhere is
    /// skimming: the first read's read-ahead, held back a moment after it, is dropped, so the
    /// origin sends each read's bytes and nothing after the first.
    @Test func aShortReadsReadAheadIsDroppedWhenThePlayerSkimsElsewhere() async throws {
        let (server, data) = try makeOrigin(size: 12_000_000)
        try await withTemporaryCache(configure: Self.holdingReadAheadsLong) { cache in
            let song = resource(cache, server)
            for start in [0, 6_000_000] {
                #expect(try await song.read(ByteRange(Int64(start), Int64(start) + 200_000)).collect() == data[start..<start + 200_000])
            }
            // Each read asked for a quarter of the first segment (256 KiB); the origin records a
            // request once its answer is written.
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < 2 * (256 << 10) }
            let ranges = server.dataRequests(for: Self.path).compactMap(\.range)
            #expect(ranges == ["bytes=0-262143", "bytes=6000000-6262143"], "\(ranges)")
            // The cache may still be writing the last chunk the origin sent.
            try await waitWhile(tries: 100, every: .milliseconds(20)) { try await song.cachedRanges.coveredByteCount < 2 * (256 << 10) }
            let cached = try await song.cachedRanges
            #expect(cached.ranges == [ByteRange(0, 256 << 10), ByteRange(6_000_000, 6_000_000 + (256 << 10))], "cached: \(cached)")
        }
    }

    /// A read that reaches into a held read-ahead lets it go on at once: a player that reads a
    /// file in short ranges one after another gets the next one from the download already there,
    /// without waiting for the hold and without a request of its own.
    @Test func aReadThatContinuesAShortReadTakesItsReadAheadAtOnce() async throws {
        let (server, data) = try makeOrigin(size: 12_000_000)
        try await withTemporaryCache(configure: Self.holdingReadAheadsLong) { cache in
            let song = resource(cache, server)
            #expect(try await song.read(ByteRange(0, 200_000)).collect() == data[0..<200_000])
            let start = ContinuousClock.now
            #expect(try await song.read(ByteRange(200_000, 1_000_000)).collect() == data[200_000..<1_000_000])
            // The hold (300 s) did not delay it.
            #expect(ContinuousClock.now - start < .seconds(150))
            let ranges = server.dataRequests(for: Self.path).compactMap(\.range)
            #expect(ranges.first == "bytes=0-262143", "\(ranges)")
            #expect(ranges.dropFirst().first?.hasPrefix("bytes=262144-") == true, "the download went on where it was: \(ranges)")
            try await waitUntilNoDownload(of: song, within: .seconds(60))
            let cached = try await song.cachedRanges
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            #expect(server.bodyBytesSent(for: Self.path) == cached.coveredByteCount, "no byte fetched twice")
        }
    }

    /// A short read's download that a stream went on from is a stream's from then on: when the
    /// player then seeks far away, it reads ahead where the stream left, as any stream's does,
    /// rather than being dropped as a skim's (3.8 MB past where it was, against the end of its
    /// request in flight, about 6 MB in, before).
    @Test func aShortReadsDownloadThatAStreamWentOnFromKeepsItsReadAheadWhenThePlayerSeeks() async throws {
        let (server, data) = try makeOrigin(size: 12_000_000)
        // The read-ahead is still under way when the player seeks.
        server.bytesPerSecond = 4_000_000
        try await withTemporaryCache(configure: { configuration in
            // Held or not when the stream comes (a loaded machine may come after the hold), the
            // short read's download is the stream's; the seek's own hold ends soon.
            configuration.skimmingWindow = .milliseconds(300)
            configuration.minimumParallelGain = nil
            configuration.playbackReadAhead = nil
            configuration.idleDownloadGracePeriod = .seconds(300)
        }) { cache in
            let song = resource(cache, server)
            #expect(try await song.read(ByteRange(0, 200_000)).collect() == data[0..<200_000])
            #expect(try await song.read(ByteRange(200_000, 4_000_000)).collect() == data[200_000..<4_000_000])
            #expect(try await song.read(ByteRange(10_000_000, 10_200_000)).collect() == data[10_000_000..<10_200_000])
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(60)))
            let cached = try await song.cachedRanges
            // 4 MB where the stream left, and 3.8 MB (what it took) past them.
            #expect(cached.contains(ByteRange(0, 7_800_000)), "cached: \(cached); \(server.timeline(for: Self.path))")
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            #expect(server.bodyBytesSent(for: Self.path) == cached.coveredByteCount, "no byte fetched twice")
        }
    }

    /// A reader that streamed a while and left finds the bytes after it ready when it comes back:
    /// the read-ahead grows with what it took, up to `idleReadAhead`, and then stops.
    @Test func aReaderThatStreamedLeavesAReadAheadBehind() async throws {
        let (server, data) = try makeOrigin(size: 16_000_000)
        // A grace period no run reaches (a sanitizer run once took longer than the default 5 s to
        // fetch the read-ahead): the read-ahead, not the clock, must stop the download.
        try await withTemporaryCache(configure: { $0.idleDownloadGracePeriod = .seconds(300) }) { cache in
            let song = resource(cache, server)
            #expect(try await song.read(ByteRange(0, 3_000_000)).collect() == data[0..<3_000_000])
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(60)))
            let cached = try await song.cachedRanges
            #expect(cached.contains(ByteRange(0, 6_000_000)), "cached: \(cached); \(server.timeline(for: Self.path))")
            #expect(cached.coveredByteCount <= 3_000_000 + (4 << 20) + (4 << 20), "cached: \(cached)")
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            #expect(server.bodyBytesSent(for: Self.path) == cached.coveredByteCount)
        }
    }

    /// The read-ahead a reader leaves grows with what it was handed, not with how far its
    /// download had run ahead of it: how far that is depends on how much the transport hands over
    /// at once, which no transport promises. A player that took well under 1 MiB leaves the
    /// minimum read-ahead (1 MiB) behind, even from a download that had reached 3 MB.
    @Test func theReadAheadGrowsWithWhatTheReaderTookNotWithHowFarTheDownloadGot() async throws {
        let (server, data) = try makeOrigin(size: 16_000_000)
        // Slow enough that the request in flight when the reader leaves is longer than what
        // arrives within `maximumJoinWait`: it is cut where the read-ahead ends.
        server.bytesPerSecond = 1_000_000
        // The download's first request past 3 MB waits until the reader has left.
        let readerLeft = Locked(false)
        let held = Locked<Int64?>(nil)
        server.faults = { _, _, headers, _ in
            guard let start = headers["Range"].flatMap(Self.requestedStart), start >= 3_000_000 else { return nil }
            held.withLock { $0 = $0 ?? start }
            return .pause(afterBytes: 0, until: { readerLeft.withLock { $0 } })
        }
        try await withTemporaryCache(configure: { configuration in
            // What the reader is handed is what it takes, give or take this much.
            configuration.readBufferLimit = 128 << 10
            configuration.playbackReadAhead = nil
            configuration.parallelDownloads = 1
            configuration.idleDownloadGracePeriod = .seconds(300)
        }) { cache in
            let song = resource(cache, server, waitsOutHeldAnswers: true)
            var iterator = song.read(from: 0).makeAsyncIterator()
            var taken = Data()
            while taken.count < 600_000, let chunk = try await iterator.next() { taken.append(chunk.data) }
            #expect(taken == data[0..<taken.count])
            // The download goes on while the reader stays; it stops at the held request.
            try await waitWhile(tries: 1_000 * TestTiming.slowdown, every: .milliseconds(20)) { held.withLock({ $0 }) == nil }
            let leftAt = try #require(held.withLock { $0 }, "the download reached 3 MB: \(server.timeline(for: Self.path))")
            iterator.cancel()
            try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(10)) { await !song.readers.isEmpty }
            #expect(await song.readers.isEmpty, "the engine saw the reader leave")
            readerLeft.withLock { $0 = true }
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(60)))
            let cached = try await song.cachedRanges
            let minimum: Int64 = 1 << 20
            #expect(cached.contains(ByteRange(0, leftAt + minimum)), "cached: \(cached)")
            // One chunk past the read-ahead at most; the old rule (how far the download got) went 3 MB past.
            #expect(cached.coveredByteCount <= leftAt + minimum + (256 << 10), "cached: \(cached)")
        }
    }

    /// Acceptance 3 at unit scale: 8 concurrent readers share downloads.
    @Test func concurrentReadersShareOneDownload() async throws {
        let size = 6_000_000
        let (server, data) = try makeOrigin(size: size)
        server.bytesPerSecond = 40_000_000
        try await withTemporaryCache { cache in
            let song = resource(cache, server)
            let digests = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<8 { group.addTask { TestData.sha256(try await song.read(from: 0).collect()) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(digests.count == 8)
            #expect(Set(digests) == [TestData.sha256(data)])
            await cache.shutdown()
            let ratio = Double(server.bodyBytesSent(for: Self.path)) / Double(size)
            #expect(ratio <= 1.02, "origin bytes / file size = \(ratio)")
        }
    }

    @Test func cachedBytesSurviveARestartAndServeOffline() async throws {
        let (server, data) = try makeOrigin(size: 2_000_000)
        try await withTemporaryDirectory { directory in
            let url = server.url(Self.path)
            do {
                let cache = try StreamCache(configuration: .init(directory: directory))
                let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
                try await song.prefetch()
                await cache.shutdown()
            }
            server.stop()
            let cache = try StreamCache(configuration: .init(directory: directory))
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, configuration: { var c = HTTPOrigin.Configuration(); c.retry = .none; return c }()))
            #expect(try await song.isComplete)
            let bytes = try await song.read(from: 0).collect()
            #expect(bytes == data)
            await cache.shutdown()
        }
    }

    @Test func readPastTheEndIsEmptyAndRangesAreClamped() async throws {
        let (server, data) = try makeOrigin(size: 1000)
        try await withTemporaryCache { cache in
            let song = resource(cache, server)
            let tail = try await song.read(ByteRange(900, 5000)).collect()
            #expect(tail == data[900..<1000])
            let beyond = try await song.read(ByteRange(1000, 2000)).collect()
            #expect(beyond.isEmpty)
        }
    }

    /// A read that starts past the longest resource the cache handles is refused before anything
    /// is planned or asked, here while the length is not known yet: at `Int64.max - 10`, planning
    /// its download overflowed and stopped the process. One just below the bound is asked for.
    @Test func aReadPastTheLongestResourceIsRefusedWithoutARequest() async throws {
        let (server, data) = try makeOrigin(size: 1000)
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let song = resource(cache, server)
            for start in [Int64.max - 10, ByteRange.largestLength] {
                let read = await #expect(throws: StreamCacheError.self) { _ = try await song.read(ByteRange(start, Int64.max)).collect() }
                #expect(read?.code == .rangeNotSatisfiable)
                let prefetch = await #expect(throws: StreamCacheError.self) { try await song.prefetch(ByteRange(start, start + 10)) }
                #expect(prefetch?.code == .rangeNotSatisfiable)
            }
            #expect(server.requests.isEmpty, "\(server.requests.map(\.range))")
            // The origin tells the length, and the read past it is empty, as any past the end is.
            #expect(try await song.read(ByteRange(ByteRange.largestLength - 1, Int64.max)).collect().isEmpty)
            #expect(server.requests.count == 1)
            #expect(try await song.read(from: 0).collect() == data)
        }
    }

    /// A length no resource can have, from a caller telling the version its source reports, is
    /// refused (`invalidArgument`) before anything is dropped: a negative one once became the
    /// resource's length and stopped the process at the next read.
    @Test func anImpossibleLengthToExpectIsRefusedAndTheBytesStay() async throws {
        let (server, data) = try makeOrigin(size: 1000)
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let song = resource(cache, server)
            #expect(try await song.read(from: 0).collect() == data)
            for length in [-1, ByteRange.largestLength + 1, Int64.max] {
                let refusal = await #expect(throws: StreamCacheError.self) {
                    try await song.expectVersion(Validator(entityTag: "\"another\""), totalLength: length)
                }
                #expect(refusal?.code == .invalidArgument)
            }
            #expect(try await song.cachedRanges == RangeSet([ByteRange(0, 1000)]))
            #expect(try await song.read(from: 0).collect() == data)
            #expect(server.requests.count == 1)
        }
    }

    /// An origin of an app's own that answers with numbers no resource can have (a negative
    /// offset, length or total; a range that runs past `Int64.max`) fails the read with
    /// `badResponse`, nothing cached. Before, the negative offset reached a range and stopped the
    /// process, and a negative length or total left the engine spinning at full CPU without end.
    @Test(arguments: [(Int64(-1), Int64?.some(10), Int64?.some(1000)), (0, -3, 1000), (0, 10, -5),
                      (Int64.max - 5, 10, nil), (0, 10, ByteRange.largestLength + 1)])
    func anOriginsImpossibleNumbersAreABadResponse(offset: Int64, length: Int64?, total: Int64?) async throws {
        let origin = MemoryOrigin(file: Data(count: 10)) { answer in
            (answer.offset, answer.length, answer.totalLength) = (offset, length, total)
        }
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let song = cache.resource(for: CacheKey("test:impossible"), origin: origin)
            let refusal = await #expect(throws: StreamCacheError.self) { _ = try await song.read(from: 0).collect() }
            #expect(refusal?.code == .badResponse && refusal?.message.contains("no resource can have") == true, "\(String(describing: refusal))")
            #expect(try await song.cachedRanges.isEmpty)
        }
    }

    /// An `Origin` of an app's own whose body runs on past the length its answer states (`length`
    /// bytes of the file, then bytes of no range) has only the stated bytes cached: a read gets
    /// the file's bytes, never what followed them.
    @Test func bytesPastAnAnswersStatedLengthAreNotCached() async throws {
        let file = TestData.random(count: 900_000, seed: 319)
        let origin = MemoryOrigin(file: file) { $0.body += Data(repeating: 0xEE, count: 5_000) }
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let song = cache.resource(for: CacheKey("test:overlong"), origin: origin)
            let first = try await song.read(ByteRange(0, 1000)).collect()
            #expect(first == file.prefix(1000))
            let whole = try await song.read(from: 0).collect()
            #expect(whole.count == file.count && TestData.sha256(whole) == TestData.sha256(file))
        }
    }

    /// An origin's own largest request binds every request, a read's first included: before,
    /// the first asked for the initial segment (1 MiB) whatever the origin's maximum. A maximum
    /// below one byte is no limit and reads go on as without one.
    @Test(arguments: [Int64(100_000), 0, -5])
    func anOriginsLargestRequestBindsTheFirstRequestToo(maximum: Int64) async throws {
        let file = TestData.random(count: 2_000_000, seed: 320)
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let origin = MemoryOrigin(file: file, maximumRequestLength: maximum)
            let song = cache.resource(for: CacheKey("test:limited"), origin: origin)
            let whole = try await song.read(from: 0).collect()
            #expect(whole.count == file.count && TestData.sha256(whole) == TestData.sha256(file))
            let askedFor = origin.rangesAsked.map(\.count)
            if maximum > 0 {
                #expect(askedFor.allSatisfy { $0 <= maximum } && askedFor.reduce(0, +) == Int64(file.count), "\(askedFor)")
            }
        }
    }

    /// An `Origin` of an app's own that answers from a later byte than asked fails the read with
    /// `badResponse` at its first answer, naming both bytes. Before, each request asked again for
    /// the bytes before the answer's start, about fifty in a burst, until the read failed with
    /// `originUnavailable` ("kept ending downloads without delivering byte 500000").
    @Test func anAnswerFromALaterByteThanAskedIsABadResponse() async throws {
        // The first 10 bytes of each answer are left out, and its offset says so.
        let origin = MemoryOrigin(file: TestData.random(count: 2_000_000, seed: 321)) { answer in
            let skipped = min(10, answer.body.count)
            answer.offset += Int64(skipped)
            answer.length = answer.length.map { $0 - Int64(skipped) }
            answer.body = answer.body.dropFirst(skipped)
        }
        try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
            let song = cache.resource(for: CacheKey("test:late-start"), origin: origin)
            let refusal = await #expect(throws: StreamCacheError.self) { _ = try await song.read(ByteRange(500_000, 1_500_000)).collect() }
            #expect(refusal?.code == .badResponse && refusal?.message.contains("from byte 500010 when asked from byte 500000") == true,
                    "\(String(describing: refusal))")
            #expect(origin.rangesAsked.count == 1, "asked \(origin.rangesAsked)")
        }
    }

    /// An `Origin` of an app's own that answers from an earlier byte than asked, as a store of
    /// whole blocks does (here 64 KiB blocks: each answer starts at the block that holds the
    /// asked byte), stays one that serves ranges: each read gets exact bytes, the block's bytes
    /// before the asked one are kept (a read of them asks nothing), and no read fetches more
    /// than its block-rounded range and read-ahead. Before, the first such answer marked the
    /// resource as one that ignores ranges: its download went on to the file's end.
    @Test func anAnswerFromAnEarlierByteThanAskedKeepsTheRangesServed() async throws {
        let block: Int64 = 65_536
        let file = TestData.random(count: 64 << 20, seed: 322)
        let origin = MemoryOrigin(file: file) { Self.startAtItsBlock(&$0, of: file, block: block) }
        try await withTemporaryCache(configure: { $0.parallelDownloads = 1 }) { (cache: StreamCache) async throws -> Void in
            let song = cache.resource(for: CacheKey("test:blocks"), origin: origin)
            let seek = ByteRange(40_000_000, 40_100_000)
            #expect(try await song.read(seek).collect() == file[Int(seek.lowerBound)..<Int(seek.upperBound)])
            try await ParallelDownloadTests.waitUntilIdle(song)
            let asked = origin.rangesAsked.count
            // Within the block the answer began at: cached already.
            let before = ByteRange(seek.lowerBound / block * block, seek.lowerBound)
            #expect(try await song.read(before).collect() == file[Int(before.lowerBound)..<Int(before.upperBound)])
            #expect(origin.rangesAsked.count == asked, "the bytes before the asked one were kept: \(origin.rangesAsked)")
            let other = ByteRange(3_000_123, 3_200_000)
            #expect(try await song.read(other).collect() == file[Int(other.lowerBound)..<Int(other.upperBound)])
            try await ParallelDownloadTests.waitUntilIdle(song)
            #expect(await song.info?.acceptsByteRanges == true)
            let fetched = origin.rangesAsked.reduce(0) { $0 + $1.count }
            #expect(fetched < 16 << 20, "two short reads fetched \(fetched) bytes: \(origin.rangesAsked)")
        }
    }

    /// A block answer whose bytes before the asked one hold cached bytes (a range prefetched
    /// inside the block) goes on through them to the asked bytes: they are not where the
    /// download runs into the cache. Before, the download ended on meeting them, and each
    /// request the reader made again met them again, until the read failed.
    @Test func aBlockAnswerGoesOnThroughCachedBytesBeforeTheAskedOne() async throws {
        let block: Int64 = 65_536
        let file = TestData.random(count: 4 << 20, seed: 323)
        let roundsDown = Locked(false)
        // An answer's first chunk is written alone: of 9000 bytes, the block's ends at 140072,
        // inside the prefetched bytes.
        let origin = MemoryOrigin(file: file, chunkSize: 9_000) { answer in
            if roundsDown.withLock({ $0 }) { Self.startAtItsBlock(&answer, of: file, block: block) }
        }
        try await withTemporaryCache(configure: { $0.parallelDownloads = 1 }) { (cache: StreamCache) async throws -> Void in
            let song = cache.resource(for: CacheKey("test:blocks-cached"), origin: origin)
            try await song.prefetch(ByteRange(140_000, 141_000))
            #expect(try await song.cachedRanges == RangeSet([ByteRange(140_000, 141_000)]))
            roundsDown.withLock { $0 = true }
            let seek = ByteRange(150_000, 250_000)
            #expect(try await song.read(seek).collect() == file[Int(seek.lowerBound)..<Int(seek.upperBound)])
            #expect(origin.rangesAsked.count <= 3, "asked \(origin.rangesAsked)")
        }
    }

    /// Makes `answer` start at the first byte of the `block`-byte block that holds its first
    /// byte, with `file`'s bytes before that one: an answer from a store of whole blocks.
    static func startAtItsBlock(_ answer: inout MemoryOrigin.Answer, of file: Data, block: Int64) {
        let start = answer.offset / block * block
        answer.body = file[Int(start)..<Int(answer.offset)] + answer.body
        answer.length = answer.length.map { $0 + answer.offset - start }
        answer.offset = start
    }

    @Test func eventsReportInfoAndCachedBytes() async throws {
        let (server, _) = try makeOrigin(size: 500_000)
        try await withTemporaryCache { cache in
            let song = resource(cache, server)
            let events = await song.events()
            try await song.prefetch()
            await song.flush()
            var sawInfo = false
            var cached: Int64 = 0
            var committed = false
            for await event in events {
                switch event {
                case .infoKnown(let info): sawInfo = info.totalLength == 500_000
                case .bytesCached(_, let total): cached = total
                case .committed(let spans): committed = spans.coveredByteCount == 500_000
                default: break
                }
                if sawInfo, cached == 500_000, committed { break }
            }
            #expect(sawInfo && cached == 500_000 && committed)
            let statistics = await song.statistics
            #expect(statistics.bytesDownloaded == 500_000)
        }
    }
}

extension EngineTests {
    /// A subscriber that reads nothing while a download reports hundreds of chunks (a user
    /// interface whose main thread was busy) still gets every event but the progress that later
    /// events restate: each download's start and end, the info, the final totals. With a buffer
    /// that dropped the oldest events, the first download's start and the info were lost.
    ///
    /// Requests of 64 KiB make it hundreds of reports however many chunks a busy download writes
    /// at once (each request's bytes are reported apart).
    @Test func aSlowSubscriberLosesOnlyProgress() async throws {
        let size = 24_000_000
        let (server, data) = try makeOrigin(size: size)
        try await withTemporaryCache(configure: { configuration in
            configuration.initialSegmentSize = 64 << 10
            configuration.maximumSegmentSize = 64 << 10
        }) { cache in
            let song = resource(cache, server)
            let events = await song.events()
            try await song.prefetch()
            await song.flush()
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(data))
            let received = await collectEvents(events) { event in
                if case .committed(let spans) = event { spans.coveredByteCount == Int64(size) } else { false }
            }

            // The first download starts before its answer tells the info.
            guard case .downloadStarted(let first) = received.first, first.lowerBound == 0 else {
                Issue.record("the first event is not the first download's start: \(received.prefix(3))")
                return
            }
            #expect(received.contains { if case .infoKnown(let info) = $0 { info.totalLength == Int64(size) } else { false } })
            let started = received.filter { if case .downloadStarted = $0 { true } else { false } }
            let ended = received.filter { if case .downloadEnded = $0 { true } else { false } }
            #expect(!started.isEmpty && started.count == ended.count, "\(started.count) downloads started, \(ended.count) ended")
            let cached = received.compactMap { event -> (range: ByteRange, total: Int64)? in
                if case .bytesCached(let range, let total) = event { (range, total) } else { nil }
            }
            #expect(cached.last?.total == Int64(size))
            #expect(cached.reduce(0) { $0 + $1.range.count } < Int64(size), "no progress was dropped: the subscriber never fell behind")
            #expect(received.count <= ResourceEvents.capacity + started.count + ended.count + 1)
        }
    }

    /// Cancelling the task that waits for events ends the sequence, as it does an `AsyncStream`.
    @Test(.timeLimit(.minutes(5))) func cancellingTheWatcherEndsItsEvents() async throws {
        let (server, _) = try makeOrigin(size: 1000)
        try await withTemporaryCache { cache in
            let events = await resource(cache, server).events()
            let watcher = Task {
                var count = 0
                for await _ in events { count += 1 }
                return count
            }
            try await Task.sleep(for: .milliseconds(50))
            watcher.cancel()
            #expect(await watcher.value == 0)
        }
    }

    /// Cancels `prefetch` and expects it to end with `CancellationError` and `song`'s downloads to
    /// end; then lets the origin's held answers go on (`released`) and expects no request to reach
    /// it after the stop.
    func stopAndExpectNoRequestAfter(_ prefetch: Task<Void, any Error>, of song: Resource, on server: TestOrigin,
                                     releasing released: Locked<Bool>) async throws {
        prefetch.cancel()
        await #expect(throws: CancellationError.self) { try await prefetch.value }
        // 30 s: in a rehearsal's main suite, a minute in, as every suite ran at once, the cut
        // download left the resource just as 10 s ran out.
        #expect(try await waitUntilNoDownload(of: song, within: .seconds(30), checkingEvery: .milliseconds(20)))
        let stoppedAt = ContinuousClock.now
        released.withLock { $0 = true }
        let late = try await server.requests(arrivedSince: stoppedAt)
        #expect(late.isEmpty, "\(late.map { $0.range ?? "-" })")
    }

    /// Cancelling a prefetch stops its downloads, the request in flight included (an app's "stop
    /// downloading this album"); what came stays cached, and the origin gets no request after it.
    /// Before, the downloads went on to the end of the file.
    @Test func cancellingAPrefetchStopsItsDownloads() async throws {
        let size = 6_000_000
        let (server, _) = try makeOrigin(size: size, seed: 31)
        defer { server.stop() }
        // Every answer stops after 700 kB until the end, so the prefetch cannot finish first.
        let released = Locked(false)
        defer { released.withLock { $0 = true } }
        server.faults = { _, _, _, _ in .pause(afterBytes: 700_000, until: { released.withLock { $0 } }) }
        try await withTemporaryCache { cache in
            let song = resource(cache, server, waitsOutHeldAnswers: true)
            let prefetch = Task { try await song.prefetch() }
            try await waitWhile(tries: 250 * TestTiming.slowdown, every: .milliseconds(20)) { try await song.cachedRanges.coveredByteCount < 700_000 }
            try await stopAndExpectNoRequestAfter(prefetch, of: song, on: server, releasing: released)
            #expect(server.bodyBytesSent(for: Self.path) < Int64(size))
            #expect(try await song.cachedRanges.coveredByteCount >= 700_000, "what came stays cached")
        }
    }

    /// A prefetch that joined a player's read-ahead gives it back when it is done: the read-ahead
    /// goes on to where it would have stopped (3 MB past what the player took), so the player
    /// coming back finds its bytes. Before, the prefetch's end cut the download where it stood
    /// (3.33 MB). A prefetch stopped by its caller ("stop downloading") still cuts it, request in
    /// flight and all: no request reaches the origin after the stop.
    @Test(arguments: [false, true])
    func aPrefetchThatJoinedAReadAheadGivesItBackWhenDoneAndCutsItWhenStopped(prefetchFinishes: Bool) async throws {
        let (server, data) = try makeOrigin(size: 16_000_000, seed: 37)
        defer { server.stop() }
        // Slow enough that a cut lands well short of the read-ahead's end.
        server.bytesPerSecond = 4_000_000
        // The request that carries byte 3.2 MB stops there until the prefetch has joined.
        let released = Locked(false)
        defer { released.withLock { $0 = true } }
        let pauseAt: Int64 = 3_200_000
        server.faults = { _, _, headers, _ in
            guard let header = headers["Range"], let start = Self.requestedStart(header), start < pauseAt,
                  Self.requestedLength(header).map({ start + $0 > pauseAt }) ?? true else { return nil }
            return .pause(afterBytes: Int(pauseAt - start), until: { released.withLock { $0 } })
        }
        try await withTemporaryCache(configure: { configuration in
            configuration.parallelDownloads = 1
            configuration.playbackReadAhead = nil
            configuration.idleDownloadGracePeriod = .seconds(300)
        }) { cache in
            let song = resource(cache, server, waitsOutHeldAnswers: true)
            #expect(try await song.read(ByteRange(0, 3_000_000)).collect() == data[0..<3_000_000])
            try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(10)) { try await song.cachedRanges.coveredByteCount < pauseAt }
            #expect(try await song.cachedRanges == RangeSet([ByteRange(0, pauseAt)]), "the read-ahead waits at 3.2 MB")
            let prefetchEnd: Int64 = prefetchFinishes ? 3_300_000 : 12_000_000
            let prefetch = Task { try await song.prefetch(ByteRange(3_000_000, prefetchEnd)) }
            try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(10)) { await !song.downloads.values.contains(where: { $0.kind == .prefetch }) }
            let downloads = await song.downloadsDescription
            #expect(await song.downloads.count == 1, "the prefetch joined the read-ahead: \(downloads)")
            #expect(await song.downloads.values.first?.kind == .prefetch)
            guard prefetchFinishes else {
                try await stopAndExpectNoRequestAfter(prefetch, of: song, on: server, releasing: released)
                let cached = try await song.cachedRanges
                #expect(cached == RangeSet([ByteRange(0, pauseAt)]), "\(cached); \(server.timeline(for: Self.path))")
                return
            }
            released.withLock { $0 = true }
            try await prefetch.value
            #expect(try await waitUntilNoDownload(of: song, within: .seconds(60)))
            let cached = try await song.cachedRanges
            #expect(cached.contains(ByteRange(0, 6_000_000)), "the read-ahead went on: \(cached); \(server.timeline(for: Self.path))")
            #expect(cached.coveredByteCount <= 3_000_000 + (4 << 20) + (4 << 20), "a read-ahead's bytes, not more: \(cached)")
            try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: Self.path) < cached.coveredByteCount }
            #expect(server.bodyBytesSent(for: Self.path) == cached.coveredByteCount, "no byte fetched twice")
            #expect(try await song.read(ByteRange(3_000_000, 6_000_000)).collect() == data[3_000_000..<6_000_000])
        }
    }

    /// A prefetch of many segments completes (each wake-up is progress, not a failed re-plan).
    @Test func prefetchOfALargeResourceCompletes() async throws {
        let (server, data) = try makeOrigin(size: 40_000_000)
        try await withTemporaryCache(configure: { $0.chunkSize = 16 * 1024 }) { cache in
            let song = resource(cache, server)
            try await song.prefetch()
            #expect(try await song.isComplete)
            server.stop()
            let bytes = try await song.read(from: 0).collect()
            #expect(TestData.firstDifference(bytes, data) == nil)
            #expect(server.bodyBytesSent(for: Self.path) == Int64(data.count))
        }
    }
}
