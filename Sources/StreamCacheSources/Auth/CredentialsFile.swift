#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Credentials kept in a JSON file that only its owner can read (mode 0600), so tokens need not
/// be typed or put in the environment.
///
/// ```json
/// {
///   "yandex":   { "token": "y0_…" },
///   "dropbox":  { "refresh_token": "…", "client_id": "…", "client_secret": "…" },
///   "webdav":   { "me@cloud.example": { "password": "…" } }
/// }
/// ```
///
/// A service entry holds either a `token`, or a `refresh_token` with the app's `client_id` (and
/// `client_secret` for confidential clients, and the `scope` to ask for where the service wants one)
/// for ``OAuthRefreshingToken``. WebDAV entries are
/// keyed by `user@host`. The default location is `$XDG_CONFIG_HOME/streamcache/credentials.json`
/// (`~/.config/streamcache/credentials.json`).
public struct CredentialsFile: Sendable {
    struct Entry: Decodable {
        var token: String?
        var refresh_token: String?
        var client_id: String?
        var client_secret: String?
        var scope: String?
        var password: String?
    }

    /// The file's top level: service entries by name, and WebDAV entries under `webdav`.
    struct Document: Decodable {
        struct UnexpectedEntry: Error {
            let name: String
        }

        struct Name: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        var services: [String: Entry] = [:]
        var webdav: [String: Entry] = [:]

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Name.self)
            for name in container.allKeys {
                if name.stringValue == "webdav", let hosts = try? container.decode([String: Entry].self, forKey: name) {
                    webdav = hosts
                } else if let entry = try? container.decode(Entry.self, forKey: name) {
                    services[name.stringValue] = entry
                } else {
                    throw UnexpectedEntry(name: name.stringValue)
                }
            }
        }
    }

    private let url: URL
    private let services: [String: Entry]
    private let webdav: [String: Entry]

    /// The default path.
    public static func defaultURL(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        if let xdg = environment["XDG_CONFIG_HOME"], !xdg.isEmpty {
            return URL(fileURLWithPath: xdg).appendingPathComponent("streamcache/credentials.json")
        }
        let home = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
        return URL(fileURLWithPath: home).appendingPathComponent(".config/streamcache/credentials.json")
    }

    /// Reads the file at `url`, or returns `nil` when there is none.
    ///
    /// - Throws: ``StreamCache/StreamCacheError`` (`invalidArgument`) when others may read or write
    ///   the file, or it is not valid JSON of the documented shape. The message never quotes it.
    public static func load(from url: URL = defaultURL()) throws -> CredentialsFile? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        var status = stat()
        guard stat(url.path, &status) == 0 else {
            throw StreamCacheError(.invalidArgument, "\(url.path) cannot be read (errno \(errno)).")
        }
        let mode = Int(status.st_mode) & 0o777
        guard mode & 0o077 == 0 else {
            throw StreamCacheError(.invalidArgument, "\(url.path) may be read by other users (mode \(String(mode, radix: 8))); run chmod 600 on it.")
        }
        let data = try Data(contentsOf: url)
        let document: Document
        do {
            document = try JSONDecoder().decode(Document.self, from: data)
        } catch let error as Document.UnexpectedEntry {
            throw StreamCacheError(.invalidArgument, "The \"\(error.name)\" entry of \(url.path) has an unexpected shape.")
        } catch {
            throw StreamCacheError(.invalidArgument, "\(url.path) is not a JSON object.")
        }
        return CredentialsFile(url: url, services: document.services, webdav: document.webdav)
    }

    /// The token provider for `service` (`yandex`, `dropbox`, `gdrive`, `onedrive`, `box`), if the file has one.
    public func tokenProvider(for service: String, configuration: SourceConfiguration) -> (any TokenProvider)? {
        guard let entry = services[service] else { return nil }
        if let refresh = entry.refresh_token, let clientID = entry.client_id, let url = configuration.endpoints.tokens[service] {
            return OAuthRefreshingToken(endpoint: .init(url: url), clientID: clientID, clientSecret: entry.client_secret, refreshToken: refresh,
                                        accessToken: entry.token, transport: configuration.transport, scope: entry.scope,
                                        store: CredentialsFileTokenStore(url: self.url, service: service), logger: configuration.logger)
        }
        return entry.token.map { StaticToken($0) }
    }

    /// Keeps what a sign-in obtained as `signIn`'s service entry in the credentials file at `url`
    /// (created, mode 0600, with its directory, when there is none): the app's client id (and
    /// secret), the refresh token, the access token, and the scope for a service that refreshes
    /// with one. The entry replaces any earlier one of that service; the other entries are kept.
    ///
    /// - Throws: ``StreamCache/StreamCacheError`` `invalidArgument` when the file exists but is
    ///   not a JSON object (it is left as it was) or cannot be written.
    public static func keep(_ tokens: OAuthSignIn.Tokens, of signIn: OAuthSignIn, clientSecret: String?, at url: URL = defaultURL()) async throws {
        var entry: [String: JSONValue] = ["client_id": .string(signIn.clientID), "token": .string(tokens.accessToken)]
        if let refresh = tokens.refreshToken { entry["refresh_token"] = .string(refresh) }
        if let clientSecret { entry["client_secret"] = .string(clientSecret) }
        if signIn.service.refreshesWithScope, let scope = signIn.service.scope { entry["scope"] = .string(scope) }
        try await CredentialsFileEditor.edit(url, creating: true) { document in
            document[signIn.service.name] = .object(entry)
        }
    }

    /// The refresh token of `service`'s entry, if it has one.
    func refreshToken(for service: String) -> String? { services[service]?.refresh_token }

    /// The WebDAV password for `user` at `host`, if the file has one.
    public func webDAVPassword(user: String, host: String) -> String? {
        webdav["\(user)@\(host)"]?.password
    }
}
