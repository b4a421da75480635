import Foundation
import StreamCache
import StreamCacheTestSupport
import Testing

/// `streamcache auth SERVICE`, run as a user runs it, with the test as the user's browser: the
/// command prints the service's sign-in page, the "browser" opens it and follows its redirect back
/// to the command's loopback address, and the command exchanges the code at the token endpoint and
/// keeps the tokens in the credentials file, from which `ls` then reads and refreshes them.
@Suite(.serialized) struct SignInCommandTests {
    static let services = ["yandex", "dropbox", "gdrive", "onedrive", "box"]
    /// The client secret the token endpoint wants from Google's and Box's apps.
    static let clientSecret = "app-secret-41c9"

    /// The variables that point every endpoint of every service at the test server.
    static func variables(_ environment: CloudTestEnvironment) -> [String: String] {
        var variables = environment.endpointVariables
        variables["APP_SECRET"] = clientSecret
        for service in services {
            variables["STREAMCACHE_ENDPOINT_AUTHORIZE_\(service.uppercased())"] = environment.server.url(.api, "/oauth/authorize").absoluteString
        }
        return variables
    }

    /// A running `streamcache auth`, the sign-in page it printed, and where its stderr goes.
    struct SignIn {
        let process: ChildProcess
        let page: URL
        let stderr: URL

        var errors: String { (try? String(contentsOf: stderr, encoding: .utf8)) ?? "" }

        /// Waits (at most 30 s) for the command to end; its exit status.
        func status() async throws -> Int32 {
            try await process.exit(within: 30)
            return process.terminationStatus
        }
    }

    /// Starts `streamcache auth` with `arguments`; returns once it printed the sign-in page. A
    /// command a failed test leaves behind gives up after a minute (unless `--timeout` is given).
    static func start(_ arguments: [String], variables: [String: String], in work: URL, stdin: FileHandle? = nil) async throws -> SignIn {
        let arguments = arguments.contains("--timeout") ? arguments : arguments + ["--timeout", "60s"]
        let out = work.appendingPathComponent("auth-stdout-\(UUID().uuidString)")
        let err = work.appendingPathComponent("auth-stderr-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        let process = try CommandLineTool.start(["auth"] + arguments, stdin: stdin, stdout: try FileHandle(forWritingTo: out),
                                                stderr: try FileHandle(forWritingTo: err), environment: variables)
        for _ in 0..<300 {
            let text = (try? String(contentsOf: out, encoding: .utf8)) ?? ""
            if text.hasSuffix("\n"), let page = URL(string: String(text.dropLast())) { return SignIn(process: process, page: page, stderr: err) }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.signal(SIGKILL)
        process.waitUntilExit()
        let errors = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        throw StreamCacheError(.invalidArgument, "auth printed no sign-in page (exit \(process.terminationStatus)): \(errors)")
    }

    /// What a browser does: opens `page`, and follows its redirect back to the command. The answer
    /// of the address it was sent back to.
    static func browse(_ page: URL) async throws -> Curl.Result {
        let signIn = try await Curl.fetch(page)
        #expect(signIn.status == 302, "the sign-in page answered \(signIn.status)")
        let location = try #require(signIn.headers["location"].flatMap(URL.init(string:)), "no redirect: \(signIn.headers)")
        return try await Curl.fetch(location)
    }

    static func writeCredentials(_ text: String, to file: URL) throws {
        try Data(text.utf8).write(to: file)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
    }

    static func mode(_ path: String) throws -> Int {
        try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
    }

    /// A sign-in to each service keeps a refresh token that `ls` then uses: after the access token
    /// expires, `ls` refreshes it once with what the sign-in kept (the client secret for Google
    /// and Box, the scope for Microsoft) and lists the folder. The sign-in page was asked for what
    /// the service needs to grant a refresh token, with a PKCE challenge where the service takes
    /// one, and the file (and its new directory) are the owner's alone.
    @Test(arguments: services)
    func aSignInKeepsTokensThatLaterCommandsRefreshAndUse(service: String) async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                server.setFile("/Music/a.mp3", data: TestData.random(count: 1_000, seed: 91))
                let needsSecret = ["gdrive", "box"].contains(service)
                if needsSecret { server.requireClientSecret(Self.clientSecret) }
                if service == "onedrive" { server.requireScope("Files.Read offline_access") }
                let credentials = work.appendingPathComponent("config/streamcache/credentials.json")
                let variables = Self.variables(environment)
                let signIn = try await Self.start([service, "--client-id", server.clientID, "--credentials-file", credentials.path]
                                                  + (needsSecret ? ["--client-secret-env", "APP_SECRET"] : []), variables: variables, in: work)
                let page = try await Self.browse(signIn.page)
                #expect(page.status == 200 && page.text.contains("Signed in to \(service)"), "\(page.status): \(page.text)")
                #expect(try await signIn.status() == 0, "\(signIn.errors)")

                let asked = try #require(server.signIns.first)
                #expect(server.signIns.count == 1)
                #expect(asked["redirect_uri"]?.hasPrefix("http://127.0.0.1:") == true, "\(asked)")
                #expect((asked["state"]?.count ?? 0) >= 22, "\(asked)")
                #expect((asked["code_challenge"] != nil) == (service != "box"), "PKCE: \(asked)")
                switch service {
                case "dropbox": #expect(asked["token_access_type"] == "offline", "\(asked)")
                case "gdrive":
                    #expect(asked["access_type"] == "offline" && asked["prompt"] == "consent", "\(asked)")
                    #expect(asked["scope"] == "https://www.googleapis.com/auth/drive.readonly", "\(asked)")
                case "onedrive": #expect(asked["scope"] == "Files.Read offline_access", "\(asked)")
                default: #expect(asked["scope"] == nil, "\(asked)")
                }
                #expect(server.codeGrants == 1)
                // Microsoft's endpoint takes the scope with the code too (optional there, and the
                // same the refresh sends).
                #expect(server.codeExchanges.first?["scope"] == (service == "onedrive" ? "Files.Read offline_access" : nil))

                #expect(try Self.mode(credentials.path) == 0o600)
                #expect(try Self.mode(credentials.deletingLastPathComponent().path) == 0o700)
                let document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: credentials)) as? [String: [String: String]])
                let entry = try #require(document[service], "\(document.keys)")
                #expect(entry["client_id"] == server.clientID)
                #expect(entry["refresh_token"] == server.refreshToken)
                #expect(entry["client_secret"] == (needsSecret ? Self.clientSecret : nil))
                #expect(entry["scope"] == (service == "onedrive" ? "Files.Read offline_access" : nil))

                server.expireTokens(afterBytes: 0)
                let listed = try await CommandLineTool.run(["ls", CloudTestEnvironment.folderReference(service), "--credentials-file", credentials.path], timeout: 60, environment: variables)
                #expect(listed.status == 0, "\(listed.stderr)")
                #expect(listed.output.hasPrefix("a.mp3\t1000\t"), "\(listed.output)")
                #expect(server.tokenGrants == 1, "the kept refresh token was not used once")
            }
        }
    }

    /// Answers that do not carry the sign-in's `state` (a stale tab, a page elsewhere that sends the
    /// browser to the address with a code of its choosing) get a 400 and are never exchanged; the
    /// command waits on for its own, which it exchanges once. Other paths are not found, and the
    /// path of a `--redirect-uri` is the one listened on.
    @Test func answersWithoutTheSignInsStateAreIgnored() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                let credentials = work.appendingPathComponent("credentials.json")
                let signIn = try await Self.start(["dropbox", "--client-id", server.clientID, "--credentials-file", credentials.path,
                                                   "--redirect-uri", "http://localhost/streamcache/callback"],
                                                  variables: Self.variables(environment), in: work)
                let redirect = try #require(URLComponents(url: signIn.page, resolvingAgainstBaseURL: false)?.queryItems?.first { $0.name == "redirect_uri" }?.value)
                #expect(redirect.hasPrefix("http://localhost:") && redirect.hasSuffix("/streamcache/callback"), "\(redirect)")
                let port = try #require(URL(string: redirect)?.port)
                let base = "http://127.0.0.1:\(port)/streamcache/callback"
                for query in ["?code=chosen-by-another&state=guessed", "?code=chosen-by-another", "?error=access_denied&state=guessed"] {
                    let answer = try await Curl.fetch(URL(string: base + query)!)
                    #expect(answer.status == 400, "\(query): \(answer.status)")
                }
                #expect(try await Curl.fetch(URL(string: "http://127.0.0.1:\(port)/favicon.ico")!).status == 404)
                #expect(signIn.process.isRunning, "a foreign answer ended the sign-in: \(signIn.errors)")
                #expect(!FileManager.default.fileExists(atPath: credentials.path))

                let page = try await Self.browse(signIn.page)
                #expect(page.status == 200, "\(page.text)")
                #expect(try await signIn.status() == 0, "\(signIn.errors)")
                #expect(server.codeGrants == 1)
                #expect(server.records.filter { $0.path == "/oauth/token" }.count == 1, "a foreign code went to the token endpoint")
                let entry = try #require((try JSONSerialization.jsonObject(with: Data(contentsOf: credentials)) as? [String: [String: String]])?["dropbox"])
                #expect(entry["refresh_token"] == server.refreshToken)
            }
        }
    }

    /// A browser on another machine (the command runs over SSH) ends on the loopback address,
    /// which does not load there; the user pastes that address into the command, which takes it
    /// as the browser's answer. A line that is not such an address, or one without the sign-in's
    /// state, is refused on stderr and the command waits on.
    @Test func theAddressABrowserElsewhereEndedOnCanBePasted() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                let credentials = work.appendingPathComponent("credentials.json")
                let input = Pipe()
                let signIn = try await Self.start(["dropbox", "--client-id", server.clientID, "--credentials-file", credentials.path],
                                                  variables: Self.variables(environment), in: work, stdin: input.fileHandleForReading)
                let signInPage = try await Curl.fetch(signIn.page)
                let endedOn = try #require(signInPage.headers["location"], "\(signInPage.headers)")
                let foreign = endedOn.replacingOccurrences(of: "state=", with: "state=x")
                input.fileHandleForWriting.write(Data("not an address\n\(foreign)\n".utf8))
                try await waitWhile(tries: 100, every: .milliseconds(50)) { !signIn.errors.contains("not for the sign-in") }
                #expect(signIn.errors.contains("not the address the browser ended on"), "\(signIn.errors)")
                #expect(signIn.errors.contains("not for the sign-in"), "\(signIn.errors)")
                #expect(signIn.process.isRunning)
                input.fileHandleForWriting.write(Data("  \(endedOn)  \n".utf8))
                #expect(try await signIn.status() == 0, "\(signIn.errors)")
                #expect(server.codeGrants == 1)
                let entry = try #require((try JSONSerialization.jsonObject(with: Data(contentsOf: credentials)) as? [String: [String: String]])?["dropbox"])
                #expect(entry["refresh_token"] == server.refreshToken)
            }
        }
    }

    /// A user who denies access: the browser is told, the command exits 4 naming the service's
    /// error, and the credentials file is byte for byte what it was.
    @Test func aDeniedSignInExitsWithFourAndChangesNothing() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                server.refuseSignIns(with: "access_denied")
                let credentials = work.appendingPathComponent("credentials.json")
                let before = "{\"dropbox\": {\"token\": \"kept-token\"}}\n"
                try Self.writeCredentials(before, to: credentials)
                let signIn = try await Self.start(["dropbox", "--client-id", server.clientID, "--credentials-file", credentials.path],
                                                  variables: Self.variables(environment), in: work)
                let page = try await Self.browse(signIn.page)
                #expect(page.status == 403 && page.text.contains("access_denied"), "\(page.status): \(page.text)")
                #expect(try await signIn.status() == 4)
                #expect(signIn.errors.contains("did not grant access (access_denied)"), "\(signIn.errors)")
                #expect(try String(contentsOf: credentials, encoding: .utf8) == before)
                #expect(server.codeGrants == 0)
                #expect(server.records.allSatisfy { $0.path != "/oauth/token" })
            }
        }
    }

    /// A code the token endpoint refuses (here: the app's secret is wrong) ends the sign-in with
    /// exit 4 and the endpoint's error code, on the page and on stderr; no file is written. The
    /// secret and the code appear in neither.
    @Test func aCodeTheTokenEndpointRefusesEndsTheSignInAndWritesNothing() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                server.requireClientSecret("another-secret")
                let credentials = work.appendingPathComponent("credentials.json")
                let signIn = try await Self.start(["box", "--client-id", server.clientID, "--credentials-file", credentials.path, "--client-secret-env", "APP_SECRET"],
                                                  variables: Self.variables(environment), in: work)
                let page = try await Self.browse(signIn.page)
                #expect(page.status == 502 && page.text.contains("invalid_grant"), "\(page.status): \(page.text)")
                #expect(try await signIn.status() == 4)
                #expect(signIn.errors.contains("refused the sign-in's code (HTTP 400, invalid_grant)"), "\(signIn.errors)")
                #expect(!FileManager.default.fileExists(atPath: credentials.path))
                for text in [page.text, signIn.errors] {
                    #expect(!text.contains(Self.clientSecret) && !text.contains("code-"), "\(text)")
                }
            }
        }
    }

    /// A sign-in replaces its service's entry (nothing of the old one is left) and keeps every
    /// other entry, WebDAV passwords included, as they were.
    @Test func aSignInReplacesItsEntryAndKeepsTheOthers() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let server = environment.server
                let credentials = work.appendingPathComponent("credentials.json")
                try Self.writeCredentials("""
                    {"yandex": {"token": "y0-kept"}, "onedrive": {"token": "old", "refresh_token": "old-refresh", "client_id": "old-app"},
                     "webdav": {"me@nas.local": {"password": "kept-password"}}}
                    """, to: credentials)
                let signIn = try await Self.start(["onedrive", "--client-id", server.clientID, "--credentials-file", credentials.path],
                                                  variables: Self.variables(environment), in: work)
                #expect(try await Self.browse(signIn.page).status == 200)
                #expect(try await signIn.status() == 0, "\(signIn.errors)")
                let document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: credentials)) as? [String: Any])
                #expect((document["yandex"] as? [String: String]) == ["token": "y0-kept"])
                #expect((document["webdav"] as? [String: [String: String]]) == ["me@nas.local": ["password": "kept-password"]])
                let entry = try #require(document["onedrive"] as? [String: String])
                #expect(Set(entry.keys) == ["client_id", "refresh_token", "token", "scope"], "\(entry.keys)")
                #expect(entry["client_id"] == server.clientID && entry["refresh_token"] == server.refreshToken)
                #expect(try Self.mode(credentials.path) == 0o600)
            }
        }
    }

    /// No browser comes back: the command gives up after `--timeout`, exits 4 and writes nothing.
    /// Arguments it cannot use are refused (exit 64) before it listens or prints a page.
    @Test func noAnswerTimesOutAndBadArgumentsAreRefused() async throws {
        try await withTemporaryDirectory { work in
            try await CloudTestEnvironment.with { environment in
                let credentials = work.appendingPathComponent("credentials.json")
                let variables = Self.variables(environment)
                let signIn = try await Self.start(["yandex", "--client-id", environment.server.clientID, "--credentials-file", credentials.path,
                                                   "--timeout", "1s"], variables: variables, in: work)
                #expect(try await signIn.status() == 4)
                #expect(signIn.errors.contains("No answer came back"), "\(signIn.errors)")
                #expect(!FileManager.default.fileExists(atPath: credentials.path))

                let refusals: [([String], String)] = [
                    (["gdrive", "--client-id", "app"], "--client-secret-env"),
                    (["dropbox", "--client-id", "app", "--redirect-uri", "http://example.com:8080/"], "127.0.0.1, localhost or [::1]"),
                    (["dropbox", "--client-id", "app", "--redirect-uri", "https://127.0.0.1/"], "http URL on a loopback host"),
                    (["icloud", "--client-id", "app"], "not a service that signs in"),
                    (["box", "--client-id", "app", "--client-secret-env", "UNSET_SECRET_VARIABLE"], "UNSET_SECRET_VARIABLE is not set"),
                ]
                for (arguments, message) in refusals {
                    let result = try await CommandLineTool.run(["auth"] + arguments + ["--credentials-file", credentials.path], timeout: 30, environment: variables)
                    #expect(result.status == 64 && result.stderr.contains(message), "\(arguments): \(result.status) \(result.stderr)")
                    #expect(result.output.isEmpty, "\(arguments) printed a sign-in page")
                }
                #expect(environment.server.signIns.isEmpty)
            }
        }
    }
}
