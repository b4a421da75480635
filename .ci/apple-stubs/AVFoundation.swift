// Stand-ins for the AVFoundation declarations StreamCache uses, with the exact Swift signatures of
// `shared/reference/avfoundation-resource-loader.md` §1, so that the Apple-only file and the
// README's AVPlayer example are type-checked on Linux (`.ci/typecheck-apple-code`). Bodies are empty:
// nothing here runs. `AVPlayer` and `AVPlayerItem` are main-actor isolated here, the stricter case.
@_exported import Foundation
import FoundationNetworking

public protocol AVAssetResourceLoaderDelegate: NSObjectProtocol {}

open class AVAsset: NSObject, @unchecked Sendable {}

open class AVURLAsset: AVAsset, @unchecked Sendable {
    public init(url URL: URL, options: [String: Any]? = nil) { resourceLoader = AVAssetResourceLoader() }
    public let resourceLoader: AVAssetResourceLoader
}

open class AVAssetResourceLoader: NSObject {
    open func setDelegate(_ delegate: (any AVAssetResourceLoaderDelegate)?, queue delegateQueue: DispatchQueue?) {}
    open weak var delegate: (any AVAssetResourceLoaderDelegate)? { nil }
    open var delegateQueue: DispatchQueue? { nil }
}

open class AVAssetResourceLoadingDataRequest: NSObject {
    open var requestedOffset: Int64 { 0 }
    open var requestedLength: Int { 0 }
    open var requestsAllDataToEndOfResource: Bool { false }
    open var currentOffset: Int64 { 0 }
    open func respond(with data: Data) {}
}

open class AVAssetResourceLoadingContentInformationRequest: NSObject {
    open var contentType: String?
    open var contentLength: Int64 = 0
    open var isByteRangeAccessSupported = false
    open var allowedContentTypes: [String]? { nil }
    open var isEntireLengthAvailableOnDemand = false
}

open class AVAssetResourceLoadingRequest: NSObject {
    open var request: URLRequest { URLRequest(url: URL(fileURLWithPath: "/")) }
    open var isFinished: Bool { false }
    open var isCancelled: Bool { false }
    open var contentInformationRequest: AVAssetResourceLoadingContentInformationRequest? { nil }
    open var dataRequest: AVAssetResourceLoadingDataRequest? { nil }
    open func finishLoading() {}
    open func finishLoading(with error: (any Error)?) {}
}

@MainActor open class AVPlayerItem: NSObject {
    public init(asset: AVAsset) {}
}

@MainActor open class AVPlayer: NSObject {
    public init(playerItem item: AVPlayerItem?) {}
    open var automaticallyWaitsToMinimizeStalling = true
    open func play() {}
}

// The Objective-C runtime's associated objects (module ObjectiveC on Apple platforms).
public enum objc_AssociationPolicy { case OBJC_ASSOCIATION_RETAIN_NONATOMIC }
public func objc_setAssociatedObject(_ object: Any, _ key: UnsafeRawPointer, _ value: Any?, _ policy: objc_AssociationPolicy) {}
