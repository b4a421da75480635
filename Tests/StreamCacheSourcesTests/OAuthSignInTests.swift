import Foundation
#if canImport(Glibc)
import Glibc
#endif
import StreamCacheTestSupport
import Testing
@testable import StreamCacheSources

/// The sign-in's values, without a server: the PKCE challenge, the sign-in page's query, and what
/// an answer to the redirect address means.
struct OAuthSignInTests {
    /// RFC 7636, Appendix B: the example verifier and its `S256` challenge.
    @Test func theChallengeIsTheVerifiersSHA256InURLSafeBase64() {
        #expect(OAuthSignIn.challenge(for: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    /// Each sign-in has its own state and verifier, long enough not to be guessed: 128 and 256 bits.
    @Test func eachSignInDrawsItsOwnStateAndVerifier() throws {
        let service = try #require(OAuthSignIn.Service.named("dropbox"))
        let signIns = (0..<50).map { _ in OAuthSignIn(service: service, clientID: "app", redirectURI: "http://127.0.0.1:5000/") }
        #expect(Set(signIns.map(\.state)).count == 50)
        #expect(Set(signIns.compactMap(\.codeVerifier)).count == 50)
        #expect(signIns.allSatisfy { $0.state.count == 22 && $0.codeVerifier?.count == 43 })
        #expect(OAuthSignIn(service: try #require(OAuthSignIn.Service.named("box")), clientID: "app", redirectURI: "http://127.0.0.1:5000/").codeVerifier == nil)
    }

    /// The sign-in page's query: the real endpoint, every value encoded (a redirect address with
    /// its own query, a scope with a space), and Google's refresh-token parameters.
    @Test func theSignInPageAsksForACodeWithTheChallenge() throws {
        let service = try #require(OAuthSignIn.Service.named("gdrive"))
        let signIn = OAuthSignIn(service: service, clientID: "id.apps", redirectURI: "http://127.0.0.1:5000/cb?x=1&y=2", state: "s-1", codeVerifier: "v")
        let components = try #require(URLComponents(url: signIn.authorizationURL, resolvingAgainstBaseURL: false))
        #expect(components.host == "accounts.google.com" && components.path == "/o/oauth2/v2/auth")
        let query = Dictionary(uniqueKeysWithValues: (components.queryItems ?? []).map { ($0.name, $0.value ?? "") })
        #expect(query == ["response_type": "code", "client_id": "id.apps", "redirect_uri": "http://127.0.0.1:5000/cb?x=1&y=2", "state": "s-1",
                          "scope": "https://www.googleapis.com/auth/drive.readonly", "code_challenge": OAuthSignIn.challenge(for: "v"),
                          "code_challenge_method": "S256", "access_type": "offline", "prompt": "consent"])
    }

    /// Only an answer with the sign-in's state counts; with it, a code is a code, and its absence a
    /// refusal with the service's error.
    @Test func anAnswerCountsOnlyWithTheSignInsState() throws {
        let signIn = OAuthSignIn(service: try #require(OAuthSignIn.Service.named("yandex")), clientID: "app", redirectURI: "http://127.0.0.1:1/",
                                 state: "expected-state", codeVerifier: nil)
        #expect(signIn.answer(toRedirectQuery: ["code": "c", "state": "expected-state"]) == .code("c"))
        #expect(signIn.answer(toRedirectQuery: ["code": "c", "state": "expected-statf"]) == .foreign)
        #expect(signIn.answer(toRedirectQuery: ["code": "c"]) == .foreign)
        #expect(signIn.answer(toRedirectQuery: ["error": "access_denied", "state": "expected-state"]) == .refused(error: "access_denied"))
        #expect(signIn.answer(toRedirectQuery: ["code": "", "state": "expected-state"]) == .refused(error: "no code"))
        #expect(OAuthSignIn.Service.named("icloud") == nil)
    }

    /// Keeping a sign-in's tokens waits while another process holds the lock on the credentials
    /// file's directory (a refresh writing a rotated token), then writes its entry beside the
    /// others: two writers at once must not lose one's change.
    @Test func keepingTokensWaitsForAnotherWritersLock() async throws {
        try await withTemporaryDirectory { root in
            let file = root.appendingPathComponent("credentials.json")
            let before = Data(#"{"yandex": {"token": "kept"}}"#.utf8)
            try before.write(to: file)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
            let directory = open(root.path, O_RDONLY)
            #expect(directory >= 0 && flock(directory, LOCK_EX) == 0)
            let signIn = OAuthSignIn(service: try #require(.named("dropbox")), clientID: "app", redirectURI: "http://127.0.0.1:53682/")
            let keeping = Task {
                try await CredentialsFile.keep(OAuthSignIn.Tokens(accessToken: "access", refreshToken: "refresh"), of: signIn, clientSecret: nil, at: file)
            }
            try await Task.sleep(for: .milliseconds(300))
            #expect(try Data(contentsOf: file) == before, "written while another process held the lock")
            flock(directory, LOCK_UN)
            close(directory)
            try await keeping.value
            let kept = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: [String: String]])
            #expect(kept["yandex"] == ["token": "kept"])
            #expect(kept["dropbox"]?["refresh_token"] == "refresh")
        }
    }
}
