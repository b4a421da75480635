#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A file's size as a cloud service's JSON states it: a number of bytes, or (Google Drive) the
/// number as a decimal string. Decoding refuses a size no file can have
/// (``StreamCache/ByteRange/isPossibleLength(_:)``), so the answer is a clear `badResponse` and a
/// negative or impossibly large size never reaches the cache's arithmetic.
struct StatedSize: Decodable, Sendable {
    /// The size in bytes.
    let bytes: Int64

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self) {
            guard let bytes = Int64(text), ByteRange.isPossibleLength(bytes) else { throw Self.notASize("\"\(text.prefix(40))\"", in: container) }
            self.bytes = bytes
        } else {
            let bytes = try container.decode(Int64.self)
            guard ByteRange.isPossibleLength(bytes) else { throw Self.notASize(String(bytes), in: container) }
            self.bytes = bytes
        }
    }

    private static func notASize(_ stated: String, in container: any SingleValueDecodingContainer) -> DecodingError {
        .dataCorruptedError(in: container, debugDescription: "\(stated) is not a size in bytes")
    }
}
