#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// An ``Origin`` for any HTTP(S) URL, with custom headers such as `Authorization: Bearer …`,
/// `Authorization: OAuth …` or Basic credentials.
///
/// It asks for byte ranges and reads the resource's info from the same answer. It copes with
/// origins that ignore `Range` (200: the body starts at 0), omit `Content-Length`, redirect (your
/// headers are sent to the original scheme, host and port only, unless
/// ``Configuration/forwardsHeadersToHosts`` names the new host), answer 401/403 (one credential
/// refresh through a ``CredentialProvider``), 5xx or 429, refuse or reset a connection (retries
/// with back-off, about 1.5 s in all by default), or drop the
/// connection mid-body (resumes from the last byte received with `If-Range`, and fails with
/// ``StreamCacheError/Code/resourceChanged`` rather than mixing two versions).
///
/// ```swift
/// let origin = HTTPOrigin(
///     url: URL(string: "https://webdav.example/music/a.mp3")!,
///     headers: ["Authorization": "Basic bWU6c2VjcmV0"],
///     transport: URLSessionTransport.shared  // or AsyncHTTPClientTransport.shared
/// )
/// ```
public struct HTTPOrigin: Origin {
    /// Behaviour settings.
    public struct Configuration: Sendable {
        /// The most redirects followed for one request.
        public var maxRedirects: Int = 10
        /// Retries of transient failures and resumes of broken bodies.
        public var retry: RetryPolicy = RetryPolicy()
        /// Hosts besides the URL's own that may receive your headers after a redirect.
        public var forwardsHeadersToHosts: Set<String> = []
        /// The wait for a response head, and between body chunks.
        public var timeout: Duration = .seconds(30)
        /// Where the origin remembers which hosts serve several ranges in one response (see
        /// ``OriginRequest/followingRanges``); `nil` asks for one range per request. Share one
        /// memory among origins on the same host, so each host is tried once.
        public var multipleRanges: MultipleRangesMemory? = MultipleRangesMemory()

        /// The default configuration.
        public init() {}
    }

    /// Where the bytes are downloaded from: a fixed URL, or a cloud service's expiring links.
    public let locator: any DownloadLocator
    /// Supplies and refreshes authorization headers, if any.
    public let credentials: (any CredentialProvider)?
    /// The HTTP client.
    public let transport: any HTTPTransport
    /// Behaviour settings.
    public let configuration: Configuration
    private let logger: Logger
    /// The last URL a response came from: the host ``servesMultipleRanges`` asks the memory about.
    private let lastAnsweredURL: Locked<URL?>

    /// Creates an origin.
    ///
    /// - Parameters:
    ///   - url: An `http` or `https` URL.
    ///   - headers: Headers for every request, credentials included.
    ///   - credentials: A provider of authorization headers that can refresh them after a 401.
    ///   - transport: The HTTP client: `URLSessionTransport` (module `StreamCacheURLSession`, which
    ///     also adds this initializer without `transport:`) or `AsyncHTTPClientTransport`
    ///     (`StreamCacheHTTPClient`).
    ///   - configuration: Redirect, retry and timeout settings.
    ///   - logger: Where to log; URLs are logged without their query and no header value is logged.
    public init(
        url: URL, headers: HTTPHeaders = [:], credentials: (any CredentialProvider)? = nil,
        transport: any HTTPTransport, configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "streamcache.origin", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.init(locator: FixedDownloadLocator(url: url, headers: headers), credentials: credentials, transport: transport,
                  configuration: configuration, logger: logger)
    }

    /// Creates an origin whose download target comes from `locator` (a cloud service's links).
    ///
    /// A target that answers 403, 404 or 410 and may expire is resolved again (at most twice per
    /// request, once per dead link), and the download carries on from the same byte; credentials
    /// go only to targets that want them.
    ///
    /// - Parameters:
    ///   - locator: Resolves where to download from.
    ///   - credentials: Authorization headers for targets that take them, refreshed after a 401.
    ///   - transport: The HTTP client.
    ///   - configuration: Redirect, retry and timeout settings.
    ///   - logger: Where to log.
    public init(
        locator: any DownloadLocator, credentials: (any CredentialProvider)? = nil, transport: any HTTPTransport,
        configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "streamcache.origin", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.locator = locator
        self.credentials = credentials
        self.transport = transport
        self.configuration = configuration
        self.logger = logger
        self.lastAnsweredURL = Locked((locator as? FixedDownloadLocator)?.fixedTarget.url)
    }

    public var logDescription: String { locator.logDescription }

    /// 4 MiB when the transport cannot hold back a slow consumer (`URLSessionTransport` on
    /// Linux), so a response it buffers stays small; no limit otherwise.
    public var maximumRequestLength: Int64? { transport.holdsBackSlowConsumers ? nil : 4 << 20 }

    /// False when the transport cannot hold back a slow consumer (`URLSessionTransport` on
    /// Linux): it receives what is on its way regardless, a dropped body included.
    public var stopsAbandonedTransfers: Bool { transport.holdsBackSlowConsumers }

    /// The transport's ``HTTPTransport/bodyExecutor``: downloads take their bytes on the thread
    /// that received them.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    public var downloadExecutor: (any TaskExecutor)? { transport.bodyExecutor }

    /// True unless ``Configuration/multipleRanges`` is `nil` or the host answered a request for
    /// several ranges with one range or the whole file.
    public var servesMultipleRanges: Bool {
        guard let memory = configuration.multipleRanges else { return false }
        return lastAnsweredURL.withLock { $0 }.map(memory.mayAsk) ?? true
    }

    /// The host that answered last (the fixed URL's before any request) and the transport's
    /// connections per host; `nil` while a cloud link is not resolved yet, or when the transport
    /// does not say.
    public var connectionLimit: OriginConnectionLimit? {
        guard let connections = transport.maximumConnectionsPerHost, let url = lastAnsweredURL.withLock({ $0 }) else { return nil }
        return OriginConnectionLimit(host: url.hostKey, connections: connections)
    }

    /// ``connectionLimit``; before any answer, the host of the link ``locator`` resolves (which it
    /// keeps for the first request). A service that redirects its links elsewhere (OneDrive,
    /// Box) is held back at the link's host until the first answer names the other.
    public func resolveConnectionLimit() async -> OriginConnectionLimit? {
        if let known = connectionLimit { return known }
        guard let connections = transport.maximumConnectionsPerHost, let target = try? await locator.target() else { return nil }
        return OriginConnectionLimit(host: target.url.hostKey, connections: connections)
    }

    /// The resource's version now, from its first byte, after the locator has had its say
    /// (``DownloadLocator/prepareForVersionCheck()``): a target whose version comes from the
    /// service's API is resolved again, since its downloads repeat the version the target was
    /// resolved with for as long as it works, even after the file was replaced.
    public func currentInfo() async throws -> ResourceInfo {
        await locator.prepareForVersionCheck()
        return try await infoFromFirstByte()
    }

    fileprivate func log(_ message: Logger.Message, metadata: Logger.Metadata) {
        logger.info(message, metadata: metadata.merging(["origin": "\(logDescription)"]) { first, _ in first })
    }

    public func open(_ request: OriginRequest) async throws -> OriginResponse {
        let first = try await openTryingMultipleRanges(range: request.range, following: request.followingRanges, validator: request.validator,
                                                       givesWayWhenBusy: request.givesWayWhenBusy)
        let toTheEnd = first.info.totalLength.flatMap { $0 >= first.offset ? [ByteRange(first.offset, $0)] : nil }
        guard let ranges = first.ranges ?? toTheEnd, first.info.acceptsByteRanges else {
            return first
        }
        // Wrap the body so that a connection dropped mid-body resumes where it broke off. The
        // wrapper runs in the consumer's task: a chunk costs no extra thread hop.
        let body = HTTPBody(pulling: ResumingBody(origin: self, info: first.info, ranges: ranges, body: first.body))
        return OriginResponse(info: first.info, offset: first.offset, length: first.length, followingRanges: first.followingRanges, body: body,
                              confirmsVersion: first.confirmsVersion)
    }

    /// Opens `range` and, in the same response when the host serves several ranges, `following`;
    /// asks for `range` alone when the host answered with the whole file instead. `givesWayWhenBusy`:
    /// see ``OriginRequest/givesWayWhenBusy``.
    private func openTryingMultipleRanges(range: ByteRange?, following: [ByteRange], validator: Validator?,
                                          givesWayWhenBusy: Bool = false) async throws -> OriginResponse {
        guard !following.isEmpty, configuration.multipleRanges != nil else {
            return try await openOnce(range: range, following: [], validator: validator, givesWayWhenBusy: givesWayWhenBusy)
        }
        do {
            return try await openOnce(range: range, following: following, validator: validator, givesWayWhenBusy: givesWayWhenBusy)
        } catch is MultipleRangesRefused {
            logger.info("the origin answered a request for several ranges with the whole file; asking for one at a time",
                        metadata: ["origin": "\(logDescription)"])
            return try await openOnce(range: range, following: [], validator: validator, givesWayWhenBusy: givesWayWhenBusy)
        }
    }

    /// Re-opens `ranges` (the rest of the range that broke off, then those still due) and proves it
    /// is the same version; otherwise throws `resourceChanged`.
    ///
    /// - Returns: The body and how many of `ranges` it carries: all, or fewer when the host no
    ///   longer serves several ranges in one response.
    fileprivate func resume(_ ranges: [ByteRange], info: ResourceInfo) async throws -> (HTTPBody, carried: Int) {
        let ifRange = info.validator.ifRangeValue != nil ? info.validator : nil
        let response = try await openTryingMultipleRanges(range: ranges[0], following: Array(ranges.dropFirst()), validator: ifRange)
        guard response.offset == ranges[0].lowerBound, response.info.acceptsByteRanges, info.isSameVersion(as: response.info) else {
            response.body.discard()
            throw StreamCacheError(.resourceChanged, "The resource changed on the origin while it was being downloaded.", range: ranges[0])
        }
        return (response.body, 1 + response.followingRanges.count)
    }

    /// One logical request: redirects, a credential refresh and transient retries, no body resume.
    /// A request that gives way when the origin is busy (`givesWayWhenBusy`) is tried twice at
    /// most after a 429 or 503, which there most likely means one connection too many.
    private func openOnce(range: ByteRange?, following: [ByteRange], validator: Validator?, givesWayWhenBusy: Bool) async throws -> OriginResponse {
        var attempt = 1
        var refreshed = false
        var relocations = 0
        var deadTarget: DownloadTarget?
        while true {
            let target = try await locator.target()
            let (response, sentCredentials, answeredBy) = try await sendFollowingRedirects(target: target, ranges: range.map { [$0] + following } ?? [],
                                                                                          validator: validator)
            lastAnsweredURL.withLock { $0 = answeredBy }
            // A 403 may be a rate limit in disguise (Google's), told by its body, which may also
            // say why it refuses.
            var refusalReasons: [String] = []
            var rateLimited = false
            if response.status == 403 {
                let body = (try? await response.body.collect(upTo: RetryPolicy.refusalBodyLimit)) ?? Data()
                refusalReasons = GoogleErrorBody.reasons(in: body)
                rateLimited = RetryPolicy.isRateLimit(status: 403, body: body)
            }
            if response.status != 200, response.status != 206 { response.body.discard() }
            if relocations < Self.mostRelocations, target != deadTarget, !rateLimited, target.isDead(answering: response.status) {
                // An expired link, or a version the service no longer keeps: resolve a new one
                // and ask again for the same bytes. The next link may be dead too when another
                // request resolved it a while ago: several downloads share a link, and a service
                // that gives each link a budget of bytes or requests has had it spent by them.
                relocations += 1
                deadTarget = target
                if await locator.targetFailed(target, status: response.status) {
                    logger.info("download link resolved again after \(response.status)", metadata: ["origin": "\(logDescription)"])
                    continue
                }
            }
            switch rateLimited ? 429 : response.status {
            case 200, 206:
                do {
                    var answer = try await interpret(response, requested: range, following: following, target: target, answeredBy: answeredBy,
                                                     validator: validator)
                    answer.confirmsVersion = target.confirmsVersionInResponses
                    return answer
                } catch {
                    response.body.discard()
                    throw error
                }
            case 416:
                let total = response.headers["Content-Range"].flatMap(ContentRange.init(headerValue:))?.completeLength
                guard let total, let range, range.lowerBound >= total else {
                    throw StreamCacheError(.rangeNotSatisfiable, "The origin refused the byte range \(range.map(\.description) ?? "").", httpStatus: 416, range: range)
                }
                let info = Self.applying(target, to: ResourceInfo(totalLength: total, mimeType: response.headers["Content-Type"],
                                                                   fileName: fileName(from: response.headers, target: target),
                                                                   acceptsByteRanges: true, validator: validatorOf(response.headers)),
                                         headers: response.headers)
                return OriginResponse(info: info, offset: range.lowerBound, length: 0, body: HTTPBody(chunks: []),
                                      confirmsVersion: target.confirmsVersionInResponses)
            case 401, 403:
                if !refreshed, sentCredentials, let credentials {
                    refreshed = true
                    let rejected = try await credentials.authorizationHeaders()
                    if try await credentials.refresh(rejected: rejected, status: response.status) {
                        logger.info("credentials refreshed after \(response.status)", metadata: ["origin": "\(logDescription)"])
                        continue
                    }
                }
                if let reason = refusalReasons.first {
                    throw StreamCacheError(.authenticationFailed, "The origin refused the request (HTTP 403, \(reason)) for \(logDescription).",
                                           httpStatus: response.status, range: range)
                }
                throw StreamCacheError(.authenticationFailed,
                                       "The origin rejected the credentials (HTTP \(response.status)); check the token or password for \(logDescription).",
                                       httpStatus: response.status, range: range)
            case 404, 410:
                throw StreamCacheError(.notFound, "The origin has no resource at \(logDescription).", httpStatus: response.status, range: range)
            case 408, 425, 429, 500...599:
                // Asked again once: a server may still count a connection whose answer has all
                // gone out, and refuse the request the client sent right after it.
                if givesWayWhenBusy, attempt >= 2, rateLimited || response.status == 429 || response.status == 503 {
                    throw StreamCacheError(.originUnavailable, "The origin refused one more connection for now (HTTP \(response.status)).",
                                           httpStatus: rateLimited ? 429 : response.status, range: range)
                }
                guard attempt < configuration.retry.maxAttempts else {
                    throw StreamCacheError(.originUnavailable, "The origin kept failing with HTTP \(response.status) after \(attempt) attempts.",
                                           httpStatus: response.status, range: range)
                }
                attempt += 1
                try await Task.sleep(for: configuration.retry.wait(beforeAttempt: attempt, retryAfter: response.headers["Retry-After"]))
            default:
                throw StreamCacheError(.badResponse, "The origin answered with an unexpected HTTP \(response.status).", httpStatus: response.status, range: range)
            }
        }
    }

    /// The most times one request resolves its link again (``DownloadLocator/targetFailed(_:status:)``)
    /// before a dead link's 404 or 410 counts as a missing file: once for its own link, once
    /// more for a link another request resolved that died meanwhile. A locator that hands out the
    /// same dead link again is not asked twice for it.
    static let mostRelocations = 2

    /// What the service's API said about the resource overrides what the download's headers say,
    /// except the version the response itself reports (``DownloadTarget/versionHeader``). The
    /// content digest is the API's, else the response's `Repr-Digest` (or legacy `Digest`).
    private static func applying(_ target: DownloadTarget, to info: ResourceInfo, headers: HTTPHeaders) -> ResourceInfo {
        var info = info
        if let version = target.version { info.validator = version }
        info.contentDigest = target.contentDigest ?? ContentDigest(representationDigestHeaders: headers)
        if let header = target.versionHeader, let value = headers[header.name],
           let object = try? JSONDecoder().decode([String: JSONStringField].self, from: Data(value.utf8)), let tag = object[header.jsonKey]?.string {
            info.validator = Validator(entityTag: "\"\(tag)\"")
            if let algorithm = header.digestAlgorithm { info.contentDigest = ContentDigest(algorithm: algorithm, hex: tag) }
        }
        if let mimeType = target.mimeType { info.mimeType = MediaType.essence(of: mimeType) }
        if let fileName = target.fileName { info.fileName = fileName }
        // A custom locator's length is checked as an origin's header would be: one no resource can
        // have would reach the reads' ranges.
        if info.totalLength == nil, info.acceptsByteRanges { info.totalLength = ByteRange.possibleLength(target.totalLength) }
        return info
    }

    /// Builds the info and the body's position from a 200 or 206.
    private func interpret(_ response: HTTPResponse, requested range: ByteRange?, following: [ByteRange], target: DownloadTarget,
                           answeredBy: URL, validator requestedValidator: Validator?) async throws -> OriginResponse {
        let headers = response.headers
        // Ranges and lengths of a compressed answer count the compressed bytes, and the body is
        // not the file's: cached, it would be served as the media. The transports ask for
        // `identity`, so only an origin that ignores that gets here.
        if let coding = headers["Content-Encoding"]?.trimmingWhitespace(), !coding.isEmpty, coding.lowercased() != "identity" {
            throw StreamCacheError(.badResponse, "The origin compressed its answer (Content-Encoding: \(coding)) although the file's own bytes were asked for (Accept-Encoding: identity).",
                                   httpStatus: response.status, range: range)
        }
        // The If-Range the request carried (none for a source whose API names the version).
        let sentIfRange = target.version == nil ? requestedValidator?.ifRangeValue : nil
        if !following.isEmpty, let range {
            if response.status == 206, let boundary = headers["Content-Type"].flatMap(MultipartByteRangesParser.boundary(ofContentType:)) {
                let parts = MultipartByteRangesBody(body: response.body, boundary: boundary, expected: [range] + following)
                let total = try await parts.readFirstPartHead()
                configuration.multipleRanges?.record(answeredBy, served: true)
                // The parts' own types are the media type; the engine keeps the one it knows.
                let info = Self.applying(target, to: ResourceInfo(totalLength: total, mimeType: nil, fileName: fileName(from: headers, target: target),
                                                                  acceptsByteRanges: true, validator: validatorOf(headers)), headers: headers)
                return OriginResponse(info: info, offset: range.lowerBound, length: range.count, followingRanges: following, body: HTTPBody(pulling: parts))
            }
            // A 200 to an `If-Range` whose tag no longer matches is a new version, not a refusal:
            // it tells nothing of the host's ranges, and the host stays one to ask for several.
            let newVersion = response.status == 200 && sentIfRange.map { $0 != validatorOf(headers).ifRangeValue } ?? false
            if !newVersion {
                // One range, or the whole file: this host serves one range per response.
                configuration.multipleRanges?.record(answeredBy, served: false)
                if response.status == 200 { throw MultipleRangesRefused() }
            }
        }
        let contentLength = headers["Content-Length"].flatMap { Int64(asciiDigits: Substring($0.trimmingWhitespace())) }
        let mime = headers["Content-Type"]
        let name = fileName(from: headers, target: target)
        let validator = validatorOf(headers)
        if response.status == 206 {
            guard let contentRange = headers["Content-Range"].flatMap(ContentRange.init(headerValue:)), let delivered = contentRange.range else {
                throw StreamCacheError(.badResponse, "The origin answered 206 without a valid Content-Range.", httpStatus: 206, range: range)
            }
            if let range, delivered.lowerBound != range.lowerBound {
                throw StreamCacheError(.badResponse, "The origin sent bytes from \(delivered.lowerBound) when \(range.lowerBound) was asked.",
                                       httpStatus: 206, range: range)
            }
            let info = Self.applying(target, to: ResourceInfo(totalLength: contentRange.completeLength, mimeType: mime, fileName: name,
                                                              acceptsByteRanges: true, validator: validator), headers: headers)
            return OriginResponse(info: info, offset: delivered.lowerBound, length: delivered.count, body: response.body)
        }
        // 200: the whole representation from byte 0. When a range was asked, the origin ignores ranges,
        // or the If-Range validator no longer matched: a new version (the caller compares validators)
        // from an origin that does serve ranges, since only such an origin evaluates If-Range.
        let newVersionForIfRange = range != nil && sentIfRange != nil && sentIfRange != validator.ifRangeValue
        let acceptsRanges = (range == nil && headers["Accept-Ranges"]?.lowercased().contains("bytes") == true) || newVersionForIfRange
        let info = Self.applying(target, to: ResourceInfo(totalLength: contentLength, mimeType: mime, fileName: name,
                                                          acceptsByteRanges: acceptsRanges, validator: validator), headers: headers)
        return OriginResponse(info: info, offset: 0, length: contentLength, body: response.body)
    }

    private func sendFollowingRedirects(target download: DownloadTarget, ranges: [ByteRange],
                                        validator: Validator?) async throws -> (HTTPResponse, sentCredentials: Bool, answeredBy: URL) {
        let url = download.url
        var target = url
        var mayCarryCredentials = true
        var visited: Set<URL> = []
        for _ in 0...configuration.maxRedirects {
            var requestHeaders = HTTPHeaders()
            var sendsCredentials = false
            if mayCarryCredentials {
                requestHeaders.merge(download.headers)
                if download.sendsCredentials, let credentials {
                    requestHeaders.merge(try await credentials.authorizationHeaders())
                    sendsCredentials = true
                }
            }
            if !ranges.isEmpty {
                requestHeaders["Range"] = "bytes=" + ranges.map { range in
                    range.upperBound == Int64.max ? "\(range.lowerBound)-" : "\(range.lowerBound)-\(range.httpLast)"
                }.joined(separator: ",")
                // A version from the service's API is not a tag the content host knows.
                if download.version == nil, let ifRange = validator?.ifRangeValue { requestHeaders["If-Range"] = ifRange }
            }
            let response = try await transport.send(HTTPRequest(url: target, headers: requestHeaders, timeout: configuration.timeout),
                                                    retrying: configuration.retry, logger: logger)
            guard [301, 302, 303, 307, 308].contains(response.status), let location = response.headers["Location"],
                  let next = URL(string: location, relativeTo: target)?.absoluteURL
            else {
                return (response, sendsCredentials, target)
            }
            response.body.discard()
            visited.insert(target)
            guard !visited.contains(next) else {
                throw StreamCacheError(.tooManyRedirects, "The origin redirects in a loop (to \(next.host ?? "?") again).", httpStatus: response.status)
            }
            if !next.hasSameOrigin(as: url), !configuration.forwardsHeadersToHosts.contains(next.host?.lowercased() ?? "") {
                mayCarryCredentials = false
            }
            if url.scheme?.lowercased() == "https", next.scheme?.lowercased() != "https" { mayCarryCredentials = false }
            // Only the host: pre-signed download URLs carry their signature in the path as well.
            logger.debug("following a redirect", metadata: ["to host": "\(next.host ?? "?")", "credentials": "\(mayCarryCredentials)"])
            target = next
        }
        throw StreamCacheError(.tooManyRedirects, "The origin redirected more than \(configuration.maxRedirects) times.")
    }

    private func validatorOf(_ headers: HTTPHeaders) -> Validator {
        Validator(entityTag: headers["ETag"], lastModified: headers["Last-Modified"])
    }

    private func fileName(from headers: HTTPHeaders, target: DownloadTarget) -> String? {
        if let disposition = headers["Content-Disposition"], let range = disposition.firstRange(of: "filename=") {
            let name = disposition[range.upperBound...].split(separator: ";").first.map(String.init)?
                .trimming(where: { $0 == "\"" || $0 == " " })
            if let name, !name.isEmpty { return name }
        }
        let last = target.url.lastPathComponent
        return last.isEmpty || last == "/" ? nil : last
    }
}

extension URL {
    /// The URL without user info, query or fragment: safe to log.
    public var redactedDescription: String {
        guard var components = URLComponents(url: self, resolvingAgainstBaseURL: true) else { return "<url>" }
        components.user = nil
        components.password = nil
        if components.percentEncodedQuery != nil { components.percentEncodedQuery = "redacted" }
        components.fragment = nil
        return components.string ?? "<url>"
    }

    func hasSameOrigin(as other: URL) -> Bool {
        func port(_ url: URL) -> Int? { url.port ?? (url.scheme?.lowercased() == "https" ? 443 : url.scheme?.lowercased() == "http" ? 80 : nil) }
        return scheme?.lowercased() == other.scheme?.lowercased() && host?.lowercased() == other.host?.lowercased() && port(self) == port(other)
    }
}

/// A request for several ranges was answered with the whole file: ask again for one range.
private struct MultipleRangesRefused: Error {}

/// A body that, when its connection breaks off, re-opens the rest with `Range` and `If-Range`
/// (after the retry policy's back-off) and carries on from the same byte, or throws
/// `resourceChanged` when the origin's version is no longer the same. A body of several ranges
/// re-opens the rest of the one that broke off and those still due, in one request when the
/// host serves several ranges, otherwise one request after another.
private final class ResumingBody: HTTPBodySource, @unchecked Sendable {
    // @unchecked: `next()` runs in one task at a time (the body's consumer); `current` is also
    // read by `cancel()` from any thread, so it is guarded by `lock`.
    private let origin: HTTPOrigin
    private let info: ResourceInfo
    /// The ranges still to deliver; the first is delivered from `position` on.
    private var ranges: ArraySlice<ByteRange>
    private var position: Int64
    /// How many of `ranges` the current body carries.
    private var carried: Int
    private var failures = 0
    private var iterator: HTTPBody.Iterator
    private let current: Locked<(body: HTTPBody, cancelled: Bool)>

    init(origin: HTTPOrigin, info: ResourceInfo, ranges: [ByteRange], body: HTTPBody) {
        self.origin = origin
        self.info = info
        self.ranges = ranges[...]
        self.position = ranges.first?.lowerBound ?? 0
        self.carried = ranges.count
        self.iterator = body.makeAsyncIterator()
        self.current = Locked((body, false))
    }

    func next() async throws -> Data? {
        try await nextChunk()?.data
    }

    func nextChunk() async throws -> HTTPBody.Chunk? {
        while let range = ranges.first {
            if position >= range.upperBound {
                ranges.removeFirst()
                carried -= 1
                guard let following = ranges.first else { break }
                position = following.lowerBound
                // A body re-opened from a host that no longer serves several ranges ends early.
                if carried == 0 { try await reopen() }
                continue
            }
            do {
                guard let chunk = try await iterator.nextChunk() else {
                    throw StreamCacheError(.badResponse, "The origin ended the body \(range.upperBound - position) bytes early.",
                                           range: ByteRange(position, range.upperBound))
                }
                let usable = chunk.data.prefix(Int(clamping: range.upperBound - position))
                guard !usable.isEmpty else { continue }
                position += Int64(usable.count)
                failures = 0
                return HTTPBody.Chunk(usable, arrivedAt: chunk.arrivedAt)
            } catch let error where !(error is CancellationError) && !Task.isCancelled && !current.withLock({ $0.cancelled }) {
                failures += 1
                guard failures < origin.configuration.retry.maxAttempts else { throw error }
                origin.log("resuming after a broken body", metadata: ["offset": "\(position)", "error": "\(error)"])
                try await Task.sleep(for: origin.configuration.retry.backoff(beforeAttempt: failures + 1))
                try await reopen()
            }
        }
        return nil
    }

    func readyChunk() -> HTTPBody.Chunk? {
        // Only within the range under way: going on to the next one may take a request.
        guard let range = ranges.first, position < range.upperBound, let chunk = iterator.readyChunk() else { return nil }
        let usable = chunk.data.prefix(Int(clamping: range.upperBound - position))
        position += Int64(usable.count)
        failures = 0
        return HTTPBody.Chunk(usable, arrivedAt: chunk.arrivedAt)
    }

    /// Opens the ranges still due, from `position` on.
    private func reopen() async throws {
        var rest = Array(ranges)
        rest[0] = ByteRange(position, rest[0].upperBound)
        let (body, carried) = try await origin.resume(rest, info: info)
        let cancelled = current.withLock { state -> Bool in
            state.body = body
            return state.cancelled
        }
        if cancelled {
            body.discard()
            throw CancellationError()
        }
        self.carried = carried
        iterator = body.makeAsyncIterator()
    }

    func cancel() {
        let body = current.withLock { state -> HTTPBody in
            state.cancelled = true
            return state.body
        }
        body.discard()
    }

    /// The current body's: `nil` from a re-open until its first chunk, when nothing can be said.
    var newestArrival: ContinuousClock.Instant? { current.withLock { $0.body }.newestArrival }

    /// The current body's: a chunk is handed on as it came, trimmed only at its range's end.
    var bytesWaiting: Int? { current.withLock { $0.body }.bytesWaiting }
}

/// A member of a JSON object that is kept only when it is a string: headers such as
/// `Dropbox-API-Result` hold an object of which one string field matters.
private struct JSONStringField: Decodable {
    let string: String?

    init(from decoder: any Decoder) throws {
        string = try? decoder.singleValueContainer().decode(String.self)
    }
}
