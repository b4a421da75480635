// The Apple-only part of the AVFoundation front end: it maps AVFoundation's types onto the
// platform-neutral bridge and holds no logic of its own, so everything that can go wrong is
// tested on every platform through `ResourceLoaderBridge`. Written against the signatures in
// `shared/reference/avfoundation-resource-loader.md` §1.
#if canImport(AVFoundation) && !os(watchOS)
import AVFoundation
import Foundation
import StreamCache

extension AVAssetResourceLoadingRequest: LoadingRequest {
    public var requestsData: Bool { dataRequest != nil }
    public var requestedOffset: Int64 { dataRequest?.requestedOffset ?? 0 }
    public var requestedLength: Int { dataRequest?.requestedLength ?? 0 }
    public var requestsAllDataToEndOfResource: Bool { dataRequest?.requestsAllDataToEndOfResource ?? false }
    public var currentOffset: Int64 { dataRequest?.currentOffset ?? 0 }
    public var requestsContentInformation: Bool { contentInformationRequest != nil }
    public var allowedContentTypes: [String]? { contentInformationRequest?.allowedContentTypes }

    public func fillContentInformation(_ information: ContentInformation) {
        contentInformationRequest?.contentType = information.contentType
        contentInformationRequest?.contentLength = information.contentLength
        contentInformationRequest?.isByteRangeAccessSupported = information.isByteRangeAccessSupported
        contentInformationRequest?.isEntireLengthAvailableOnDemand = information.isEntireLengthAvailableOnDemand
    }

    public func respond(with data: Data) { dataRequest?.respond(with: data) }
    // `finishLoading()`, `finishLoading(with:)`, `isCancelled` and `isFinished` are AVFoundation's own.
}

/// The resource-loader delegate of a StreamCache asset: it hands each loading request to its
/// ``ResourceLoaderBridge``.
///
/// The resource loader holds its delegate weakly; ``StreamCache/StreamCache/asset(for:headers:key:options:)``
/// ties the delegate's life to the asset's.
public final class StreamCacheResourceLoaderDelegate: NSObject, AVAssetResourceLoaderDelegate, Sendable {
    /// The bridge that answers the requests.
    public let bridge: ResourceLoaderBridge

    /// Creates a delegate for `bridge`; set it with `setDelegate(_:queue:)` and `bridge.queue`.
    public init(bridge: ResourceLoaderBridge) {
        self.bridge = bridge
        super.init()
    }

    public func resourceLoader(_ resourceLoader: AVAssetResourceLoader,
                               shouldWaitForLoadingOfRequestedResource loadingRequest: AVAssetResourceLoadingRequest) -> Bool {
        bridge.startLoading(loadingRequest)
    }

    @objc(resourceLoader:didCancelLoadingRequest:)
    public func resourceLoader(_ resourceLoader: AVAssetResourceLoader, didCancel loadingRequest: AVAssetResourceLoadingRequest) {
        bridge.cancelLoading(loadingRequest)
    }
}

private enum AssociatedKeys {
    // Only its address is used, as the key that ties a delegate to its asset.
    nonisolated(unsafe) static var loaderDelegate: UInt8 = 0
}

extension StreamCache {
    /// An asset that plays `url` through the cache, sending `headers` with every origin request.
    ///
    /// The asset's URL has a custom scheme (`streamcache-https://…`), so AVFoundation asks the
    /// cache for every byte. The delegate and its queue are set before any `AVPlayerItem`
    /// exists, and the delegate lives as long as the asset.
    ///
    /// - Parameters:
    ///   - url: An `http` or `https` URL.
    ///   - headers: Headers for every origin request (`Authorization: OAuth …`); never stored.
    ///   - key: The cache key; by default derived from `url` without its query.
    ///   - options: `AVURLAsset` options.
    public func asset(for url: URL, headers: HTTPHeaders = [:], key: CacheKey? = nil, options: [String: Any]? = nil) -> AVURLAsset {
        asset(with: ResourceLoaderBridge(cache: self, url: url, headers: headers, key: key), options: options)
    }

    /// An asset that plays `resource` (from any origin) through the cache.
    ///
    /// - Parameters:
    ///   - resource: A resource of this cache.
    ///   - fileName: The file's name; its extension helps find the type when the origin does not tell it.
    ///   - options: `AVURLAsset` options.
    public func asset(for resource: Resource, fileName: String?, options: [String: Any]? = nil) -> AVURLAsset {
        let configuration = ResourceLoaderBridge.Configuration(fileNameHint: fileName)
        return asset(with: ResourceLoaderBridge(resource: resource, configuration: configuration), options: options)
    }

    /// A player item for ``asset(for:headers:key:options:)``; make it where you use the player.
    @MainActor
    public func makePlayerItem(for url: URL, headers: HTTPHeaders = [:], key: CacheKey? = nil) -> AVPlayerItem {
        AVPlayerItem(asset: asset(for: url, headers: headers, key: key))
    }

    private func asset(with bridge: ResourceLoaderBridge, options: [String: Any]?) -> AVURLAsset {
        let asset = AVURLAsset(url: bridge.assetURL, options: options)
        let delegate = StreamCacheResourceLoaderDelegate(bridge: bridge)
        asset.resourceLoader.setDelegate(delegate, queue: bridge.queue)
        objc_setAssociatedObject(asset, &AssociatedKeys.loaderDelegate, delegate, .OBJC_ASSOCIATION_RETAIN_NONATOMIC)
        return asset
    }
}
#endif
