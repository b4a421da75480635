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

/// The claim of one ``CacheStore`` on its directory: an exclusive `flock` on `<directory>/lock`,
/// held from opening the store until ``release()`` or the store's end.
///
/// Two stores on one directory would each trust its own picture of the files: the second one's
/// start-up deletes data files the first has not indexed yet, its eviction deletes files the first
/// writes to, and two downloads of a file that changed at the origin write two versions into one
/// data file under one index row. So the second store is refused, in another process or in this
/// one (a `flock` belongs to an open file, not to a process).
///
/// A `flock` ends with the process that holds it, however it ends: a killed server leaves no
/// stale claim behind. The file also names its holder (process id and name), for the message
/// the next one gets.
final class CacheDirectoryLock: Sendable {
    /// The lock file's descriptor while the claim holds (internal for tests, which duplicate it).
    let descriptor = Locked<Int32?>(nil)

    /// Claims `directory`, which must exist.
    ///
    /// - Throws: ``StreamCacheError`` with ``StreamCacheError/Code/cacheInUse`` when another store
    ///   holds it, ``StreamCacheError/Code/cacheIOFailed`` when the lock file cannot be opened.
    init(directory: URL) throws {
        let path = directory.appendingPathComponent("lock").path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DataFile.error(errno, "open the cache's lock file \(path)") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = Self.holder(fd)
            close(fd)
            guard code == EWOULDBLOCK else { throw DataFile.error(code, "lock the cache directory \(directory.path)") }
            throw Self.inUse(directory, by: holder)
        }
        Self.write(holder: "\(getpid()) \(Self.processName)\n", to: fd)
        descriptor.withLock { $0 = fd }
    }

    deinit { release() }

    /// Whether the claim still holds: false once ``release()`` gave the directory up.
    var isHeld: Bool { descriptor.withLock { $0 != nil } }

    /// Gives the directory up for another store. Idempotent.
    func release() {
        guard let fd = descriptor.withLock({ value -> Int32? in defer { value = nil }; return value }) else { return }
        // Emptied first: a holder named after its release would mislead the next message.
        _ = ftruncate(fd, 0)
        // Unlocked before the close: the lock belongs to the open file, which a child process
        // forked meanwhile shares until it calls exec, and a close alone would leave the lock to
        // that copy. A store opened on the directory right after this one's shutdown was refused
        // so under a full test run that spawned processes beside it.
        _ = flock(fd, LOCK_UN)
        close(fd)
    }

    private static func inUse(_ directory: URL, by holder: (pid: Int32, name: String)?) -> StreamCacheError {
        if let holder, holder.pid == getpid() {
            return StreamCacheError(.cacheInUse, "The cache at \(directory.path) is already open in this process: use one StreamCache per directory, or shut the other one down first.")
        }
        let who = holder.map { "process \($0.pid)\($0.name.isEmpty ? "" : " (\($0.name))")" } ?? "another process"
        return StreamCacheError(.cacheInUse, "The cache at \(directory.path) is in use by \(who): one process at a time may use a cache directory. Stop it, or use another directory.")
    }

    /// The holder the lock file names: the process id, then the process's name.
    private static func holder(_ fd: Int32) -> (pid: Int32, name: String)? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[..<count], as: UTF8.self).split(separator: "\n").first ?? ""
        let fields = text.split(separator: " ", maxSplits: 1)
        guard let first = fields.first, let pid = Int32(first) else { return nil }
        return (pid, fields.count > 1 ? String(fields[1]) : "")
    }

    private static func write(holder: String, to fd: Int32) {
        _ = ftruncate(fd, 0)
        let bytes = Array(holder.utf8)
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    /// The executable's file name, as `ps` shows it.
    private static var processName: String {
        CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "") } ?? ""
    }
}
