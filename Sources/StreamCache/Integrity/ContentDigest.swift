#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A digest of a resource's whole content, as its origin publishes it.
///
/// Cloud services publish one for every file (Yandex.Disk's `sha256`, Google Drive's
/// `md5Checksum`, Dropbox's `content_hash`, Box's `sha1`, OneDrive's `quickXorHash`), and an HTTP
/// origin may send an RFC 9530 `Repr-Digest`. Once every byte of a resource is cached, the cache
/// hashes its data file and compares: a mismatch means bytes were corrupted on the way or on the
/// disk, or mixed from two versions, and every cached byte is dropped (see
/// ``ResourceEvent/contentMismatch(expected:found:)``).
///
/// ```swift
/// let digest = ContentDigest(algorithm: .sha256, hex: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
/// print(digest!)  // sha256:e3b0c442…
/// ```
public struct ContentDigest: Hashable, Sendable, Codable, CustomStringConvertible {
    /// How a digest is computed.
    public enum Algorithm: String, Hashable, Sendable, Codable, CaseIterable {
        /// MD5 (Google Drive's `md5Checksum`, Yandex.Disk's `md5`).
        case md5
        /// SHA-1 (Box's `sha1`, OneDrive personal's `sha1Hash`).
        case sha1
        /// SHA-256 (Yandex.Disk's `sha256`, `Repr-Digest: sha-256`).
        case sha256
        /// SHA-512 (`Repr-Digest: sha-512`).
        case sha512
        /// Dropbox's `content_hash`: the SHA-256 of the concatenated SHA-256 digests of the
        /// content's 4 MiB blocks.
        case dropboxContentHash = "dropbox-content-hash"
        /// OneDrive's `quickXorHash`: a 160-bit XOR of the bytes, each shifted 11 bits further
        /// than the one before, with the length mixed into its last 8 bytes.
        case quickXor = "quickxor"

        /// The length of the algorithm's digests in bytes.
        public var digestLength: Int {
            switch self {
            case .md5: 16
            case .sha1, .quickXor: 20
            case .sha256, .dropboxContentHash: 32
            case .sha512: 64
            }
        }
    }

    /// How the digest was computed.
    public let algorithm: Algorithm
    /// The digest's bytes.
    public let bytes: [UInt8]

    /// Creates a digest from its bytes, or `nil` when their count is not the algorithm's length.
    public init?(algorithm: Algorithm, bytes: [UInt8]) {
        guard bytes.count == algorithm.digestLength else { return nil }
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// Creates a digest from hexadecimal text in either case, or `nil` when the text is not a
    /// digest of `algorithm` (services send an empty string for files they have not hashed yet).
    public init?(algorithm: Algorithm, hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count == algorithm.digestLength * 2 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = Self.nibble(digits[index]), let low = Self.nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        self.init(algorithm: algorithm, bytes: bytes)
    }

    /// Creates a digest from base64 text (OneDrive's `quickXorHash`, a `Repr-Digest` value), or
    /// `nil` when the text is not a digest of `algorithm`.
    public init?(algorithm: Algorithm, base64: String) {
        guard let data = Data(base64Encoded: base64) else { return nil }
        self.init(algorithm: algorithm, bytes: Array(data))
    }

    /// Parses the text ``description`` writes (`sha256:9f86…`), as the cache index stores it.
    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":"), let algorithm = Algorithm(rawValue: String(text[..<colon])) else { return nil }
        self.init(algorithm: algorithm, hex: String(text[text.index(after: colon)...]))
    }

    /// The digest in lowercase hexadecimal.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The algorithm's name and the digest in hexadecimal: `sha256:9f86…`.
    public var description: String { "\(algorithm.rawValue):\(hex)" }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
