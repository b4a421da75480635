#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Changes the credentials file in place: read again, changed, and written back whole, under a
/// lock, so that two processes changing two entries at once (a rotated refresh token, a sign-in)
/// do not lose one of them.
///
/// The file is replaced whole (``PrivateFile``: mode 0600, on disk before the rename), so no
/// reader ever sees half of it, under an exclusive `flock` on its directory. A credentials file
/// that is a symbolic link (kept with other dotfiles) has the file it names replaced, and stays a
/// link. Entries are written back with sorted keys; what the change does not touch is kept.
enum CredentialsFileEditor {
    /// Applies `change` to the file at `url`'s top-level object. A file that does not exist yet is
    /// created (with its directory, mode 0700) when `creating`; otherwise its absence is an error.
    static func edit(_ url: URL, creating: Bool = false, _ change: (inout [String: JSONValue]) throws -> Void) async throws {
        let file = url.resolvingSymlinksInPath()
        let directory = file.deletingLastPathComponent()
        if creating, !FileManager.default.fileExists(atPath: directory.path) {
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw StreamCacheError(.invalidArgument, "Cannot create \(directory.path) for the credentials file.")
            }
        }
        try await withLock(of: directory.path) {
            // Read again under the lock: another process may have changed another entry.
            var document: [String: JSONValue] = [:]
            if !creating || FileManager.default.fileExists(atPath: file.path) {
                guard let read = try? JSONDecoder().decode([String: JSONValue].self, from: Data(contentsOf: file)) else {
                    throw StreamCacheError(.invalidArgument, "\(url.path) is not a JSON object; it was left as it was.")
                }
                document = read
            }
            try change(&document)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            try PrivateFile.store(String(decoding: try encoder.encode(document), as: UTF8.self) + "\n", at: file.path, name: "the credentials file")
        }
    }

    /// Runs `body` holding an exclusive `flock` on `directory`; waits for another holder at most
    /// 5 s (holders keep it for one small write).
    private static func withLock<T>(of directory: String, _ body: () throws -> T) async throws -> T {
        let fd = open(directory, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StreamCacheError(.invalidArgument, "Cannot open \(directory) (errno \(errno)).") }
        defer { close(fd) }
        let deadline = ContinuousClock.now + .seconds(5)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard ContinuousClock.now < deadline else {
                throw StreamCacheError(.cacheInUse, "Another process kept \(directory) locked for 5 s; the credentials file was not changed.")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        defer { flock(fd, LOCK_UN) }
        return try body()
    }
}

/// Any JSON value, so that an entry can be changed and the rest of the file written back as it was.
enum JSONValue: Codable {
    case string(String)
    case integer(Int64)
    case number(Double)
    case bool(Bool)
    case array([JSONValue])
    case object([String: JSONValue])
    case null

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        case .null: try container.encodeNil()
        }
    }
}
