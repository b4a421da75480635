/// A single-consumer queue between a producer and an `async` consumer, bounded by weight.
///
/// It carries HTTP bodies and read streams. The producer either `send`s (suspending while the
/// buffer is over its limit: back-pressure for async producers) or `offer`s (never suspends, but
/// reports when the buffer is over its limit so a callback-driven producer, such as a URLSession
/// delegate, can pause its source until ``onDrain`` fires). When the consumer goes away
/// (cancelled, or its iterator dropped) ``onCancel`` runs once so the producer stops its work.
package final class AsyncBuffer<Element: Sendable>: Sendable {
    /// A sender waiting for room, with the number of the element it sent.
    private typealias WaitingSender = (continuation: CheckedContinuation<Void, any Error>, element: Int)

    private struct State {
        /// Taken slots are cleared at once (so a consumed chunk is freed), and compacted later.
        var queue: [(element: Element?, weight: Int)] = []
        var head = 0
        var bufferedWeight = 0
        var terminal: Result<Void, any Error>?
        var isCancelled = false
        var isPaused = false
        var consumer: CheckedContinuation<Element?, any Error>?
        /// Senders waiting for room.
        var producers: [WaitingSender] = []
        /// Elements accepted so far, and elements the consumer has taken so far: element number
        /// `n` (counting from 1) was taken once `taken >= n`.
        var accepted = 0
        var taken = 0
        var onCancel: (@Sendable () -> Void)?
        var onDrain: (@Sendable () -> Void)?
        /// The stamp of the newest element accepted (see ``stamp``).
        var newestStamp: ContinuousClock.Instant?
    }

    private let state = Locked(State())
    /// The weight above which producers are held back.
    package let limit: Int

    /// What time an element carries, if the buffer keeps the newest (``newestStamp``).
    private let stamp: (@Sendable (Element) -> ContinuousClock.Instant)?

    /// A buffer that holds producers back above `limit`; with `stamp`, it keeps the time the
    /// newest element it accepted carries.
    package init(limit: Int, stamp: (@Sendable (Element) -> ContinuousClock.Instant)? = nil) {
        self.limit = limit
        self.stamp = stamp
    }

    /// The time the newest element accepted carries (``init(limit:stamp:)``), taken or not;
    /// `nil` before the first, or without a `stamp`. A consumer that has handled every element
    /// up to this time has handled all that came.
    package var newestStamp: ContinuousClock.Instant? { state.withLock { $0.newestStamp } }

    /// The weight of the elements queued for the consumer: for a body's buffer, the bytes the
    /// transport received that the consumer has not taken yet.
    package var queuedWeight: Int { state.withLock { $0.bufferedWeight } }

    /// Sets the action run once when the consumer stops listening. Runs at once if it already has.
    package func setOnCancel(_ action: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.isCancelled { return true }
            state.onCancel = action
            return false
        }
        if runNow { action() }
    }

    /// Sets the action run when a paused producer may go on (the buffer drained below half its limit).
    package func setOnDrain(_ action: @escaping @Sendable () -> Void) {
        state.withLock { $0.onDrain = action }
    }

    /// Appends an element without suspending. Returns `true` when the buffer is now over its
    /// limit: the producer should pause until ``setOnDrain(_:)``'s action runs.
    @discardableResult
    package func offer(_ element: Element, weight: Int) -> Bool {
        if case .accepted(_, let pause) = accept(element, weight: weight) { return pause }
        return false
    }

    /// What became of an element handed to the buffer.
    private enum Acceptance {
        /// Queued or handed to the waiting consumer, as element `number`; `pause` when the buffer
        /// is now over its limit.
        case accepted(number: Int, pause: Bool)
        /// Dropped: the stream has ended or its consumer has gone away.
        case refused
    }

    private func accept(_ element: Element, weight: Int) -> Acceptance {
        let (consumer, acceptance): (CheckedContinuation<Element?, any Error>?, Acceptance) = state.withLock { state in
            guard state.terminal == nil, !state.isCancelled else { return (nil, .refused) }
            state.accepted += 1
            if let stamp { state.newestStamp = stamp(element) }
            if let consumer = state.consumer {
                state.consumer = nil
                state.taken += 1
                return (consumer, .accepted(number: state.accepted, pause: false))
            }
            state.queue.append((element, weight))
            state.bufferedWeight += weight
            if state.bufferedWeight > limit { state.isPaused = true }
            return (nil, .accepted(number: state.accepted, pause: state.isPaused))
        }
        consumer?.resume(returning: element)
        return acceptance
    }

    /// Appends an element, suspending while the buffer is over its limit.
    ///
    /// Returns once the buffer has accepted the element and, when that put it over its limit, once
    /// it has drained to half or the consumer has taken the element. A consumer that takes the
    /// element and goes away at once does not make this throw, so a producer that counts what it
    /// sent (a read counts the bytes it served) counts each element the consumer took.
    ///
    /// - Throws: `CancellationError` when the consumer had gone away before the element came, or
    ///   went away without taking it while this waited for room.
    package func send(_ element: Element, weight: Int) async throws {
        guard case .accepted(let number, let pause) = accept(element, weight: weight) else { throw CancellationError() }
        guard pause else { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let resumeNow: Result<Void, any Error>? = state.withLock { state in
                if state.isCancelled { return Self.outcome(forElement: number, in: state) }
                if state.bufferedWeight <= limit / 2 { return .success(()) }
                state.producers.append((continuation, number))
                return nil
            }
            if let resumeNow { continuation.resume(with: resumeNow) }
        }
    }

    /// How a send waiting for room ends once the consumer has gone away: normally if the
    /// consumer took its element first.
    private static func outcome(forElement number: Int, in state: State) -> Result<Void, any Error> {
        state.taken >= number ? .success(()) : .failure(CancellationError())
    }

    /// Whether the producer was told to pause and the consumer has not drained the buffer since.
    /// A producer that pauses its source after ``offer(_:weight:)`` returned `true` checks this
    /// afterwards: the consumer may have drained (and fired ``setOnDrain(_:)``) in between.
    package var isPaused: Bool { state.withLock { $0.isPaused } }

    /// Ends the stream after the queued elements, with an error or normally.
    package func finish(throwing error: (any Error)? = nil) {
        let consumer: CheckedContinuation<Element?, any Error>? = state.withLock { state in
            guard state.terminal == nil else { return nil }
            state.terminal = error.map { .failure($0) } ?? .success(())
            guard state.head == state.queue.count, let consumer = state.consumer else { return nil }
            state.consumer = nil
            return consumer
        }
        if let error { consumer?.resume(throwing: error) } else { consumer?.resume(returning: nil) }
    }

    /// Called by the consumer when it stops listening; wakes everyone and runs ``onCancel`` once.
    package func cancel() {
        typealias Woken = (CheckedContinuation<Element?, any Error>?, [(CheckedContinuation<Void, any Error>, Result<Void, any Error>)], (@Sendable () -> Void)?)
        let (consumer, producers, action): Woken = state.withLock { state in
            guard !state.isCancelled else { return (nil, [], nil) }
            state.isCancelled = true
            state.queue.removeAll()
            state.head = 0
            state.bufferedWeight = 0
            let producers = state.producers.map { ($0.continuation, Self.outcome(forElement: $0.element, in: state)) }
            let result = (state.consumer, producers, state.onCancel)
            state.consumer = nil
            state.producers = []
            state.onCancel = nil
            state.onDrain = nil
            return result
        }
        consumer?.resume(throwing: CancellationError())
        for (producer, outcome) in producers { producer.resume(with: outcome) }
        action?()
    }

    /// The next element, `nil` at the end, or the producer's error.
    package func next() async throws -> Element? {
        // Fast path: an element is queued, so no continuation is needed.
        if let element = nextIfQueued() { return element }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Element?, any Error>) in
                typealias Outcome = (Result<Element?, any Error>?, [WaitingSender], (@Sendable () -> Void)?)
                let (result, wake, drain): Outcome = state.withLock { state in
                    if state.isCancelled { return (.failure(CancellationError()), [], nil) }
                    if state.head < state.queue.count {
                        let (element, wake, drain) = Self.take(&state, limit: limit)
                        return (.success(element), wake, drain)
                    }
                    switch state.terminal {
                    case .none:
                        state.consumer = continuation
                        return (nil, [], nil)
                    case .success: return (.success(nil), [], nil)
                    case .failure(let error): return (.failure(error), [], nil)
                    }
                }
                if let result { continuation.resume(with: result) }
                for producer in wake { producer.continuation.resume() }
                drain?()
            }
        } onCancel: {
            cancel()
        }
    }

    /// The next element if one is queued, without waiting: `nil` when none is (the stream's end
    /// and its error, too, are for ``next()`` to report). A consumer that takes what has piled
    /// up in one go (a download writing several chunks with one call) calls this after ``next()``.
    package func nextIfQueued() -> Element? {
        typealias Ready = (Element, [WaitingSender], (@Sendable () -> Void)?)
        let ready: Ready? = state.withLock { state in
            guard !state.isCancelled, state.head < state.queue.count else { return nil }
            return Self.take(&state, limit: limit)
        }
        guard let (element, wake, drain) = ready else { return nil }
        for producer in wake { producer.continuation.resume() }
        drain?()
        return element
    }

    /// Removes the head element; returns the producers to wake and the drain action to run once
    /// the buffer is at most half full.
    private static func take(_ state: inout State, limit: Int) -> (Element, [WaitingSender], (@Sendable () -> Void)?) {
        let (slot, weight) = state.queue[state.head]
        state.queue[state.head].element = nil
        state.head += 1
        state.taken += 1
        state.bufferedWeight -= weight
        if state.head > 64, state.head * 2 > state.queue.count {
            state.queue.removeFirst(state.head)
            state.head = 0
        }
        guard state.bufferedWeight <= limit / 2 else { return (slot!, [], nil) }
        let wake = state.producers
        state.producers = []
        var drain: (@Sendable () -> Void)?
        if state.isPaused {
            state.isPaused = false
            drain = state.onDrain
        }
        return (slot!, wake, drain)
    }
}

/// Runs an action when the last reference to it goes away; lets an iterator (a struct) tell its
/// producer that nobody will read any more.
final class DeinitAction: Sendable {
    private let action: @Sendable () -> Void
    init(_ action: @escaping @Sendable () -> Void) { self.action = action }
    deinit { action() }
}
