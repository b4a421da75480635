/// Supplies authorization headers for an origin and renews them when the origin rejects them.
///
/// ``HTTPOrigin`` asks for headers before each request. On a 401 or 403 it calls
/// ``refresh(rejected:status:)`` once; when that returns `true` it retries the request with fresh
/// headers, mid-stream included, so an access token that expires during playback costs one
/// refresh and no cached byte.
///
/// ```swift
/// struct MyTokens: CredentialProvider {
///     let store: TokenStore
///     func authorizationHeaders() async throws -> HTTPHeaders { ["Authorization": "Bearer \(await store.accessToken)"] }
///     func refresh(rejected: HTTPHeaders, status: Int) async throws -> Bool { try await store.refresh(); return true }
/// }
/// ```
public protocol CredentialProvider: Sendable {
    /// The headers that authorize the next request.
    func authorizationHeaders() async throws -> HTTPHeaders

    /// Renews the credentials after the origin answered `status` (401 or 403) to `rejected`.
    ///
    /// - Returns: `true` when new credentials are available and the request should be retried once.
    func refresh(rejected: HTTPHeaders, status: Int) async throws -> Bool
}

/// Credentials that never change, such as a long-lived token or a password.
public struct StaticCredentials: CredentialProvider {
    private let headers: HTTPHeaders

    /// Creates a provider that always supplies `headers`.
    public init(_ headers: HTTPHeaders) { self.headers = headers }

    public func authorizationHeaders() async throws -> HTTPHeaders { headers }

    public func refresh(rejected: HTTPHeaders, status: Int) async throws -> Bool { false }
}
