import Foundation
import StreamCache

/// A transport whose consumer comes late for the rest of one answer, the first to a request for
/// the file's first bytes: once it has taken `before` bytes of that body, it waits before it
/// takes more, as the task of a download does on a busy machine, while the transport it wraps
/// goes on receiving. It waits `hold`, or until `release` says so, whichever comes first.
final class LateConsumerTransport: HTTPTransport {
    let inner: any HTTPTransport
    let before: Int
    let hold: Duration
    let release: (@Sendable () -> Bool)?
    private let answers = Counter()

    init(wrapping inner: any HTTPTransport, before: Int, hold: Duration, until release: (@Sendable () -> Bool)? = nil) {
        self.inner = inner
        self.before = before
        self.hold = hold
        self.release = release
    }

    var holdsBackSlowConsumers: Bool { inner.holdsBackSlowConsumers }

    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let response = try await inner.send(request)
        guard request.headers["Range"]?.hasPrefix("bytes=0-") == true, answers.next() == 0 else { return response }
        let late = LateConsumer(response.body, before: before, hold: hold, release: release)
        return HTTPResponse(status: response.status, headers: response.headers, body: HTTPBody(pulling: late))
    }

    private final class Counter: @unchecked Sendable {
        // @unchecked: `count` is only touched under `lock`.
        private let lock = NSLock()
        private var count = 0
        func next() -> Int { lock.withLock { defer { count += 1 }; return count } }
    }

    private final class LateConsumer: HTTPBodySource, @unchecked Sendable {
        // @unchecked: only the body's one consumer calls `nextChunk()`; `newestArrival`,
        // `bytesWaiting` and `cancel()` touch the immutable `body` only.
        private let body: HTTPBody
        private var iterator: HTTPBody.Iterator
        private let before: Int
        private let hold: Duration
        private let release: (@Sendable () -> Bool)?
        private var taken = 0
        private var held = false

        init(_ body: HTTPBody, before: Int, hold: Duration, release: (@Sendable () -> Bool)?) {
            self.body = body
            self.iterator = body.makeAsyncIterator()
            self.before = before
            self.hold = hold
            self.release = release
        }

        func next() async throws -> Data? { try await nextChunk()?.data }

        func nextChunk() async throws -> HTTPBody.Chunk? {
            if taken >= before, !held {
                held = true
                if let release {
                    let until = ContinuousClock.now + hold
                    while !release(), ContinuousClock.now < until { try await Task.sleep(for: .milliseconds(10)) }
                } else {
                    try await Task.sleep(for: hold)
                }
            }
            let chunk = try await iterator.nextChunk()
            taken += chunk?.data.count ?? 0
            return chunk
        }

        var newestArrival: ContinuousClock.Instant? { body.newestArrival }

        var bytesWaiting: Int? { body.bytesWaiting }

        func cancel() { body.discard() }
    }
}
