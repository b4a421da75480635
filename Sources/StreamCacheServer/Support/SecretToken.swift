import Crypto
import Foundation

/// Unguessable tokens for stream URLs and the control API, and a comparison that does not leak
/// how much of a guess was right.
enum SecretToken {
    /// A token of `bytes` random bytes (128 bits by default) in URL-safe base64 without padding.
    static func make(bytes: Int = 16) -> String {
        var generator = SystemRandomNumberGenerator()
        let random = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return Data(random).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Whether `candidate` equals `secret`, in time that depends only on their lengths.
    static func matches(_ candidate: some StringProtocol, _ secret: String) -> Bool {
        let a = Array(candidate.utf8)
        let b = Array(secret.utf8)
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }

    /// Whether `value` can be used in a URL path segment as is: letters, digits, `-`, `_`, `.`, `~`.
    static func isValid(_ value: String) -> Bool {
        !value.isEmpty && value.count <= 128 && value != "." && value != ".."
            && value.unicodeScalars.allSatisfy { CharacterSet.urlPathSafe.contains($0) }
    }
}

extension CharacterSet {
    /// The unreserved characters of RFC 3986.
    static let urlPathSafe = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")
}
