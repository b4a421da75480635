#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import StreamCache

/// Unbuffered output to a file descriptor: standard output and error, or a file `get` writes.
///
/// `FileHandle` would do, but on Linux it lives in the full Foundation, which this tool does not
/// load (with ICU, 9 MiB of resident memory a long-running `serve` has no use for).
struct FileDescriptorOutput: Sendable {
    let descriptor: Int32
    /// For a file written beside its destination: where it is, and the path it replaces once
    /// complete (see ``replacing(path:)``).
    private let pending: (temporary: String, destination: String)?

    private init(descriptor: Int32, pending: (temporary: String, destination: String)? = nil) {
        self.descriptor = descriptor
        self.pending = pending
    }

    static let standardOutput = FileDescriptorOutput(descriptor: STDOUT_FILENO)
    static let standardError = FileDescriptorOutput(descriptor: STDERR_FILENO)

    /// Output for the file at `path` that replaces it only when complete: the bytes go to a
    /// hidden file beside it (`.NAME.streamcache-PID.part`), renamed over `path` by ``finish()``,
    /// so a download that fails, or a cache that refuses, leaves what was at `path` as it was;
    /// such files that killed runs left are deleted (``removeLeftovers(of:in:)``). Something at
    /// `path` that is not a regular file (`/dev/null`, a pipe) is written directly; a symbolic
    /// link keeps pointing where it did, at the new file. A file that was there keeps its
    /// permissions.
    static func replacing(path: String) throws -> FileDescriptorOutput {
        var status = stat()
        let exists = stat(path, &status) == 0
        if exists, status.st_mode & S_IFMT != S_IFREG {
            let descriptor = open(path, O_WRONLY | O_CLOEXEC)
            guard descriptor >= 0 else { throw cannotCreate(path) }
            return FileDescriptorOutput(descriptor: descriptor)
        }
        var path = path
        if let resolved = realpath(path, nil) {
            path = String(cString: resolved)
            free(resolved)
        }
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        let temporary = "\(directory).\(name).streamcache-\(getpid()).part"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw cannotCreate(path) }
        if exists { _ = fchmod(descriptor, status.st_mode & 0o7777) }
        removeLeftovers(of: name, in: directory)
        return FileDescriptorOutput(descriptor: descriptor, pending: (temporary, path))
    }

    /// Deletes the hidden files that earlier `get -o` runs into `name` left in `directory` when
    /// they were killed (SIGKILL, a power cut: no chance to clean up), recognised by the process
    /// id in their name no longer running. A run still writing its file is left alone; so is a
    /// file whose process id a live process has taken since, which costs only its space.
    private static func removeLeftovers(of name: String, in directory: String) {
        let prefix = ".\(name).streamcache-", suffix = ".part"
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory.isEmpty ? "." : directory) else { return }
        for entry in entries where entry.hasPrefix(prefix) && entry.hasSuffix(suffix) && entry.count > prefix.count + suffix.count {
            let digits = entry.dropFirst(prefix.count).dropLast(suffix.count)
            guard digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let pid = pid_t(digits), pid > 0, pid != getpid() else { continue }
            if kill(pid, 0) != 0, errno == ESRCH { unlink(directory + entry) }
        }
    }

    private static func cannotCreate(_ path: String) -> StreamCacheError {
        StreamCacheError(.invalidArgument, "Cannot create the output file \(path) (\(String(cString: strerror(errno)))).")
    }

    /// Syncs and closes a file output; one written beside its destination then replaces it.
    func finish() throws {
        do {
            try synchronize()
        } catch {
            discard()
            throw error
        }
        close()
        if let pending, rename(pending.temporary, pending.destination) != 0 {
            let reason = String(cString: strerror(errno))
            unlink(pending.temporary)
            throw StreamCacheError(.invalidArgument, "Cannot replace the output file \(pending.destination) (\(reason)).")
        }
    }

    /// Closes a file output that did not complete; one written beside its destination is deleted,
    /// leaving the destination untouched.
    func discard() {
        close()
        if let pending { unlink(pending.temporary) }
    }

    /// Writes all of `data`, retrying short writes and interruptions.
    func write(contentsOf data: Data) throws {
        try data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = systemWrite(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw OutputWriteFailure(errorNumber: errno)
                }
                offset += written
            }
        }
    }

    /// Writes `text` as UTF-8; a failure (a closed pipe) is ignored, as `print` ignores it.
    func write(_ text: String) {
        try? write(contentsOf: Data(text.utf8))
    }

    /// Flushes the file to disk.
    func synchronize() throws {
        guard fsync(descriptor) == 0 || errno == EINVAL else { throw OutputWriteFailure(errorNumber: errno) }
    }

    func close() {
        _ = systemClose(descriptor)
    }
}

// The system calls, under names the methods above do not shadow.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { write(descriptor, bytes, count) }
private func systemClose(_ descriptor: Int32) -> Int32 { close(descriptor) }

/// Writing a command's output failed: the output's failure, not the cache's (which keeps what it
/// downloaded), and when a pipe's reader has gone (`get … | head -c 100`), no failure at all.
struct OutputWriteFailure: Error {
    /// The `errno` of the write.
    let errorNumber: Int32

    /// The reader of the pipe the output goes to has closed it.
    var readerLeft: Bool { errorNumber == EPIPE }

    var message: String { "Writing the output failed (\(String(cString: strerror(errorNumber))))." }
}
