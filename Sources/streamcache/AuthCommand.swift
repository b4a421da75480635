import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StreamCache
import StreamCacheHTTPClient
import StreamCacheSources

/// `streamcache auth SERVICE`: sign in to a cloud service in the browser and keep a refresh token
/// in the credentials file, so later commands never ask again.
struct AuthCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "auth",
        abstract: "Sign in to a cloud service in the browser and keep its refresh token in the credentials file.",
        discussion: """
        Prints the service's sign-in page (and opens it in a browser when run in a terminal), waits for the browser to come back \
        to a loopback address with a one-time code, exchanges the code for tokens (PKCE, where the service supports it) and keeps \
        them as the service's entry in the credentials file (mode 0600; the other entries are kept). get, serve, prefetch and ls \
        then refresh the access token by themselves.

        No browser on this machine (over SSH)? Open the page on any other machine; its browser ends on the loopback address, \
        which does not load there: paste that address into the waiting command.

        Register the redirect address with your app: Dropbox, Box and Yandex want it exactly, port included (pass the same \
        --redirect-uri); Google and Microsoft accept any port of a loopback address.

        Examples:
          streamcache auth dropbox --client-id APP_KEY --redirect-uri http://127.0.0.1:53682/
          GOOGLE_SECRET=… streamcache auth gdrive --client-id ID.apps.googleusercontent.com --client-secret-env GOOGLE_SECRET
        """
    )

    @Argument(help: ArgumentHelp("The service: yandex, dropbox, gdrive, onedrive or box.", valueName: "service"))
    var service: String

    @Option(name: .customLong("client-id"), help: ArgumentHelp("Your app's client id (Dropbox: its app key).", valueName: "id"))
    var clientID: String

    @Option(name: .customLong("client-secret-env"),
            help: ArgumentHelp("The environment variable holding your app's client secret (Google and Box need one).", valueName: "name"))
    var clientSecretEnvironment: String?

    @Option(name: .customLong("redirect-uri"),
            help: ArgumentHelp("The loopback address the service sends the browser back to.",
                               discussion: "http://127.0.0.1, http://localhost or http://[::1], with a port and a path. Default: http://127.0.0.1:<a free port>/.",
                               valueName: "uri"))
    var redirectURI: String?

    @Option(name: .customLong("credentials-file"), help: ArgumentHelp("The JSON credentials file to keep the tokens in.", discussion: "Default: $XDG_CONFIG_HOME/streamcache/credentials.json, else ~/.config/streamcache/credentials.json.", valueName: "file"))
    var credentialsFile: String?

    @Option(help: ArgumentHelp("How long to wait for the browser (90s, 15m). Default: 5m.", valueName: "time"), transform: ArgumentParsing.duration)
    var timeout: Duration?

    @Flag(name: .customLong("no-browser"), help: "Only print the sign-in page's address; do not open a browser.")
    var noBrowser = false

    @OptionGroup var transportOptions: TransportOptions

    func validate() throws {
        guard OAuthSignIn.Service.names.contains(service) else {
            throw ValidationError("'\(service.prefix(40))' is not a service that signs in; one of: \(OAuthSignIn.Service.names.joined(separator: ", ")).")
        }
        guard !clientID.isEmpty, HTTPHeaders.isValidFieldValue(clientID) else { throw ValidationError("--client-id is empty or holds a control character.") }
        _ = try LoopbackRedirect(redirectURI ?? LoopbackRedirect.default)
    }

    func run() async throws {
        do {
            let environment = ProcessInfo.processInfo.environment
            let endpoints = SourceConfiguration.Endpoints.fromEnvironment(environment)
            guard let service = OAuthSignIn.Service.named(service, endpoints: endpoints) else { throw ValidationError("Unknown service.") }
            var clientSecret: String?
            if let name = clientSecretEnvironment {
                guard let value = environment[name], !value.isEmpty else { throw ValidationError("The environment variable \(name) is not set.") }
                clientSecret = value
            } else if service.needsClientSecret {
                throw ValidationError("\(service.name)'s token endpoint wants your app's client secret: pass --client-secret-env NAME.")
            }
            let file = credentialsFile.map { URL(fileURLWithPath: $0) } ?? CredentialsFile.defaultURL(environment: environment)
            let transport = try transportOptions.transport(.shared, configuration: AsyncHTTPClientTransport.Configuration())
            try await signIn(service: service, clientSecret: clientSecret, file: file, transport: transport)
        } catch let error as ValidationError {
            throw error
        } catch {
            throw Failure.exit(error)
        }
    }

    private func signIn(service: OAuthSignIn.Service, clientSecret: String?, file: URL, transport: any HTTPTransport) async throws {
        let redirect = try LoopbackRedirect(redirectURI ?? LoopbackRedirect.default)
        // The sign-in needs the address, which needs the port: the handler reads it once bound.
        let current = Locked<OAuthSignIn?>(nil)
        let exchanging = Locked(false)
        let listener = try await RedirectListener.start(host: redirect.bindHost, port: redirect.port, path: redirect.path) { query in
            guard let signIn = current.withLock({ $0 }) else { return (.init(status: .serviceUnavailable, text: "Not ready yet; reload this page."), nil) }
            switch signIn.answer(toRedirectQuery: query) {
            case .foreign:
                return (.init(status: .badRequest, text: "This answer is not for the sign-in streamcache is waiting for; it was ignored."), nil)
            case .refused(let error):
                let reason = Self.printable(error)
                return (.init(status: .forbidden, text: "Access was not granted (\(reason)). Nothing was changed."),
                        .failure(StreamCacheError(.authenticationFailed, "\(service.name) did not grant access (\(reason)); nothing was changed.")))
            case .code(let code):
                guard exchanging.withLock({ busy in defer { busy = true }; return !busy }) else {
                    return (.init(status: .conflict, text: "This sign-in is already being completed."), nil)
                }
                do {
                    let tokens = try await signIn.exchange(code: code, clientSecret: clientSecret, transport: transport)
                    try await CredentialsFile.keep(tokens, of: signIn, clientSecret: clientSecret, at: file)
                    let note = tokens.refreshToken == nil ? " The service granted no refresh token: sign in again when the access token expires." : ""
                    return (.init(status: .ok, text: "Signed in to \(service.name). You can close this tab.\(note)"), .success(()))
                } catch {
                    return (.init(status: .badGateway, text: "The sign-in could not be completed: \(error)"), .failure(error))
                }
            }
        }
        let signIn = OAuthSignIn(service: service, clientID: clientID, redirectURI: redirect.uri(port: listener.port))
        current.withLock { $0 = signIn }
        let page = signIn.authorizationURL.absoluteString
        FileDescriptorOutput.standardError.write("Open this page in a browser and allow access; streamcache waits at \(signIn.redirectURI):\n")
        FileDescriptorOutput.standardOutput.write(page + "\n")
        if !noBrowser, isatty(STDERR_FILENO) == 1 { Self.openInBrowser(page) }
        if isatty(STDIN_FILENO) == 1 {
            FileDescriptorOutput.standardError.write("No browser here (over SSH)? Open the page on any machine, then paste here the address its browser ends on.\n")
        }
        let pasting = Task { await Self.readPastedAnswers(into: listener) }
        defer { pasting.cancel() }
        do {
            try await listener.end(within: timeout ?? .seconds(300))
        } catch {
            await listener.stop()
            throw error
        }
        await listener.stop()
        FileDescriptorOutput.standardError.write("Signed in to \(service.name); its tokens are in \(file.path).\n")
    }

    /// Reads addresses pasted on standard input, a line each, and hands their queries to the
    /// listener: the sign-in of a user whose browser runs on another machine ends on an address
    /// that does not load there, `http://127.0.0.1:PORT/?code=…&state=…`, which they copy here.
    /// Polls rather than blocks, so no thread waits on a terminal nobody types into; ends at the
    /// end of input (`/dev/null`, a closed pipe) or when cancelled.
    private static func readPastedAnswers(into listener: RedirectListener) async {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !Task.isCancelled {
            var descriptor = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 0) > 0 else {
                try? await Task.sleep(for: .milliseconds(100))
                continue
            }
            let count = read(STDIN_FILENO, &buffer, buffer.count)
            if count < 0, errno == EINTR || errno == EAGAIN { continue }
            guard count > 0 else { return }
            pending += buffer[..<count]
            while let newline = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<newline], as: UTF8.self).trimmingWhitespace()
                pending.removeSubrange(...newline)
                guard !line.isEmpty else { continue }
                guard let items = URLComponents(string: String(line))?.queryItems, !items.isEmpty else {
                    FileDescriptorOutput.standardError.write("That is not the address the browser ended on (http://127.0.0.1:…/?code=…&state=…); paste it whole.\n")
                    continue
                }
                let query = Dictionary(items.map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { first, _ in first })
                let (page, ended) = await listener.deliver(pasted: query)
                if !ended { FileDescriptorOutput.standardError.write(page.text + "\n") }
                if ended { return }
            }
        }
    }

    /// An error code from the redirect, shown only as letters, digits, `_`, `-` and `.`: it came
    /// from the query string of whoever called the address.
    private static func printable(_ text: String) -> String {
        let kept = String(text.prefix(60).filter { $0.isASCII && ($0.isLetter || $0.isNumber || "_-. ".contains($0)) })
        return kept.isEmpty ? "no reason given" : kept
    }

    /// Opens `page` with the desktop's opener (`xdg-open`, macOS `open`) and does not wait for it.
    private static func openInBrowser(_ page: String) {
        #if os(macOS)
        let opener = "open"
        #else
        let opener = "xdg-open"
        #endif
        var pid: pid_t = 0
        let arguments: [UnsafeMutablePointer<CChar>?] = [strdup(opener), strdup(page), nil]
        defer { for argument in arguments { free(argument) } }
        _ = posix_spawnp(&pid, opener, nil, nil, arguments, environ)
    }
}

/// The address a sign-in's browser comes back to: an `http` URL on a loopback host, whose port
/// may be left out (any free one).
struct LoopbackRedirect {
    static let `default` = "http://127.0.0.1/"

    /// The host as written in the URL (`127.0.0.1`, `localhost`, `[::1]`).
    let host: String
    /// What the listener binds (`localhost` binds `127.0.0.1`).
    let bindHost: String
    /// The port; 0 when the URL names none.
    let port: Int
    /// The path, `/` at least.
    let path: String

    init(_ text: String) throws {
        guard let components = URLComponents(string: text), components.scheme?.lowercased() == "http",
              let host = components.host?.lowercased(), components.query == nil, components.fragment == nil, components.user == nil else {
            throw ValidationError("--redirect-uri must be an http URL on a loopback host, such as http://127.0.0.1:53682/, without a query.")
        }
        switch host {
        case "127.0.0.1", "localhost": bindHost = "127.0.0.1"
        case "::1", "[::1]": bindHost = "::1"
        default: throw ValidationError("--redirect-uri must name 127.0.0.1, localhost or [::1]: the browser's answer carries a code for this machine only.")
        }
        self.host = host.hasPrefix("::") ? "[\(host)]" : host
        port = components.port ?? 0
        guard (0...65535).contains(port) else { throw ValidationError("--redirect-uri has no valid port.") }
        path = components.path.isEmpty ? "/" : components.path
    }

    /// The URL with the port listened on.
    func uri(port bound: Int) -> String {
        "http://\(host):\(bound)\(path)"
    }
}
