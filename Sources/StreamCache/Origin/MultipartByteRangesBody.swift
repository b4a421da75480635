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
    /// When the newest chunk the parser took arrived, the newest that held payload, and the
    /// payload bytes in ``pending``: read by ``newestArrival`` and ``bytesWaiting`` from any thread.
    private let parsed = Locked<(taken: ContinuousClock.Instant?, payload: ContinuousClock.Instant?, pending: Int)>((nil, nil, 0))

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
        return handOn()
    }

    func readyChunk() -> HTTPBody.Chunk? {
        while pending.isEmpty {
            guard !ended, deferredError == nil, let chunk = iterator.readyChunk() else { return nil }
            do {
                try parse(chunk)
            } catch {
                deferredError = error
                return nil
            }
        }
        return handOn()
    }

    /// Takes the first piece of ``pending``, which must not be empty.
    private func handOn() -> HTTPBody.Chunk {
        let piece = pending.removeFirst()
        parsed.withLock { $0.pending -= piece.data.count }
        return piece
    }

    func cancel() {
        body.discard()
    }

    /// The transport's, unless the parser has taken every chunk the transport received: then the
    /// newest that held payload. A chunk of boundaries and part heads alone brings none of the
    /// file's bytes, and a consumer that has taken all the payload has taken all there is.
    var newestArrival: ContinuousClock.Instant? {
        guard let newest = body.newestArrival else { return nil }
        let (taken, payload) = parsed.withLock { ($0.taken, $0.payload) }
        guard let taken, newest <= taken else { return newest }
        return payload
    }

    /// The payload parsed and not handed on yet, and what the transport holds that the parser
    /// has not taken: none once the consumer has taken all that came. A count of the file's
    /// bytes to within the boundaries and part heads among them, which may belong to the
    /// ranges after the one arriving.
    var bytesWaiting: Int? {
        guard let unparsed = body.bytesWaiting else { return nil }
        return unparsed + parsed.withLock { $0.pending }
    }

    /// Parses the next chunk of the body; `false` once it has ended (after its last part).
    private func receive() async throws -> Bool {
        if let deferredError { throw deferredError }
        guard !ended else { return false }
        guard let chunk = try await iterator.nextChunk() else {
            ended = true
            try parser.finish()
            return false
        }
        try parse(chunk)
        return true
    }

    /// Parses `chunk` of the body into ``pending``.
    private func parse(_ chunk: HTTPBody.Chunk) throws {
        let pieces = try parser.parse(chunk.data)
        pending += pieces.map { HTTPBody.Chunk($0, arrivedAt: chunk.arrivedAt) }
        parsed.withLock { parsed in
            parsed.taken = chunk.arrivedAt
            if !pieces.isEmpty { parsed.payload = chunk.arrivedAt }
            parsed.pending += pieces.reduce(0) { $0 + $1.count }
        }
    }
}
