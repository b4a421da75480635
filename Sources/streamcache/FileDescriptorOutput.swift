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

    static let standardOutput = FileDescriptorOutput(descriptor: STDOUT_FILENO)
    static let standardError = FileDescriptorOutput(descriptor: STDERR_FILENO)

    /// Creates (or truncates) the file at `path` for writing.
    static func create(path: String) throws -> FileDescriptorOutput {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw StreamCacheError(.invalidArgument, "Cannot create the output file \(path) (errno \(errno)).")
        }
        return FileDescriptorOutput(descriptor: descriptor)
    }

    /// Writes all of `data`, retrying short writes and interruptions.
    func write(contentsOf data: Data) throws {
        try data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = systemWrite(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw StreamCacheError(.cacheIOFailed, "Writing the output failed (errno \(errno)).")
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
        guard fsync(descriptor) == 0 || errno == EINVAL else {
            throw StreamCacheError(.cacheIOFailed, "Syncing the output failed (errno \(errno)).")
        }
    }

    func close() {
        _ = systemClose(descriptor)
    }
}

// The system calls, under names the methods above do not shadow.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { write(descriptor, bytes, count) }
private func systemClose(_ descriptor: Int32) -> Int32 { close(descriptor) }
