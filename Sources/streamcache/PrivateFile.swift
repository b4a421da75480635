#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StreamCache

/// A small file only the user may read (the control token, `server.json`), written whole or not
/// at all: the bytes go to a temporary file created with mode 0600 before any byte is written, so
/// they are never readable by others, even briefly, and it is renamed over `path`, so a reader
/// never sees half of it.
enum PrivateFile {
    /// Writes `text` to `path`; `name` says what the file is in an error ("the control token
    /// file").
    ///
    /// - Throws: ``StreamCacheError`` `invalidArgument` when the file cannot be created (a
    ///   directory the user cannot write), `cacheIOFailed` when it cannot be written.
    static func store(_ text: String, at path: String, name: String) throws {
        let temporary = "\(path).\(getpid()).tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StreamCacheError(.invalidArgument, "Cannot create \(name) \(path) (errno \(errno)).") }
        let bytes = Array(text.utf8)
        let written = write(fd, bytes, bytes.count)
        close(fd)
        guard written == bytes.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw StreamCacheError(.cacheIOFailed, "Cannot write \(name) \(path).")
        }
    }
}
