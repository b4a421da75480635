#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The ordered stream of ``CachedRegion``s that answers one read, for consumers that move bytes
/// from the cache file themselves (a server sending them with `sendfile`).
///
/// It plans, waits and downloads exactly as a ``ReadStream`` does, but hands on where the bytes
/// lie instead of copies of them: each region is granted as soon as its bytes are in the cache
/// file, cached ones at once and missing ones as the download writes them, so the first bytes of a
/// cold read go out as early as with a ``ReadStream``. Regions come in offset order without gaps;
/// each covers as much as was cached from its start at that moment, so a consumer slower than its
/// download gets fewer, longer regions.
///
/// The stream runs at most about ``StreamCache/Configuration/readBufferLimit`` bytes ahead of its
/// consumer (one region, however long, counts as its length). Stopping iteration or cancelling the
/// consuming task ends the read, as with a ``ReadStream``.
///
/// - Throws: (from iteration) ``StreamCacheError`` when the origin fails or the resource changes
///   during the read, `CancellationError` when cancelled.
public struct RegionStream: AsyncSequence, Sendable {
    public typealias Element = CachedRegion

    let buffer: AsyncBuffer<CachedRegion>

    public func makeAsyncIterator() -> Iterator { Iterator(buffer: buffer) }

    /// Iterates a region read; dropping it ends the read. Like ``ReadStream/Iterator`` it may be
    /// handed to another task, but only one task may use it at a time.
    public struct Iterator: AsyncIteratorProtocol, Sendable {
        private let buffer: AsyncBuffer<CachedRegion>
        private let abandon: DeinitAction

        init(buffer: AsyncBuffer<CachedRegion>) {
            self.buffer = buffer
            self.abandon = DeinitAction { buffer.cancel() }
        }

        public mutating func next() async throws -> CachedRegion? { try await buffer.next() }

        /// Ends the read now, from any task: a `next()` waiting or to come throws
        /// `CancellationError`, as when the consuming task is cancelled.
        ///
        /// For a consumer that learns from elsewhere that nobody wants the bytes (a server whose
        /// client closed its connection while the read waited for the origin) and cannot cancel
        /// the task that iterates.
        public func cancel() { buffer.cancel() }
    }
}

/// How a read hands on what it finds cached.
enum ReadDelivery: Sendable {
    /// Copies of the bytes, in chunks of at most ``StreamCache/Configuration/chunkSize`` (a ``ReadStream``).
    case chunks(AsyncBuffer<ReadChunk>)
    /// Where the bytes lie (a ``RegionStream``).
    case regions(AsyncBuffer<CachedRegion>)
    /// Nothing: a prefetch, which only waits until every byte is cached and skips cached ones.
    case nothing(AsyncBuffer<ReadChunk>)

    var isPrefetch: Bool {
        if case .nothing = self { return true }
        return false
    }

    func finish(throwing error: (any Error)? = nil) {
        switch self {
        case .chunks(let buffer), .nothing(let buffer): buffer.finish(throwing: error)
        case .regions(let buffer): buffer.finish(throwing: error)
        }
    }
}
