#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import StreamCache

/// An OAuth 2.0 access token renewed with the refresh-token grant (RFC 6749 §6) when the service
/// rejects it.
///
/// Refreshes are single-flight: however many requests fail with the same token at once, one
/// refresh runs and all of them retry with its result. A token this provider obtained less than
/// ``minimumTokenAge`` ago is not refreshed again when it is rejected: a service that refuses a
/// token minutes younger than any lifetime it grants refuses it for another reason (a revoked
/// grant, a file the account may not read), and every read would otherwise cost a call to the
/// token endpoint, which services rate-limit too.
///
/// Tokens are kept in memory, except a refresh token the service rotates (Box, Microsoft): that
/// one goes to the ``RefreshTokenStore`` given, if any. When the endpoint refuses the refresh
/// token held, and the store holds another (kept by another process since this one read it), the
/// refresh is tried once more with that one.
public actor OAuthRefreshingToken: TokenProvider {
    /// A service's token endpoint.
    public struct Endpoint: Sendable, Hashable {
        /// The token URL.
        public var url: URL

        /// Creates an endpoint.
        public init(url: URL) { self.url = url }

        /// Yandex OAuth.
        public static let yandex = Endpoint(url: URL(string: "https://oauth.yandex.ru/token")!)
        /// Dropbox.
        public static let dropbox = Endpoint(url: URL(string: "https://api.dropboxapi.com/oauth2/token")!)
        /// Google.
        public static let google = Endpoint(url: URL(string: "https://oauth2.googleapis.com/token")!)
        /// Microsoft identity platform (personal and work accounts).
        public static let microsoft = Endpoint(url: URL(string: "https://login.microsoftonline.com/common/oauth2/v2.0/token")!)
        /// Box.
        public static let box = Endpoint(url: URL(string: "https://api.box.com/oauth2/token")!)
    }

    private let endpoint: Endpoint
    private let clientID: String
    private let clientSecret: String?
    private let scope: String?
    private var refreshToken: String
    private var current: String?
    private var refreshing: Task<String, any Error>?
    /// When ``current`` came from the token endpoint (`nil`: given at creation, of unknown age).
    private var obtainedAt: ContinuousClock.Instant?
    private let transport: any HTTPTransport
    private let store: (any RefreshTokenStore)?
    private let logger: Logger
    /// How old a token this provider obtained must be before a rejection refreshes it again
    /// (60 s by default; the services' tokens live an hour or more).
    public let minimumTokenAge: Duration

    /// Creates a provider.
    ///
    /// - Parameters:
    ///   - endpoint: The service's token endpoint.
    ///   - clientID: The app's client id.
    ///   - clientSecret: The app's client secret, for confidential clients.
    ///   - refreshToken: The user's refresh token.
    ///   - accessToken: An access token already held, if any; otherwise the first use refreshes.
    ///   - transport: The HTTP client.
    ///   - minimumTokenAge: How old a token obtained here must be before its rejection refreshes it again.
    ///   - scope: The `scope` sent with each refresh, for an endpoint that wants one (Microsoft's
    ///     can refuse a refresh without it: `Files.Read offline_access`); `nil` sends none, and
    ///     the service grants the scopes of the original sign-in.
    ///   - store: Where a rotated refresh token is kept, and where another process's is found.
    ///   - logger: Where a refresh token that could not be kept is reported (never the token).
    public init(endpoint: Endpoint, clientID: String, clientSecret: String? = nil, refreshToken: String, accessToken: String? = nil,
                transport: any HTTPTransport, minimumTokenAge: Duration = .seconds(60), scope: String? = nil, store: (any RefreshTokenStore)? = nil,
                logger: Logger = Logger(label: "streamcache.sources", factory: { _ in SwiftLogNoOpLogHandler() })) {
        self.scope = scope
        self.store = store
        self.logger = logger
        self.minimumTokenAge = minimumTokenAge
        self.endpoint = endpoint
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.refreshToken = refreshToken
        self.current = accessToken
        self.transport = transport
    }

    public func accessToken() async throws -> String {
        if let current { return current }
        return try await runRefresh()
    }

    public func refresh(rejected: String) async throws -> String? {
        // Someone else already replaced the rejected token: use theirs.
        if let current, current != rejected { return current }
        if current != nil, let obtainedAt, ContinuousClock.now - obtainedAt < minimumTokenAge { return nil }
        return try await runRefresh()
    }

    private func runRefresh() async throws -> String {
        let task: Task<String, any Error>
        if let refreshing {
            task = refreshing
        } else {
            task = Task { try await self.requestToken() }
            refreshing = task
        }
        // Every waiter stores the result, so none of them can read the old token after the await.
        defer { if refreshing == task { refreshing = nil } }
        let token = try await task.value
        if token != current { obtainedAt = .now }
        current = token
        return token
    }

    private func requestToken() async throws -> String {
        do {
            return try await grant(using: refreshToken)
        } catch let refusal as StreamCacheError where refusal.code == .authenticationFailed {
            // Another process may have used the token this one holds, and kept the one it got.
            guard let store, let stored = try? await store.storedRefreshToken(), stored != refreshToken else { throw refusal }
            refreshToken = stored
            return try await grant(using: stored)
        }
    }

    /// One refresh-token grant with `token`; keeps the refresh token that comes back in its place.
    private func grant(using token: String) async throws -> String {
        var form = [("grant_type", "refresh_token"), ("refresh_token", token), ("client_id", clientID)]
        if let clientSecret { form.append(("client_secret", clientSecret)) }
        if let scope { form.append(("scope", scope)) }
        let decoded = try await TokenEndpoint.post(form, to: endpoint.url, transport: transport)
            .grant(refusing: "to refresh the access token", at: endpoint.url, advice: "sign in again")
        if let rotated = decoded.refresh_token, rotated != token {
            refreshToken = rotated
            do {
                try await store?.keep(refreshToken: rotated, accessToken: decoded.access_token)
            } catch {
                // The access token works; only the next process's first refresh will fail.
                logger.warning("could not keep the refresh token the service rotated; the next run may have to sign in again",
                               metadata: ["endpoint": "\(endpoint.url.redactedDescription)", "error": "\(error)"])
            }
        }
        return decoded.access_token
    }
}
