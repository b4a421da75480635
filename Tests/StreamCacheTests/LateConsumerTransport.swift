import Foundation
import StreamCache

/// A transport whose consumer comes late for the rest of its first answer: once it has taken
/// `before` bytes of that body, it waits `hold` before it takes more, as the task of a download
/// does on a busy machine, while the transport it wraps goes on receiving.
final class LateConsumerTransport: HTTPTransport {
    let inner: any HTTPTransport
    let before: Int
    let hold: Duration
    private let answers = Counter()

    init(wrapping inner: any HTTPTransport, before: Int, hold: Duration) {
        self.inner = inner
        self.before = before
        self.hold = hold
    }

    var holdsBackSlowConsumers: Bool { inner.holdsBackSlowConsumers }

    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let response = try await inner.send(request)
        guard answers.next() == 0 else { return response }
        let late = LateConsumer(response.body, before: before, hold: hold)
        return HTTPResponse(status: response.status, headers: response.headers, body: HTTPBody(pulling: late))
    }

    private final class Counter: @unchecked Sendable {
        // @unchecked: `count` is only touched under `lock`.
        private let lock = NSLock()
        private var count = 0
        func next() -> Int { lock.withLock { defer { count += 1 }; return count } }
    }

    private final class LateConsumer: HTTPBodySource, @unchecked Sendable {
        // @unchecked: only the body's one consumer calls `nextChunk()`; `newestArrival` and
        // `cancel()` touch the immutable `body` only.
        private let body: HTTPBody
        private var iterator: HTTPBody.Iterator
        private let before: Int
        private let hold: Duration
        private var taken = 0
        private var held = false

        init(_ body: HTTPBody, before: Int, hold: Duration) {
            self.body = body
            self.iterator = body.makeAsyncIterator()
            self.before = before
            self.hold = hold
        }

        func next() async throws -> Data? { try await nextChunk()?.data }

        func nextChunk() async throws -> HTTPBody.Chunk? {
            if taken >= before, !held {
                held = true
                try await Task.sleep(for: hold)
            }
            let chunk = try await iterator.nextChunk()
            taken += chunk?.data.count ?? 0
            return chunk
        }

        var newestArrival: ContinuousClock.Instant? { body.newestArrival }

        func cancel() { body.discard() }
    }
}
