/// OneDrive's `quickXorHash` (Microsoft's "QuickXorHash" snippet for the Graph API): byte `i` of
/// the content is XORed into a 160-bit circular register at bit `11 × i mod 160`, and the
/// content's length, as 8 little-endian bytes, is XORed into the register's last 8 bytes.
///
/// Bytes 160 apart land on the same bit, so the register is kept as 160 per-position XORs and
/// spread over the bits once, when the digest is taken.
struct QuickXorHasher: Sendable {
    private static let widthInBits = 160
    private static let shift = 11

    /// The XOR of the bytes whose index is `position` modulo 160.
    private var lanes = [UInt8](repeating: 0, count: QuickXorHasher.widthInBits)
    private var length: UInt64 = 0

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var lane = Int(length % UInt64(Self.widthInBits))
        lanes.withUnsafeMutableBufferPointer { lanes in
            for byte in bytes {
                lanes[lane] ^= byte
                lane += 1
                if lane == Self.widthInBits { lane = 0 }
            }
        }
        length += UInt64(bytes.count)
    }

    func finalize() -> [UInt8] {
        // One byte past the register: a lane shifted over its end wraps to the first byte.
        var register = [UInt8](repeating: 0, count: Self.widthInBits / 8 + 1)
        for (index, lane) in lanes.enumerated() {
            let bit = index * Self.shift % Self.widthInBits
            let shifted = UInt16(lane) << UInt16(bit % 8)
            register[bit / 8] ^= UInt8(truncatingIfNeeded: shifted)
            register[bit / 8 + 1] ^= UInt8(truncatingIfNeeded: shifted >> 8)
        }
        register[0] ^= register[Self.widthInBits / 8]
        register.removeLast()
        for index in 0..<8 {
            register[register.count - 8 + index] ^= UInt8(truncatingIfNeeded: length >> (8 * UInt64(index)))
        }
        return register
    }
}
