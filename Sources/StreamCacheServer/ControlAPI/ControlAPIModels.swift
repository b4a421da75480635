#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheHLS

/// The JSON bodies of the control API (`/api/…`). Field names are the wire format; keep them
/// stable.
public enum ControlAPI {
    /// `POST /api/resources`: a resource to register.
    public struct RegisterRequest: Codable, Sendable {
        /// The `http` or `https` URL of the resource; or, instead, a ``source``.
        public var url: String?
        /// Headers sent to the origin (for example `Authorization`); never echoed back.
        public var headers: [String: String]?
        /// A cache key; by default derived from the URL without user info or query.
        public var key: String?
        /// The file name at the end of the stream URL; by default the URL's last path segment.
        public var name: String?
        /// A source reference to a file (`yandex:/Music/a.mp3`, `webdav://me@nas/music/a.mp3`),
        /// instead of a ``url``: the server resolves it with its
        /// ``ProxyServer/Configuration/sourceResolver`` (400 for a server without one), and keys
        /// it as the source does; ``key`` and ``name`` do not apply.
        public var source: String?
        /// The credentials for ``source``; without them the resolver uses its own.
        public var sourceAccess: SourceAccess?
        /// Other references to ``source``'s file that the cache remembers with it (as it
        /// remembers ``source``), so that they find its bytes with the service out of reach: a
        /// folder's reference and the file's path below it (`gdrive:FOLDER/Album/01.mp3`), the
        /// name a folder mount asks for. With ``source`` only.
        public var aliases: [String]?

        /// Creates a request for a URL.
        public init(url: String, headers: [String: String]? = nil, key: String? = nil, name: String? = nil) {
            self.url = url
            self.headers = headers
            self.key = key
            self.name = name
        }

        /// Creates a request for a source reference.
        public init(source: String, access: SourceAccess? = nil, aliases: [String]? = nil) {
            self.source = source
            self.sourceAccess = access
            self.aliases = aliases
        }
    }

    /// The credentials a client hands the server with a source reference: those it was given
    /// (an access token or password from its environment, a credentials file), so that the
    /// server reads the file as the client would have. Never echoed back or logged.
    public struct SourceAccess: Codable, Sendable, Equatable {
        /// A cloud service's access token.
        public var token: String?
        /// A WebDAV password.
        public var password: String?
        /// The WebDAV user, when the reference names none.
        public var user: String?
        /// The path of a credentials file (refused unless mode 0600, as the client's own would be).
        public var credentialsFile: String?

        /// Creates credentials; all are optional.
        public init(token: String? = nil, password: String? = nil, user: String? = nil, credentialsFile: String? = nil) {
            self.token = token
            self.password = password
            self.user = user
            self.credentialsFile = credentialsFile
        }
    }

    /// `POST /api/resources/{id}/prefetch`: an optional byte range to fill (`end` exclusive), or
    /// for an HLS playlist, which variants and how many segments to download.
    public struct PrefetchRequest: Codable, Sendable {
        /// The first byte; 0 by default.
        public var start: Int64?
        /// One past the last byte; the end of the resource by default.
        public var end: Int64?
        /// HLS: `all`, `highest` (the default), `lowest`, or a 0-based variant index.
        public var variants: String?
        /// HLS: download only the first this many segments of each media playlist.
        public var segments: Int?
        /// Pin what is downloaded once it is cached (an HLS stream's playlists and segments
        /// too), so that eviction never removes it: a "download for offline" that stays until it
        /// is unpinned (`DELETE /api/cache/{key}/pin`). A prefetch that fails pins nothing.
        public var pin: Bool?
        /// The bytes per second this prefetch takes at most (more than 0), besides the server's
        /// background rate (`GET /api/settings`); none by default. A player that comes to the
        /// bytes is never held back. Asked for again while the prefetch runs, it goes on at the
        /// new rate, or at full speed when none is given.
        public var rate: Int64?
        /// A name the client gives this start (a UUID, say; at most
        /// ``PrefetchRequest/longestRequestID`` characters), so that a stop that names it
        /// (`DELETE /api/resources/{id}/prefetch?requestID=…`) wins over it even when the stop
        /// reaches the server first. A client that gives up on its start (Ctrl-C on
        /// `streamcache prefetch`) cannot tell whether the server has it yet; without a name, a
        /// start still on its way when the stop is through would download the file.
        public var requestID: String?

        /// The longest ``requestID`` the server takes.
        public static let longestRequestID = 128

        /// Creates a request.
        public init(start: Int64? = nil, end: Int64? = nil, variants: String? = nil, segments: Int? = nil, pin: Bool? = nil, rate: Int64? = nil,
                    requestID: String? = nil) {
            self.start = start
            self.end = end
            self.variants = variants
            self.segments = segments
            self.pin = pin
            self.rate = rate
            self.requestID = requestID
        }
    }

    /// A cached byte range, `end` exclusive.
    public struct Span: Codable, Sendable, Hashable {
        /// The first byte.
        public var start: Int64
        /// One past the last byte.
        public var end: Int64
    }

    /// What the API says about one registered resource.
    public struct ResourceStatus: Codable, Sendable {
        /// The resource's id (the token in its stream URL).
        public var id: String
        /// The URL players open.
        public var streamURL: String
        /// The cache key.
        public var key: String
        /// The source without user info or query.
        public var source: String
        /// `empty`, `partial` or `complete`.
        public var state: String
        /// Whether a download is in flight.
        public var downloading: Bool
        /// The length in bytes, once known.
        public var size: Int64?
        /// The MIME type, once known.
        public var mimeType: String?
        /// Bytes on disk.
        public var cachedBytes: Int64
        /// The cached ranges.
        public var cachedRanges: [Span]
        /// Bytes served to clients from the cache since the server started.
        public var bytesFromCache: Int64
        /// Bytes served to clients as they arrived from the origin since the server started.
        public var bytesFromOrigin: Int64
        /// Requests sent to the origin since the server started.
        public var originRequests: Int
        /// Whether a prefetch started through the API is under way: a client that started one
        /// polls until this turns false, then reads ``prefetchError``.
        public var prefetching: Bool
        /// The last prefetch's error, if it failed.
        public var prefetchError: String?
        /// The kind of the last prefetch's error, when it was a ``StreamCacheError``: its code's
        /// name (`authenticationFailed`, `notFound`, `diskFull`, …), for a client to act on.
        public var prefetchErrorCode: String?
        /// The rate of its own the prefetch under way keeps to, in bytes per second
        /// (``PrefetchRequest/rate``); `nil` for none, or when no prefetch runs.
        public var prefetchRate: Int64?
        /// For an HLS playlist, how far its last prefetch got.
        public var hlsPrefetch: HLSPrefetchProgress?
    }

    /// `GET /api/stats`: the whole cache's totals since the server's cache was opened, and its size.
    public struct CacheStats: Codable, Sendable {
        /// Reads, bytes served from the cache and from origins, requests, errors, evictions.
        public var statistics: CacheStatistics
        /// Bytes cached on disk, over every resource.
        public var cachedBytes: Int64
        /// The cache's size limit, if it has one.
        public var maximumSize: Int64?
    }

    /// `GET /api/resources`.
    public struct ResourceList: Codable, Sendable {
        /// Every registered resource.
        public var resources: [ResourceStatus]
        /// Every served folder: its URL prefix on this server.
        public var folders: [String]
    }

    /// `PUT` and `DELETE /api/cache/{key}/pin`: the resource's pin as it now is.
    public struct PinState: Codable, Sendable {
        /// The cache key.
        public var key: String
        /// Whether the resource is kept from eviction.
        public var pinned: Bool
    }

    /// `POST /api/cache/{key}/verify`: what hashing a resource's cached bytes again found (see
    /// `StreamCache.checkContent(of:)`).
    public struct ContentCheck: Codable, Sendable, Hashable {
        /// The cache key.
        public var key: String
        /// `matched`, `mismatched` (the cached bytes were dropped), `disputed` (the origin's bytes
        /// failed its digest twice alike and are kept), `incomplete` or `noDigest`.
        public var result: String
        /// The digest the origin publishes (`sha256:…`), when it publishes one.
        public var expected: String?
        /// The digest of the cached bytes, when they did not match.
        public var found: String?

        /// Creates an answer.
        public init(key: String, result: String, expected: String? = nil, found: String? = nil) {
            self.key = key
            self.result = result
            self.expected = expected
            self.found = found
        }
    }

    /// `DELETE /api/cache`: what clearing the cache did.
    public struct Removal: Codable, Sendable {
        /// Resources deleted with their cached bytes.
        public var removed: Int
        /// Resources kept because a player or a download was using them.
        public var kept: Int
    }

    /// `POST /api/cache/prune`: the rules of one eviction pass (``StreamCache/EvictionRules``), at
    /// least one of them; and whether to only tell what would go.
    public struct PruneRequest: Codable, Sendable, Equatable {
        /// Evict least recently used resources until the cache holds at most 90 % of this many bytes.
        public var maximumSize: Int64?
        /// Evict resources not read for this many seconds.
        public var maximumAgeSeconds: Double?
        /// Evict least recently used resources while the volume has less free than this many bytes.
        public var minimumFreeSpace: Int64?
        /// Only tell what would be evicted.
        public var dryRun: Bool?

        /// Creates a request.
        public init(maximumSize: Int64? = nil, maximumAgeSeconds: Double? = nil, minimumFreeSpace: Int64? = nil, dryRun: Bool? = nil) {
            self.maximumSize = maximumSize
            self.maximumAgeSeconds = maximumAgeSeconds
            self.minimumFreeSpace = minimumFreeSpace
            self.dryRun = dryRun
        }
    }

    /// `GET /api/settings`, and `PUT /api/settings` to change them while the server runs: the
    /// settings an app changes as its situation does (a phone that leaves Wi-Fi for a metered
    /// link). A `PUT` changes the fields it names and leaves the others; the answer is the
    /// settings as they then are.
    public struct Settings: Codable, Sendable, Equatable {
        /// The bytes per second prefetches and background fills take together
        /// (``StreamCache/StreamCache/backgroundDownloadRate``); `null` when there is no limit.
        /// In a `PUT`, `0` or `null` lifts the limit.
        public var backgroundDownloadRate: Int64?

        /// Creates settings.
        public init(backgroundDownloadRate: Int64? = nil) {
            self.backgroundDownloadRate = backgroundDownloadRate
        }

        private enum CodingKeys: String, CodingKey { case backgroundDownloadRate }

        /// Writes every field, `null` for one that is not set, so that a reader sees "no limit"
        /// rather than nothing.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(backgroundDownloadRate, forKey: .backgroundDownloadRate)
        }
    }

    /// `PUT /api/settings`: the fields to change. A field that is absent is left as it is; one
    /// that is `null` is cleared (as `0` is, for a rate).
    public struct SettingsChange: Decodable, Sendable {
        /// The new background rate: absent, unchanged; `null` or `0`, no limit.
        public var backgroundDownloadRate: Int64??

        private enum CodingKeys: String, CodingKey { case backgroundDownloadRate }

        /// Decodes a change, telling an absent field from a `null` one.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            if container.contains(.backgroundDownloadRate) {
                backgroundDownloadRate = .some(try container.decodeNil(forKey: .backgroundDownloadRate)
                    ? nil : try container.decode(Int64.self, forKey: .backgroundDownloadRate))
            }
        }

        /// A change of the background rate (`nil`: no limit).
        public init(backgroundDownloadRate: Int64?) {
            self.backgroundDownloadRate = .some(backgroundDownloadRate)
        }
    }

    /// `POST /api/cache/prune`: what the pass evicted, least recently used first (or, in a dry
    /// run, would have).
    public struct Pruning: Codable, Sendable, Equatable {
        /// One resource evicted.
        public struct Evicted: Codable, Sendable, Equatable {
            /// Its cache key.
            public var key: String
            /// The cached bytes it held.
            public var bytes: Int64
            /// The rule it went by: `age`, `size` or `freeSpace` (``StreamCache/EvictionReason``).
            public var reason: String

            /// Creates a row.
            public init(key: String, bytes: Int64, reason: String) {
                self.key = key
                self.bytes = bytes
                self.reason = reason
            }
        }

        /// The resources evicted.
        public var evicted: [Evicted]
        /// Whether nothing was removed (the request's `dryRun`).
        public var dryRun: Bool

        /// An answer of these rows.
        public init(evicted: [Evicted], dryRun: Bool) {
            self.evicted = evicted
            self.dryRun = dryRun
        }
    }

    /// The body of every error answer.
    public struct ErrorBody: Codable, Sendable {
        /// A stable machine-readable code (`unauthorized`, `notFound`, `invalidRequest`, …).
        public var error: String
        /// A sentence for people.
        public var message: String
    }
}
