#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Where a playlist or one of the files it names lives, and the headers it is fetched with.
///
/// A playlist's URIs are resolved against the playlist's URL (RFC 3986). The headers, which
/// usually carry the user's credentials, go only to the playlist's own origin (same scheme, host
/// and port): a segment on a CDN host is fetched without them, as a browser would, so a playlist
/// can never make the cache send a token to a host the user did not name.
///
/// ```swift
/// let master = HLSLocation(url: URL(string: "https://media.example/show/master.m3u8")!,
///                          headers: ["Authorization": "Bearer …"])
/// master.resolve("720p/index.m3u8")     // https://media.example/show/720p/index.m3u8, same headers
/// master.resolve("https://cdn.example/seg1.ts")   // no headers
/// master.resolve("skd://key-id")        // nil: not fetched over HTTP
/// ```
public struct HLSLocation: Sendable, Hashable {
    /// The absolute `http` or `https` URL.
    public var url: URL
    /// The headers sent with every request for it.
    public var headers: HTTPHeaders

    /// Creates a location.
    public init(url: URL, headers: HTTPHeaders = [:]) {
        self.url = url
        self.headers = headers
    }

    /// The cache key of the file: derived from the URL, the query reduced to a digest.
    public var key: CacheKey { CacheKey(url: url) }

    /// The file name a player sees: the URL's last path segment, or `fallback` when it has none.
    public func fileName(fallback: String) -> String {
        let last = url.lastPathComponent
        return last.isEmpty || last == "/" ? fallback : last
    }

    /// The location of a URI found in this playlist, or `nil` when it is not fetched over HTTP
    /// (`skd://`, `data:`) or does not parse.
    public func resolve(_ uri: String) -> HLSLocation? {
        guard let resolved = URL(string: uri, relativeTo: url)?.absoluteURL,
              let scheme = resolved.scheme?.lowercased(), scheme == "http" || scheme == "https", resolved.host != nil else { return nil }
        return HLSLocation(url: resolved, headers: isSameOrigin(resolved) ? headers : [:])
    }

    private func isSameOrigin(_ other: URL) -> Bool {
        url.scheme?.lowercased() == other.scheme?.lowercased() && url.host?.lowercased() == other.host?.lowercased()
            && Self.port(of: url) == Self.port(of: other)
    }

    private static func port(of url: URL) -> Int? {
        url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
    }
}
