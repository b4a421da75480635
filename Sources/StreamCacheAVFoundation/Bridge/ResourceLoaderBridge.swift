import Dispatch
import Foundation
import StreamCache
import StreamCacheURLSession

/// Answers a player's loading requests for one resource from the cache: the logic behind
/// AVFoundation's resource-loader delegate, on every platform.
///
/// For each request the bridge runs **one** engine read from the request's `currentOffset` to
/// its end and delivers the bytes as they arrive, in order, in slices of at most
/// ``Configuration/maximumResponseLength``. A request that asks for the content information (a
/// UTI, the whole length, range access, and whether every byte is cached) gets it with its first
/// byte, from the version that byte belongs to, so a file replaced at the origin and met on the
/// way to it is described as the new version rather than failing the request. Several requests
/// may be outstanding at once; each has its own read, and reads of the same resource share
/// downloads. The 2-byte probe AVPlayer starts with gets its content information and its two
/// bytes.
///
/// The bridge never responds to or finishes a request the player cancelled, and never finishes a
/// request twice: before every call it checks, on the queue, that the request is still its own
/// and neither cancelled nor finished (AVFoundation does not always send `didCancel`). Engine
/// errors finish the request with an `NSError` in ``StreamCache/StreamCacheError/errorDomain``
/// whose code is the ``StreamCache/StreamCacheError/Code/number`` of the error.
///
/// Every call into the bridge and every call it makes to a request happen on ``queue``, which
/// must be the resource loader's delegate queue.
///
/// ```swift
/// let bridge = ResourceLoaderBridge(cache: cache, url: songURL, headers: ["Authorization": "OAuth \(token)"])
/// // AVFoundation side (done for you by `StreamCache.asset(for:headers:)` on Apple platforms):
/// asset.resourceLoader.setDelegate(delegate, queue: bridge.queue)
/// // in the delegate, on bridge.queue:
/// bridge.startLoading(loadingRequest)   // shouldWaitForLoadingOfRequestedResource
/// bridge.cancelLoading(loadingRequest)  // didCancel
/// ```
public final class ResourceLoaderBridge: @unchecked Sendable {
    // @unchecked: `active` and `nextToken` are read and written only on `queue`; every other
    // stored property is immutable and Sendable.

    /// Settings of a bridge.
    public struct Configuration: Sendable {
        /// The most bytes one `respond(with:)` delivers. AVFoundation stalls on huge responses;
        /// the KTVHTTPCache maintainer recommends 1 MiB slices.
        public var maximumResponseLength: Int
        /// A file name whose extension gives the type when the origin's `Content-Type` and file
        /// name do not (the asset URL's last path component, for example).
        public var fileNameHint: String?

        /// Creates settings.
        public init(maximumResponseLength: Int = 1 << 20, fileNameHint: String? = nil) {
            precondition(maximumResponseLength > 0, "maximumResponseLength must be positive")
            self.maximumResponseLength = maximumResponseLength
            self.fileNameHint = fileNameHint
        }
    }

    /// The resource whose bytes the bridge delivers.
    public let resource: Resource
    /// The serial queue every call happens on: pass it as the resource loader's delegate queue.
    public let queue: DispatchQueue
    /// The URL to create the player's asset with (a custom scheme, see ``CustomSchemeURL``).
    public let assetURL: URL
    /// The bridge's settings.
    public let configuration: Configuration

    private var active: [ObjectIdentifier: ActiveRequest] = [:]
    private var nextToken = 0

    private struct ActiveRequest {
        let token: Int
        var task: Task<Void, Never>?
        let request: QueueConfined<any LoadingRequest>
    }

    /// Identifies one start of one request: a request object's identifier may be reused after
    /// it is freed, so a late block of an old load must not touch a new request at that address.
    private struct Handle: Sendable {
        let id: ObjectIdentifier
        let token: Int
        let request: QueueConfined<any LoadingRequest>
    }

    /// What a request asks for, read once on the queue when it starts.
    private struct Plan: Sendable {
        var contentInformation: Bool
        var allowedContentTypes: [String]?
        /// The bytes to read, or `nil` when the request asks for no data. The upper bound is
        /// `Int64.max` for "to the end"; the engine cuts it to the resource's length.
        var range: ByteRange?
    }

    /// Creates a bridge for `resource`.
    ///
    /// - Parameters:
    ///   - resource: The resource to answer from; see ``StreamCache/StreamCache/resource(for:origin:)``.
    ///   - assetURL: The asset's URL; by default a ``CustomSchemeURL`` made from the resource's key
    ///     and ``Configuration/fileNameHint``.
    ///   - queue: The delegate queue; a new serial queue by default.
    ///   - configuration: Settings.
    public init(resource: Resource, assetURL: URL? = nil, queue: DispatchQueue? = nil, configuration: Configuration = Configuration()) {
        self.resource = resource
        self.assetURL = assetURL ?? CustomSchemeURL.make(for: resource.key, fileName: configuration.fileNameHint)
        self.queue = queue ?? DispatchQueue(label: "streamcache.resource-loader")
        self.configuration = configuration
    }

    /// Creates a bridge for the file at `url`, downloaded with `headers` into `cache`.
    ///
    /// - Parameters:
    ///   - cache: The cache.
    ///   - url: An `http` or `https` URL.
    ///   - headers: Headers for every origin request, credentials included; never part of the
    ///     cache key or the asset URL.
    ///   - key: The cache key; by default derived from `url` (``StreamCache/CacheKey/init(url:)``).
    ///   - queue: The delegate queue; a new serial queue by default.
    public convenience init(cache: StreamCache, url: URL, headers: HTTPHeaders = [:], key: CacheKey? = nil, queue: DispatchQueue? = nil) {
        let resource = cache.resource(for: key ?? CacheKey(url: url), origin: HTTPOrigin(url: url, headers: headers))
        self.init(resource: resource, assetURL: CustomSchemeURL.make(for: url), queue: queue,
                  configuration: Configuration(fileNameHint: url.lastPathComponent))
    }

    // MARK: Requests from the player (on `queue`)

    /// Takes a loading request and starts answering it; call it from
    /// `resourceLoader(_:shouldWaitForLoadingOfRequestedResource:)` and return its result.
    ///
    /// - Returns: `true` when the bridge will finish the request (also when it already is
    ///   answering this very request); `false` for a request already cancelled or finished.
    @discardableResult
    public func startLoading(_ request: any LoadingRequest) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        let id = ObjectIdentifier(request)
        if active[id] != nil { return true }
        guard !request.isCancelled, !request.isFinished else { return false }
        nextToken += 1
        let handle = Handle(id: id, token: nextToken, request: QueueConfined(request, queue: queue))
        let plan = Self.plan(for: request)
        active[id] = ActiveRequest(token: handle.token, task: nil, request: handle.request)
        active[id]?.task = Task { await self.load(plan, handle) }
        return true
    }

    /// Stops answering a request the player cancelled; call it from
    /// `resourceLoader(_:didCancel:)`. The request is not touched again.
    public func cancelLoading(_ request: any LoadingRequest) {
        dispatchPrecondition(condition: .onQueue(queue))
        active.removeValue(forKey: ObjectIdentifier(request))?.task?.cancel()
    }

    /// Finishes every outstanding request with a cancellation error (`NSCocoaErrorDomain`,
    /// `NSUserCancelledError`) and stops their reads; for an asset that is being discarded.
    public func invalidate() {
        dispatchPrecondition(condition: .onQueue(queue))
        let requests = active
        active = [:]
        for entry in requests.values {
            entry.task?.cancel()
            entry.request.withValue { request in
                guard !request.isCancelled, !request.isFinished else { return }
                request.finishLoading(with: NSError(domain: NSCocoaErrorDomain, code: NSUserCancelledError))
            }
        }
    }

    /// How many requests the bridge is answering; for tests and diagnostics. Call it off the queue.
    package var activeRequestCount: Int {
        dispatchPrecondition(condition: .notOnQueue(queue))
        return queue.sync { active.count }
    }

    private static func plan(for request: any LoadingRequest) -> Plan {
        var range: ByteRange?
        if request.requestsData {
            let start = max(0, request.currentOffset)
            // A range that runs past `Int64.max` runs to the end; one that starts past any
            // resource is the engine's to refuse (`rangeNotSatisfiable`).
            let (requestedEnd, overflows) = request.requestedOffset.addingReportingOverflow(Int64(max(0, request.requestedLength)))
            let end = request.requestsAllDataToEndOfResource || overflows ? Int64.max : max(start, requestedEnd)
            range = ByteRange(start, end)
        }
        return Plan(contentInformation: request.requestsContentInformation,
                    allowedContentTypes: request.requestsContentInformation ? request.allowedContentTypes : nil, range: range)
    }

    // MARK: Answering (in the request's task)

    private func load(_ plan: Plan, _ handle: Handle) async {
        do {
            if plan.contentInformation, let range = plan.range, !range.isEmpty {
                // The information waits for the first byte, as the proxy's head does: what the
                // origin says on the way to it (a new version) is what the player is told.
                let opened = try await openWithInformation(range)
                try Self.check(opened.information, allowed: plan.allowedContentTypes)
                guard await perform(handle, { $0.fillContentInformation(opened.information) }) else { return }
                guard try await deliver(opened.first, to: handle) else { return }
                var rest = opened.rest
                while let region = try await rest.next() {
                    guard try await deliver(region, to: handle) else { return }
                }
            } else {
                if plan.contentInformation {
                    let information = try await contentInformation(near: plan.range?.lowerBound ?? 0)
                    try Self.check(information, allowed: plan.allowedContentTypes)
                    guard await perform(handle, { $0.fillContentInformation(information) }) else { return }
                }
                if let range = plan.range, !range.isEmpty {
                    for try await chunk in resource.read(range) {
                        // Returning drops the stream, which ends the read.
                        guard await deliver(chunk.data, to: handle) else { return }
                    }
                }
            }
            await perform(handle, finishing: true) { $0.finishLoading() }
        } catch {
            let nsError = Self.nsError(for: error)
            await perform(handle, finishing: true) { $0.finishLoading(with: nsError) }
        }
    }

    private static func check(_ information: ContentInformation, allowed: [String]?) throws {
        if let allowed, !allowed.contains(information.contentType) {
            throw StreamCacheError(.unsupportedMediaType, "The player accepts \(allowed.joined(separator: ", ")), not \(information.contentType).")
        }
    }

    /// A read of `range` with its first region in hand, and the content information of the
    /// version that region's bytes belong to (a new version met before it restarts the read, as
    /// the proxy's answers do); a read that starts past the end is told the information alone.
    private func openWithInformation(_ range: ByteRange) async throws -> (information: ContentInformation, first: CachedRegion?, rest: RegionStream.Iterator) {
        let read = try await StartedRead(resource: resource, range: range, restartsOnVersionChange: StartedRead.versionChangesAnsweredAnew)
        guard let first = read.first else { return (try await contentInformation(near: range.lowerBound), nil, read.rest) }
        guard let info = first.info else {
            throw StreamCacheError(.badResponse, "The origin did not tell the resource's length, which the player needs.")
        }
        return (try await contentInformation(for: info), first, read.rest)
    }

    /// Delivers a region's bytes, read from the cache file in slices of at most
    /// ``Configuration/maximumResponseLength``.
    ///
    /// - Returns: Whether the request still wants more.
    private func deliver(_ region: CachedRegion?, to handle: Handle) async throws -> Bool {
        guard let region else { return true }
        var offset = region.range.lowerBound
        while offset < region.range.upperBound {
            let count = Int(min(Int64(configuration.maximumResponseLength), region.range.upperBound - offset))
            var slice = Data(count: count)
            _ = try slice.withUnsafeMutableBytes { try region.read(into: $0, at: offset) }
            let piece = slice
            guard await perform(handle, { $0.respond(with: piece) }) else { return false }
            offset += Int64(count)
        }
        return true
    }

    private func deliver(_ data: Data, to handle: Handle) async -> Bool {
        let limit = configuration.maximumResponseLength
        guard data.count > limit else { return await perform(handle) { $0.respond(with: data) } }
        var start = data.startIndex
        while start < data.endIndex {
            let end = min(start + limit, data.endIndex)
            let slice = data.subdata(in: start..<end)
            guard await perform(handle, { $0.respond(with: slice) }) else { return false }
            start = end
        }
        return true
    }

    /// Runs `body` with the request on the queue if the request is still this load's and is
    /// neither cancelled nor finished. A request found dead, or one being finished, is forgotten.
    ///
    /// - Returns: Whether `body` ran.
    @discardableResult
    private func perform(_ handle: Handle, finishing: Bool = false, _ body: @escaping @Sendable (any LoadingRequest) -> Void) async -> Bool {
        await withCheckedContinuation { continuation in
            queue.async {
                guard self.active[handle.id]?.token == handle.token else {
                    continuation.resume(returning: false)
                    return
                }
                let ran = handle.request.withValue { request -> Bool in
                    guard !request.isCancelled, !request.isFinished else { return false }
                    body(request)
                    return true
                }
                if finishing || !ran { self.active[handle.id] = nil }
                continuation.resume(returning: ran)
            }
        }
    }

    // MARK: Content information

    /// The content information, asking the origin only when the cache does not know the length;
    /// `offset` is where the request reads first, so that question starts the download it needs.
    func contentInformation(near offset: Int64) async throws -> ContentInformation {
        try await contentInformation(for: try await resource.loadInfo(near: offset))
    }

    /// The content information of the version `info` describes.
    private func contentInformation(for info: ResourceInfo) async throws -> ContentInformation {
        guard let length = info.totalLength else {
            throw StreamCacheError(.badResponse, "The origin did not tell the resource's length, which the player needs.")
        }
        let type = try await uniformTypeIdentifier(for: info)
        return ContentInformation(contentType: type, contentLength: length, isByteRangeAccessSupported: true,
                                  isEntireLengthAvailableOnDemand: try await resource.isComplete)
    }

    /// The UTI from the origin's MIME type, else the extension of the origin's file name or of
    /// the hint, else the resource's first bytes (`shared/reference/mime-uti.md`).
    private func uniformTypeIdentifier(for info: ResourceInfo) async throws -> String {
        let fromOrigin = MediaType.uniformTypeIdentifier(mimeType: info.mimeType, fileName: info.fileName)
        if fromOrigin != MediaType.genericUTI { return fromOrigin }
        let fromHint = MediaType.uniformTypeIdentifier(mimeType: nil, fileName: configuration.fileNameHint)
        if fromHint != MediaType.genericUTI { return fromHint }
        let leadingBytes = try await resource.read(ByteRange(0, 16)).collect()
        return MediaType.sniff(leadingBytes) ?? MediaType.genericUTI
    }

    /// The error a request is finished with: a ``StreamCache/StreamCacheError`` as an `NSError`
    /// in its own domain, a cancellation as `NSUserCancelledError`.
    static func nsError(for error: any Error) -> NSError {
        switch error {
        case let error as StreamCacheError:
            NSError(domain: StreamCacheError.errorDomain, code: error.errorCode, userInfo: error.errorUserInfo)
        case is CancellationError:
            NSError(domain: NSCocoaErrorDomain, code: NSUserCancelledError)
        default:
            NSError(domain: StreamCacheError.errorDomain, code: StreamCacheError.Code.cacheIOFailed.number,
                    userInfo: [NSLocalizedDescriptionKey: "Reading the resource failed: \(error)"])
        }
    }
}
