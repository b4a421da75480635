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

/// Keeps a service's rotated refresh token in the credentials file it came from (see
/// ``RefreshTokenStore``): the entry's `refresh_token` and `token` are replaced, everything else
/// in the file is kept (written again with sorted keys).
///
/// The file is replaced whole (``PrivateFile``: mode 0600, on disk before the rename), so no
/// reader ever sees half of it, under an exclusive `flock` on its directory, so that two processes
/// keeping tokens of two services at once do not lose one of them. A credentials file that is a
/// symbolic link (kept with other dotfiles) has the file it names replaced, and stays a link.
struct CredentialsFileTokenStore: RefreshTokenStore {
    /// The credentials file.
    let url: URL
    /// The service's entry (`box`, `onedrive`, …).
    let service: String

    func storedRefreshToken() async throws -> String? {
        try CredentialsFile.load(from: url)?.refreshToken(for: service)
    }

    func keep(refreshToken: String, accessToken: String) async throws {
        let file = url.resolvingSymlinksInPath()
        try await withLock(of: file.deletingLastPathComponent().path) {
            // Read again under the lock: another process may have changed another entry.
            var document = try JSONDecoder().decode([String: JSONValue].self, from: Data(contentsOf: file))
            guard case .object(var entry)? = document[service] else {
                throw StreamCacheError(.invalidArgument, "\(url.path) no longer has a \"\(service)\" entry to keep the new refresh token in.")
            }
            entry["refresh_token"] = .string(refreshToken)
            entry["token"] = .string(accessToken)
            document[service] = .object(entry)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            try PrivateFile.store(String(decoding: try encoder.encode(document), as: UTF8.self) + "\n", at: file.path, name: "the credentials file")
        }
    }

    /// Runs `body` holding an exclusive `flock` on `directory`; waits for another holder at most
    /// 5 s (holders keep it for one small write).
    private func withLock<T>(of directory: String, _ body: () throws -> T) async throws -> T {
        let fd = open(directory, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StreamCacheError(.invalidArgument, "Cannot open \(directory) (errno \(errno)).") }
        defer { close(fd) }
        let deadline = ContinuousClock.now + .seconds(5)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard ContinuousClock.now < deadline else {
                throw StreamCacheError(.cacheInUse, "Another process kept \(directory) locked for 5 s; the new refresh token was not written.")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        defer { flock(fd, LOCK_UN) }
        return try body()
    }
}

/// Any JSON value, so that an entry can be changed and the rest of the file written back as it was.
private enum JSONValue: Codable {
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
