#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the cache knows about a resource as a whole: its length, type and version.
///
/// The first data request to an origin yields the info, so playback never pays an extra round
/// trip for a `HEAD`. The total length comes from `Content-Range: bytes a-b/TOTAL` (or a 200's
/// `Content-Length`), never from a 206's `Content-Length`, which is only the part's length.
public struct ResourceInfo: Hashable, Sendable, Codable {
    /// The length of the whole resource in bytes, or `nil` while unknown.
    public var totalLength: Int64?
    /// The MIME type without parameters (`audio/mpeg`), or `nil` when the origin gave none.
    public var mimeType: String?
    /// The file name from `Content-Disposition` or the URL's last path component, if any.
    public var fileName: String?
    /// Whether the origin serves byte ranges (it answered a range request with 206).
    public var acceptsByteRanges: Bool
    /// What identifies this version of the resource.
    public var validator: Validator
    /// The digest of the whole content that the origin publishes (a cloud service's file hash, an
    /// HTTP `Repr-Digest`), or `nil` when it publishes none. The cache checks the bytes against
    /// it once every byte is cached.
    public var contentDigest: ContentDigest?

    /// Creates an info value.
    public init(totalLength: Int64?, mimeType: String?, fileName: String? = nil, acceptsByteRanges: Bool, validator: Validator = Validator(),
                contentDigest: ContentDigest? = nil) {
        self.totalLength = totalLength
        self.mimeType = mimeType.map(MediaType.essence(of:))
        self.fileName = fileName
        self.acceptsByteRanges = acceptsByteRanges
        self.validator = validator
        self.contentDigest = contentDigest
    }

    /// The Uniform Type Identifier for AVFoundation, with the file-extension fallback applied.
    public var uniformTypeIdentifier: String {
        MediaType.uniformTypeIdentifier(mimeType: mimeType, fileName: fileName)
    }

    /// The MIME type to send to players: the origin's, unless missing or generic, then one guessed
    /// from the file name, else `application/octet-stream`.
    public var effectiveMIMEType: String {
        if let mimeType, mimeType != "application/octet-stream", mimeType != "binary/octet-stream" { return mimeType }
        return fileName.flatMap(MediaType.mimeType(forFileName:)) ?? mimeType ?? "application/octet-stream"
    }

    /// Whether `other` describes the same version of the resource: validators agree (when both
    /// have one), lengths agree (when both know it), and content digests of one algorithm agree
    /// (when both have one).
    public func isSameVersion(as other: ResourceInfo) -> Bool {
        if validator.matches(other.validator) == false { return false }
        if let mine = totalLength, let theirs = other.totalLength, mine != theirs { return false }
        if let mine = contentDigest, let theirs = other.contentDigest, mine.algorithm == theirs.algorithm, mine != theirs { return false }
        return true
    }
}
