#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where a resource's bytes come from: opens a byte range and streams it.
///
/// ``HTTPOrigin`` covers any HTTP(S) URL with custom headers; cloud sources (WebDAV, Yandex.Disk,
/// …) conform in the `StreamCacheSources` module. An origin's first answer also carries the
/// resource's ``ResourceInfo``, so the engine never needs a separate `HEAD`.
///
/// Conformances retry transient failures themselves and, when a body breaks off, resume from the
/// last byte delivered only after proving the version is unchanged; the engine sees one
/// continuous body or an error.
public protocol Origin: Sendable {
    /// A description for logs and errors; must not contain credentials or signed query strings.
    var logDescription: String { get }

    /// Opens `request.range` (or the whole resource when `nil`).
    ///
    /// - Returns: The resource info and a body starting at ``OriginResponse/offset``, which is the
    ///   requested start, or 0 when the origin cannot serve ranges.
    /// - Throws: ``StreamCacheError`` (`authenticationFailed`, `notFound`, `originUnavailable`,
    ///   `badResponse`, `tooManyRedirects`), or `CancellationError`.
    func open(_ request: OriginRequest) async throws -> OriginResponse

    /// The most bytes one request should ask for, or `nil` when only the engine's
    /// ``StreamCache/Configuration/maximumSegmentSize`` applies. An origin whose client cannot
    /// hold back a response from a slow consumer may have to buffer a whole request in memory.
    /// It binds every request, a read's first included; a number below one counts as `nil`.
    var maximumRequestLength: Int64? { get }

    /// Whether dropping a response's body stops its transfer at once. The engine cuts a request
    /// in flight when a seek lands far ahead in it, or when no reader needs its bytes any more;
    /// an origin whose client goes on receiving a body it was told to drop (`URLSessionTransport`
    /// on Linux) would receive such a request whole, so its requests also end within
    /// ``StreamCache/Configuration/maximumJoinWait`` at the connection's speed.
    var stopsAbandonedTransfers: Bool { get }

    /// Whether a request's ``OriginRequest/followingRanges`` may come in the same response. The
    /// engine plans a request across cached bytes (a `multipart/byteranges` request for the gaps
    /// on either side) only when this is true; otherwise each gap is a request of its own.
    var servesMultipleRanges: Bool { get }

    /// The host a request of this origin goes to and how many connections its transport opens
    /// there, when known. Downloads that no reader waits for keep
    /// ``StreamCache/Configuration/connectionsKeptForReaders`` of them free, across every
    /// resource of the cache; `nil` leaves them unlimited.
    var connectionLimit: OriginConnectionLimit? { get }

    /// ``connectionLimit``, finding out the host first if the origin does not know it yet (a
    /// cloud service's download link that has not been resolved): the engine asks this before a
    /// download no reader waits for sends its first request, so that the first downloads of
    /// many files fetched at once for offline use are held back as well. `nil` when the host
    /// cannot be found out (the request that follows reports why) or the transport does not say.
    func resolveConnectionLimit() async -> OriginConnectionLimit?

    /// What the origin says now about the resource's version and length: the answer
    /// ``StreamCache/Configuration/revalidationInterval`` compares with the cached version.
    ///
    /// The default asks for the first byte (``infoFromFirstByte()``). An origin whose version
    /// comes from elsewhere than its downloads' headers (a cloud service's API) asks there, so
    /// that a version it learned earlier is not mistaken for the current one.
    ///
    /// - Throws: What ``open(_:)`` throws.
    func currentInfo() async throws -> ResourceInfo

    /// Whether the origin stands in for one not reached yet, so that the cached bytes' version is
    /// unconfirmed (a file resolved from the cache while its service was out of reach), and
    /// would try to reach it now: its tries keep their own pace. While it is `true`, a read of
    /// cached bytes first asks ``currentInfo()`` (waiting at most
    /// ``StreamCache/Configuration/revalidationTimeout``), whatever
    /// ``StreamCache/Configuration/revalidationInterval`` says, and a changed version drops the
    /// cached bytes. `false` by default.
    var isProvisional: Bool { get }

    /// Told once the engine has compared an answer of this origin (a download's response, or
    /// ``currentInfo()``'s) with the cached bytes' version, or taken a version the caller gave
    /// (``Resource/expectVersion(_:totalLength:)``). A provisional origin is provisional no
    /// more: an answer that came after the engine stopped waiting for it
    /// (``StreamCache/Configuration/revalidationTimeout``) was never compared, so it leaves the
    /// origin provisional and the next read asks again. Does nothing by default.
    func versionWasChecked()

    /// The executor a download of this origin runs on, or `nil` for Swift's global executor.
    ///
    /// The engine starts each download's task with this executor as its preference: the task
    /// opens the origin's responses, writes their bodies to the cache file and reports them to
    /// the resource. ``HTTPOrigin`` names its transport's ``HTTPTransport/bodyExecutor``, so the
    /// bytes are written on the thread that received them.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    var downloadExecutor: (any TaskExecutor)? { get }
}

/// The connections a transport opens to one host.
public struct OriginConnectionLimit: Sendable, Hashable {
    /// The host, as `scheme://host:port`.
    public var host: String
    /// The most connections the transport opens to it at once; it queues more requests.
    public var connections: Int

    /// Creates a limit of `connections` to `host`.
    public init(host: String, connections: Int) {
        self.host = host
        self.connections = connections
    }
}

extension Origin {
    /// No limit of the origin's own.
    public var maximumRequestLength: Int64? { nil }

    /// Dropping a body stops its transfer.
    public var stopsAbandonedTransfers: Bool { true }

    /// One range per request.
    public var servesMultipleRanges: Bool { false }

    /// Not known: downloads are not held back.
    public var connectionLimit: OriginConnectionLimit? { nil }

    /// ``connectionLimit`` as it is.
    public func resolveConnectionLimit() async -> OriginConnectionLimit? { connectionLimit }

    /// ``infoFromFirstByte()``.
    public func currentInfo() async throws -> ResourceInfo { try await infoFromFirstByte() }

    /// An origin that was reached, or will be by its first request.
    public var isProvisional: Bool { false }

    /// Nothing: an origin that is never provisional has nothing to learn from it.
    public func versionWasChecked() {}

    /// None: downloads run on Swift's global executor.
    @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, visionOS 2.0, *)
    public var downloadExecutor: (any TaskExecutor)? { nil }

    /// The info of a response to a request for the resource's first byte.
    ///
    /// A short body is read to its end, so that the connection goes back to the pool for the
    /// next request; the whole file from an origin that ignores ranges is dropped instead.
    public func infoFromFirstByte() async throws -> ResourceInfo {
        let response = try await open(OriginRequest(range: ByteRange(0, 1)))
        if let length = response.length, length <= 64 << 10 {
            // The head has told the version: a body that breaks off changes nothing.
            do { for try await _ in response.body {} } catch {}
        } else {
            response.body.discard()
        }
        return response.info
    }
}

/// A request for part of a resource.
public struct OriginRequest: Sendable, Hashable {
    /// The bytes wanted, or `nil` for the whole resource. The range may run past the end when the
    /// length is not known yet; the origin then delivers up to the end.
    public var range: ByteRange?
    /// Further ranges wanted in the same response, in ascending order, each beginning past the end
    /// of the one before (the cache holds the bytes between). Only an origin whose
    /// ``Origin/servesMultipleRanges`` is true is given any, and it may deliver fewer: the
    /// response's ``OriginResponse/followingRanges`` says which came. `range` is bounded then.
    public var followingRanges: [ByteRange]
    /// The version the cache holds. HTTP origins send it as `If-Range`, so a changed resource
    /// comes back whole (200) with its new validator instead of as a mix of versions.
    public var validator: Validator?
    /// Whether the request gives way when the origin refuses it for now (HTTP 429 or 503, which
    /// beside the cache's other requests most likely means one connection too many: a service
    /// that limits a user's downloads at once). Such a request is tried twice; refused both
    /// times, it throws ``StreamCacheError/Code/originUnavailable`` with that status, without the
    /// further retries of ``HTTPOrigin/Configuration/retry``, and the cache uses fewer connections
    /// to that host. The cache sets it for an extra connection of a download split across several
    /// (a part of a long read, a split seek's second half), whose bytes the others can bring.
    public var givesWayWhenBusy: Bool

    /// Creates a request.
    public init(range: ByteRange?, followingRanges: [ByteRange] = [], validator: Validator? = nil, givesWayWhenBusy: Bool = false) {
        self.range = range
        self.followingRanges = followingRanges
        self.validator = validator
        self.givesWayWhenBusy = givesWayWhenBusy
    }
}

/// An origin's answer: the info and a body.
public struct OriginResponse: Sendable {
    /// What the origin said about the whole resource.
    public var info: ResourceInfo
    /// The offset of the body's first byte: the requested range's start, or a byte before it (a
    /// store of whole blocks rounds a start down; the bytes from there are cached too). An answer
    /// from byte 0 to the end of the file, when a later byte was asked for, ignored the range.
    public var offset: Int64
    /// How many bytes the body carries, when known.
    public var length: Int64?
    /// The ranges whose bytes the body carries after its first ``length`` bytes, in order: the
    /// request's ``OriginRequest/followingRanges`` that came in this response (all of them or
    /// none). Empty for a response to one range.
    public var followingRanges: [ByteRange]
    /// The bytes, in order from ``offset``, then those of each of ``followingRanges``. With a
    /// ``length``, the bytes past the last range are not taken: the answer ends there.
    public var body: HTTPBody
    /// Whether the response itself tells the version it carries. A download from a cloud
    /// service whose version comes from its API only repeats the version its link was resolved
    /// with, which the bytes may no longer be: such an answer does not count as the origin's word
    /// for ``StreamCache/Configuration/revalidationInterval``.
    public var confirmsVersion: Bool

    /// Creates a response.
    public init(info: ResourceInfo, offset: Int64, length: Int64?, followingRanges: [ByteRange] = [], body: HTTPBody, confirmsVersion: Bool = true) {
        self.info = info
        self.offset = offset
        self.length = length
        self.followingRanges = followingRanges
        self.body = body
        self.confirmsVersion = confirmsVersion
    }

    /// What in the answer no resource can have, for the error (an offset, length or total length
    /// below zero or past ``ByteRange/largestLength``); `nil` when every number can be. The engine
    /// checks each answer with it before doing arithmetic with its numbers: an ``Origin`` of an
    /// app's own may state anything.
    var impossibleNumbers: String? {
        if !(0..<ByteRange.largestLength).contains(offset) { return "an offset of \(offset)" }
        if let length, length < 0 || length > ByteRange.largestLength - offset { return "a length of \(length) at offset \(offset)" }
        if let total = info.totalLength, !ByteRange.isPossibleLength(total) { return "a total length of \(total)" }
        if let last = followingRanges.last, last.upperBound > ByteRange.largestLength { return "a range ending at \(last.upperBound)" }
        return nil
    }

    /// Every range the body carries, in order; `nil` while the first one's length is unknown.
    public var ranges: [ByteRange]? {
        length.map { [ByteRange(offset: offset, length: $0)] + followingRanges }
    }
}
