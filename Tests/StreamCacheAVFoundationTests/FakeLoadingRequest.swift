import Dispatch
import Foundation
import StreamCache
import StreamCacheAVFoundation
import StreamCacheTestSupport

/// A loading request that behaves like AVFoundation's and records every call the bridge makes,
/// with every rule a call breaks: a response or finish after cancellation, a second finish, a
/// response past the requested range, a call off the delegate queue.
final class FakeLoadingRequest: LoadingRequest, @unchecked Sendable {
    // @unchecked: the inputs are immutable; everything mutable is in `state`, under a lock.

    /// What the request has received so far.
    struct Snapshot: Sendable {
        var received = Data()
        var responseLengths: [Int] = []
        var contentInformation: ContentInformation?
        var finishCount = 0
        var errorDomain: String?
        var errorCode: Int?
        var errorMessage: String?
        var cancelled = false
        var violations: [String] = []

        var isFinished: Bool { finishCount > 0 }
    }

    let requestsData: Bool
    let requestedOffset: Int64
    let requestedLength: Int
    let requestsAllDataToEndOfResource: Bool
    let requestsContentInformation: Bool
    let allowedContentTypes: [String]?
    private let isOnDelegateQueue: @Sendable () -> Bool
    private let state = Locked(State())

    private struct State {
        var snapshot = Snapshot()
        var waiters: [Int: Waiter] = [:]
        var expired: Set<Int> = []
        var nextWaiter = 0
    }

    private struct Waiter {
        let condition: @Sendable (Snapshot) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
    }

    init(offset: Int64 = 0, length: Int = 0, toEnd: Bool = false, data: Bool = true, contentInformation: Bool = false,
         allowedContentTypes: [String]? = nil, isOnDelegateQueue: @escaping @Sendable () -> Bool) {
        requestsData = data
        requestedOffset = offset
        requestedLength = length
        requestsAllDataToEndOfResource = toEnd
        requestsContentInformation = contentInformation
        self.allowedContentTypes = allowedContentTypes
        self.isOnDelegateQueue = isOnDelegateQueue
    }

    var snapshot: Snapshot { state.withLock { $0.snapshot } }

    /// The byte range the received bytes cover.
    var receivedRange: Range<Int> {
        let count = snapshot.received.count
        return Int(requestedOffset)..<Int(requestedOffset) + count
    }

    // MARK: LoadingRequest

    var currentOffset: Int64 { requestedOffset + Int64(state.withLock { $0.snapshot.received.count }) }
    var isCancelled: Bool { state.withLock { $0.snapshot.cancelled } }
    var isFinished: Bool { state.withLock { $0.snapshot.isFinished } }

    func fillContentInformation(_ information: ContentInformation) {
        record("fillContentInformation") { snapshot in
            if !self.requestsContentInformation { snapshot.violations.append("content information filled for a request that did not ask for it") }
            if snapshot.contentInformation != nil { snapshot.violations.append("content information filled twice") }
            snapshot.contentInformation = information
        }
    }

    func respond(with data: Data) {
        record("respond") { snapshot in
            if !self.requestsData { snapshot.violations.append("data sent to a request that asked for none") }
            if data.isEmpty { snapshot.violations.append("empty response") }
            let end = self.requestedOffset + Int64(snapshot.received.count + data.count)
            if !self.requestsAllDataToEndOfResource, end > self.requestedOffset + Int64(self.requestedLength) {
                snapshot.violations.append("response past the requested range (to \(end))")
            }
            snapshot.received.append(data)
            snapshot.responseLengths.append(data.count)
        }
    }

    func finishLoading() {
        record("finishLoading") { $0.finishCount += 1 }
    }

    func finishLoading(with error: (any Error)?) {
        record("finishLoading(with:)") { snapshot in
            snapshot.finishCount += 1
            let nsError = error.map { $0 as NSError }
            snapshot.errorDomain = nsError?.domain ?? "nil"
            snapshot.errorCode = nsError?.code
            snapshot.errorMessage = nsError?.localizedDescription
        }
    }

    /// What the player does when the user seeks away: `isCancelled` is set before `didCancel`.
    func markCancelled() {
        record(nil) { $0.cancelled = true }
    }

    private func record(_ call: String?, _ change: @escaping (inout Snapshot) -> Void) {
        let onQueue = isOnDelegateQueue()
        let satisfied = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            if let call {
                if !onQueue { state.snapshot.violations.append("\(call) off the delegate queue") }
                if state.snapshot.cancelled { state.snapshot.violations.append("\(call) after cancellation") }
                if state.snapshot.isFinished { state.snapshot.violations.append("\(call) after finishing") }
            }
            change(&state.snapshot)
            var ready: [CheckedContinuation<Bool, Never>] = []
            for (id, waiter) in state.waiters where waiter.condition(state.snapshot) {
                ready.append(waiter.continuation)
                state.waiters[id] = nil
            }
            return ready
        }
        for continuation in satisfied { continuation.resume(returning: true) }
    }

    // MARK: Waiting

    /// Waits until `condition` holds, at most `timeout` (stretched under a sanitizer, see `TestTiming`).
    ///
    /// - Returns: Whether it held in time.
    func wait(timeout: Duration = TestTiming.time(.seconds(30)), until condition: @escaping @Sendable (Snapshot) -> Bool) async -> Bool {
        let id = state.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            self?.expire(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            // `nil`: registered, resumed later by a change or by the timer.
            let answer = state.withLock { state -> Bool? in
                if condition(state.snapshot) { return true }
                if state.expired.contains(id) { return false }
                state.waiters[id] = Waiter(condition: condition, continuation: continuation)
                return nil
            }
            if let answer { continuation.resume(returning: answer) }
        }
    }

    private func expire(_ id: Int) {
        let waiter = state.withLock { state -> Waiter? in
            state.expired.insert(id)
            return state.waiters.removeValue(forKey: id)
        }
        waiter?.continuation.resume(returning: false)
    }

    /// Waits until the request is finished.
    func waitUntilFinished(timeout: Duration = TestTiming.time(.seconds(30))) async -> Bool {
        await wait(timeout: timeout) { $0.isFinished }
    }
}
