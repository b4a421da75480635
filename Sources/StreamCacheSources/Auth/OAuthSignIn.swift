import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A sign-in to a cloud service with the OAuth 2.0 authorization code grant (RFC 6749 §4.1), as a
/// program on the user's own machine does it (RFC 8252): the user's browser opens the service's
/// sign-in page, which sends it back to a loopback address with a one-time code; the code is
/// exchanged for an access token and a refresh token, which ``CredentialsFile`` keeps for
/// ``OAuthRefreshingToken``.
///
/// Two values tie the flow to this sign-in. `state` ties the browser's answer to it: a page
/// elsewhere cannot make the user's browser deliver a code of its choosing (RFC 6749 §10.12).
/// PKCE (RFC 7636, `S256`) ties the code to it: a code that another program on the machine reads
/// off the redirect is worth nothing without the verifier, which never leaves this process.
///
/// ```swift
/// let signIn = OAuthSignIn(service: .named("dropbox")!, clientID: appKey, redirectURI: "http://127.0.0.1:53682/")
/// // Open signIn.authorizationURL in a browser; on the redirect to 127.0.0.1:53682:
/// if case .code(let code) = signIn.answer(toRedirectQuery: query) {
///     let tokens = try await signIn.exchange(code: code, clientSecret: nil, transport: transport)
/// }
/// ```
public struct OAuthSignIn: Sendable {
    /// What a service's sign-in asks for, and where.
    public struct Service: Sendable, Hashable {
        /// The service's name in references and the credentials file (`dropbox`).
        public var name: String
        /// The sign-in page.
        public var authorizationURL: URL
        /// The token endpoint.
        public var tokenURL: URL
        /// The permissions asked for, where the service wants them named at sign-in; `nil` for
        /// services whose app registration fixes them (Yandex, Dropbox, Box).
        public var scope: String?
        /// Further query parameters of the sign-in page: those that make the service grant a
        /// refresh token (`token_access_type=offline` for Dropbox, `access_type=offline` for Google).
        public var parameters: [String: String]
        /// Whether the service takes a PKCE challenge (Box documents none).
        public var usesPKCE: Bool
        /// Whether the token endpoint wants the app's client secret with the code (Google and Box
        /// do, even for apps on the user's machine).
        public var needsClientSecret: Bool
        /// Whether each refresh sends ``scope`` again (Microsoft's endpoint can refuse one without
        /// it), so it is kept in the credentials file.
        public var refreshesWithScope: Bool

        /// Creates a service description.
        public init(name: String, authorizationURL: URL, tokenURL: URL, scope: String? = nil, parameters: [String: String] = [:],
                    usesPKCE: Bool = true, needsClientSecret: Bool = false, refreshesWithScope: Bool = false) {
            self.name = name
            self.authorizationURL = authorizationURL
            self.tokenURL = tokenURL
            self.scope = scope
            self.parameters = parameters
            self.usesPKCE = usesPKCE
            self.needsClientSecret = needsClientSecret
            self.refreshesWithScope = refreshesWithScope
        }

        /// The services a sign-in knows, by name.
        public static let names = ["yandex", "dropbox", "gdrive", "onedrive", "box"]

        /// The service called `name` (one of ``names``) at `endpoints` (the real ones by default):
        /// read-only access to the user's files, with a refresh token.
        public static func named(_ name: String, endpoints: SourceConfiguration.Endpoints = .init()) -> Service? {
            guard let authorization = endpoints.authorizations[name], let token = endpoints.tokens[name] else { return nil }
            var service = Service(name: name, authorizationURL: authorization, tokenURL: token)
            switch name {
            case "dropbox":
                service.parameters = ["token_access_type": "offline"]
            case "gdrive":
                service.scope = "https://www.googleapis.com/auth/drive.readonly"
                // `prompt=consent`: Google grants a refresh token only when the user consents,
                // not when an earlier consent is reused.
                service.parameters = ["access_type": "offline", "prompt": "consent"]
                service.needsClientSecret = true
            case "onedrive":
                service.scope = "Files.Read offline_access"
                service.parameters = ["response_mode": "query"]
                service.refreshesWithScope = true
            case "box":
                service.usesPKCE = false
                service.needsClientSecret = true
            case "yandex":
                break
            default:
                return nil
            }
            return service
        }
    }

    /// What came back to the redirect address.
    public enum RedirectAnswer: Sendable, Equatable {
        /// The user allowed access: the code to exchange.
        case code(String)
        /// The user (or the service) refused: the RFC 6749 §4.1.2.1 error code, such as `access_denied`.
        case refused(error: String)
        /// An answer without this sign-in's `state`: not for this sign-in, and ignored.
        case foreign
    }

    /// What the token endpoint granted.
    public struct Tokens: Sendable {
        /// The access token.
        public var accessToken: String
        /// The refresh token; `nil` when the service granted none.
        public var refreshToken: String?
    }

    /// The service.
    public let service: Service
    /// The app's client id.
    public let clientID: String
    /// The loopback address the service sends the browser back to, exactly as registered with the
    /// app where the service wants that (Dropbox, Box, Yandex), such as `http://127.0.0.1:53682/`.
    public let redirectURI: String
    /// The random value the answer must carry back.
    let state: String
    /// The PKCE code verifier (RFC 7636 §4.1); `nil` for a service without PKCE.
    let codeVerifier: String?

    /// Starts a sign-in with a fresh `state` and code verifier (128 and 256 random bits).
    public init(service: Service, clientID: String, redirectURI: String) {
        self.init(service: service, clientID: clientID, redirectURI: redirectURI, state: SecretToken.make(),
                  codeVerifier: service.usesPKCE ? SecretToken.make(bytes: 32) : nil)
    }

    init(service: Service, clientID: String, redirectURI: String, state: String, codeVerifier: String?) {
        self.service = service
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.state = state
        self.codeVerifier = codeVerifier
    }

    /// The PKCE `S256` challenge: the verifier's SHA-256 in URL-safe base64 without padding.
    static func challenge(for verifier: String) -> String {
        SecretToken.base64URL(SHA256.hash(data: Data(verifier.utf8)))
    }

    /// The sign-in page to open in the user's browser.
    public var authorizationURL: URL {
        var query = [("response_type", "code"), ("client_id", clientID), ("redirect_uri", redirectURI), ("state", state)]
        if let scope = service.scope { query.append(("scope", scope)) }
        if let codeVerifier { query += [("code_challenge", Self.challenge(for: codeVerifier)), ("code_challenge_method", "S256")] }
        query += service.parameters.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let base = service.authorizationURL.absoluteString
        let separator = base.contains("?") ? "&" : "?"
        return URL(string: base + separator + query.map { "\($0.0)=\(FormEncoding.encode($0.1))" }.joined(separator: "&"))!
    }

    /// Reads the query of a request to the redirect address (its names and values decoded).
    public func answer(toRedirectQuery query: [String: String]) -> RedirectAnswer {
        guard let returned = query["state"], SecretToken.matches(returned, state) else { return .foreign }
        if let code = query["code"], !code.isEmpty { return .code(code) }
        return .refused(error: query["error"].flatMap { $0.isEmpty ? nil : $0 } ?? "no code")
    }

    /// Exchanges `code` for tokens at the service's token endpoint.
    ///
    /// - Parameters:
    ///   - code: The code from ``answer(toRedirectQuery:)``.
    ///   - clientSecret: The app's client secret, for a service that wants it (``Service/needsClientSecret``).
    ///   - transport: The HTTP client.
    /// - Throws: ``StreamCache/StreamCacheError`` `authenticationFailed` when the endpoint refuses
    ///   the code (used already, expired, another verifier); the message never quotes the code.
    public func exchange(code: String, clientSecret: String?, transport: any HTTPTransport) async throws -> Tokens {
        var form = [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("client_id", clientID)]
        if let clientSecret { form.append(("client_secret", clientSecret)) }
        if let codeVerifier { form.append(("code_verifier", codeVerifier)) }
        if service.refreshesWithScope, let scope = service.scope { form.append(("scope", scope)) }
        let grant = try await TokenEndpoint.post(form, to: service.tokenURL, transport: transport)
            .grant(refusing: "the sign-in's code", at: service.tokenURL, advice: "sign in again")
        return Tokens(accessToken: grant.access_token, refreshToken: grant.refresh_token)
    }
}
