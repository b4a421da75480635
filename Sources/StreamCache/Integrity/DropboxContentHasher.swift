import Crypto

/// Dropbox's `content_hash`: the content is cut into blocks of 4 MiB (the last may be shorter),
/// each block is hashed with SHA-256, and the concatenated block digests are hashed again with
/// SHA-256 (Dropbox's "Content hash" reference). An empty content has no block: its hash is the
/// SHA-256 of nothing.
struct DropboxContentHasher: Sendable {
    static let blockSize = 4 * 1024 * 1024

    private var blockDigests = SHA256()
    private var block = SHA256()
    private var bytesInBlock = 0

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var rest = bytes[...]
        while !rest.isEmpty {
            let count = min(rest.count, Self.blockSize - bytesInBlock)
            block.update(bufferPointer: UnsafeRawBufferPointer(rebasing: rest.prefix(count)))
            bytesInBlock += count
            rest = rest.dropFirst(count)
            if bytesInBlock == Self.blockSize { endBlock() }
        }
    }

    func finalize() -> [UInt8] {
        var copy = self
        if copy.bytesInBlock > 0 { copy.endBlock() }
        return Array(copy.blockDigests.finalize())
    }

    private mutating func endBlock() {
        let digest = block.finalize()
        digest.withUnsafeBytes { blockDigests.update(bufferPointer: $0) }
        block = SHA256()
        bytesInBlock = 0
    }
}
