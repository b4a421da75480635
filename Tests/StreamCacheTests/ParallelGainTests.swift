import Foundation
@testable import StreamCache
import StreamCacheTestSupport
import Testing

/// The arithmetic that tells a cap on each connection from a link all connections share, on
/// made-up clocks: transfers on a loaded machine are too irregular to pin it end to end.
@Suite struct ParallelGainTests {
    static let start = ContinuousClock.now

    static func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    /// `connections` requests receiving `eachRate` bytes per second each, side by side from
    /// `start` for 100 ms; returns what the first of them did meanwhile.
    static func sideBySide(_ connections: Int, eachRate: Double, from start: Int, in gain: inout ParallelGain) -> ParallelGain.Overlap {
        for request in 0..<connections { gain.beginReceiving(request, at: at(start)) }
        for request in 0..<connections { gain.noteReceived(Int64(eachRate / 10), by: request, at: at(start + 100)) }
        let overlaps = (0..<connections).map { gain.endReceiving($0, startedAt: at(start), at: at(start + 100)) }
        return overlaps[0]
    }

    /// One request alone at `rate`, then two side by side at `eachRate` each for the same time.
    static func gain(alone rate: Double, twoAtOnce eachRate: Double) -> ParallelGain {
        var gain = ParallelGain()
        gain.record(rate: rate, during: sideBySide(1, eachRate: rate, from: 0, in: &gain), at: at(100))
        let first = sideBySide(2, eachRate: eachRate, from: 200, in: &gain)
        #expect(abs(first.connections - 2) < 1e-9)
        gain.record(rate: eachRate, during: first, at: at(300))
        return gain
    }

    /// A request of one connection alone, at `rate`.
    static func alone(_ rate: Double) -> ParallelGain.Overlap {
        ParallelGain.Overlap(connections: 1, allRequestsRate: rate)
    }

    @Test func connectionsThatKeepTheirSpeedSideBySideHelp() {
        let gain = Self.gain(alone: 4_000_000, twoAtOnce: 4_000_000)
        #expect(gain.together(at: Self.at(300)).map { abs($0 - 8_000_000) < 1 } == true)
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(300)) == true)
    }

    @Test func connectionsThatShareOneLinkDoNotHelp() {
        let gain = Self.gain(alone: 10_000_000, twoAtOnce: 5_000_000)
        #expect(gain.together(at: Self.at(300)).map { abs($0 - 10_000_000) < 1 } == true)
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(300)) == false)
    }

    /// A long read's first request receives alone, then beside its three parts on a link all
    /// four share (10 MB/s): alone at 10 MB/s for 100 ms, then at 2.5 MB/s for 100 ms. Its own
    /// speed, 6.25 MB/s, times the 2.5 requests it averaged would be 15.6 MB/s, a gain; what all
    /// four received meanwhile is the link's 10 MB/s.
    @Test func aRequestJoinedByOthersOnASharedLinkShowsNoGain() {
        var gain = ParallelGain()
        gain.beginReceiving(0, at: Self.at(0))
        gain.noteReceived(1_000_000, by: 0, at: Self.at(100))
        let early = gain.overlap(of: 0, startedAt: Self.at(0), at: Self.at(100))
        #expect(abs(early.connections - 1) < 1e-9)
        gain.record(rate: 10_000_000, during: early, at: Self.at(100))
        for part in 1...3 { gain.beginReceiving(part, at: Self.at(100)) }
        for request in 0...3 { gain.noteReceived(250_000, by: request, at: Self.at(200)) }
        for part in 1...3 { gain.endReceiving(part, startedAt: Self.at(100), at: Self.at(200)) }
        let whole = gain.endReceiving(0, startedAt: Self.at(0), at: Self.at(200))
        #expect(abs(whole.connections - 2.5) < 1e-9)
        gain.record(rate: 6_250_000, during: whole, at: Self.at(200))
        #expect(gain.together(at: Self.at(200)).map { abs($0 - 10_000_000) < 1 } == true, "\(String(describing: gain.together(at: Self.at(200))))")
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(200)) == false)
    }

    @Test func nothingIsKnownBeforeBothWereMeasuredOrAfterTheMeasurementOfSeveralGrewOld() {
        var gain = ParallelGain()
        #expect(gain.helps(minimumSpeedup: 1.4) == nil)
        gain.record(rate: 4_000_000, during: Self.alone(4_000_000), at: Self.at(0))
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(0)) == nil)
        let measured = Self.gain(alone: 10_000_000, twoAtOnce: 5_000_000)
        #expect(measured.helps(minimumSpeedup: 1.4, now: Self.at(300) + ParallelGain.memory) == nil)
    }

    /// What the other files of the host measured (``HostPathMemory``) stands in for what a
    /// resource has not measured itself within ``ParallelGain/memory``, and only for that: its own
    /// samples come first. What the host's files recorded counts for the same time as the
    /// resource's own.
    @Test func whatTheHostsOtherFilesMeasuredFillsInWhatAResourceHasNot() throws {
        let host = "http://cloud.example:"
        let memory = HostPathMemory()
        // What another file's requests recorded (one alone at 4 MB/s, two together at 8 MB/s),
        // handed to the host as the engine does.
        var other = ParallelGain()
        let alone = other.record(rate: 4_000_000, during: Self.alone(4_000_000), at: Self.at(100))
        #expect(alone == .alone(4_000_000))
        memory.record(try #require(alone), host: host, at: Self.at(100))
        let together = other.record(rate: 4_000_000, during: Self.sideBySide(2, eachRate: 4_000_000, from: 200, in: &other), at: Self.at(300))
        memory.record(try #require(together), host: host, at: Self.at(300))
        let shared = memory.rates(of: host, at: Self.at(300))
        #expect(shared.alone == 4_000_000)
        #expect(shared.together.map { abs($0 - 8_000_000) < 1 } == true, "\(String(describing: shared.together))")
        let elsewhere = memory.rates(of: "http://other.example:", at: Self.at(300))
        #expect(elsewhere.alone == nil && elsewhere.together == nil)

        // A new file of the host knows at once that its connections gain.
        let fresh = ParallelGain()
        #expect(fresh.helps(minimumSpeedup: 1.4, now: Self.at(300)) == nil)
        #expect(fresh.helps(minimumSpeedup: 1.4, now: Self.at(300), shared: shared) == true)
        // Its own sample of one alone comes first: measured at 8 MB/s, 8 MB/s together is no gain.
        var measuredAlone = ParallelGain()
        measuredAlone.record(rate: 8_000_000, during: Self.alone(8_000_000), at: Self.at(300))
        #expect(measuredAlone.helps(minimumSpeedup: 1.4, now: Self.at(300), shared: shared) == false)
        // Its own measurement of both stands whatever the host's files measured.
        let sharedLink = Self.gain(alone: 10_000_000, twoAtOnce: 5_000_000)
        #expect(sharedLink.helps(minimumSpeedup: 1.4, now: Self.at(300), shared: shared) == false)
        // The host's samples grow old like the resource's own.
        let later = Self.at(300) + ParallelGain.memory
        #expect(memory.rates(of: host, at: later).together == nil)
        #expect(fresh.helps(minimumSpeedup: 1.4, now: later, shared: memory.rates(of: host, at: later)) == nil)
    }

    /// A cache that talks to ever more hosts (a proxy for many services) keeps the 64 measured
    /// last: the one measured longest ago makes room.
    @Test func theHostMeasuredLongestAgoMakesRoomForANewOne() {
        let memory = HostPathMemory()
        for host in 0..<64 {
            memory.record(.alone(Double(host + 1)), host: "http://host\(host):", at: Self.at(host))
        }
        // Measured again: now the newest of all.
        memory.record(.alone(1), host: "http://host0:", at: Self.at(100))
        memory.record(.alone(99), host: "http://host64:", at: Self.at(101))
        let now = Self.at(101)
        #expect(memory.rates(of: "http://host0:", at: now).alone == 1)
        #expect(memory.rates(of: "http://host1:", at: now).alone == nil, "measured longest ago")
        #expect(memory.rates(of: "http://host2:", at: now).alone == 3)
        #expect(memory.rates(of: "http://host64:", at: now).alone == 99)
    }

    /// A request that overlapped another for a part of its time only is no sample of either kind.
    @Test func aRequestThatOverlappedOthersInPartIsLeftOut() {
        var gain = ParallelGain()
        gain.beginReceiving(0, at: Self.at(0))
        gain.beginReceiving(1, at: Self.at(50))
        gain.noteReceived(200_000, by: 1, at: Self.at(100))
        gain.endReceiving(1, startedAt: Self.at(50), at: Self.at(100))
        gain.noteReceived(800_000, by: 0, at: Self.at(200))
        let overlap = gain.endReceiving(0, startedAt: Self.at(0), at: Self.at(200))
        #expect(abs(overlap.connections - 1.25) < 1e-9)
        gain.record(rate: 4_000_000, during: overlap)
        #expect(gain.alone(at: Self.at(200)) == nil && gain.together(at: Self.at(200)) == nil)
    }

    /// A long read's first request on connections capped at 400 kB/s: alone for 500 ms, then
    /// beside its three parts for 150 ms, within which each part's first 64 KiB chunk came (which
    /// never counts) and its second had not yet. What all received meanwhile is its own speed, as
    /// if four connections fetched no more than one: a mix of alone and beside others tells
    /// neither kind. What it received alone until the parts began does, as do the parts' own
    /// samples, beside others all along, whose time holds their bytes.
    @Test func aShortSampleThatIsPartlyAloneTellsNeitherKind() {
        var gain = ParallelGain()
        let rate = 400_000.0
        gain.beginReceiving(0, at: Self.at(0))
        gain.noteReceived(200_000, by: 0, at: Self.at(500))
        let untilTheParts = gain.overlap(of: 0, startedAt: Self.at(0), at: Self.at(500))
        #expect(untilTheParts.tellsOneKind && untilTheParts.aloneShare == 1 && abs(untilTheParts.connections - 1) < 1e-9)
        for part in 1...3 { gain.beginReceiving(part, at: Self.at(500)) }
        // Each part's first chunk came at once (it counts as no bytes), its second not yet.
        for request in 1...3 { gain.noteReceived(0, by: request, at: Self.at(501)) }
        gain.noteReceived(60_000, by: 0, at: Self.at(650))
        let mixed = gain.overlap(of: 0, startedAt: Self.at(0), at: Self.at(650))
        #expect(abs(mixed.aloneShare - 500.0 / 650) < 1e-9 && abs(mixed.connections - 1100.0 / 650) < 1e-9)
        #expect(!mixed.tellsOneKind, "\(mixed)")
        for request in 1...3 { gain.noteReceived(0, by: request, at: Self.at(650)) }
        let told = gain.overlap(of: 0, startedAt: Self.at(0), at: Self.at(650))
        #expect(told.allRequestsRate.map { abs($0 - rate) < 1 } == true, "the parts' time counted, not yet their bytes")
        for request in 0...3 { gain.noteReceived(64 << 10, by: request, at: Self.at(1150)) }
        let part = gain.overlap(of: 1, startedAt: Self.at(500), at: Self.at(1150))
        #expect(part.tellsOneKind && part.aloneShare == 0 && abs(part.connections - 4) < 1e-9)
    }

    /// A long read's first request (0) alone at 400 kB/s for 500 ms, recorded as one alone, then its
    /// part (1) beside it at 400 kB/s each until 1155 ms, where the first request's task runs late:
    /// it has told only its bytes up to 700 ms, the part all of its 256 KiB after its first chunk.
    static func partBesideALateFirstRequest(newestArrivalOfTheFirst: (@Sendable () -> ContinuousClock.Instant?)? = nil) -> ParallelGain {
        var gain = ParallelGain()
        gain.beginReceiving(0, at: at(0), newestArrival: newestArrivalOfTheFirst)
        gain.noteReceived(200_000, by: 0, at: at(500))
        gain.record(rate: 400_000, during: gain.overlap(of: 0, startedAt: at(0), at: at(500)), at: at(500))
        gain.beginReceiving(1, at: at(500))
        gain.noteReceived(80_000, by: 0, at: at(700))
        gain.noteReceived(262_000, by: 1, at: at(1155))
        return gain
    }

    /// A long read's first request and its part, each on a connection capped at 400 kB/s, where
    /// the first request's task runs late (a starved machine): when the part has received 256 KiB
    /// after its first chunk, the first request has told only what came in the part's first
    /// 200 ms. Counted as told, both together received 522 kB/s, no gain over one alone; what
    /// they received is known only once the first request has told the rest, and then it is
    /// 800 kB/s.
    @Test func bytesARequestBesideHasNotToldYetAreWaitedForNotTakenForNone() throws {
        var gain = Self.partBesideALateFirstRequest()
        let early = gain.overlap(of: 1, startedAt: Self.at(500), at: Self.at(1155))
        #expect(early.receivedTogether && early.tellsOneKind, "\(early)")
        #expect(early.allRequestsRate == nil, "the first request has told 200 ms of the part's 655: \(early)")
        // Late, the first request tells what it received meanwhile.
        gain.noteReceived(182_000, by: 0, at: Self.at(1155))
        let told = gain.overlap(of: 1, startedAt: Self.at(500), at: Self.at(1155))
        let together = try #require(told.allRequestsRate)
        #expect(abs(together - 800_000) < 1, "\(told)")
        gain.record(rate: 400_000, during: told, at: Self.at(1155))
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(1155)) == true)
        // Bytes that arrived before the part's first ones are none of its sample, whenever told.
        gain.beginReceiving(2, at: Self.at(1200))
        gain.noteReceived(50_000, by: 0, at: Self.at(1190))
        gain.noteReceived(40_000, by: 0, at: Self.at(1300))
        gain.noteReceived(40_000, by: 2, at: Self.at(1300))
        gain.noteReceived(40_000, by: 1, at: Self.at(1300))
        let later = gain.endReceiving(2, startedAt: Self.at(1200), at: Self.at(1300))
        #expect(later.allRequestsRate.map { abs($0 - 1_200_000) < 1 } == true, "\(later)")
    }

    /// A part that ends before the late first request beside it has told its bytes over the
    /// part's time is held and recorded once it has: dropped, the read it measured for had to
    /// measure again. One whose neighbour tells nothing for 3 s is dropped: that one stalled.
    @Test func aSampleThatEndsBeforeALateRequestToldIsRecordedOnceItHas() throws {
        var gain = Self.partBesideALateFirstRequest()
        let ended = gain.endReceiving(1, startedAt: Self.at(500), at: Self.at(1155), holdingASampleOf: 400_000)
        #expect(ended.receivedTogether && ended.allRequestsRate == nil && gain.holdsASample, "\(ended)")
        #expect(gain.record(rate: 400_000, during: ended, at: Self.at(1155)) == nil)
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(1155)) == nil && gain.takeLateSamples().isEmpty)
        // The first request tells the rest.
        gain.noteReceived(182_000, by: 0, at: Self.at(1155))
        let late = gain.takeLateSamples()
        #expect(late.count == 1, "\(late)")
        if case .together(let together) = late.first { #expect(abs(together - 800_000) < 1) } else { Issue.record("\(late)") }
        #expect(!gain.holdsASample && gain.helps(minimumSpeedup: 1.4, now: Self.at(1155)) == true)
        #expect(gain.takeLateSamples().isEmpty, "taken once")

        // The first request stalls: a sample beside it waits 3 s, then goes.
        gain.beginReceiving(2, at: Self.at(1200))
        gain.noteReceived(400_000, by: 2, at: Self.at(2000))
        gain.endReceiving(2, startedAt: Self.at(1200), at: Self.at(2000), holdingASampleOf: 500_000)
        #expect(gain.holdsASample)
        gain.beginReceiving(3, at: Self.at(4000))
        gain.noteReceived(100_000, by: 3, at: Self.at(4900))
        #expect(gain.holdsASample, "2.9 s after it ended")
        gain.noteReceived(10_000, by: 3, at: Self.at(5000))
        #expect(!gain.holdsASample && gain.takeLateSamples().isEmpty, "dropped 3 s after it ended")
    }

    /// The same first request and part, where the transport says when each request's newest
    /// bytes arrived (``HTTPBody/newestArrival``). The first request has bytes that arrived and
    /// it has not told: the part's sample is held past 3 s, however long its task runs late
    /// (under the whole suite, more than 3 s: the sample was dropped, and the prefetch it measured
    /// for ran on two connections for 3 s more), and recorded once it tells.
    @Test func aSampleBesideARequestWithBytesUntoldIsHeldUntilItTellsThem() throws {
        let newest = (first: Locked(Self.at(1150)), other: Locked(Self.at(5000)))
        var gain = Self.partBesideALateFirstRequest(newestArrivalOfTheFirst: { newest.first.withLock { $0 } })
        gain.endReceiving(1, startedAt: Self.at(500), at: Self.at(1155), holdingASampleOf: 400_000)
        #expect(gain.holdsASample)
        gain.beginReceiving(2, at: Self.at(4000), newestArrival: { newest.other.withLock { $0 } })
        gain.noteReceived(100_000, by: 2, at: Self.at(5000))
        #expect(gain.holdsASample && gain.takeLateSamples().isEmpty, "3.8 s after it ended, the first request still has bytes untold")
        gain.noteReceived(182_000, by: 0, at: Self.at(1150))
        let late = gain.takeLateSamples()
        if case .together(let together) = late.first { #expect(abs(together - 800_000) < 1e4, "\(late)") } else { Issue.record("\(late)") }
        #expect(!gain.holdsASample)
    }

    /// A request whose transport says it has told all it received stopped receiving: what it
    /// received is known up to now, though it told nothing for a while (its origin went quiet).
    /// A sample beside it is recorded at once, and none is held for it.
    @Test func aRequestThatHasToldAllItsTransportReceivedIsKnownUpToNow() throws {
        var gain = Self.partBesideALateFirstRequest(newestArrivalOfTheFirst: { Self.at(700) })
        let ended = gain.endReceiving(1, startedAt: Self.at(500), at: Self.at(1155), holdingASampleOf: 400_000)
        #expect(!gain.holdsASample)
        // 80 kB of the first request and 262 kB of the part in 655 ms.
        #expect(abs(try #require(ended.allRequestsRate) - 342_000 / 0.655) < 1, "\(ended)")
    }

    /// A first request whose task runs late tells of its first bytes after a part, begun later,
    /// told of its own: it counts from when its bytes arrived, beside the part from the part's
    /// first bytes. Counted as the requests told (a running count integrated up to the latest
    /// time told), it received beside nobody until the part began and then beside nothing at all:
    /// 0 connections on average, no sample of either kind.
    @Test func aRequestThatTellsLateCountsFromWhenItsBytesArrived() throws {
        var gain = ParallelGain()
        gain.beginReceiving(1, at: Self.at(500))
        gain.noteReceived(0, by: 1, at: Self.at(500))
        gain.beginReceiving(0, at: Self.at(0))
        gain.noteReceived(200_000, by: 0, at: Self.at(500))
        let alone = gain.overlap(of: 0, startedAt: Self.at(0), at: Self.at(500))
        #expect(abs(alone.connections - 1) < 1e-9 && alone.aloneShare == 1, "\(alone)")
        for request in 0...1 { gain.noteReceived(262_000, by: request, at: Self.at(1155)) }
        let part = gain.overlap(of: 1, startedAt: Self.at(500), at: Self.at(1155))
        #expect(abs(part.connections - 2) < 1e-9 && part.aloneShare == 0, "\(part)")
        #expect(abs(try #require(part.allRequestsRate) - 800_000) < 1, "\(part)")
        let first = gain.endReceiving(0, startedAt: Self.at(0), at: Self.at(1155))
        #expect(abs(first.connections - 1810.0 / 1155) < 1e-9 && abs(first.aloneShare - 500.0 / 1155) < 1e-9, "\(first)")
        // The part, ended later, still counts the first request's time beside it.
        gain.noteReceived(200_000, by: 1, at: Self.at(1655))
        let ended = gain.endReceiving(1, startedAt: Self.at(500), at: Self.at(1655))
        #expect(abs(ended.connections - 1810.0 / 1155) < 1e-9 && abs(ended.aloneShare - 500.0 / 1155) < 1e-9, "\(ended)")
    }

    /// A request that receives for minutes (an origin that ignores ranges answers with a whole
    /// large file) keeps at most ``ParallelGain/mostArrivals`` arrivals, not one per millisecond,
    /// and what it and parts beside it did is still told: the parts' last second exactly, the
    /// two minutes of the long one within a few bytes per second.
    @Test func aRequestThatReceivesForMinutesKeepsFewArrivals() throws {
        var gain = ParallelGain()
        let chunk: Int64 = 4096
        gain.beginReceiving(0, at: Self.at(0))
        for millisecond in 1...119_000 { gain.noteReceived(chunk, by: 0, at: Self.at(millisecond)) }
        for part in 1...3 { gain.beginReceiving(part, at: Self.at(119_000)) }
        for millisecond in 119_001...120_000 {
            for request in 0...3 { gain.noteReceived(chunk, by: request, at: Self.at(millisecond)) }
        }
        #expect(gain.arrivalsKept <= ParallelGain.mostArrivals)
        let part = gain.overlap(of: 1, startedAt: Self.at(119_000), at: Self.at(120_000))
        #expect(abs(part.connections - 4) < 1e-9)
        #expect(try #require(part.allRequestsRate) == 4 * 4096 * 1000)
        let long = gain.overlap(of: 0, startedAt: Self.at(0), at: Self.at(120_000))
        #expect(abs(long.connections - 1.025) < 1e-9)
        let rate = try #require(long.allRequestsRate)
        let exact = Double(120_000 * 4096 + 3_000 * 4096) / 120
        #expect(abs(rate - exact) < exact * 1e-4, "\(rate) B/s, \(exact) exactly")
    }

    /// Two parts of a split read that a shared link delivers one after the other: each part alone
    /// looks as fast as one connection, the read as a whole is no faster.
    @Test func aSplitReadIsMeasuredAsAWhole() {
        var gain = ParallelGain()
        gain.record(rate: 10_000_000, during: Self.alone(10_000_000), at: Self.at(0))
        gain.beginSplitRead(id: 7, parts: 2)
        let chunk: Int64 = 64 << 10
        // 64 KiB every 6.5 ms: first part's two chunks, then the second part's.
        for (index, milliseconds) in [1000, 1007, 1013, 1020].enumerated() {
            gain.noteSplitRead(id: 7, bytes: chunk, firstChunkWindow: .milliseconds(2), at: Self.at(milliseconds))
            if index == 1 { gain.finishSplitReadPart(id: 7, smallestSample: chunk, at: Self.at(milliseconds)) }
        }
        #expect(gain.together(at: Self.at(1020)) == nil, "one part of two is no sample")
        gain.finishSplitReadPart(id: 7, smallestSample: chunk, at: Self.at(1020))
        let together = gain.together(at: Self.at(1020))
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
        #expect(gain.together(at: Self.at(16)).map { abs($0 - Double(64 << 10) / 0.016) < 1 } == true)
    }

    /// A request alone that a busy machine received late does not make connections side by side
    /// look like a gain: the best sample within the memory counts, and only it.
    @Test func aSlowSampleDoesNotHideTheBestRecentOne() {
        var gain = ParallelGain()
        gain.record(rate: 10_000_000, during: Self.alone(10_000_000), at: Self.at(0))
        gain.record(rate: 6_000_000, during: Self.alone(6_000_000), at: Self.at(1000))
        gain.record(rate: 5_000_000, during: ParallelGain.Overlap(connections: 2, allRequestsRate: 10_000_000), at: Self.at(2000))
        #expect(gain.alone(at: Self.at(2000)) == 10_000_000)
        #expect(gain.helps(minimumSpeedup: 1.4, now: Self.at(2000)) == false, "10 MB/s alone and together: a shared link")
        // Once the best sample is older than the memory, the later one stands.
        let later = Self.at(0) + ParallelGain.memory
        #expect(gain.alone(at: later) == 6_000_000)
        #expect(gain.helps(minimumSpeedup: 1.4, now: later) == true)
        // Past the memory of every sample alone, the last one still stands; the samples of
        // several connections are gone.
        let muchLater = Self.at(5000) + ParallelGain.memory
        #expect(gain.alone(at: muchLater) == 6_000_000)
        #expect(gain.together(at: muchLater) == nil && gain.helps(minimumSpeedup: 1.4, now: muchLater) == nil)
    }
}

/// The engine times a transfer by when its chunks arrived at the transport, not when its download
/// got to them (see ``HTTPBody/Chunk``).
@Suite struct TransferTimingTests {
    /// Hands out a 1 MiB file in 16 chunks of 64 KiB, all at once, each saying it arrived 10 ms
    /// after the one before: as a transport does when a busy machine left its buffer unread.
    /// `queued`: the chunks wait in the body's buffer, as a transport's do, and the download may
    /// take them all at once (``HTTPBody/Iterator/readyChunk()``); otherwise it gets one per call.
    struct BackloggedOrigin: Origin {
        static let chunk = 64 << 10
        static let data = TestData.random(count: 16 * chunk, seed: 91)
        var queued = false
        var logDescription: String { "backlogged" }

        func open(_ request: OriginRequest) async throws -> OriginResponse {
            let range = (request.range ?? ByteRange(0, Int64.max)).clamped(toLength: Int64(Self.data.count))
            let start = ContinuousClock.now
            let chunks = stride(from: Int(range.lowerBound), to: Int(range.upperBound), by: Self.chunk).map { offset in
                HTTPBody.Chunk(Self.data[offset..<min(offset + Self.chunk, Int(range.upperBound))],
                               arrivedAt: start + .milliseconds(10 * (offset / Self.chunk)))
            }
            let info = ResourceInfo(totalLength: Int64(Self.data.count), mimeType: "audio/mpeg", acceptsByteRanges: true,
                                    validator: Validator(entityTag: "\"v1\""))
            let body: HTTPBody
            if queued {
                let buffer = AsyncBuffer<HTTPBody.Chunk>(limit: Int.max)
                for chunk in chunks { buffer.offer(chunk, weight: chunk.data.count) }
                buffer.finish()
                body = HTTPBody(buffer: buffer)
            } else {
                body = HTTPBody(pulling: Chunks(chunks))
            }
            return OriginResponse(info: info, offset: range.lowerBound, length: range.count, body: body)
        }
    }

    final class Chunks: HTTPBodySource, @unchecked Sendable {
        // @unchecked: only the body's one consumer calls `nextChunk()`.
        private var chunks: ArraySlice<HTTPBody.Chunk>
        init(_ chunks: [HTTPBody.Chunk]) { self.chunks = chunks[...] }
        func next() async throws -> Data? { try await nextChunk()?.data }
        func nextChunk() async throws -> HTTPBody.Chunk? { chunks.popFirst() }
        func cancel() {}
    }

    /// Timed by arrival whether the download takes the backlog chunk by chunk or, as it does from
    /// a transport's buffer, writes it all and reports it as one run.
    @Test(arguments: [false, true])
    func aBacklogTakenInAtOnceIsTimedByItsArrival(queued: Bool) async throws {
        try await withTemporaryCache { cache in
            let song = cache.resource(for: CacheKey("backlogged"), origin: BackloggedOrigin(queued: queued))
            #expect(try await song.read(ByteRange(0, Int64(BackloggedOrigin.data.count))).collect() == BackloggedOrigin.data)
            // Fifteen chunks after the first over 150 ms. Timed as the download took them in,
            // they came in no time at all.
            let alone = try #require(await song.parallelGain.alone())
            let expected = Double(15 * BackloggedOrigin.chunk) / 0.150
            #expect(abs(alone - expected) < expected * 0.01, "measured \(alone) B/s")
        }
    }

    /// A download that finds chunks waiting writes them and reports them in one go: its readers
    /// are woken (and its progress told) once for the lot, not once per chunk. The answer's first
    /// chunk, which a reader may be waiting for, goes alone.
    @Test func chunksThatPiledUpAreReportedAsOneRun() async throws {
        try await withTemporaryCache { (cache: StreamCache) async throws in
            let song = cache.resource(for: CacheKey("backlogged"), origin: BackloggedOrigin(queued: true))
            let events = await song.events()
            let size = Int64(BackloggedOrigin.data.count)
            #expect(try await song.read(ByteRange(0, size)).collect() == BackloggedOrigin.data)
            let received = await collectEvents(events) { event in
                if case .bytesCached(_, let total) = event { total == size } else { false }
            }
            let ranges = received.compactMap { event -> ByteRange? in
                if case .bytesCached(let range, _) = event { range } else { nil }
            }
            #expect(ranges == [ByteRange(0, Int64(BackloggedOrigin.chunk)), ByteRange(Int64(BackloggedOrigin.chunk), size)])
        }
    }
}

/// The sliding-window maximum behind ``ParallelGain``'s figures.
@Suite struct WindowedMaximumTests {
    @Test func theLargestSampleWithinTheWindowCounts() {
        var maximum = WindowedMaximum(window: .seconds(10))
        let start = ContinuousClock.now
        #expect(maximum.maximum(at: start) == nil && maximum.newest == nil)
        for (second, value) in [(0, 5.0), (1, 9.0), (2, 3.0), (3, 7.0), (4, 1.0)] {
            maximum.record(value, at: start + .seconds(second))
        }
        #expect(maximum.maximum(at: start + .seconds(4)) == 9)
        #expect(maximum.maximum(at: start + .seconds(11)) == 7, "9 was recorded 10 s before")
        #expect(maximum.maximum(at: start + .seconds(12)) == 7)
        #expect(maximum.maximum(at: start + .seconds(13)) == 1, "7 was recorded 10 s before")
        #expect(maximum.maximum(at: start + .seconds(14)) == nil, "every sample is older than the window")
        #expect(maximum.newest == 1)
    }

    @Test func aLongRunOfEverSmallerSamplesKeepsItsNewest() {
        var maximum = WindowedMaximum(window: .seconds(3600))
        let start = ContinuousClock.now
        for index in 0..<1000 {
            maximum.record(Double(1000 - index), at: start + .milliseconds(index))
        }
        #expect(maximum.newest == 1)
        #expect((maximum.maximum(at: start + .seconds(1)) ?? 0) > 1, "some larger sample is kept")
    }
}
