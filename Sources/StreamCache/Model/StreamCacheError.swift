/// The one error type StreamCache throws, apart from `CancellationError`.
///
/// Like AsyncHTTPClient's `HTTPClientError`, it is a struct over an extensible ``Code`` so new
/// failure kinds break no one's `switch`. The ``message`` says what failed and what to do about it;
/// it never holds a token, an `Authorization` value, a cookie or a URL query.
///
/// ```swift
/// do {
///     for try await chunk in cache.read(ByteRange(0, 1024), of: origin) { … }
/// } catch let error as StreamCacheError where error.code == .authenticationFailed {
///     // ask the user to sign in again
/// }
/// ```
public struct StreamCacheError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case originUnavailable, resourceChanged, rangeNotSatisfiable, authenticationFailed, notFound
            case badResponse, tooManyRedirects, diskFull, cacheIOFailed, invalidArgument, rangeNotSupported
            case unsupportedMediaType, invalidPlaylist, cacheInUse, contentMismatch
        }

        private let base: Base

        /// The origin could not be reached, or kept failing (5xx, dropped connections) after the retries.
        public static let originUnavailable = Code(base: .originUnavailable)
        /// The origin's content changed (new validator or length) while it was being read.
        public static let resourceChanged = Code(base: .resourceChanged)
        /// The requested range starts at or past the end of the resource.
        public static let rangeNotSatisfiable = Code(base: .rangeNotSatisfiable)
        /// The origin answered 401 or 403, also after a credential refresh.
        public static let authenticationFailed = Code(base: .authenticationFailed)
        /// The origin answered 404 or 410.
        public static let notFound = Code(base: .notFound)
        /// The origin's answer broke HTTP rules the cache relies on (wrong `Content-Range`, short body, unexpected status).
        public static let badResponse = Code(base: .badResponse)
        /// The origin redirected more times than allowed, or in a loop.
        public static let tooManyRedirects = Code(base: .tooManyRedirects)
        /// The cache's file system is full.
        public static let diskFull = Code(base: .diskFull)
        /// Reading or writing the cache failed for a reason other than a full disk.
        public static let cacheIOFailed = Code(base: .cacheIOFailed)
        /// The caller passed a value the API cannot use.
        public static let invalidArgument = Code(base: .invalidArgument)
        /// The origin cannot serve byte ranges and the request cannot be answered without them.
        public static let rangeNotSupported = Code(base: .rangeNotSupported)
        /// The player cannot take the resource's media type (for example AVFoundation's
        /// `allowedContentTypes` does not list it).
        public static let unsupportedMediaType = Code(base: .unsupportedMediaType)
        /// A playlist (HLS `.m3u8`) does not follow RFC 8216, or is too large to be one.
        public static let invalidPlaylist = Code(base: .invalidPlaylist)
        /// Another cache, in this process or another, has the cache directory open: one at a
        /// time may use it (see ``CacheStore/init(directory:logger:)``).
        public static let cacheInUse = Code(base: .cacheInUse)
        /// The complete cached bytes do not match the content digest the origin publishes
        /// (``ContentDigest``), again after they were dropped and downloaded once more.
        public static let contentMismatch = Code(base: .contentMismatch)

        /// A stable number for the code, used as the `NSError` code (`errorCode`, in
        /// `StreamCacheAVFoundation`).
        /// Numbers are never reused.
        public var number: Int {
            switch base {
            case .originUnavailable: 1
            case .resourceChanged: 2
            case .rangeNotSatisfiable: 3
            case .authenticationFailed: 4
            case .notFound: 5
            case .badResponse: 6
            case .tooManyRedirects: 7
            case .diskFull: 8
            case .cacheIOFailed: 9
            case .invalidArgument: 10
            case .rangeNotSupported: 11
            case .unsupportedMediaType: 12
            case .invalidPlaylist: 13
            case .cacheInUse: 14
            case .contentMismatch: 15
            }
        }

        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed and how to fix it; safe to show to a user.
    public var message: String
    /// The HTTP status the origin answered with, when there was one.
    public var httpStatus: Int?
    /// The byte range concerned, when there was one.
    public var range: ByteRange?
    /// The lower-level error that caused this one, if any.
    public var underlying: (any Error & Sendable)?
    /// How the connection to the origin failed, for an ``Code/originUnavailable`` that a
    /// transport could tell apart; `nil` otherwise.
    public var connectionFailure: ConnectionFailure?

    /// How a connection to the origin failed without an answer. It decides whether a request is
    /// sent again (``HTTPTransport/send(_:retrying:logger:)``): a refused or lost connection may
    /// succeed at once on the next try, however long the failure took to show on a loaded machine;
    /// a timeout already waited as long as the request may.
    public enum ConnectionFailure: Hashable, Sendable {
        /// Nothing listens where the origin should (a server down or restarting).
        case refused
        /// The connection closed or was reset before an answer came.
        case lost
        /// The origin did not answer within the transport's timeout.
        case timedOut
        /// The origin's TLS certificate was refused: no trusted authority signed it, it names
        /// another host, or it has expired. Trying again changes nothing until the client is told
        /// to trust its authority.
        case certificateRejected
        /// The proxy the request goes through would not carry it: it asks for credentials the
        /// client does not have (407), or it refused the origin. Trying again changes nothing until
        /// the proxy's settings do.
        case proxyRefused
    }

    /// Whether the error ends a read whose bytes are no longer the cache's: a new version of the
    /// resource, or cached bytes that failed the origin's digest and were dropped. Reading again
    /// fetches them anew, so a front end that has sent nothing yet answers again instead of failing.
    package var endsAReadOfDroppedBytes: Bool { code == .resourceChanged || code == .contentMismatch }

    /// Creates an error.
    public init(_ code: Code, _ message: String, httpStatus: Int? = nil, range: ByteRange? = nil, underlying: (any Error & Sendable)? = nil,
                connectionFailure: ConnectionFailure? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.range = range
        self.underlying = underlying
        self.connectionFailure = connectionFailure
    }

    public var description: String {
        var text = "\(code): \(message)"
        if let httpStatus { text += " (HTTP \(httpStatus))" }
        return text
    }
}

extension StreamCacheError {
    /// Whether the origin refused a request for now with a status that, for a request beside
    /// others, says one connection too many (429, 503; Google's 403 `rateLimitExceeded` is given as
    /// 429): see ``OriginRequest/givesWayWhenBusy``.
    var refusesOneMoreConnection: Bool {
        code == .originUnavailable && (httpStatus == 429 || httpStatus == 503)
    }
}
