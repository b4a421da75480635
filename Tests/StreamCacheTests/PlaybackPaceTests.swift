import Foundation
@testable import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import Testing

/// A player that plays in real time keeps its download a window of playing time ahead of it, not
/// the whole file ahead; readers that wait for the origin or read flat out are never held back.
@Suite struct PlaybackPaceTests {
    @Test func aRateIsMeasuredOnlyWhileTheReaderFindsItsBytesCached() {
        var pace = PlaybackPace(smallestStep: 1 << 20)
        let start = ContinuousClock.now
        pace.reader(at: 0, cached: true, now: start)
        pace.reader(at: 400_000, cached: true, now: start + .milliseconds(500))
        #expect(pace.rate == nil, "half a second is too short to tell a bitrate from a burst")
        pace.reader(at: 1_000_000, cached: true, now: start + .seconds(1))
        #expect(pace.rate == 1_000_000)
        pace.reader(at: 1_500_000, cached: true, now: start + .seconds(2))
        #expect(pace.rate == 500_000, "the lower of the last two seconds: the first filled buffers")
        pace.reader(at: 2_300_000, cached: true, now: start + .seconds(3))
        #expect(pace.rate == 500_000)
        pace.reader(at: 3_100_000, cached: true, now: start + .seconds(4))
        #expect(pace.rate == 800_000, "a player that plays faster gets a wider window a second later")
        pace.reader(at: 3_200_000, cached: false, now: start + .milliseconds(4100))
        #expect(pace.rate == nil, "a reader that waits for the origin shows the origin's speed, not its own")
        pace.reader(at: 3_300_000, cached: true, now: start + .milliseconds(4500))
        #expect(pace.rate == nil)
    }

    @Test func stepsGrowWhileTheReaderComesBackAtOnceAndShrinkWhenItTakesItsTime() {
        let step: Int64 = 1 << 20
        var pace = PlaybackPace(smallestStep: step)
        var now = ContinuousClock.now
        pace.reader(at: 0, cached: true, now: now)
        #expect(pace.stepLimit == step)
        for expected in [2 * step, 4 * step, 8 * step] {
            pace.handedOutStep(bytes: pace.stepLimit, now: now)
            now += .milliseconds(1)
            pace.reader(at: 0, cached: true, now: now)
            #expect(pace.stepLimit == expected)
        }
        // 8 MiB in 300 ms is 28 MB/s: faster than media plays, though 1 MiB in 300 ms is not.
        pace.handedOutStep(bytes: pace.stepLimit, now: now)
        now += .milliseconds(300)
        pace.reader(at: 0, cached: true, now: now)
        #expect(pace.stepLimit == 16 * step, "a long step copied on a busy machine is still a quick return")
        pace.handedOutStep(bytes: pace.stepLimit, now: now)
        now += .milliseconds(700)
        pace.reader(at: 0, cached: true, now: now)
        #expect(pace.stepLimit == 32 * step, "16 MiB in 700 ms is 24 MB/s")
        pace.handedOutStep(bytes: step, now: now)
        now += .milliseconds(60)
        pace.reader(at: 0, cached: true, now: now)
        #expect(pace.stepLimit == step, "a player's pace (1 MiB in 60 ms is 17 MB/s): its position is known to a step")
        for _ in 0..<70 {
            pace.handedOutStep(bytes: pace.stepLimit, now: now)
            pace.reader(at: 0, cached: true, now: now)
        }
        #expect(pace.stepLimit == .max, "growth stops at the largest step, without overflowing")
    }

    static let path = "/film.bin"

    /// One connection, a two-second window of at least `window` bytes, and chunks, read buffers
    /// and first requests that shrink with the sanitizer's slowdown, as the rates do.
    static func playingInRealTime(_ configuration: inout StreamCache.Configuration, window: Int64) {
        configuration.parallelDownloads = 1
        configuration.chunkSize = max(4096, TestTiming.rate(65_536))
        // The engine sees a reader where its read buffer ends: keep that close to the player.
        configuration.readBufferLimit = 2 * configuration.chunkSize
        configuration.initialSegmentSize = Int64(TestTiming.rate(262_144))
        configuration.playbackReadAhead = .seconds(2)
        // The window never shrinks below the player's two seconds: a loaded machine that holds
        // the player up (CI's sanitizer run) measures a lower rate, and with a smaller floor the
        // next download would start less than a quarter window ahead of it.
        configuration.minimumPlaybackReadAhead = window
        // Under the sanitizer's slowdown the uncached 0.8 MB would count as a small hole to fill.
        configuration.fillsSmallGaps = false
    }

    /// A 16 MB file whose first 3 MB are cached, on an origin as fast as loopback, read by a player
    /// that takes 1 MB/s (its bitrate) for 5 MB and then the rest as fast as it comes, with a window
    /// of two seconds (2 MB). Without the window, the player reaching the end of the cached
    /// bytes would have the origin send all the rest at once. Rates and sizes shrink under the
    /// sanitizer's slowdown; times do not.
    @Test func aPlayerInRealTimeKeepsItsDownloadAWindowAheadAndNeverWaits() async throws {
        let size = TestTiming.rate(16_000_000)
        let playerRate = TestTiming.rate(1_000_000)
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: size, seed: 811)
        server.setFile(Self.path, data: data)
        let window = Int64(2 * playerRate)
        try await withTemporaryCache(configure: { Self.playingInRealTime(&$0, window: window) }) { (cache: StreamCache) async throws -> Void in
            let url = server.url(Self.path)
            let film = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: AsyncHTTPClientTransport.shared))
            let prefetched = Int64(3 * playerRate)
            try await film.prefetch(ByteRange(0, prefetched))
            #expect(try await server.waitUntilAnswersEnd())
            server.resetRecords()
            var received = Data()
            let clock = ContinuousClock()
            var iterator = film.read(from: 0).makeAsyncIterator()
            // When the player had taken how much.
            var played: [(at: ContinuousClock.Instant, bytes: Int64)] = [(clock.now, 0)]
            // Plays 5 MB, a chunk's playing time after each chunk: a player held up (a loaded
            // machine) goes on at its bitrate, it does not race to catch up.
            while received.count < 5 * playerRate {
                guard let chunk = try await iterator.next() else { break }
                received.append(chunk.data)
                played.append((clock.now, Int64(received.count)))
                try await Task.sleep(for: .seconds(Double(chunk.data.count) / Double(playerRate)))
            }
            let total = Int64(received.count)
            #expect(try await server.waitUntilAnswersEnd())
            let requests = server.requests
            let fetched = prefetched + server.bodyBytesSent(for: Self.path)
            print("playing in real time: played \(total), cached \(fetched) in \(requests.count) requests")
            #expect(fetched <= total + 2 * window, "played \(total), cached \(fetched): \(requests.map { $0.range ?? "" })")
            #expect(requests.count >= 2, "the download paused and started again: \(requests.map { $0.range ?? "" })")
            // Each download starts well before the player reaches its first byte (half a window
            // before the engine's reader does, which is the read buffer ahead of the player): the
            // player never waits for the origin.
            var leads: [Int64] = []
            for request in requests {
                let first = try #require(request.range.flatMap { Int64($0.dropFirst(6).prefix { $0 != "-" }) })
                let playedThen = played.last { $0.at <= request.interval.lowerBound }?.bytes ?? 0
                leads.append(first - playedThen)
                #expect(first - playedThen >= window / 4, "a request for bytes from \(first) began when the player had taken \(playedThen)")
            }
            print("playing in real time: each request began ahead of the player by \(leads) bytes (window \(window))")

            while let chunk = try await iterator.next() { received.append(chunk.data) }
            #expect(TestData.sha256(received) == TestData.sha256(data))
            #expect(try await server.waitUntilAnswersEnd())
            #expect(prefetched + server.bodyBytesSent(for: Self.path) == Int64(size), "each byte came from the origin once")
        }
    }

    /// A reader that drains a partly cached file at disk speed is never taken for a player: it
    /// gets the cached bytes in a few long steps. A file cached whole comes in one.
    @Test func aReaderThatReadsFlatOutIsNotPaced() async throws {
        let size = 40_000_000
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: size, seed: 812)
        server.setFile(Self.path, data: data)
        try await withTemporaryCache(configure: { configuration in
            configuration.playbackReadAhead = .seconds(1)
            configuration.minimumPlaybackReadAhead = 1 << 20
        }) { (cache: StreamCache) async throws -> Void in
            let url = server.url(Self.path)
            let file = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: AsyncHTTPClientTransport.shared))
            // The regions of a read of `range`, and how many of them begin before `cachedEnd`.
            func regions(of range: ByteRange, cachedEnd: Int64 = .max) async throws -> (count: Int, bytes: Data) {
                var count = 0
                var received = Data()
                for try await region in file.regions(range) {
                    if region.range.lowerBound < cachedEnd { count += 1 }
                    var bytes = Data(count: Int(region.range.count))
                    _ = try bytes.withUnsafeMutableBytes { try region.read(into: $0, at: region.range.lowerBound) }
                    received.append(bytes)
                }
                return (count, received)
            }
            let cached: Int64 = 39_000_000
            try await file.prefetch(ByteRange(0, cached))
            let partly = try await regions(of: ByteRange(0, 39_500_000), cachedEnd: cached)
            #expect(TestData.sha256(partly.bytes) == TestData.sha256(data.prefix(39_500_000)))
            // Steps of 1, 2, 4, 8 and 16 MiB and the rest of the cached bytes: six. A return is
            // late when the reader took its step at under 20 MB/s (an 8 MiB step in over 420 ms);
            // steps then start again from 1 MiB: up to five more for one such return, and twelve
            // allows it. Thirty-eight steps if they did not grow. (With a fixed 50 ms for any
            // step, a sanitizer run came back late twice and took 13.)
            #expect(partly.count <= 12, "\(partly.count) regions for 39 MB cached")
            try await file.prefetch()
            let whole = try await regions(of: ByteRange(0, Int64.max))
            #expect(TestData.sha256(whole.bytes) == TestData.sha256(data))
            #expect(whole.count == 1, "\(whole.count) regions for a file cached whole")
        }
    }

    /// A download that serves a player in real time and, beside it, a reader that reads flat out
    /// (a second client saving the file while the first plays it) is not held to the player's
    /// window: a window binds a download only while every reader it serves has one. Bound by the
    /// player's window alone, each download the reader started paused 2 MB ahead of the player,
    /// before it reached the reader's bytes, and after 50 of them the reader failed with
    /// `originUnavailable` ("the origin kept ending downloads without delivering bytes").
    ///
    /// How many requests the reader's bytes take is not asserted: alone they come in one, but
    /// under the full suite's load the reader takes its bytes slowly enough to be measured as a
    /// player too (a rate of its own, and a window), and its download pauses and resumes with it
    /// (25 requests in one run).
    @Test func aDownloadAlsoServingAReaderThatReadsFlatOutIsNotHeldToThePlayersWindow() async throws {
        let size = TestTiming.rate(16_000_000)
        let playerRate = TestTiming.rate(1_000_000)
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: size, seed: 813)
        server.setFile(Self.path, data: data)
        try await withTemporaryCache(configure: { Self.playingInRealTime(&$0, window: Int64(2 * playerRate)) }) { (cache: StreamCache) async throws -> Void in
            let url = server.url(Self.path)
            let film = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, transport: AsyncHTTPClientTransport.shared))
            // 3 MB cached: the player's rate is known after a second of them.
            try await film.prefetch(ByteRange(0, Int64(3 * playerRate)))
            #expect(try await server.waitUntilAnswersEnd())
            server.resetRecords()
            let readerDone = Locked(false)
            let player = Task {
                var played = 0
                var iterator = film.read(from: 0).makeAsyncIterator()
                while !readerDone.withLock({ $0 }), played < size, let chunk = try await iterator.next() {
                    played += chunk.data.count
                    try await Task.sleep(for: .seconds(Double(chunk.data.count) / Double(playerRate)))
                }
                iterator.cancel()
                return played
            }
            // The player plays 1.5 s before the reader comes: its rate is known, its window set.
            try await waitWhile(tries: 500 * TestTiming.slowdown, every: .milliseconds(10)) { await !film.readers.values.contains(where: { $0.pace.rate != nil }) }
            #expect(await film.readers.values.contains { $0.pace.rate != nil }, "the player's rate is known")
            let read = try await film.read(from: 0).collect()
            readerDone.withLock { $0 = true }
            let played = try await player.value
            #expect(TestData.sha256(read) == TestData.sha256(data))
            print("beside a player in real time (it played \(played) bytes meanwhile): \(server.requests.count) requests")
        }
    }
}
