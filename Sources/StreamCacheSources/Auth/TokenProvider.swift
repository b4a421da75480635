#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Supplies the access token for a cloud service, and a new one when the service rejects it.
///
/// Sources ask for the token before each API call and each download; on a 401 they call
/// ``refresh(rejected:)`` once and retry, mid-stream included, so a token that expires during
/// playback costs one refresh and no cached byte.
///
/// ```swift
/// let token = StaticToken(ProcessInfo.processInfo.environment["YANDEX_TOKEN"] ?? "")
/// let refreshing = OAuthRefreshingToken(endpoint: .yandex, clientID: id, clientSecret: secret, refreshToken: refresh,
///                                       transport: URLSessionTransport.shared)
/// ```
public protocol TokenProvider: Sendable {
    /// The current access token.
    func accessToken() async throws -> String
    /// Gets a new access token after the service rejected `rejected`.
    ///
    /// - Returns: The new token, or `nil` when no refresh is possible (the caller then fails with
    ///   ``StreamCache/StreamCacheError/Code/authenticationFailed``).
    func refresh(rejected: String) async throws -> String?
}

/// A token that never changes (a long-lived OAuth token, an app password).
public struct StaticToken: TokenProvider {
    private let token: String

    /// Creates a provider of `token`.
    public init(_ token: String) { self.token = token }

    public func accessToken() async throws -> String { token }
    public func refresh(rejected: String) async throws -> String? { nil }
}

/// Turns a ``TokenProvider`` into the `Authorization` header an ``StreamCache/HTTPOrigin`` sends:
/// `OAuth <token>` for Yandex, `Bearer <token>` for the others.
public struct TokenCredentials: CredentialProvider {
    /// The token source.
    public let tokens: any TokenProvider
    /// The authorization scheme (`Bearer`, `OAuth`).
    public let scheme: String

    /// Creates credentials that send `scheme token`.
    public init(_ tokens: any TokenProvider, scheme: String = "Bearer") {
        self.tokens = tokens
        self.scheme = scheme
    }

    public func authorizationHeaders() async throws -> HTTPHeaders {
        ["Authorization": "\(scheme) \(try await tokens.accessToken())"]
    }

    public func refresh(rejected: HTTPHeaders, status: Int) async throws -> Bool {
        // A 403 is scope or quota, not expiry (cloud-apis.md, cross-service rules).
        guard status == 401 else { return false }
        let prefix = "\(scheme) "
        let token = rejected["Authorization"].map { $0.hasPrefix(prefix) ? String($0.dropFirst(prefix.count)) : $0 } ?? ""
        return try await tokens.refresh(rejected: token) != nil
    }
}
