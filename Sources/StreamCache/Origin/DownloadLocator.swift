#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where an ``HTTPOrigin`` downloads a resource from right now.
///
/// A plain URL never changes (``FixedDownloadLocator``). Cloud services hand out download links
/// that expire: Yandex.Disk's `href`, Dropbox's temporary links, the pre-authenticated URLs
/// OneDrive and Box redirect to. Their locators (in `StreamCacheSources`) resolve a link through
/// the service's API and resolve again when the link stops working, and ``HTTPOrigin`` carries
/// on from the same byte, mid-stream included, without losing a cached byte.
public protocol DownloadLocator: Sendable {
    /// A description for logs and errors, without credentials or signed query strings.
    var logDescription: String { get }
    /// The target to download from, resolving one when none is known yet.
    func target() async throws -> DownloadTarget
    /// Reports that `target` answered `status` (403, 404 or 410 from an expiring link), so the
    /// next ``target()`` resolves a new one.
    ///
    /// - Returns: Whether a new target may succeed where this one failed.
    func targetFailed(_ target: DownloadTarget, status: Int) async -> Bool
    /// Called before the origin is asked for the resource's current version
    /// (``Origin/currentInfo()``). A locator whose target carries a ``DownloadTarget/version``
    /// from the service's API forgets that target, so that the next ``target()`` asks the
    /// service again: a download only repeats the version its link was resolved with. The
    /// default does nothing.
    func prepareForVersionCheck() async
}

extension DownloadLocator {
    /// Nothing to prepare: the downloads' own headers tell the version.
    public func prepareForVersionCheck() async {}
}

/// One place to download a resource from, with what the service's API said about the resource.
public struct DownloadTarget: Sendable, Hashable {
    /// The URL to send ranged `GET`s to.
    public var url: URL
    /// Headers the target needs besides credentials (Dropbox's `Dropbox-API-Arg`, for example).
    public var headers: HTTPHeaders
    /// Whether the origin's ``CredentialProvider`` headers go to this URL. Pre-signed links need
    /// none, and the bearer token must not travel to a content host that does not need it.
    public var sendsCredentials: Bool
    /// Whether the link can expire: its 403, 404 and 410 answers then mean "resolve again".
    public var expires: Bool
    /// Whether the URL names the file version it serves (Box's `version`, a Google Drive
    /// revision): every response is then that version's bytes, never another's, and a 404 or
    /// 410 means the service no longer keeps it, so "resolve again" rather than "no such file".
    public var pinsVersion: Bool = false
    /// The version the service's API reports (revision, content hash, ETag of the metadata),
    /// used instead of the download's own headers. When set, no `If-Range` is sent (content hosts
    /// do not know this tag; Yandex answers 416 to `If-Range`): a new version shows when the
    /// target is resolved again.
    public var version: Validator?
    /// A response header that reports the version of the bytes actually sent, as JSON with this
    /// key (Dropbox's `Dropbox-API-Result` and its `content_hash`). Stable download endpoints serve
    /// whatever version is current, so without it a file replaced during a download would show
    /// only by a changed length.
    public var versionHeader: VersionHeader?
    /// The resource's length from the API, when known.
    public var totalLength: Int64?
    /// The MIME type from the API, when it gives one.
    public var mimeType: String?
    /// The file's name from the API.
    public var fileName: String?
    /// The digest of the whole file the API publishes (``ResourceInfo/contentDigest``), checked
    /// against the cached bytes once they are complete.
    public var contentDigest: ContentDigest?

    /// Creates a target.
    public init(url: URL, headers: HTTPHeaders = [:], sendsCredentials: Bool = true, expires: Bool = false, version: Validator? = nil,
                totalLength: Int64? = nil, mimeType: String? = nil, fileName: String? = nil, contentDigest: ContentDigest? = nil) {
        self.url = url
        self.headers = headers
        self.sendsCredentials = sendsCredentials
        self.expires = expires
        self.version = version
        self.totalLength = totalLength
        self.mimeType = mimeType
        self.fileName = fileName
        self.contentDigest = contentDigest
    }
}

extension DownloadTarget {
    /// Whether a response from this target tells the version of what it sends: its own headers
    /// do, or a ``versionHeader`` does; a ``version`` from the service's API alone is the one the
    /// target was resolved with. Only such a response is the origin's word on its current version.
    public var confirmsVersionInResponses: Bool { version == nil || versionHeader != nil }

    /// Whether the bytes of every response are known to be of one version, the one a response
    /// or the target says: the response tells it (``confirmsVersionInResponses``), or the URL
    /// names it (``pinsVersion``). A target that does not vouch for its bytes may mix a file
    /// replaced at the origin into cached bytes of the old one, so its word must not be kept long.
    public var vouchesForItsBytes: Bool { confirmsVersionInResponses || pinsVersion }

    /// Whether `status` says this target's link is dead, so that a new resolution may succeed:
    /// an expiring link's 403, 404 or 410; a pinned version's 404 or 410 (the service no longer
    /// keeps it). A pinned link's 403 is a refusal.
    public func isDead(answering status: Int) -> Bool {
        (expires && [403, 404, 410].contains(status)) || (pinsVersion && [404, 410].contains(status))
    }
}

/// A response header that carries JSON metadata of the bytes sent, and the key of the version in it.
public struct VersionHeader: Sendable, Hashable {
    /// The header's name.
    public var name: String
    /// The JSON key whose string value is the version tag.
    public var jsonKey: String
    /// The algorithm of the content digest the tag is, when it is one (Dropbox's `content_hash`):
    /// the response's tag then replaces the target's ``DownloadTarget/contentDigest``.
    public var digestAlgorithm: ContentDigest.Algorithm?

    /// Creates a description.
    public init(name: String, jsonKey: String, digestAlgorithm: ContentDigest.Algorithm? = nil) {
        self.name = name
        self.jsonKey = jsonKey
        self.digestAlgorithm = digestAlgorithm
    }
}

/// The locator of a plain URL: always the same target.
public struct FixedDownloadLocator: DownloadLocator {
    /// The only target.
    public let fixedTarget: DownloadTarget

    /// Creates a locator for `url` with `headers`.
    public init(url: URL, headers: HTTPHeaders = [:]) {
        fixedTarget = DownloadTarget(url: url, headers: headers)
    }

    /// Creates a locator for a target that never expires (an API endpoint that takes the token).
    public init(target: DownloadTarget) {
        fixedTarget = target
    }

    public var logDescription: String { fixedTarget.url.redactedDescription }
    public func target() async throws -> DownloadTarget { fixedTarget }
    public func targetFailed(_ target: DownloadTarget, status: Int) async -> Bool { false }
}
