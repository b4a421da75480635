@testable import StreamCache
import Testing

/// The arithmetic that tells a cap on each connection from a link all connections share, on
/// made-up clocks: transfers on a loaded machine are too irregular to pin it end to end.
@Suite struct ParallelGainTests {
    static let start = ContinuousClock.now

    static func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    /// One request alone at `rate`, then two side by side at `eachRate` each for the same time.
    static func gain(alone rate: Double, twoAtOnce eachRate: Double) -> ParallelGain {
        var gain = ParallelGain()
        var mark = gain.beginReceiving(at: at(0))
        gain.record(rate: rate, connections: gain.endReceiving(since: mark, startedAt: at(0), at: at(100)), at: at(100))
        mark = gain.beginReceiving(at: at(200))
        let other = gain.beginReceiving(at: at(200))
        let first = gain.endReceiving(since: mark, startedAt: at(200), at: at(300))
        gain.endReceiving(since: other, startedAt: at(200), at: at(300))
        #expect(abs(first - 2) < 1e-9)
        gain.record(rate: eachRate, connections: first, at: at(300))
        return gain
    }

    @Test func connectionsThatKeepTheirSpeedSideBySideHelp() {
        let gain = Self.gain(alone: 4_000_000, twoAtOnce: 4_000_000)
        #expect(gain.together.map { abs($0 - 8_000_000) < 1 } == true)
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(300)) == true)
    }

    @Test func connectionsThatShareOneLinkDoNotHelp() {
        let gain = Self.gain(alone: 10_000_000, twoAtOnce: 5_000_000)
        #expect(gain.together.map { abs($0 - 10_000_000) < 1 } == true)
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(300)) == false)
    }

    @Test func nothingIsKnownBeforeBothWereMeasuredOrAfterTheMeasurementOfSeveralGrewOld() {
        var gain = ParallelGain()
        #expect(gain.helps(minimumSpeedup: 1.4) == nil)
        gain.record(rate: 4_000_000, connections: 1, at: Self.at(0))
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(0)) == nil)
        let measured = Self.gain(alone: 10_000_000, twoAtOnce: 5_000_000)
        #expect(measured.helps(minimumSpeedup: 1.4, now: Self.at(300) + ParallelGain.memory) == nil)
    }

    /// A request that overlapped another for a part of its time only is no sample of either kind.
    @Test func aRequestThatOverlappedOthersInPartIsLeftOut() {
        var gain = ParallelGain()
        let long = gain.beginReceiving(at: Self.at(0))
        let short = gain.beginReceiving(at: Self.at(50))
        gain.endReceiving(since: short, startedAt: Self.at(50), at: Self.at(100))
        let connections = gain.endReceiving(since: long, startedAt: Self.at(0), at: Self.at(200))
        #expect(abs(connections - 1.25) < 1e-9)
        gain.record(rate: 4_000_000, connections: connections)
        #expect(gain.alone == nil && gain.together == nil)
    }

    /// Two parts of a split read that a shared link delivers one after the other: each part alone
    /// looks as fast as one connection, the read as a whole is no faster.
    @Test func aSplitReadIsMeasuredAsAWhole() {
        var gain = ParallelGain()
        gain.record(rate: 10_000_000, connections: 1, at: Self.at(0))
        gain.beginSplitRead(id: 7, parts: 2)
        let chunk: Int64 = 64 << 10
        // 64 KiB every 6.5 ms: first part's two chunks, then the second part's.
        for (index, milliseconds) in [1000, 1007, 1013, 1020].enumerated() {
            gain.noteSplitRead(id: 7, bytes: chunk, firstChunkWindow: .milliseconds(2), at: Self.at(milliseconds))
            if index == 1 { gain.finishSplitReadPart(id: 7, smallestSample: chunk, at: Self.at(milliseconds)) }
        }
        #expect(gain.together == nil, "one part of two is no sample")
        gain.finishSplitReadPart(id: 7, smallestSample: chunk, at: Self.at(1020))
        let together = try? #require(gain.together)
        #expect(together.map { abs($0 - Double(3 * chunk) / 0.020) < 1 } == true, "\(String(describing: together))")
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(1020)) == false)
    }

    /// Bytes that follow a split read's first bytes within the window are its first chunk.
    @Test func aShapersFirstBurstDoesNotCount() {
        var gain = ParallelGain()
        gain.beginSplitRead(id: 1, parts: 1)
        gain.noteSplitRead(id: 1, bytes: 16 << 10, firstChunkWindow: .milliseconds(2), at: Self.at(0))
        gain.noteSplitRead(id: 1, bytes: 48 << 10, firstChunkWindow: .milliseconds(2), at: Self.at(1))
        gain.noteSplitRead(id: 1, bytes: 64 << 10, firstChunkWindow: .milliseconds(2), at: Self.at(16))
        gain.finishSplitReadPart(id: 1, smallestSample: 64 << 10, at: Self.at(16))
        #expect(gain.together.map { abs($0 - Double(64 << 10) / 0.016) < 1 } == true)
    }
}
