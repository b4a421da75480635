import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The stable name of a cached resource, independent of how it is downloaded.
///
/// Keys come from the source (a file id or path plus an account), never from signed, expiring
/// download URLs, and never hold a secret (invariant 6): they are stored in the index in clear.
/// ``init(url:)`` derives a key from a plain URL: scheme, host, port and path, with user info
/// dropped and the query replaced by a digest, since query strings often carry tokens.
///
/// ```swift
/// CacheKey(url: URL(string: "https://cdn.example/a.mp3?sig=secret")!).rawValue
/// // "https://cdn.example/a.mp3?#5f1c…" (the query's digest, not the query)
/// CacheKey("yandex:me/disk:/Music/a.mp3")
/// ```
public struct CacheKey: Hashable, Sendable, Codable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The key's text.
    public let rawValue: String

    /// Creates a key from text chosen by the caller (for example `service:account:fileID`).
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public init(stringLiteral value: String) { self.init(value) }

    /// Derives a key from a URL with user info removed and the query reduced to a digest.
    ///
    /// The key is built from the URL's parts as written (host lower-cased, path still
    /// percent-encoded), never through `URLComponents.host`, which runs IDNA through ICU: on Linux
    /// that loads ICU's data into the process on a player's first request.
    public init(url: URL) {
        guard let scheme = url.scheme else {
            self.init(CacheKey.digest(of: url.absoluteString))
            return
        }
        var text = scheme.lowercased() + "://"
        if let host = url.host(percentEncoded: true)?.lowercased() {
            text += host.contains(":") ? "[\(host)]" : host
        }
        if let port = url.port { text += ":\(port)" }
        text += url.path(percentEncoded: true)
        if let query = url.query(percentEncoded: true), !query.isEmpty { text += "?#" + CacheKey.digest(of: query).prefix(16) }
        self.init(text)
    }

    /// The name of the key's data file: the SHA-256 of the key in hex. Keys with `/` or `..` can
    /// never escape the cache directory.
    public var fileStem: String { CacheKey.digest(of: rawValue) }

    public var description: String { rawValue }

    static func digest(of text: String) -> String {
        // Hex by table: `String(format:)` costs microseconds per byte on Linux, and this runs on
        // every request.
        let digits = Array("0123456789abcdef".utf8)
        var hex = [UInt8]()
        hex.reserveCapacity(64)
        for byte in SHA256.hash(data: Data(text.utf8)) {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: hex, as: UTF8.self)
    }
}
