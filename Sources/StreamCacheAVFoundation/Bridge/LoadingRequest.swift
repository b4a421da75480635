import Foundation

/// One loading request from a player, as AVFoundation's `AVAssetResourceLoadingRequest` presents
/// it: an optional data request, an optional content-information request, and the calls that
/// answer and finish it.
///
/// ``ResourceLoaderBridge`` owns all the logic of answering requests and talks to them only
/// through this protocol, so the logic is compiled and tested on every platform. On Apple
/// platforms `AVAssetResourceLoadingRequest` conforms (a direct mapping of each member); tests
/// use a recording fake.
///
/// Every member is used on the bridge's serial queue only (the resource loader's delegate queue),
/// as AVFoundation requires.
public protocol LoadingRequest: AnyObject {
    /// Whether the request asks for data (`dataRequest != nil`).
    var requestsData: Bool { get }
    /// The first byte asked for.
    var requestedOffset: Int64 { get }
    /// How many bytes are asked for; ignored when ``requestsAllDataToEndOfResource`` is `true`.
    var requestedLength: Int { get }
    /// Whether the player wants every byte from ``requestedOffset`` to the end of the resource.
    var requestsAllDataToEndOfResource: Bool { get }
    /// The offset of the next byte to respond with; it moves forward with each ``respond(with:)``.
    var currentOffset: Int64 { get }
    /// Whether the request asks for content information (type, length, range support).
    var requestsContentInformation: Bool { get }
    /// The content types (UTIs) the player accepts, or `nil` for any.
    var allowedContentTypes: [String]? { get }
    /// Whether the player cancelled the request.
    var isCancelled: Bool { get }
    /// Whether the request was finished.
    var isFinished: Bool { get }

    /// Fills the content-information request.
    func fillContentInformation(_ information: ContentInformation)
    /// Delivers the next bytes, starting at ``currentOffset``.
    func respond(with data: Data)
    /// Finishes the request successfully.
    func finishLoading()
    /// Finishes the request with an error (an `NSError` the player reports).
    func finishLoading(with error: (any Error)?)
}
