#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One resource's sparse data file, accessed with positional I/O (`pread`/`pwrite`), so any
/// number of readers and writers can use it at once without sharing a file offset.
///
/// Bytes are written where they belong in the resource; holes stay unallocated. Which bytes are
/// valid is the index's business (``CacheStore``), never the file's size.
final class DataFile: Sendable {
    /// The file's path.
    let path: String
    private let descriptor: Int32
    /// Whether opening created the file: there was none at `path`. Where the index names a file
    /// that held bytes, they are gone (deleted behind the cache's back while it ran).
    let wasCreated: Bool

    /// Opens (creating if needed, mode 0600) the file at `path`.
    init(path: String) throws {
        var fd = openFile(path, O_RDWR | O_CLOEXEC, 0)
        var created = false
        if fd < 0, errno == ENOENT {
            fd = openFile(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            created = true
        }
        guard fd >= 0 else { throw DataFile.error(errno, "open the cache file") }
        self.path = path
        self.descriptor = fd
        self.wasCreated = created
    }

    deinit { close(descriptor) }

    /// Writes all of `data` at `offset`.
    ///
    /// - Throws: ``StreamCacheError`` with ``StreamCacheError/Code/diskFull`` on `ENOSPC`/`EDQUOT`,
    ///   ``StreamCacheError/Code/cacheIOFailed`` otherwise.
    func write(_ data: Data, at offset: Int64) throws {
        try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            guard let base = raw.baseAddress else { return }
            var done = 0
            while done < raw.count {
                let written = pwrite(descriptor, base + done, raw.count - done, off_t(offset + Int64(done)))
                if written < 0 {
                    if errno == EINTR { continue }
                    throw DataFile.error(errno, "write the cache file")
                }
                done += written
            }
        }
    }

    /// Reads up to `count` bytes at `offset`; fewer only at the end of the file.
    ///
    /// The buffer is allocated uninitialised and handed to `Data` without a copy: on the warm path
    /// this is the only memory traffic besides the kernel's copy.
    func read(count: Int, at offset: Int64) throws -> Data {
        guard count > 0 else { return Data() }
        let base = UnsafeMutableRawPointer.allocate(byteCount: count, alignment: 16)
        let done: Int
        do {
            done = try read(into: UnsafeMutableRawBufferPointer(start: base, count: count), at: offset)
        } catch {
            base.deallocate()
            throw error
        }
        return Data(bytesNoCopy: base, count: done, deallocator: .custom { pointer, _ in pointer.deallocate() })
    }

    /// Reads up to `buffer.count` bytes at `offset` into caller-owned memory; fewer only at the
    /// end of the file. Returns the number of bytes read.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var done = 0
        while done < buffer.count {
            let read = pread(descriptor, base + done, buffer.count - done, off_t(offset + Int64(done)))
            if read < 0 {
                if errno == EINTR { continue }
                throw DataFile.error(errno, "read the cache file")
            }
            if read == 0 { break }
            done += read
        }
        return done
    }

    /// Makes every write so far durable (`fdatasync`, `F_FULLFSYNC` semantics aside).
    func sync() throws {
        #if canImport(Darwin)
        let result = fsync(descriptor)
        #else
        let result = fdatasync(descriptor)
        #endif
        guard result == 0 else { throw DataFile.error(errno, "sync the cache file") }
    }

    /// The file's current size in bytes.
    func size() throws -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw DataFile.error(errno, "inspect the cache file") }
        return Int64(info.st_size)
    }

    /// The bytes the file holds from `offset` on, up to the first hole or the file's end: what a
    /// file cut short or deleted behind the cache's back (and created anew, empty, when reopened)
    /// no longer holds. A hole is found with `SEEK_HOLE`, a whole file-system block at a time; a
    /// file system that keeps no holes reports the file's end. A hole under bytes the index claims
    /// never occurs otherwise, since a byte is written before it is claimed.
    func heldBytes(from offset: Int64) -> ByteRange {
        let holeStart = lseek(descriptor, off_t(offset), seekHole)
        if holeStart >= 0 { return ByteRange(offset, max(offset, Int64(holeStart))) }
        // ENXIO: `offset` is at or past the end.
        if errno == ENXIO { return ByteRange(offset, offset) }
        // A kernel without `SEEK_HOLE`: the file's size tells; without even that, the index is
        // trusted, as it always was before this check.
        guard let size = try? size() else { return ByteRange(offset, Int64.max) }
        return ByteRange(offset, max(offset, size))
    }

    /// Where the file's next written bytes at or after `offset` begin (`SEEK_DATA`), or `nil` when
    /// none follow.
    func nextHeldByte(atOrAfter offset: Int64) -> Int64? {
        let dataStart = lseek(descriptor, off_t(offset), seekData)
        return dataStart >= 0 ? Int64(dataStart) : nil
    }

    /// The file system's block size (at least 4 KiB): a hole starts and ends on a block's edge,
    /// and the block a file was cut in, or written into again past a hole, reads as data
    /// wherever it holds no bytes, as zeros.
    func blockSize() -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 4096 }
        return max(4096, Int64(info.st_blksize))
    }

    /// A new descriptor of the file (close-on-exec), or `nil` when the file ends before `end` or
    /// the descriptor cannot be duplicated.
    func duplicateDescriptor(coveringUpTo end: Int64) -> Int32? {
        guard let size = try? size(), size >= end else { return nil }
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        return copy >= 0 ? copy : nil
    }

    static func error(_ code: Int32, _ action: String) -> StreamCacheError {
        let reason = String(cString: strerror(code))
        if code == ENOSPC || code == EDQUOT {
            return StreamCacheError(.diskFull, "Could not \(action): the disk is full (\(reason)). Free space or lower the cache size limit.")
        }
        return StreamCacheError(.cacheIOFailed, "Could not \(action): \(reason).")
    }
}

#if canImport(Darwin)
private let seekData = SEEK_DATA
private let seekHole = SEEK_HOLE
#else
// Linux's values (`<unistd.h>` declares them only under `_GNU_SOURCE`, which Swift's Glibc
// module does not set).
private let seekData: Int32 = 3
private let seekHole: Int32 = 4
#endif

private func openFile(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}
