import Foundation
import StreamCache
import StreamCacheHTTPClient
import StreamCacheSources
import StreamCacheTestSupport
import Testing

/// `OAuthRefreshingToken` against the test server's token endpoint. Box answers every refresh
/// with a new refresh token and refuses the one used from then on (Microsoft rotates too); the
/// test server does the same after `rotateRefreshTokens()`: a refresh token used twice gets
/// `invalid_grant`.
@Suite struct OAuthRefreshingTokenTests {
    /// A request sent with the old token whose refusal comes after the refresh has finished gets
    /// the new token, without another refresh (which, a token seconds old, would be refused as
    /// too young and fail the request).
    @Test func aLateRefusalOfTheOldTokenGetsTheNewOne() async throws {
        try await CloudTestEnvironment.with { environment in
            let token = environment.refreshingToken()
            let fresh = try #require(try await token.refresh(rejected: CloudTestEnvironment.accessToken))
            let late = try await token.refresh(rejected: CloudTestEnvironment.accessToken)
            #expect(late == fresh)
            #expect(environment.server.tokenGrants == 1)
        }
    }

    /// A refused refresh is `authenticationFailed` with the endpoint's error code, never with the
    /// rest of its error text, which may quote the refresh token it was sent.
    @Test func aRefusedRefreshNeverQuotesTheTokenTheEndpointEchoes() async throws {
        try await CloudTestEnvironment.with { environment in
            let server = environment.server
            server.echoRequestsInRefusals()
            let secret = "refresh-that-was-revoked-4c1d"
            let token = OAuthRefreshingToken(endpoint: .init(url: server.url(.api, "/oauth/token")), clientID: server.clientID, refreshToken: secret,
                                             accessToken: CloudTestEnvironment.accessToken, transport: AsyncHTTPClientTransport.shared)
            do {
                _ = try await token.refresh(rejected: CloudTestEnvironment.accessToken)
                Issue.record("a refused refresh must throw")
            } catch let error as StreamCacheError {
                #expect(error.code == .authenticationFailed)
                #expect(error.message.contains("HTTP 400"), "\(error.message)")
                #expect(!error.message.contains(secret) && !"\(error)".contains(secret), "\(error)")
            }
            #expect(server.records.contains { $0.path == "/oauth/token" && $0.status == 400 }, "the endpoint refused it")
        }
    }

    /// Two expiries in one process: the second refresh uses the refresh token the first one got.
    @Test func theNextRefreshUsesTheRotatedToken() async throws {
        try await CloudTestEnvironment.with { environment in
            let server = environment.server
            server.setFile("/Music/song.mp3", data: TestData.random(count: 1000, seed: 92))
            server.rotateRefreshTokens()
            let token = environment.refreshingToken(minimumTokenAge: .zero)
            let first = try #require(try await token.refresh(rejected: CloudTestEnvironment.accessToken))
            let second = try #require(try await token.refresh(rejected: first))
            #expect(second != first)
            #expect(server.tokenGrants == 2)
            // The service takes the second token.
            let file = try await environment.source("gdrive", path: "/Music/song.mp3", token: token).resolve()
            #expect(file.size == 1000)
        }
    }

    /// `streamcache get` with a credentials file, run twice, each run with an access token the
    /// service no longer takes: the second refresh works only with the refresh token the first
    /// run got, which the file must hold afterwards. Everything else in the file is kept, and the
    /// file stays readable by its owner only. The path given is a symbolic link to the file (as
    /// dotfile managers keep it), and stays one.
    @Test func aRotatedRefreshTokenOutlivesTheProcess() async throws {
        let data = TestData.random(count: 300_000, seed: 93)
        try await withTemporaryDirectory { root in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
                server.rotateRefreshTokens()
                let credentials = root.appendingPathComponent("credentials.json")
                let target = root.appendingPathComponent("dotfiles/credentials.json")
                try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
                let original = try Self.credentialsFile(at: target, entry: ["token": "expired-token", "refresh_token": server.refreshToken,
                                                                          "client_id": server.clientID])
                try FileManager.default.createSymbolicLink(at: credentials, withDestinationURL: target)
                let endpoints = ["STREAMCACHE_ENDPOINT_BOX": environment.configuration.endpoints.box.absoluteString,
                                 "STREAMCACHE_ENDPOINT_TOKEN_BOX": server.url(.api, "/oauth/token").absoluteString]
                for run in 1...2 {
                    let output = root.appendingPathComponent("song-\(run).mp3")
                    let got = try await CommandLineTool.run(["get", environment.reference("box", path: "/Music/song.mp3"),
                                                             "--credentials-file", credentials.path, "-o", output.path,
                                                             "--cache-dir", root.appendingPathComponent("cache-\(run)").path, "--quiet"],
                                                            environment: endpoints)
                    #expect(got.status == 0, "run \(run): \(got.stderr)")
                    #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data))
                    #expect(server.tokenGrants == run)
                    let kept = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: credentials)) as? [String: Any])
                    let box = try #require(kept["box"] as? [String: String])
                    #expect(box["refresh_token"] == server.refreshToken, "run \(run)")
                    #expect(box["client_id"] == server.clientID)
                    #expect(box["token"] != "expired-token")
                    #expect(kept["yandex"] as? [String: String] == original["yandex"] as? [String: String])
                    #expect(kept["webdav"] as? [String: [String: String]] == original["webdav"] as? [String: [String: String]])
                    let mode = try #require(try FileManager.default.attributesOfItem(atPath: target.path)[.posixPermissions] as? Int)
                    #expect(mode == 0o600)
                    #expect(try FileManager.default.destinationOfSymbolicLink(atPath: credentials.path) == target.path)
                    // The next run begins with an access token the service no longer takes.
                    server.expireTokens(afterBytes: 0)
                }
                #expect(!server.records.contains { $0.path == "/oauth/token" && $0.status != 200 }, "a used refresh token was sent")
            }
        }
    }

    /// Two processes started with the same refresh token: the first to refresh gets a new one
    /// and keeps it in the file; the other's token is then refused, and it refreshes again with
    /// the one in the file rather than failing.
    @Test func aTokenRotatedByAnotherProcessIsTakenFromTheFile() async throws {
        try await withTemporaryDirectory { root in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                server.rotateRefreshTokens()
                let credentials = root.appendingPathComponent("credentials.json")
                try Self.credentialsFile(at: credentials, entry: ["token": CloudTestEnvironment.accessToken, "refresh_token": server.refreshToken,
                                                                "client_id": server.clientID])
                let file = try #require(try CredentialsFile.load(from: credentials))
                let first = try #require(file.tokenProvider(for: "box", configuration: environment.configuration))
                let second = try #require(file.tokenProvider(for: "box", configuration: environment.configuration))
                let fromFirst = try #require(try await first.refresh(rejected: CloudTestEnvironment.accessToken))
                let fromSecond = try #require(try await second.refresh(rejected: CloudTestEnvironment.accessToken))
                #expect(fromFirst != fromSecond)
                #expect(server.tokenGrants == 2)
                #expect(server.records.filter { $0.path == "/oauth/token" }.map(\.status) == [200, 400, 200],
                        "the second process's own token refused, then the file's taken")
                let stored = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: credentials)) as? [String: [String: Any]])
                #expect(stored["box"]?["refresh_token"] as? String == server.refreshToken)
                #expect(stored["box"]?["token"] as? String == fromSecond)
            }
        }
    }

    /// An endpoint that wants a `scope` with each refresh (Microsoft's can) gets the one the
    /// credentials file's entry names; an entry without one is refused there.
    @Test func theEntrysScopeGoesWithTheRefresh() async throws {
        try await withTemporaryDirectory { root in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                server.requireScope("Files.Read offline_access")
                let credentials = root.appendingPathComponent("credentials.json")
                func provider(scope: String?) throws -> any TokenProvider {
                    var entry = ["token": CloudTestEnvironment.accessToken, "refresh_token": server.refreshToken, "client_id": server.clientID]
                    entry["scope"] = scope
                    try Self.credentialsFile(at: credentials, service: "onedrive", entry: entry)
                    return try #require(try CredentialsFile.load(from: credentials)?.tokenProvider(for: "onedrive", configuration: environment.configuration))
                }
                let unscoped = try provider(scope: nil)
                await #expect(throws: StreamCacheError.self) { _ = try await unscoped.refresh(rejected: CloudTestEnvironment.accessToken) }
                let scoped = try provider(scope: "Files.Read offline_access")
                #expect(try await scoped.refresh(rejected: CloudTestEnvironment.accessToken) != nil)
                #expect(server.tokenGrants == 1)
            }
        }
    }

    /// Writes a credentials file (mode 0600) with `entry` for `service` and two other entries;
    /// returns what it holds.
    @discardableResult
    static func credentialsFile(at url: URL, service: String = "box", entry: [String: String]) throws -> [String: Any] {
        let document: [String: Any] = [service: entry, "yandex": ["token": "y0_other-service"],
                                       "webdav": ["me@dav.example": ["password": "dav-secret"]]]
        try JSONSerialization.data(withJSONObject: document).write(to: url)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
        return document
    }
}
