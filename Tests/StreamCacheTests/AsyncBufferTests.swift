import StreamCache
import Testing

/// The queue between a read and its consumer: a read counts the bytes it served from what `send`
/// tells it, so `send` must say exactly whether the consumer took the element.
@Suite struct AsyncBufferTests {
    /// A sender held back for room, whose element the consumer took before it went away, returns
    /// normally: the element was delivered. (A read that failed here left its last region out of
    /// `bytesServedFromOrigin`: a ThreadSanitizer run counted less than the client received.)
    @Test func aSendWhoseElementWasTakenBeforeTheConsumerLeftSucceeds() async throws {
        let buffer = AsyncBuffer<Int>(limit: 10)
        let sender = Task { try await buffer.send(1, weight: 20) }
        try await Self.waitUntilPaused(buffer)
        // Another producer's element behind it keeps the buffer over half its limit, so taking the
        // first one does not wake the sender; only the consumer's leaving does.
        buffer.offer(2, weight: 20)
        #expect(try await buffer.next() == 1)
        buffer.cancel()
        await #expect(throws: Never.self) { try await sender.value }
    }

    /// A sender held back for room, whose element the consumer never took, is told the consumer
    /// left: the element was not delivered.
    @Test func aSendWhoseElementWasNotTakenThrowsWhenTheConsumerLeaves() async throws {
        let buffer = AsyncBuffer<Int>(limit: 10)
        buffer.offer(1, weight: 4)
        let sender = Task { try await buffer.send(2, weight: 20) }
        try await Self.waitUntilPaused(buffer)
        #expect(try await buffer.next() == 1)
        buffer.cancel()
        await #expect(throws: CancellationError.self) { try await sender.value }
    }

    /// A send after the consumer left throws at once.
    @Test func aSendAfterTheConsumerLeftThrows() async {
        let buffer = AsyncBuffer<Int>(limit: 10)
        buffer.cancel()
        await #expect(throws: CancellationError.self) { try await buffer.send(1, weight: 1) }
    }

    /// Waits (at most 60 s) until the buffer is over its limit.
    static func waitUntilPaused(_ buffer: AsyncBuffer<Int>) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !buffer.isPaused, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        try #require(buffer.isPaused, "the sender's element never reached the buffer")
    }

    /// What the consumer takes without waiting comes in order, and nothing when nothing is queued;
    /// the end and an error are for `next()` to tell.
    @Test func nextIfQueuedTakesWhatIsThereInOrder() async throws {
        let buffer = AsyncBuffer<Int>(limit: 100)
        #expect(buffer.nextIfQueued() == nil)
        buffer.offer(1, weight: 1)
        buffer.offer(2, weight: 1)
        #expect(buffer.nextIfQueued() == 1)
        #expect(buffer.nextIfQueued() == 2)
        #expect(buffer.nextIfQueued() == nil)
        buffer.offer(3, weight: 1)
        buffer.finish(throwing: CancellationError())
        #expect(buffer.nextIfQueued() == 3)
        #expect(buffer.nextIfQueued() == nil)
        await #expect(throws: CancellationError.self) { try await buffer.next() }
    }

    /// Taking without waiting makes room like `next()`: a producer paused over the limit is told
    /// to go on once the buffer is down to half, or it would never send again.
    @Test func nextIfQueuedWakesAPausedProducer() async throws {
        let buffer = AsyncBuffer<Int>(limit: 10)
        let drained = Locked(0)
        buffer.setOnDrain { drained.withLock { $0 += 1 } }
        #expect(!buffer.offer(1, weight: 4))
        #expect(!buffer.offer(2, weight: 4))
        #expect(buffer.offer(3, weight: 4), "12 is over the limit: the producer pauses")
        #expect(buffer.nextIfQueued() == 1)
        #expect(buffer.isPaused && drained.withLock { $0 } == 0, "8 is over half the limit")
        #expect(buffer.nextIfQueued() == 2)
        #expect(!buffer.isPaused && drained.withLock { $0 } == 1)
        let sender = Task { try await buffer.send(4, weight: 20) }
        try await Self.waitUntilPaused(buffer)
        #expect(buffer.nextIfQueued() == 3)
        #expect(buffer.nextIfQueued() == 4)
        try await sender.value
    }
}
