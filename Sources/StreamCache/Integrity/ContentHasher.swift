#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Crypto

/// Computes a ``ContentDigest`` of one algorithm over bytes fed in order.
///
/// ```swift
/// var hasher = ContentHasher(.sha256)
/// bytes.withUnsafeBytes { hasher.update($0) }
/// let digest = hasher.finalize()
/// ```
public struct ContentHasher: Sendable {
    private enum State: Sendable {
        case md5(Insecure.MD5)
        case sha1(Insecure.SHA1)
        case sha256(SHA256)
        case sha512(SHA512)
        case dropbox(DropboxContentHasher)
        case quickXor(QuickXorHasher)
    }

    private var state: State

    /// Creates a hasher for `algorithm`, having seen no byte.
    public init(_ algorithm: ContentDigest.Algorithm) {
        switch algorithm {
        case .md5: state = .md5(Insecure.MD5())
        case .sha1: state = .sha1(Insecure.SHA1())
        case .sha256: state = .sha256(SHA256())
        case .sha512: state = .sha512(SHA512())
        case .dropboxContentHash: state = .dropbox(DropboxContentHasher())
        case .quickXor: state = .quickXor(QuickXorHasher())
        }
    }

    /// Adds the next bytes of the content.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        switch state {
        case .md5(var hash): hash.update(bufferPointer: bytes); state = .md5(hash)
        case .sha1(var hash): hash.update(bufferPointer: bytes); state = .sha1(hash)
        case .sha256(var hash): hash.update(bufferPointer: bytes); state = .sha256(hash)
        case .sha512(var hash): hash.update(bufferPointer: bytes); state = .sha512(hash)
        case .dropbox(var hash): hash.update(bytes); state = .dropbox(hash)
        case .quickXor(var hash): hash.update(bytes); state = .quickXor(hash)
        }
    }

    /// The digest of `bytes` as a whole (a buffer in memory; the cache's own check feeds a data
    /// file a piece at a time with ``update(_:)``).
    public static func digest(_ algorithm: ContentDigest.Algorithm, of bytes: some ContiguousBytes) -> ContentDigest {
        var hasher = ContentHasher(algorithm)
        bytes.withUnsafeBytes { hasher.update($0) }
        return hasher.finalize()
    }

    /// The digest of every byte fed so far.
    public func finalize() -> ContentDigest {
        let (algorithm, bytes): (ContentDigest.Algorithm, [UInt8]) = switch state {
        case .md5(let hash): (.md5, Array(hash.finalize()))
        case .sha1(let hash): (.sha1, Array(hash.finalize()))
        case .sha256(let hash): (.sha256, Array(hash.finalize()))
        case .sha512(let hash): (.sha512, Array(hash.finalize()))
        case .dropbox(let hash): (.dropboxContentHash, hash.finalize())
        case .quickXor(let hash): (.quickXor, hash.finalize())
        }
        // Every algorithm's output has its declared length.
        return ContentDigest(algorithm: algorithm, bytes: bytes)!
    }
}
