#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where the bytes of a ``ReadChunk`` came from.
public enum ChunkSource: String, Sendable, Hashable, Codable {
    /// They were on disk when the read began.
    case cache
    /// They were missing when the read began and were downloaded from the origin during it.
    case origin
}

/// A piece of a read, in order: bytes `[offset, offset + data.count)` of the resource.
public struct ReadChunk: Sendable, Hashable {
    /// The resource offset of the first byte.
    public var offset: Int64
    /// The bytes.
    public var data: Data
    /// Whether the bytes were cached when the read began.
    public var source: ChunkSource

    /// The range the chunk covers.
    public var range: ByteRange { ByteRange(offset: offset, length: Int64(data.count)) }

    /// Creates a chunk.
    public init(offset: Int64, data: Data, source: ChunkSource) {
        self.offset = offset
        self.data = data
        self.source = source
    }
}

/// The ordered, back-pressured stream of chunks that answers one read.
///
/// Chunks arrive in offset order without gaps. Cached segments come from disk; missing segments
/// arrive as the download that fetches them writes them to the cache. The stream holds at most
/// about ``StreamCache/Configuration/readBufferLimit`` bytes ahead of its consumer. Stopping
/// iteration or cancelling the consuming task ends the read; a download it started stops after
/// the grace period unless another reader needs it.
///
/// - Throws: (from iteration) ``StreamCacheError`` when the origin fails or the resource changes
///   during the read, `CancellationError` when cancelled.
public struct ReadStream: AsyncSequence, Sendable {
    public typealias Element = ReadChunk

    let buffer: AsyncBuffer<ReadChunk>

    public func makeAsyncIterator() -> Iterator { Iterator(buffer: buffer) }

    /// Iterates a read; dropping it ends the read. It may be handed to another task (a server
    /// reads the first chunk before it answers, the rest while it streams), but only one task may
    /// use it at a time.
    public struct Iterator: AsyncIteratorProtocol, Sendable {
        private let buffer: AsyncBuffer<ReadChunk>
        private let abandon: DeinitAction

        init(buffer: AsyncBuffer<ReadChunk>) {
            self.buffer = buffer
            self.abandon = DeinitAction { buffer.cancel() }
        }

        public mutating func next() async throws -> ReadChunk? { try await buffer.next() }

        /// Ends the read now, from any task: a `next()` waiting or to come throws
        /// `CancellationError`, as when the consuming task is cancelled (see
        /// ``RegionStream/Iterator/cancel()``).
        public func cancel() { buffer.cancel() }
    }

    /// Collects the whole read into memory; meant for small ranges and tests.
    public func collect() async throws -> Data {
        var data = Data()
        for try await chunk in self { data.append(chunk.data) }
        return data
    }
}

/// Bytes of a resource that are entirely cached, for consumers that read them into their own
/// buffers (a server writing straight from the cache file into socket buffers, without the
/// extra copy of a ``ReadStream``).
///
/// The region stays readable even if the resource is evicted or changes version meanwhile: it
/// reads the file as it was when the region was granted, so a response is never a mix of versions.
public struct CachedRegion: Sendable {
    /// The bytes the region covers.
    public let range: ByteRange
    let file: DataFile
    /// The resource's info when the region was granted: the version its bytes belong to, which a
    /// server names in the head it sends with them (`nil` only when the origin never told it).
    public let info: ResourceInfo?

    /// A new descriptor of the region's cache file, for sending the region with `sendfile`; the
    /// caller owns it and must close it. `nil` when the file is shorter than the region claims
    /// (``read(into:at:)`` reports that as an error) or cannot be duplicated.
    public func duplicateFileDescriptor() -> Int32? {
        file.duplicateDescriptor(coveringUpTo: range.upperBound)
    }

    /// Reads bytes at `offset` (inside ``range``) into `buffer`.
    ///
    /// - Returns: The number of bytes read: `buffer.count` unless the region ends first.
    /// - Throws: ``StreamCacheError`` (`cacheIOFailed`) when the file cannot be read or is
    ///   shorter than the index claims.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        precondition(range.contains(offset), "offset \(offset) is outside \(range)")
        let wanted = min(buffer.count, Int(range.upperBound - offset))
        let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: offset)
        guard count == wanted else {
            throw StreamCacheError(.cacheIOFailed, "The cache file is shorter than its index claims; clear the cache entry.",
                                   range: ByteRange(offset, range.upperBound))
        }
        return count
    }
}
