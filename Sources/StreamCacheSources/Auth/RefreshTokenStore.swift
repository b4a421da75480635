/// Where an ``OAuthRefreshingToken`` keeps a refresh token the service rotated, so that the next
/// process, or another one running now, starts from the token the service still accepts.
///
/// Box answers every refresh with a new refresh token and refuses the old one from then on;
/// Microsoft's identity platform issues a new one with every access token too. Kept in memory
/// only, the new token ends with the process, and the next run's refresh is refused: the user
/// would have to sign in again after every run that refreshed. ``CredentialsFile`` keeps it in
/// the file it came from.
public protocol RefreshTokenStore: Sendable {
    /// The refresh token kept now, or `nil` when there is none. Another process may have kept a
    /// newer one than the token this process holds.
    func storedRefreshToken() async throws -> String?

    /// Keeps `refreshToken`, which the service issued with `accessToken` in place of the refresh
    /// token used.
    func keep(refreshToken: String, accessToken: String) async throws
}
