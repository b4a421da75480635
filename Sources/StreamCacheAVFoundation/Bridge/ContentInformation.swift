import Foundation
import StreamCache

/// What a player learns about a resource before it reads it: the fields of AVFoundation's
/// `AVAssetResourceLoadingContentInformationRequest`.
public struct ContentInformation: Hashable, Sendable {
    /// The resource's Uniform Type Identifier (`public.mp3`), never a MIME type.
    public var contentType: String
    /// The length of the **whole** resource, whatever range the request asked for.
    public var contentLength: Int64
    /// Whether any byte range can be read; always `true` for a sparse-file cache.
    public var isByteRangeAccessSupported: Bool
    /// Whether every byte is cached, so the player may read any of them at once.
    public var isEntireLengthAvailableOnDemand: Bool

    /// Creates content information.
    public init(contentType: String, contentLength: Int64, isByteRangeAccessSupported: Bool = true, isEntireLengthAvailableOnDemand: Bool) {
        self.contentType = contentType
        self.contentLength = contentLength
        self.isByteRangeAccessSupported = isByteRangeAccessSupported
        self.isEntireLengthAvailableOnDemand = isEntireLengthAvailableOnDemand
    }
}
