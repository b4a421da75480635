#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import StreamCache

/// How sources reach their services: the HTTP client and each service's API endpoints.
///
/// The endpoints default to the services' real ones; point them elsewhere to test against a
/// local server that follows the service's documented API, or to use a compatible self-hosted
/// service. ``Endpoints/fromEnvironment(_:)`` reads overrides from `STREAMCACHE_ENDPOINT_*`.
public struct SourceConfiguration: Sendable {
    /// API base URLs.
    public struct Endpoints: Sendable, Hashable {
        /// Yandex.Disk REST API.
        public var yandex = URL(string: "https://cloud-api.yandex.net/v1/disk")!
        /// Dropbox RPC endpoints.
        public var dropboxAPI = URL(string: "https://api.dropboxapi.com/2")!
        /// Dropbox content (download) endpoints.
        public var dropboxContent = URL(string: "https://content.dropboxapi.com/2")!
        /// Google Drive API v3.
        public var googleDrive = URL(string: "https://www.googleapis.com/drive/v3")!
        /// Microsoft Graph (OneDrive).
        public var microsoftGraph = URL(string: "https://graph.microsoft.com/v1.0")!
        /// Box API.
        public var box = URL(string: "https://api.box.com/2.0")!
        /// OAuth token endpoints by service, for refresh-token grants.
        public var tokens: [String: URL] = [
            "yandex": OAuthRefreshingToken.Endpoint.yandex.url, "dropbox": OAuthRefreshingToken.Endpoint.dropbox.url,
            "gdrive": OAuthRefreshingToken.Endpoint.google.url, "onedrive": OAuthRefreshingToken.Endpoint.microsoft.url,
            "box": OAuthRefreshingToken.Endpoint.box.url,
        ]
        /// OAuth authorization endpoints by service: the sign-in pages ``OAuthSignIn`` sends the
        /// user's browser to.
        public var authorizations: [String: URL] = [
            "yandex": URL(string: "https://oauth.yandex.ru/authorize")!,
            "dropbox": URL(string: "https://www.dropbox.com/oauth2/authorize")!,
            "gdrive": URL(string: "https://accounts.google.com/o/oauth2/v2/auth")!,
            "onedrive": URL(string: "https://login.microsoftonline.com/common/oauth2/v2.0/authorize")!,
            "box": URL(string: "https://account.box.com/api/oauth2/authorize")!,
        ]

        /// The real endpoints.
        public init() {}

        /// The real endpoints with overrides from `STREAMCACHE_ENDPOINT_YANDEX`, `_DROPBOX_API`,
        /// `_DROPBOX_CONTENT`, `_GDRIVE`, `_ONEDRIVE`, `_BOX`, `_TOKEN_<SERVICE>` and
        /// `_AUTHORIZE_<SERVICE>`.
        public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> Endpoints {
            var endpoints = Endpoints()
            func url(_ name: String) -> URL? { environment["STREAMCACHE_ENDPOINT_\(name)"].flatMap { URL(string: $0) } }
            if let value = url("YANDEX") { endpoints.yandex = value }
            if let value = url("DROPBOX_API") { endpoints.dropboxAPI = value }
            if let value = url("DROPBOX_CONTENT") { endpoints.dropboxContent = value }
            if let value = url("GDRIVE") { endpoints.googleDrive = value }
            if let value = url("ONEDRIVE") { endpoints.microsoftGraph = value }
            if let value = url("BOX") { endpoints.box = value }
            for service in endpoints.tokens.keys {
                if let value = url("TOKEN_\(service.uppercased())") { endpoints.tokens[service] = value }
            }
            for service in endpoints.authorizations.keys {
                if let value = url("AUTHORIZE_\(service.uppercased())") { endpoints.authorizations[service] = value }
            }
            return endpoints
        }
    }

    /// The HTTP client for API calls and downloads.
    public var transport: any HTTPTransport
    /// API base URLs.
    public var endpoints: Endpoints
    /// Where origins log (never a secret).
    public var logger: Logger
    /// How long a download link's word on a file's version holds, for the services whose
    /// downloads do not tell the version (Yandex.Disk, OneDrive, and Google Drive for a user who
    /// may not read the file's revisions): the first download after it asks the service's API
    /// again (one metadata call, once per this time per file while it downloads), so a file
    /// replaced there by one of the same length is never joined to the cached bytes of the old
    /// one for longer. Dropbox's downloads tell their version, WebDAV's answers carry an `ETag`,
    /// and Box's and Drive's links name the version they serve: they need no extra call.
    public var linkVersionLifetime: Duration = .seconds(60)

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - transport: The HTTP client: `URLSessionTransport.shared` (module
    ///     `StreamCacheURLSession`) in an app, `AsyncHTTPClientTransport.shared`
    ///     (`StreamCacheHTTPClient`) in a server.
    ///   - endpoints: API base URLs; the services' real ones by default.
    ///   - logger: Where origins log (never a secret).
    public init(transport: any HTTPTransport, endpoints: Endpoints = Endpoints(),
                logger: Logger = Logger(label: "streamcache.sources", factory: { _ in SwiftLogNoOpLogHandler() })) {
        self.transport = transport
        self.endpoints = endpoints
        self.logger = logger
    }

    /// A locator that resolves `resolve`'s links as ``linkVersionLifetime`` and their failures ask.
    func resolvingLocator(_ logDescription: String, initial: DownloadTarget? = nil,
                          resolve: @escaping @Sendable () async throws -> DownloadTarget) -> ResolvingLocator {
        ResolvingLocator(logDescription: logDescription, initial: initial, versionLifetime: linkVersionLifetime, resolve: resolve)
    }

    func origin(_ locator: any DownloadLocator, credentials: (any CredentialProvider)?) -> HTTPOrigin {
        HTTPOrigin(locator: locator, credentials: credentials, transport: transport, logger: logger)
    }
}

/// The secrets a source needs: a token provider for cloud services, a user and password for
/// WebDAV. They stay in memory; sources never write them anywhere.
public struct SourceCredentials: Sendable {
    /// The access token source (cloud services).
    public var token: (any TokenProvider)?
    /// The WebDAV user, when the reference does not name one.
    public var user: String?
    /// The WebDAV password.
    public var password: String?

    /// Creates credentials.
    public init(token: (any TokenProvider)? = nil, user: String? = nil, password: String? = nil) {
        self.token = token
        self.user = user
        self.password = password
    }

    /// Credentials with a static token.
    public init(token: String) { self.init(token: StaticToken(token)) }

    func requireToken(for service: String) throws -> any TokenProvider {
        guard let token else {
            throw StreamCacheError(.invalidArgument, "\(service) needs an access token: pass --token-env NAME, or put one in the credentials file.")
        }
        return token
    }
}
