#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Parses the references users write for files in their services into ``Source``s.
///
/// | Reference | Service |
/// |---|---|
/// | `webdav://user@host[:port]/path`, `webdavs://…` | WebDAV over HTTP / HTTPS |
/// | `yandex:/path` | Yandex.Disk |
/// | `dropbox:/path`, `dropbox:id:…` | Dropbox |
/// | `gdrive:<file or folder id>` | Google Drive |
/// | `onedrive:/path`, `onedrive:id:<item id>` | OneDrive |
/// | `box:<file id>`, `box:folder:<folder id>` | Box |
/// | `https://disk.yandex.ru/d/KEY[/path]`, `https://yadi.sk/i/KEY` | a Yandex.Disk public link |
///
/// Other `http://` and `https://` URLs are not sources; `get` and `serve` take them directly.
public enum SourceReference {
    /// The services' reference prefixes.
    public static let schemes = ["webdav://", "webdavs://", "yandex:", "dropbox:", "gdrive:", "onedrive:", "box:"]

    /// Whether `text` is a source reference (rather than a URL).
    public static func isSourceReference(_ text: String) -> Bool {
        schemes.contains { text.lowercased().hasPrefix($0) } || YandexPublicSource.parse(text) != nil
    }

    /// The service a reference names (`webdav`, `yandex`, …), or `nil`.
    public static func service(of text: String) -> String? {
        let lower = text.lowercased()
        if lower.hasPrefix("webdav://") || lower.hasPrefix("webdavs://") { return "webdav" }
        if YandexPublicSource.parse(text) != nil { return "yandex-public" }
        return schemes.first { lower.hasPrefix($0) }.map { String($0.dropLast()) }
    }

    /// The source `text` names.
    ///
    /// - Throws: ``StreamCache/StreamCacheError`` (`invalidArgument`) for an unknown or malformed
    ///   reference, or a cloud reference without a token.
    public static func parse(_ text: String, credentials: SourceCredentials, configuration: SourceConfiguration) throws -> any Source {
        guard let service = service(of: text) else {
            throw StreamCacheError(.invalidArgument, "'\(text)' is not a source reference; use webdav://, webdavs://, yandex:, dropbox:, gdrive:, onedrive: or box:.")
        }
        let rest = String(text.drop { $0 != ":" }.dropFirst())
        func nonEmpty(_ value: String, _ what: String) throws -> String {
            guard !value.isEmpty else { throw StreamCacheError(.invalidArgument, "'\(text)' names no \(what).") }
            return value
        }
        switch service {
        case "webdav":
            let secure = text.lowercased().hasPrefix("webdavs://")
            guard var components = URLComponents(string: text), let host = components.host, !host.isEmpty else {
                throw StreamCacheError(.invalidArgument, "'\(text)' is not a valid WebDAV reference (webdav://user@host:port/path).")
            }
            let user = components.user ?? credentials.user
            if components.password != nil {
                throw StreamCacheError(.invalidArgument, "Put the WebDAV password in an environment variable (--password-env), not in the reference.")
            }
            components.scheme = secure ? "https" : "http"
            components.user = nil
            guard let url = components.url else { throw StreamCacheError(.invalidArgument, "'\(text)' is not a valid WebDAV reference.") }
            return WebDAVSource(url: url, user: user, password: credentials.password, configuration: configuration)
        case "yandex-public":
            // Shared to anyone with the link: no account, and none of the user's tokens goes there.
            let (link, path) = YandexPublicSource.parse(text)!
            return YandexPublicSource(link: link, path: path, configuration: configuration)
        case "yandex":
            return YandexDiskSource(path: try nonEmpty(rest, "path"), token: try credentials.requireToken(for: "Yandex.Disk"), configuration: configuration)
        case "dropbox":
            return DropboxSource(path: try nonEmpty(rest, "path"), token: try credentials.requireToken(for: "Dropbox"), configuration: configuration)
        case "gdrive":
            return GoogleDriveSource(fileID: try nonEmpty(rest, "file id"), token: try credentials.requireToken(for: "Google Drive"),
                                     configuration: configuration)
        case "onedrive":
            return OneDriveSource(item: try nonEmpty(rest, "path"), token: try credentials.requireToken(for: "OneDrive"), configuration: configuration)
        default:
            return BoxSource(item: try nonEmpty(rest, "file id"), token: try credentials.requireToken(for: "Box"), configuration: configuration)
        }
    }
}
