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

    /// Waits (at most 10 s) until the buffer is over its limit.
    static func waitUntilPaused(_ buffer: AsyncBuffer<Int>) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !buffer.isPaused, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        try #require(buffer.isPaused, "the sender's element never reached the buffer")
    }
}
