import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheServer
import StreamCacheSources

/// Options for commands that take source references (`webdav://…`, `yandex:/…`, …): where the
/// token or password comes from. Secrets are read from the environment or the credentials file,
/// never from the command line, where other users could see them in the process list.
struct SourceOptions: ParsableArguments {
    @Option(name: .customLong("token-env"), help: ArgumentHelp("The environment variable holding the cloud service's access token.", valueName: "name"))
    var tokenEnvironment: String?

    @Option(name: .customLong("password-env"), help: ArgumentHelp("The environment variable holding the WebDAV password.", valueName: "name"))
    var passwordEnvironment: String?

    @Option(help: ArgumentHelp("The WebDAV user, when the reference does not name one (webdav://user@host/…).", valueName: "name"))
    var user: String?

    @Option(name: .customLong("credentials-file"), help: ArgumentHelp("A JSON credentials file (mode 0600).", discussion: "Default: $XDG_CONFIG_HOME/streamcache/credentials.json, else ~/.config/streamcache/credentials.json.", valueName: "file"))
    var credentialsFile: String?

    /// The source a reference names, with its credentials from the environment or the file.
    func source(_ reference: String, transport: any HTTPTransport) throws -> any Source {
        try parser(for: reference, transport: transport)(reference)
    }

    /// Parses `reference` and the references of what its folder holds with one set of
    /// credentials: the files of a folder share one token, refreshed once for all of them (a
    /// service that rotates refresh tokens takes each only once).
    func parser(for reference: String, transport: any HTTPTransport) throws -> @Sendable (String) throws -> any Source {
        try parser(for: reference, transport: transport, access: ControlAPI.SourceAccess())
    }

    /// As ``parser(for:transport:)``, with what `access` gives in place of these options: the
    /// credentials a `get` or `prefetch` beside a server hands it with a reference.
    func parser(for reference: String, transport: any HTTPTransport,
                access: ControlAPI.SourceAccess) throws -> @Sendable (String) throws -> any Source {
        let environment = ProcessInfo.processInfo.environment
        let configuration = SourceConfiguration(transport: transport, endpoints: .fromEnvironment(environment))
        let fileOption = access.credentialsFile ?? credentialsFile
        let file = try CredentialsFile.load(from: fileOption.map { URL(fileURLWithPath: $0) } ?? CredentialsFile.defaultURL(environment: environment))
        var credentials = SourceCredentials(user: access.user ?? user)
        let service = SourceReference.service(of: reference) ?? ""
        if let token = try access.token ?? tokenEnvironment.map(Self.token(from:)) {
            credentials.token = StaticToken(token)
        } else {
            credentials.token = file?.tokenProvider(for: service, configuration: configuration)
        }
        if let password = try access.password ?? passwordEnvironment.map(Self.password(from:)) {
            credentials.password = password
        } else if service == "webdav", let components = URLComponents(string: reference), let host = components.host {
            credentials.password = file?.webDAVPassword(user: components.user ?? credentials.user ?? "", host: host)
        }
        return { [credentials] in try SourceReference.parse($0, credentials: credentials, configuration: configuration) }
    }

    /// What these options hand a server with a reference: the token and password their variables
    /// hold, the user and the credentials file (as an absolute path: the server's directory differs).
    func access() throws -> ControlAPI.SourceAccess {
        ControlAPI.SourceAccess(token: try tokenEnvironment.map(Self.token(from:)), password: try passwordEnvironment.map(Self.password(from:)),
                                user: user, credentialsFile: credentialsFile.map { URL(fileURLWithPath: $0).standardizedFileURL.path })
    }

    private static func token(from variable: String) throws -> String {
        guard let token = ProcessInfo.processInfo.environment[variable], !token.isEmpty else {
            throw ValidationError("The environment variable \(variable) is not set.")
        }
        return token
    }

    private static func password(from variable: String) throws -> String {
        guard let password = ProcessInfo.processInfo.environment[variable] else { throw ValidationError("The environment variable \(variable) is not set.") }
        return password
    }
}
