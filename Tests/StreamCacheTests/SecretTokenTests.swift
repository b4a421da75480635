import Testing
import StreamCache

/// Stream URLs and the control API rest on these tokens being unguessable and URL-safe.
struct SecretTokenTests {
    @Test func randomBytesHaveTheLengthAskedForAndEveryValueTurnsUp() {
        for count in 0...33 { #expect(SecretToken.randomBytes(count).count == count) }
        // 64 KiB of uniform bytes miss a given value with probability (255/256)^65536 ≈ e^-256.
        let bytes = SecretToken.randomBytes(65_536)
        #expect(Set(bytes).count == 256)
        #expect(SecretToken.randomBytes(16) != SecretToken.randomBytes(16))
    }

    @Test func tokensAreURLSafeAndDistinct() {
        let tokens = (0..<1_000).map { _ in SecretToken.make() }
        #expect(Set(tokens).count == tokens.count)
        for token in tokens {
            #expect(token.count == 22, "16 bytes in unpadded base64")
            #expect(SecretToken.isValid(token))
        }
        #expect(SecretToken.matches(tokens[0], tokens[0]))
        #expect(!SecretToken.matches(tokens[0], tokens[1]))
    }
}
