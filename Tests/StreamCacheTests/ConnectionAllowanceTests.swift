@testable import StreamCache
import Testing

/// What an origin's refusals of one more connection teach, on made-up clocks: the fewest
/// connections it accepted within ``ConnectionAllowance/memory``, for the resource and for the
/// other files of its host. The engine's use of it runs against a real nginx that limits a
/// client's connections (`ParallelDownloadTests.aServiceThatServesTwoDownloadsAtOnceGetsReadsSplitAcrossIt`).
@Suite struct ConnectionAllowanceTests {
    static let start = ContinuousClock.now

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

    /// A service busy for a moment does not hold the downloads back for good: after the memory
    /// the next split finds out again, and a refusal then starts from what it shows.
    @Test func aRefusalIsForgottenAfterTheMemory() {
        var allowance = ConnectionAllowance()
        allowance.recordRefusal(whileUsing: 1, at: Self.start)
        let later = Self.start + ConnectionAllowance.memory
        #expect(allowance.connections(at: later - .seconds(1)) == 1)
        #expect(allowance.connections(at: later) == nil)
        allowance.recordRefusal(whileUsing: 3, at: later)
        #expect(allowance.connections(at: later) == 3)
    }

    /// Each host keeps its own; a file of another host is not held back.
    @Test func theHostsRefusalsHoldForItsOtherFilesOnly() {
        let memory = HostPathMemory()
        memory.recordRefusal(host: "https://downloader.example:443", whileUsing: 2, at: Self.start)
        #expect(memory.allowedConnections(of: "https://downloader.example:443", at: Self.start + .seconds(1)) == 2)
        #expect(memory.allowedConnections(of: "https://other.example:443", at: Self.start + .seconds(1)) == nil)
    }
}
