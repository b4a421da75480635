#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Unguessable tokens for stream URLs, the control API and OAuth sign-ins (`state`, the PKCE
/// verifier), and a comparison that does not leak how much of a guess was right.
package enum SecretToken {
    /// A token of `bytes` random bytes (128 bits by default) in URL-safe base64 without padding.
    package static func make(bytes: Int = 16) -> String {
        base64URL(randomBytes(bytes))
    }

    /// `bytes` in URL-safe base64 without padding (RFC 4648 §5).
    package static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        String(Data(bytes).base64EncodedString().compactMap { character -> Character? in
            switch character {
            case "+": "-"
            case "/": "_"
            case "=": nil
            default: character
            }
        })
    }

    /// `count` bytes from the system's secure generator, eight per draw: each draw is a system
    /// call, and a connection's markers need 16 (the server's `FileRegionSlots`).
    package static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count {
            withUnsafeBytes(of: generator.next() as UInt64) { bytes.append(contentsOf: $0) }
        }
        return Array(bytes.prefix(count))
    }

    /// Whether `candidate` equals `secret`, in time that depends only on their lengths.
    package static func matches(_ candidate: some StringProtocol, _ secret: String) -> Bool {
        let a = Array(candidate.utf8)
        let b = Array(secret.utf8)
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }

    /// Whether `value` can be used in a URL path segment as is: letters, digits, `-`, `_`, `.`, `~`.
    package static func isValid(_ value: String) -> Bool {
        !value.isEmpty && value.count <= 128 && value != "." && value != ".."
            && value.utf8.allSatisfy(URICharacters.isUnreserved)
    }
}
