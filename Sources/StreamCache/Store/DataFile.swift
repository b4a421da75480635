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

    /// Opens (creating if needed, mode 0600) the file at `path`.
    init(path: String) throws {
        let fd = openFile(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DataFile.error(errno, "open the cache file") }
        self.path = path
        self.descriptor = fd
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

private func openFile(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}
