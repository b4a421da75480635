#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A small file only the user may read (the control token, `server.json`, the credentials file
/// with a rotated refresh token), written whole or not at all: the bytes go to a temporary file
/// created with mode 0600 before any byte is written, so they are never readable by others, even
/// briefly; they are on disk (`fsync`) before it is renamed over `path`, so neither a reader nor a
/// crash ever leaves half of it.
package enum PrivateFile {
    /// Writes `text` to `path`; `name` says what the file is in an error ("the control token
    /// file").
    ///
    /// - Throws: ``StreamCacheError`` `invalidArgument` when the file cannot be created (a
    ///   directory the user cannot write), `cacheIOFailed` when it cannot be written.
    package static func store(_ text: String, at path: String, name: String) throws {
        let temporary = "\(path).\(getpid()).tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StreamCacheError(.invalidArgument, "Cannot create \(name) \(path) (errno \(errno)).") }
        let bytes = Array(text.utf8)
        var done = 0
        while done < bytes.count {
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { break }
            done += written
        }
        let durable = done == bytes.count && fsync(fd) == 0
        close(fd)
        guard durable, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw StreamCacheError(.cacheIOFailed, "Cannot write \(name) \(path).")
        }
    }
}
