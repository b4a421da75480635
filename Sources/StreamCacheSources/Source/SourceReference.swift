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

    /// `text` with each `%XX` escape replaced by its byte, and any other `%` kept: `100% Hits.mp3`
    /// as typed, `100%25 Hits.mp3` as a listing spells it. Bytes that are not UTF-8 keep their escapes.
    static func decodingEscapes(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        let utf8 = Array(text.utf8)
        var index = 0
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "%"), index + 2 < utf8.count, let high = hex(utf8[index + 1]), let low = hex(utf8[index + 2]) {
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(validating: bytes, as: UTF8.self) ?? String(text)
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
            // The path is a file's, as written: a name may hold `#` or `?`, never a fragment or a
            // query, and escapes (`%23`, the way a listing spells `#`) may stand beside raw spaces.
            let afterScheme = text[text.index(text.startIndex, offsetBy: secure ? 10 : 9)...]
            let pathStart = afterScheme.firstIndex(of: "/") ?? afterScheme.endIndex
            guard var components = URLComponents(string: "webdav://" + afterScheme[..<pathStart]), let host = components.host, !host.isEmpty else {
                throw StreamCacheError(.invalidArgument, "'\(text)' is not a valid WebDAV reference (webdav://user@host:port/path).")
            }
            components.path = Self.decodingEscapes(afterScheme[pathStart...])
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
