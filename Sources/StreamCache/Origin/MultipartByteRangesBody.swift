#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The bytes of a `multipart/byteranges` answer without its boundaries and part headers: the
/// payload of each part, in order, as one body (see ``MultipartByteRangesParser`` for what is
/// accepted). Payload chunks pass through as the transport delivers them, and each belongs to
/// one part; the rest of the body after the last part (the closing delimiter) is read, so the
/// connection can be reused.
final class MultipartByteRangesBody: HTTPBodySource, @unchecked Sendable {
    // @unchecked: `next()` and `readFirstPartHead()` run in one task at a time (the body's
    // consumer); `cancel()` only touches `body`, which is Sendable.
    private let body: HTTPBody
    private var iterator: HTTPBody.Iterator
    private var parser: MultipartByteRangesParser
    /// Payload parsed but not handed on yet, each piece with its chunk's arrival.
    private var pending: [HTTPBody.Chunk] = []
    private var ended = false
    /// A parse error met by ``readyChunk()``, which cannot throw: the next ``nextChunk()`` does.
    private var deferredError: (any Error)?

    /// Reads `body`, whose parts must be `expected`, separated by `boundary`.
    init(body: HTTPBody, boundary: String, expected: [ByteRange]) {
        self.body = body
        self.iterator = body.makeAsyncIterator()
        self.parser = MultipartByteRangesParser(boundary: boundary, expected: expected)
    }

    /// Reads up to the first part's payload and returns the resource's length its
    /// `Content-Range` gives (`nil` when it says `*`). Call once, before ``next()``.
    func readFirstPartHead() async throws -> Int64? {
        while !parser.hasReadFirstPartHead {
            guard try await receive() else { break }
        }
        return parser.completeLength
    }

    func next() async throws -> Data? {
        try await nextChunk()?.data
    }

    func nextChunk() async throws -> HTTPBody.Chunk? {
        while pending.isEmpty {
            guard try await receive() else { return nil }
        }
        return pending.removeFirst()
    }

    func readyChunk() -> HTTPBody.Chunk? {
        while pending.isEmpty {
            guard !ended, deferredError == nil, let chunk = iterator.readyChunk() else { return nil }
            do {
                pending += try parser.parse(chunk.data).map { HTTPBody.Chunk($0, arrivedAt: chunk.arrivedAt) }
            } catch {
                deferredError = error
                return nil
            }
        }
        return pending.removeFirst()
    }

    func cancel() {
        body.discard()
    }

    /// The transport's: what it received includes the boundaries and part heads, which tell no
    /// bytes, so a body whose newest chunk held only those looks untold until the next payload.
    var newestArrival: ContinuousClock.Instant? { body.newestArrival }

    /// Parses the next chunk of the body; `false` once it has ended (after its last part).
    private func receive() async throws -> Bool {
        if let deferredError { throw deferredError }
        guard !ended else { return false }
        guard let chunk = try await iterator.nextChunk() else {
            ended = true
            try parser.finish()
            return false
        }
        pending += try parser.parse(chunk.data).map { HTTPBody.Chunk($0, arrivedAt: chunk.arrivedAt) }
        return true
    }
}
