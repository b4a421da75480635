import Foundation
@testable import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import Testing

/// ``StreamCache/Configuration/revalidationInterval``: cached bytes whose version the origin has
/// not confirmed for a while are checked before they are served, against a real loopback origin.
@Suite struct RevalidationTests {
    static let path = "/song.bin"

    /// The resource of ``path``; `timeout` is the origin's wait for an answer (30 s by default).
    static func resource(_ cache: StreamCache, _ server: TestOrigin, timeout: Duration? = nil) -> Resource {
        let url = server.url(path)
        var configuration = HTTPOrigin.Configuration()
        configuration.retry = RetryPolicy(maxAttempts: 2, initialBackoff: .milliseconds(20))
        if let timeout { configuration.timeout = timeout }
        return cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, configuration: configuration))
    }

    static func configuration(_ directory: URL, interval: Duration?) -> StreamCache.Configuration {
        var configuration = StreamCache.Configuration(directory: directory)
        configuration.revalidationInterval = interval
        // The origin answers on loopback; the default 2 s is for real links, and the sanitizer's
        // loaded runs, and a slower machine's full suite, took longer than that for a question a
        // test expects answered. The bound is not a wait: the answer ends it.
        configuration.revalidationTimeout = TestTiming.time(.seconds(20))
        configuration.completesResourcesInBackground = false
        return configuration
    }

    /// An origin serving ``path`` (`size` random bytes) and an empty directory for caches.
    static func withOrigin(size: Int, seed: UInt64, _ body: (TestOrigin, Data, URL) async throws -> Void) async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: size, seed: seed)
        server.setFile(path, data: data)
        try await withTemporaryDirectory { directory in try await body(server, data, directory) }
    }

    /// Reads the whole resource and says which of its bytes came from the cache.
    static func readWhole(_ resource: Resource) async throws -> (data: Data, sources: Set<ChunkSource>) {
        var data = Data()
        var sources: Set<ChunkSource> = []
        for try await chunk in resource.read(from: 0) {
            data.append(chunk.data)
            sources.insert(chunk.source)
        }
        return (data, sources)
    }

    @Test func aFileReplacedAtTheOriginIsFetchedAnewOnceTheWordIsOld() async throws {
        let server = try TestOrigin()
        let old = TestData.random(count: 1_500_000, seed: 901)
        let new = TestData.random(count: 1_200_000, seed: 902)
        server.setFile(Self.path, data: old, entityTag: "\"v1\"")
        try await withTemporaryDirectory { directory in
            // The default trusts a whole file: no request, and the old bytes.
            let trusting = try StreamCache(configuration: Self.configuration(directory, interval: nil))
            #expect(TestData.sha256(try await Self.readWhole(Self.resource(trusting, server)).data) == TestData.sha256(old))
            await trusting.shutdown()
            server.setFile(Self.path, data: new, entityTag: "\"v2\"")
            server.resetRecords()
            let stillTrusting = try StreamCache(configuration: Self.configuration(directory, interval: nil))
            #expect(TestData.sha256(try await Self.readWhole(Self.resource(stillTrusting, server)).data) == TestData.sha256(old))
            #expect(server.requests.isEmpty)
            await stillTrusting.shutdown()

            // Asking every time: the first byte's answer shows the new version, which is read whole.
            let checking = try StreamCache(configuration: Self.configuration(directory, interval: .zero))
            let song = Self.resource(checking, server)
            let read = try await Self.readWhole(song)
            #expect(TestData.sha256(read.data) == TestData.sha256(new))
            #expect(read.sources == [.origin])
            #expect(server.requests.first?.range == "bytes=0-0")
            #expect(server.bodyBytesSent(for: Self.path) == 1 + Int64(new.count))
            #expect(await song.info?.validator.entityTag == "\"v2\"")
            #expect(await song.info?.totalLength == Int64(new.count))
            await checking.shutdown()
        }
    }

    @Test func anUnchangedFileCostsOneRequestForOneByte() async throws {
        try await Self.withOrigin(size: 2_000_000, seed: 903) { server, data, directory in
            let cache = try StreamCache(configuration: Self.configuration(directory, interval: .zero))
            let song = Self.resource(cache, server)
            _ = try await Self.readWhole(song)
            server.resetRecords()
            let again = try await Self.readWhole(song)
            #expect(again.data == data)
            #expect(again.sources == [.cache])
            #expect(server.requests.map(\.range) == ["bytes=0-0"])
            #expect(server.bodyBytesSent(for: Self.path) == 1)
            await cache.shutdown()
        }
    }

    @Test func aReadThatStartsOnAMissingByteIsNotHeldUpByAQuestion() async throws {
        try await Self.withOrigin(size: 3_000_000, seed: 907) { server, data, directory in
            let cache = try StreamCache(configuration: Self.configuration(directory, interval: .zero))
            let song = Self.resource(cache, server)
            _ = try await song.read(ByteRange(2_000_000, 3_000_000)).collect()
            server.resetRecords()
            // Its download's answer is the origin's word, before any cached byte is served.
            let read = try await song.read(ByteRange(0, 3_000_000)).collect()
            #expect(TestData.sha256(read) == TestData.sha256(data))
            #expect(!server.requests.contains { $0.range == "bytes=0-0" }, "\(server.requests.map(\.range))")
            #expect(server.requests.first?.range?.hasPrefix("bytes=0-") == true)
            await cache.shutdown()
        }
    }

    @Test func readersThatStartTogetherShareOneQuestionAndTheAnswerIsKept() async throws {
        try await Self.withOrigin(size: 600_000, seed: 904) { server, data, directory in
            let first = try StreamCache(configuration: Self.configuration(directory, interval: .seconds(3600)))
            let song = Self.resource(first, server)
            _ = try await Self.readWhole(song)
            await song.flush()
            let id = try #require(try await first.store.entry(for: song.key)?.id)
            // The origin's word is two hours old, as if the file was cached the day before.
            try await first.store.recordVerification(resourceID: id, at: Date(timeIntervalSinceNow: -7200))
            await first.shutdown()
            server.resetRecords()
            // The answer comes late, so that every reader starts while the question is out.
            server.faults = { _, _, headers, _ in headers["Range"] == "bytes=0-0" ? .stall(seconds: 0.3) : nil }

            let second = try StreamCache(configuration: Self.configuration(directory, interval: .seconds(3600)))
            let again = Self.resource(second, server)
            #expect(again.isRevalidationDue == false, "nothing is known before the index is read")
            try await withThrowingTaskGroup(of: Data.self) { group in
                for _ in 0..<8 { group.addTask { try await Self.readWhole(again).data } }
                for try await read in group { #expect(read == data) }
            }
            #expect(server.requests.map(\.range) == ["bytes=0-0"])
            await again.flush()
            await second.shutdown()

            // The answer is in the index: the next process trusts the bytes for the rest of the hour.
            server.resetRecords()
            let third = try StreamCache(configuration: Self.configuration(directory, interval: .seconds(3600)))
            let verifiedAt = try #require(try await third.store.entry(for: song.key)?.verifiedAt)
            #expect(abs(verifiedAt.timeIntervalSinceNow) < 60)
            #expect(try await Self.readWhole(Self.resource(third, server)).data == data)
            #expect(server.requests.isEmpty)
            await third.shutdown()
        }
    }

    /// With an interval of zero, no read takes a word older than itself. A question out when the
    /// file is replaced may bring the old version; the reads that start after the change wait for
    /// the next question instead, get the new bytes, and share that one question.
    @Test func readsThatStartAfterAQuestionWasSentWaitForTheNextOne() async throws {
        try await Self.withOrigin(size: 800_000, seed: 911) { server, old, directory in
            let new = TestData.random(count: 700_000, seed: 912)
            let cache = try StreamCache(configuration: Self.configuration(directory, interval: .zero))
            let song = Self.resource(cache, server)
            #expect(TestData.sha256(try await Self.readWhole(song).data) == TestData.sha256(old))
            server.resetRecords()
            // The first question is held at the origin, which has already picked the file it answers for.
            let questions = Locked(0)
            let released = Locked(false)
            server.faults = { _, _, headers, _ in
                guard headers["Range"] == "bytes=0-0", questions.withLock({ $0 += 1; return $0 }) == 1 else { return nil }
                return .hold(until: { released.withLock { $0 } })
            }
            let early = Task { try await song.read(ByteRange(0, 65_536)).collect() }
            try await waitWhile(tries: 3000, every: .milliseconds(10)) { questions.withLock({ $0 }) == 0 }
            #expect(questions.withLock { $0 } == 1)
            try await Task.sleep(for: .milliseconds(50))
            server.setFile(Self.path, data: new, entityTag: "\"v2\"")

            let later = (0..<3).map { _ in Task { try await Self.readWhole(song).data } }
            try await waitWhile(tries: 3000, every: .milliseconds(10)) { await song.readsWaitingForTheNextQuestion < 3 }
            #expect(await song.readsWaitingForTheNextQuestion == 3)
            released.withLock { $0 = true }
            for read in later { #expect(TestData.sha256(try await read.value) == TestData.sha256(new)) }
            // The early read took the held answer, of either version (a change under its feet may end it).
            if case .success(let bytes) = await early.result {
                #expect(bytes == old.prefix(65_536) || bytes == new.prefix(65_536))
            }
            #expect(server.requests.filter { $0.range == "bytes=0-0" }.count == 2, "\(server.requests.map(\.range))")
            #expect(server.bodyBytesSent(for: Self.path) == 2 + Int64(new.count))
            #expect(await song.info?.validator.entityTag == "\"v2\"")
            await cache.shutdown()
        }
    }

    /// With an interval of zero, a read that would take its first bytes from a request sent
    /// before it began asks first: that request's answer is the version the origin had then. Here
    /// the file is replaced while the first read's answer is held; the second read, starting
    /// inside that answer's range, gets the new bytes.
    @Test func aReadThatWouldJoinARequestSentBeforeItAsksFirst() async throws {
        try await Self.withOrigin(size: 2_000_000, seed: 913) { server, old, directory in
            let new = TestData.random(count: 1_800_000, seed: 914)
            var configuration = Self.configuration(directory, interval: .zero)
            configuration.parallelDownloads = 1
            let cache = try StreamCache(configuration: configuration)
            let song = Self.resource(cache, server)
            // The first read's answer stops after 300 kB until released.
            let released = Locked(false)
            server.faults = { _, _, _, index in index == 0 ? .pause(afterBytes: 300_000, until: { released.withLock { $0 } }) : nil }
            defer { released.withLock { $0 = true } }
            let first = Task { try await Self.readWhole(song) }
            let held = ByteRange(0, 300_000)
            try await waitWhile(tries: 3000, every: .milliseconds(10)) { await !song.available.contains(held) }
            #expect(await song.available.contains(held))
            server.setFile(Self.path, data: new, entityTag: "\"v2\"")

            // It starts just past the held bytes, inside the held request's range.
            let second = Task { try await song.read(ByteRange(310_000, 410_000)).collect() }
            try await waitWhile(tries: 1000, every: .milliseconds(10)) { server.requests.isEmpty }
            released.withLock { $0 = true }
            #expect(TestData.sha256(try await second.value) == TestData.sha256(new[310_000..<410_000]))
            _ = await first.result
            #expect(server.requests.contains { $0.range == "bytes=0-0" }, "\(server.requests.map(\.range))")
            #expect(await song.info?.validator.entityTag == "\"v2\"")
            await cache.shutdown()
        }
    }

    /// A read that joins a download still waiting at the connection gate asks nothing, even with
    /// an interval of zero: that download's request goes out after the read began, so its answer
    /// is the origin's word of now. Here a prefetch's parts wait behind its first request (one
    /// connection for downloads no reader waits for), and a read starts where one of them will.
    @Test func aReadThatJoinsADownloadStillAtTheGateAsksNothing() async throws {
        try await Self.withOrigin(size: 8_000_000, seed: 915) { server, data, directory in
            // Slow, so that the first request still runs when the read comes.
            server.bytesPerSecond = TestTiming.rate(131_072)
            var transportConfiguration = AsyncHTTPClientTransport.Configuration()
            transportConfiguration.maximumConnectionsPerHost = 2
            let transport = AsyncHTTPClientTransport(configuration: transportConfiguration)
            var configuration = Self.configuration(directory, interval: .zero)
            configuration.parallelDownloads = 4
            configuration.parallelPartSize = 1 << 20
            configuration.connectionsKeptForReaders = 1
            configuration.minimumParallelSpeedup = nil
            let cache = try StreamCache(configuration: configuration)
            let url = server.url(Self.path)
            let song = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: transport))
            let prefetch = Task { try await song.prefetch(ByteRange(0, Int64(data.count))) }
            var gated: Int64?
            for _ in 0..<(500 * TestTiming.slowdown) {
                guard gated == nil else { break }
                gated = await song.downloads.values.first { $0.gateTicket != nil && !$0.passedGate && $0.position > 0 }?.position
                if gated == nil { try await Task.sleep(for: .milliseconds(10)) }
            }
            let start = try #require(gated, "a part waits at the gate")
            #expect(await !song.available.contains(start))
            let read = try await song.read(ByteRange(start, start + 65_536)).collect()
            #expect(TestData.sha256(read) == TestData.sha256(data[Int(start)..<Int(start) + 65_536]))
            #expect(!server.requests.contains { $0.range == "bytes=0-0" }, "\(server.requests.map(\.range))")
            prefetch.cancel()
            await cache.shutdown()
            try await transport.shutdown()
        }
    }

    @Test func theWordOfTheDownloadThatCachedAFileOutlivesItsProcess() async throws {
        try await Self.withOrigin(size: 900_000, seed: 906) { server, data, directory in
            let first = try StreamCache(configuration: Self.configuration(directory, interval: .seconds(3600)))
            #expect(try await Self.readWhole(Self.resource(first, server)).data == data)
            await first.shutdown()
            server.resetRecords()
            let second = try StreamCache(configuration: Self.configuration(directory, interval: .seconds(3600)))
            let again = try await Self.readWhole(Self.resource(second, server))
            #expect(again.data == data && again.sources == [.cache])
            #expect(server.requests.isEmpty)
            await second.shutdown()
        }
    }

    /// The same for a resource the index knew already: a later process's download renews the
    /// origin's word in the index (at most every few seconds, not for each of its answers), so a
    /// process after it serves the cached bytes without asking while that word holds.
    @Test func aLaterDownloadRenewsTheWordInTheIndex() async throws {
        // An hour, so the second process's word still holds when the third reads on any machine
        // (at 6 s, a full run on one core saw the third process ask); the first process's word is
        // made two hours old instead of waited out.
        let interval = Duration.seconds(3600)
        // No process fills the hole between the cached bytes (`300000-599999`) once its read
        // ended: a sanitized run recorded a request after the records were reset (0 bytes sent),
        // most likely the second's fill cut as it shut down; the third's fill, no question, would
        // be counted as one if it ended before the check.
        try await Self.withOrigin(size: 900_000, seed: 907) { server, data, directory in
            var configuration = Self.configuration(directory, interval: interval)
            configuration.fillsSmallGaps = false
            let first = try StreamCache(configuration: configuration)
            let song = Self.resource(first, server)
            _ = try await song.read(ByteRange(0, 300_000)).collect()
            await song.flush()
            let id = try #require(try await first.store.entry(for: song.key)?.id)
            try await first.store.recordVerification(resourceID: id, at: Date(timeIntervalSinceNow: -7200))
            await first.shutdown()
            let second = try StreamCache(configuration: configuration)
            _ = try await Self.resource(second, server).read(ByteRange(600_000, 900_000)).collect()
            await second.shutdown()
            // A request ends in the origin's records once its answer ends or its client left it.
            #expect(try await server.waitUntilAnswersEnd())
            server.resetRecords()
            let third = try StreamCache(configuration: configuration)
            let cached = try await Self.resource(third, server).read(ByteRange(600_000, 700_000)).collect()
            #expect(cached == data[600_000..<700_000])
            #expect(try await server.waitUntilAnswersEnd())
            #expect(server.requests.isEmpty,
                    "the second process's download confirmed the version: no question needed; asked \(server.requests.map { "\($0.status) \($0.range ?? "-")" })")
            await third.shutdown()
        }
    }

    @Test func anOriginThatDoesNotAnswerLeavesTheCachedBytesServed() async throws {
        try await Self.withOrigin(size: 800_000, seed: 905) { server, data, directory in
            var configuration = Self.configuration(directory, interval: .zero)
            configuration.revalidationTimeout = .milliseconds(300)
            let cache = try StreamCache(configuration: configuration)
            // The origin's own wait outlasts the stall, so only the revalidation's timeout can end
            // the read's wait within the bound below: with the origin's default 30 s, the test
            // passed with no revalidation timeout at all.
            let song = Self.resource(cache, server, timeout: .seconds(300))
            _ = try await Self.readWhole(song)

            // A stalled origin: the read waits out the timeout, then gets the cached bytes.
            let asked = Locked(0)
            server.faults = { _, _, _, _ in
                asked.withLock { $0 += 1 }
                return .stall(seconds: 120)
            }
            let started = ContinuousClock.now
            let stalled = try await Self.readWhole(song)
            #expect(stalled.data == data && stalled.sources == [.cache])
            // Far above the 300 ms timeout, for a loaded machine under ThreadSanitizer (4.02 s
            // once) and for the cooperative pool that other tests of a full run hold (up to 20 s),
            // and far below the stall.
            #expect(ContinuousClock.now - started < .seconds(60), "the read waited for the origin instead of the timeout")
            #expect(asked.withLock { $0 } == 1)
            // It is not asked again at once: a player's next requests are not held up by it.
            #expect(song.isRevalidationDue == false)
            #expect(try await Self.readWhole(song).data == data)
            #expect(asked.withLock { $0 } == 1)

            // Offline (nothing listens): the cached bytes, without an error.
            server.stop()
            song.verification.withLock { $0.failedAt = nil }
            #expect(song.isRevalidationDue)
            let offline = try await Self.readWhole(song)
            #expect(offline.data == data && offline.sources == [.cache])
            await cache.shutdown()
        }
    }

    /// An `Origin` of an app's own whose version (``Origin/currentInfo()``) states a length no
    /// resource can have is taken as no answer: the cached bytes are served, whole, and kept.
    /// Before, the new "version" was taken with its length, and the next gap the resource planned
    /// (`0..<-5`) stopped the process.
    @Test(arguments: [Int64(-5), ByteRange.largestLength + 1, Int64.max])
    func aVersionWithALengthNoResourceCanHaveIsNoAnswer(total: Int64) async throws {
        let file = TestData.random(count: 300_000, seed: 322)
        try await withTemporaryCache(configure: { $0.revalidationInterval = .zero }) { (cache: StreamCache) async throws -> Void in
            let origin = MemoryOrigin(file: file, version: {
                ResourceInfo(totalLength: total, mimeType: nil, acceptsByteRanges: true, validator: Validator(entityTag: "\"v2\""))
            })
            let song = cache.resource(for: CacheKey("test:misstating"), origin: origin)
            #expect(TestData.sha256(try await song.read(from: 0).collect()) == TestData.sha256(file))
            let again = try await song.read(from: 0).collect()
            #expect(origin.versionQuestions == 1, "the version was asked for")
            #expect(TestData.sha256(again) == TestData.sha256(file))
            #expect(try await song.cachedRanges == RangeSet([ByteRange(0, 300_000)]))
            #expect(await song.info?.totalLength == 300_000)
        }
    }

    @Test func dueIsDecidedByTheAgeOfTheWordAndALastFailure() {
        let now = Date()
        let clock = ContinuousClock.now
        typealias Verification = Resource.Verification
        #expect(Verification().isDue(every: .seconds(60), now: now, clock: clock))
        #expect(!Verification(confirmedAt: now.addingTimeInterval(-59)).isDue(every: .seconds(60), now: now, clock: clock))
        #expect(Verification(confirmedAt: now.addingTimeInterval(-60)).isDue(every: .seconds(60), now: now, clock: clock))
        // A clock set back cannot vouch for the bytes.
        #expect(Verification(confirmedAt: now.addingTimeInterval(10)).isDue(every: .seconds(60), now: now, clock: clock))
        // After a failure, 30 s pass before the next question, whatever the interval.
        #expect(!Verification(failedAt: clock - .seconds(29)).isDue(every: .zero, now: now, clock: clock))
        #expect(Verification(failedAt: clock - .seconds(31)).isDue(every: .zero, now: now, clock: clock))
        #expect(!Verification(failedAt: clock - .seconds(29)).isDue(every: .seconds(3600), now: now, clock: clock))
        #expect(Verification(failedAt: clock - .seconds(31)).isDue(every: .seconds(3600), now: now, clock: clock))
    }
}
