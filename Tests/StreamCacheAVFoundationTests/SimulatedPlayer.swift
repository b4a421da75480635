import Dispatch
import Foundation
import StreamCache
import StreamCacheAVFoundation

/// Drives a ``ResourceLoaderBridge`` the way AVPlayer drives its resource loader's delegate
/// (`shared/reference/avfoundation-resource-loader.md` §2): requests are made and cancelled on
/// the delegate queue, `isCancelled` is set before `didCancel`, several requests may be out at once.
final class SimulatedPlayer: @unchecked Sendable {
    // @unchecked: every stored property is immutable or locked.
    let bridge: ResourceLoaderBridge
    let queue: DispatchQueue
    private let queueCheck = QueueCheck()
    /// Every request made, to check the rules over all of them at the end.
    private let made = Locked([FakeLoadingRequest]())

    init(resource: Resource, configuration: ResourceLoaderBridge.Configuration = .init()) {
        queue = DispatchQueue(label: "simulated-player.delegate")
        queue.setSpecific(key: queueCheck.key, value: 1)
        bridge = ResourceLoaderBridge(resource: resource, queue: queue, configuration: configuration)
    }

    init(cache: StreamCache, url: URL, headers: HTTPHeaders = [:]) {
        queue = DispatchQueue(label: "simulated-player.delegate")
        queue.setSpecific(key: queueCheck.key, value: 1)
        bridge = ResourceLoaderBridge(cache: cache, url: url, headers: headers, queue: queue)
    }

    /// A request that is not started yet.
    func makeRequest(offset: Int64 = 0, length: Int = 0, toEnd: Bool = false, data: Bool = true, contentInformation: Bool = false,
                     allowedContentTypes: [String]? = nil) -> FakeLoadingRequest {
        let check = queueCheck
        let request = FakeLoadingRequest(offset: offset, length: length, toEnd: toEnd, data: data, contentInformation: contentInformation,
                                         allowedContentTypes: allowedContentTypes,
                                         isOnDelegateQueue: { check.isOnQueue })
        made.withLock { $0.append(request) }
        return request
    }

    /// Hands `request` to the bridge on the delegate queue (`shouldWaitForLoadingOfRequestedResource`).
    ///
    /// - Returns: What the bridge answered.
    @discardableResult
    func start(_ request: FakeLoadingRequest) async -> Bool {
        await onQueue { self.bridge.startLoading(request) }
    }

    /// Makes and starts a request.
    func request(offset: Int64 = 0, length: Int = 0, toEnd: Bool = false, contentInformation: Bool = false,
                 allowedContentTypes: [String]? = nil) async -> FakeLoadingRequest {
        let request = makeRequest(offset: offset, length: length, toEnd: toEnd, contentInformation: contentInformation,
                                  allowedContentTypes: allowedContentTypes)
        await start(request)
        return request
    }

    /// What AVPlayer does on a seek: marks the request cancelled, then calls `didCancel`.
    func cancel(_ request: FakeLoadingRequest) async {
        await onQueue {
            request.markCancelled()
            self.bridge.cancelLoading(request)
        }
    }

    /// The first request AVPlayer makes: content information plus bytes 0-1.
    func probe(allowedContentTypes: [String]? = nil) async -> FakeLoadingRequest {
        let probe = await request(offset: 0, length: 2, contentInformation: true, allowedContentTypes: allowedContentTypes)
        _ = await probe.waitUntilFinished()
        return probe
    }

    /// Every rule broken by any request so far.
    var violations: [String] { made.withLock { $0.flatMap { $0.snapshot.violations } } }

    /// Requests made so far.
    var requests: [FakeLoadingRequest] { made.withLock { $0 } }

    func onQueue<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: body()) }
        }
    }
}

/// Tells whether code runs on the player's delegate queue.
private struct QueueCheck: @unchecked Sendable {
    // @unchecked: the key is set once on the queue and only read afterwards.
    let key = DispatchSpecificKey<UInt8>()
    var isOnQueue: Bool { DispatchQueue.getSpecific(key: key) != nil }
}
