#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@testable import StreamCache
import Testing

/// What an origin's refusals of one more connection teach, on made-up clocks: the fewest
/// connections it accepted, one more tried after each hold, the hold doubled by a refused probe,
/// for the resource and for the other files of its host. The engine's use of it runs against a real nginx that limits a
/// client's connections (`ParallelDownloadTests.aServiceThatServesTwoDownloadsAtOnceGetsReadsSplitAcrossIt`).
@Suite struct ConnectionAllowanceTests {
    static let start = ContinuousClock.now
    /// The default first hold, a minute: ``aRefusedProbeDoublesTheHold()`` spells out the holds it doubles to.
    static let firstHold = ConnectionAllowance().firstHold

    @Test func nothingIsKnownUntilARefusal() {
        #expect(ConnectionAllowance().connections(at: Self.start) == nil)
    }

    /// Refusals a moment apart may count different numbers of answers under way (one had just
    /// ended, or not yet come in): the fewest holds.
    @Test func theFewestConnectionsSeenAtARefusalHold() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 3, at: Self.start)
        allowance.recordRefusal(whileUsing: 2, at: Self.start + .milliseconds(5))
        allowance.recordRefusal(whileUsing: 3, at: Self.start + .seconds(1))
        #expect(allowance.connections(at: Self.start + .seconds(2)) == 2)
    }

    /// A refusal with nothing else out still leaves one connection.
    @Test func oneConnectionAtLeast() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 0, at: Self.start)
        #expect(allowance.connections(at: Self.start) == 1)
    }

    /// A service busy for a moment does not hold the downloads back for long: a minute after its
    /// refusal one more connection is tried, and once the service answers it, one more a minute
    /// after that.
    @Test func aRefusalsCountGrowsByOneEachHoldWhileUsed() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 1, at: Self.start)
        let hold = Self.firstHold
        #expect(allowance.connections(at: Self.start + hold - .seconds(1)) == 1)
        #expect(allowance.connections(at: Self.start + hold) == 2)
        allowance.recordAcceptance(whileUsing: 2, at: Self.start + hold)
        #expect(allowance.connections(at: Self.start + hold * 2 - .seconds(1)) == 2)
        #expect(allowance.connections(at: Self.start + hold * 2) == 3)
        allowance.recordAcceptance(whileUsing: 3, at: Self.start + hold * 2)
        #expect(allowance.connections(at: Self.start + hold * 3) == 4)
    }

    /// The count grows only when it is used (as TCP's window does, RFC 7661): a host left alone
    /// for many holds is asked for one connection more than it last accepted, not one more per
    /// hold gone by (where each connection past its limit would be refused).
    @Test func anUnusedCountGrowsByOneProbeOnly() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 2, at: Self.start)
        #expect(allowance.connections(at: Self.start + Self.firstHold * 10) == 3)
        // Answers within the count teach nothing.
        allowance.recordAcceptance(whileUsing: 2, at: Self.start + Self.firstHold * 10)
        #expect(allowance.connections(at: Self.start + Self.firstHold * 20) == 3)
    }

    /// An answer past the count before the probe is due (a request sent before the refusal,
    /// answered after it) teaches nothing: the hold runs from the refusal.
    @Test func anAnswerBeforeTheProbeIsDueTeachesNothing() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 2, at: Self.start)
        allowance.recordAcceptance(whileUsing: 3, at: Self.start + .seconds(1))
        #expect(allowance.connections(at: Self.start + .seconds(2)) == 2)
        #expect(allowance.connections(at: Self.start + Self.firstHold) == 3)
    }

    /// A probe the service refuses again teaches the count once more, and the next probe waits
    /// twice as long, up to the longest hold: a limit that stays costs a refused connection
    /// less and less often.
    @Test func aRefusedProbeDoublesTheHold() {
        var allowance = ConnectionAllowance()
        var now = Self.start
        allowance.recordRefusal(whileUsing: 2, at: now)
        var holds: [Duration] = []
        var hold = Self.firstHold
        for _ in 0..<6 {
            // The probe: one more than the service accepts, refused while its two are in use.
            now += hold
            #expect(allowance.connections(at: now) == 3)
            allowance.recordRefusal(whileUsing: 2, at: now)
            hold = Self.holdBeforeTheNextConnection(allowance, from: now) ?? .zero
            holds.append(hold)
        }
        #expect(holds == [.seconds(120), .seconds(240), .seconds(480), .seconds(600), .seconds(600), .seconds(600)])
    }

    /// A second refusal within the hold (the other part refused with the first) is the same
    /// episode: it may lower the count, and leaves the hold as it was.
    @Test func aRefusalWithinTheHoldKeepsIt() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 3, at: Self.start)
        allowance.recordRefusal(whileUsing: 2, at: Self.start + .seconds(30))
        #expect(Self.holdBeforeTheNextConnection(allowance, from: Self.start + .seconds(30)) == Self.firstHold)
        #expect(allowance.connections(at: Self.start + .seconds(31)) == 2)
    }

    /// A probe refused at a higher count than before teaches that count: the service accepted it.
    @Test func aProbeRefusedHigherUpTeachesTheHigherCount() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 1, at: Self.start)
        allowance.recordAcceptance(whileUsing: 2, at: Self.start + Self.firstHold)
        let probe = Self.start + Self.firstHold * 2
        #expect(allowance.connections(at: probe) == 3)
        allowance.recordRefusal(whileUsing: 2, at: probe)
        #expect(allowance.connections(at: probe + .seconds(1)) == 2)
    }

    /// A refusal is forgotten after the memory, and the next one starts with the first hold again.
    @Test func aRefusalIsForgottenAfterTheMemory() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 1, at: Self.start)
        allowance.recordRefusal(whileUsing: 1, at: Self.start + Self.firstHold)
        let later = Self.start + Self.firstHold + ConnectionAllowance().memory
        #expect(allowance.connections(at: later - .seconds(1)) != nil)
        #expect(allowance.connections(at: later) == nil)
        allowance.recordRefusal(whileUsing: 3, at: later)
        #expect(allowance.connections(at: later) == 3)
        #expect(Self.holdBeforeTheNextConnection(allowance, from: later) == Self.firstHold)
    }

    /// A hold of zero from a configuration would divide by zero: it is taken as a millisecond.
    @Test func aZeroIntervalIsAMillisecond() {
        var allowance = ConnectionAllowance(firstHold: .zero)
        allowance.recordRefusal(whileUsing: 2, at: Self.start)
        #expect(allowance.connections(at: Self.start) == 2)
        #expect(allowance.connections(at: Self.start + .milliseconds(1)) == 3)
    }

    /// How long after `refusal` the allowance first grants one more connection, found second by
    /// second (bounded by the longest hold and a second).
    static func holdBeforeTheNextConnection(_ allowance: ConnectionAllowance, from refusal: ContinuousClock.Instant) -> Duration? {
        guard let count = allowance.connections(at: refusal) else { return nil }
        let longest = Int(ConnectionAllowance().longestHold.components.seconds)
        return (1...longest + 1).lazy.map { Duration.seconds($0) }.first { allowance.connections(at: refusal + $0) != count }
    }

    /// Another process takes an allowance up where this one left it: the count, how much of the
    /// hold is left, and the hold itself (doubled by a refused probe), by the wall clock, whatever
    /// its continuous clock reads.
    @Test func aSnapshotCarriesTheAllowanceToAnotherProcess() throws {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 2, at: Self.start)
        allowance.recordRefusal(whileUsing: 2, at: Self.start + Self.firstHold)
        let wallNow = Date(timeIntervalSince1970: 1_800_000_000)
        let snapshot = try #require(allowance.snapshot(at: Self.start + Self.firstHold + .seconds(30), wallNow: wallNow))
        #expect(snapshot.connections == 2)
        #expect(snapshot.hold == Self.firstHold * 2)
        #expect(snapshot.taughtAt == wallNow - 30)
        // Another process, an hour of its own clock in, ten seconds later by the wall clock.
        let otherNow = Self.start + .seconds(3_600)
        let restored = ConnectionAllowance(snapshot, at: otherNow, wallNow: wallNow + 10)
        #expect(restored.connections(at: otherNow) == 2)
        // The doubled hold, less the 40 s gone: one more 80 s on.
        #expect(Self.holdBeforeTheNextConnection(restored, from: otherNow) == .seconds(80))
        #expect(restored.snapshot(at: otherNow, wallNow: wallNow + 10) == snapshot)
    }

    /// A snapshot whose refusal is older than the memory is forgotten on the way in, and one
    /// dated ahead of the wall clock (a clock set back since) counts from now.
    @Test func aSnapshotOutOfTimeIsTakenAsNowOrForgotten() throws {
        let wallNow = Date(timeIntervalSince1970: 1_800_000_000)
        let memory = ConnectionAllowance().memory.timeInterval
        let old = ConnectionAllowance.Snapshot(connections: 2, refusedAt: wallNow - memory - 1, taughtAt: wallNow - memory - 1, hold: Self.firstHold)
        #expect(ConnectionAllowance(old, at: Self.start, wallNow: wallNow).connections(at: Self.start) == nil)
        let ahead = ConnectionAllowance.Snapshot(connections: 2, refusedAt: wallNow + 3_600, taughtAt: wallNow + 3_600, hold: Self.firstHold)
        let restored = ConnectionAllowance(ahead, at: Self.start, wallNow: wallNow)
        #expect(restored.connections(at: Self.start) == 2)
        #expect(Self.holdBeforeTheNextConnection(restored, from: Self.start) == Self.firstHold)
    }

    /// A host's memory starts from what the index kept, and says when a refusal or an accepted
    /// probe changed it (the cache then writes it to its index).
    @Test func theHostMemoryStartsFromWhatWasKeptAndTellsOfChanges() {
        let host = "https://downloader.example:443"
        let kept = ConnectionAllowance.Snapshot(connections: 2, refusedAt: Date() - 5, taughtAt: Date() - 5, hold: Self.firstHold)
        let changes = Locked(0)
        let memory = HostPathMemory(remembered: [host: kept]) { _ in changes.withLock { $0 += 1 } }
        #expect(memory.allowedConnections(of: host) == 2)
        #expect(memory.allowedConnections(of: "https://other.example:443") == nil)
        memory.recordAcceptance(host: host, whileUsing: 2)
        #expect(changes.withLock { $0 } == 0)
        memory.recordRefusal(host: host, whileUsing: 1)
        #expect(changes.withLock { $0 } == 1)
        #expect(memory.allowedConnections(of: host) == 1)
        #expect(memory.allowanceSnapshots()[host]?.connections == 1)
    }

    /// Each host keeps its own; a file of another host is not held back.
    @Test func theHostsRefusalsHoldForItsOtherFilesOnly() {
        let memory = HostPathMemory()
        memory.recordRefusal(host: "https://downloader.example:443", whileUsing: 2, at: Self.start)
        #expect(memory.allowedConnections(of: "https://downloader.example:443", at: Self.start + .seconds(1)) == 2)
        #expect(memory.allowedConnections(of: "https://other.example:443", at: Self.start + .seconds(1)) == nil)
    }
}
