@testable import StreamCache
import StreamCacheTestSupport
import Testing

/// ``FirstAnswer``: a deadline that does not wait for the operation it gave up on.
@Suite struct FirstAnswerTests {
    struct TimedOut: Error {}

    /// What an operation that ignores cancellation waits for, as a transport that is slow to give
    /// up does: the test's word, or a minute.
    final class Gate: Sendable {
        private let state = Locked<(continuation: CheckedContinuation<Void, Never>?, opened: Bool, openedByTime: Bool)>((nil, false, false))

        func wait() async {
            Task.detached { [self] in
                try? await Task.sleep(for: .seconds(60))
                open(byTime: true)
            }
            await withCheckedContinuation { continuation in
                let opened = state.withLock { state -> Bool in
                    if !state.opened { state.continuation = continuation }
                    return state.opened
                }
                if opened { continuation.resume() }
            }
        }

        func open(byTime: Bool = false) {
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard !state.opened else { return nil }
                state.opened = true
                state.openedByTime = byTime
                defer { state.continuation = nil }
                return state.continuation
            }
            continuation?.resume()
        }

        var isOpen: Bool { state.withLock { $0.opened } }
    }

    @Test func theDeadlineDoesNotWaitForAnOperationThatIgnoresCancellation() async {
        let gate = Gate()
        let result = await FirstAnswer.of({ await gate.wait(); return 7 }, within: .milliseconds(100)) { TimedOut() }
        // A deadline that awaited the operation would return only once the gate opened by itself.
        #expect(!gate.isOpen, "the answer came only after the operation ended")
        gate.open()
        #expect(throws: TimedOut.self) { try result.get() }
    }

    @Test func anAnswerBeforeTheDeadlineIsReturnedWithoutWaitingForIt() async throws {
        let started = ContinuousClock.now
        // A deadline far beyond what the answer takes on any machine: a full run on one core
        // once took 33 s for this answer, the tasks of 400 tests ahead of it.
        let result = await FirstAnswer.of({ 7 }, within: .seconds(600)) { TimedOut() }
        #expect(try result.get() == 7)
        #expect(ContinuousClock.now - started < .seconds(300), "the deadline was awaited")
    }

    @Test func anOperationsErrorIsItsAnswer() async {
        struct Refused: Error {}
        let result = await FirstAnswer.of({ () async throws -> Int in throw Refused() }, within: .seconds(60)) { TimedOut() }
        #expect(throws: Refused.self) { try result.get() }
    }
}
