import Foundation
import StreamCache

/// The URLs an `AVURLAsset` is created with, so that AVFoundation asks the resource loader's
/// delegate for every byte instead of loading the URL itself.
///
/// AVFoundation calls the delegate only for URLs it cannot load, so the scheme is replaced by a
/// custom one. The scheme must be valid RFC 3986 syntax (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`):
/// iOS 17 fails to parse `__loader__https`, while `loader-https` works. The URL keeps the file name
/// and its extension, a cheap hint for AVFoundation, and drops user info, query and fragment,
/// which may carry credentials or signatures; the bridge never reads the URL back.
///
/// ```swift
/// CustomSchemeURL.make(for: URL(string: "https://cdn.example/a.mp3?sig=secret")!)
/// // streamcache-https://cdn.example/a.mp3
/// ```
public enum CustomSchemeURL {
    /// The prefix put before the original scheme.
    public static let schemePrefix = "streamcache-"
    /// The scheme of URLs made for resources without a URL of their own.
    public static let resourceScheme = "streamcache"

    /// `url` with its scheme replaced by `streamcache-<scheme>` and no user info, query or fragment.
    /// A URL without a host or scheme gets the ``make(for:fileName:)`` form instead.
    public static func make(for url: URL) -> URL {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false),
              let scheme = components.scheme?.lowercased(), components.host?.isEmpty == false,
              case let custom = schemePrefix + scheme, isValidScheme(custom)
        else {
            return make(for: CacheKey(url: url), fileName: url.lastPathComponent)
        }
        components.scheme = custom
        components.user = nil
        components.password = nil
        components.query = nil
        components.fragment = nil
        return components.url ?? make(for: CacheKey(url: url), fileName: url.lastPathComponent)
    }

    /// `streamcache://resource/<digest of the key>/<file name>` for a resource known by its key
    /// (a cloud file id, for example). The key itself is not in the URL.
    public static func make(for key: CacheKey, fileName: String?) -> URL {
        var components = URLComponents()
        components.scheme = resourceScheme
        components.host = "resource"
        let name = fileName.flatMap { $0.isEmpty || $0 == "/" ? nil : $0 } ?? "media"
        components.path = "/\(key.fileStem)/\(name)"
        // The key's digest is hex, so the fallback (used only if the name cannot be encoded) is valid.
        return components.url ?? URL(string: "\(resourceScheme)://resource/\(key.fileStem)")!
    }

    /// Whether `scheme` is a valid URL scheme per RFC 3986.
    public static func isValidScheme(_ scheme: String) -> Bool {
        guard let first = scheme.unicodeScalars.first, first.isASCII, CharacterSet.letters.contains(first) else { return false }
        return scheme.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || "+-.".unicodeScalars.contains(scalar))
        }
    }
}
