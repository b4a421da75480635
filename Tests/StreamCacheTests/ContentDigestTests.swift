import Foundation
import StreamCache
import Testing

/// The digests the cache checks complete files against: each algorithm against published
/// vectors or an independent implementation, and the text forms services and HTTP send.
@Suite struct ContentDigestTests {
    static func digest(_ algorithm: ContentDigest.Algorithm, of data: Data, piece: Int = .max) -> ContentDigest {
        var hasher = ContentHasher(algorithm)
        var offset = 0
        repeat {
            let end = min(data.count, offset + piece)
            data[offset..<end].withUnsafeBytes { hasher.update($0) }
            offset = end
        } while offset < data.count
        return hasher.finalize()
    }

    /// `(i × multiplier + addend) mod 256` for `count` bytes, as the vectors below were computed
    /// (Python: hashlib, and a port of Microsoft's QuickXorHash snippet).
    static func pattern(count: Int, multiplier: Int, addend: Int) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: $0 * multiplier + addend) })
    }

    /// rclone's quickxorhash test vectors (base64 input, base64 hash) and two from the Go port.
    @Test func quickXorHashMatchesPublishedVectors() throws {
        let vectors = [
            ("", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="), ("Sg==", "SgAAAAAAAAAAAAAAAQAAAAAAAAA="), ("tbQ=", "taAFAAAAAAAAAAAAAgAAAAAAAAA="),
            ("0pZP", "0rDEEwAAAAAAAAAAAwAAAAAAAAA="), ("jRRDVA==", "jaDAEKgAAAAAAAAABAAAAAAAAAA="), ("eAV52qE=", "eChAHrQRCgAAAAAABQAAAAAAAAA="),
            ("luBZlaT6", "lgBHFipBCn0AAAAABgAAAAAAAAA="), ("qaApEj66lw==", "qQBFCiTgA11cAgAABwAAAAAAAAA="),
            ("/aNzzCFPS/A=", "/RjFHJgRgicsAR4ACAAAAAAAAAA="),
            (Data("hello".utf8).base64EncodedString(), "aCgDG9jwBgAAAAAABQAAAAAAAAA="),
            (Data("hello world".utf8).base64EncodedString(), "aCgDG9jwBhDc4Q1yawMZAAAAAAA="),
        ]
        for (input, expected) in vectors {
            let data = try #require(Data(base64Encoded: input))
            #expect(Data(Self.digest(.quickXor, of: data).bytes).base64EncodedString() == expected, "input \(input)")
        }
    }

    /// Inputs longer than the 160-byte register, whole and fed in odd pieces, against the
    /// Python port of Microsoft's snippet (which shifts each byte into three 64-bit cells).
    @Test func quickXorHashOfLongInputsMatchesTheReferenceAlgorithm() {
        for (count, expected) in [(1000, "X4X7cC7/cVgPZMrjju+fOUsa7aY="), (100_003, "fw/OMSbnJ+lXCrS075NiSpWmgvs=")] {
            let data = Self.pattern(count: count, multiplier: 31, addend: 7)
            for piece in [Int.max, 1, 159, 161, 4096] where piece != 1 || count <= 1000 {
                #expect(Data(Self.digest(.quickXor, of: data, piece: piece).bytes).base64EncodedString() == expected, "\(count) bytes in pieces of \(piece)")
            }
        }
    }

    /// Dropbox's content hash over exactly one block, over three with a short last one, and of
    /// nothing (no block: the SHA-256 of nothing), against hashlib.
    @Test func dropboxContentHashHashesFourMiBBlocks() {
        let oneBlock = Self.pattern(count: 4 * 1024 * 1024, multiplier: 7, addend: 3)
        #expect(Self.digest(.dropboxContentHash, of: oneBlock).hex == "ed1a0dd53370ba832a2e98484b981bae55f9ad17cd0d1f88662e287d860f4855")
        let threeBlocks = Self.pattern(count: 9 * 1024 * 1024 + 123, multiplier: 7, addend: 3)
        for piece in [Int.max, 1_000_003] {
            #expect(Self.digest(.dropboxContentHash, of: threeBlocks, piece: piece).hex
                    == "11528a6506973ad1f7f8aab5c6f69ee74c8cdd2d6d5bb75fc508e05d6d03db36")
        }
        #expect(Self.digest(.dropboxContentHash, of: Data()).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test func standardAlgorithmsMatchTheirTestVectors() {
        let abc = Data("abc".utf8)
        #expect(ContentHasher.digest(.md5, of: abc).hex == "900150983cd24fb0d6963f7d28e17f72")
        #expect(Self.digest(.sha1, of: abc).hex == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Self.digest(.sha256, of: abc, piece: 1).hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Self.digest(.sha512, of: abc).bytes.count == 64)
    }

    /// Services send hexadecimal in either case, or an empty string for a file not hashed yet;
    /// the index stores `algorithm:hex`.
    @Test func textFormsParseAndRoundTrip() throws {
        let upper = try #require(ContentDigest(algorithm: .sha1, hex: "A9993E364706816ABA3E25717850C26C9CD0D89D"))
        #expect(upper.hex == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(upper.description == "sha1:a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(ContentDigest(upper.description) == upper)
        #expect(ContentDigest(algorithm: .sha1, hex: "") == nil)
        #expect(ContentDigest(algorithm: .sha256, hex: "a9993e364706816aba3e25717850c26c9cd0d89d") == nil, "a SHA-1's length")
        #expect(ContentDigest(algorithm: .md5, hex: "900150983cd24fb0d6963f7d28e17fzz") == nil)
        #expect(ContentDigest("crc32:00000000") == nil)
        #expect(ContentDigest(algorithm: .quickXor, base64: "aCgDG9jwBgAAAAAABQAAAAAAAAA=")?.bytes.count == 20)
        #expect(ContentDigest(algorithm: .quickXor, base64: "not base64!") == nil)
    }

    /// RFC 9530's example body `{"hello": "world"}`: `Repr-Digest` (SHA-256 before SHA-512, the
    /// faster of the two), the legacy `Digest`, and headers with nothing the cache computes.
    @Test func representationDigestHeadersParse() throws {
        let sha256 = "X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE="
        let sha512 = "WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew=="
        let body = Data(#"{"hello": "world"}"#.utf8)
        let one = try #require(ContentDigest(representationDigestHeaders: ["Repr-Digest": "sha-256=:\(sha256):"]))
        #expect(one == Self.digest(.sha256, of: body))
        let both = try #require(ContentDigest(representationDigestHeaders: ["Repr-Digest": "sha-512=:\(sha512):, sha-256=:\(sha256):"]))
        #expect(both == one)
        let sha512Only = try #require(ContentDigest(representationDigestHeaders: ["Repr-Digest": "sha-512=:\(sha512):;keyid=\"a\""]))
        #expect(sha512Only == Self.digest(.sha512, of: body))
        let legacy = try #require(ContentDigest(representationDigestHeaders: ["Digest": "SHA-256=\(sha256)"]))
        #expect(legacy == one)
        // ownCloud's and Nextcloud's own header: `TYPE:hex`, several to a header; Adler-32 is not computed.
        let sha1 = Self.digest(.sha1, of: body)
        #expect(ContentDigest(representationDigestHeaders: ["OC-Checksum": "ADLER32:2b2f04fa SHA1:\(sha1.hex.uppercased())"]) == sha1)
        #expect(ContentDigest(representationDigestHeaders: ["OC-Checksum": "Adler32:2b2f04fa"]) == nil)
        #expect(ContentDigest(representationDigestHeaders: ["Repr-Digest": "unixsum=:MTIz:"]) == nil)
        #expect(ContentDigest(representationDigestHeaders: ["Content-Digest": "sha-256=:\(sha256):"]) == nil, "a range's own digest")
        #expect(ContentDigest(representationDigestHeaders: ["Repr-Digest": "sha-256=\(sha256)"]) == nil, "not a byte sequence")
    }
}
