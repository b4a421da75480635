#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A path below a served folder, normalized so it can never climb out of the folder.
///
/// Built from the raw (percent-encoded) request path: each segment is decoded once, and the path
/// is rejected when a decoded segment is empty, `.` or `..`, or holds `/`, `\` or a control
/// character, so `%2e%2e`, `..%2f` and `a//b` are refused rather than interpreted.
public struct RelativePath: Hashable, Sendable, CustomStringConvertible {
    /// The decoded segments, none empty, none `.` or `..`.
    public let segments: [String]

    /// Parses the encoded part of a request path after the folder's token (`a/b%20c.mp3`).
    ///
    /// - Returns: `nil` when the path is empty or would leave the folder.
    public init?(encoded: some StringProtocol) {
        guard !encoded.isEmpty, encoded.utf8.count <= 4096 else { return nil }
        var segments: [String] = []
        for raw in encoded.split(separator: "/", omittingEmptySubsequences: false) {
            guard let decoded = String(raw).percentDecoded, Self.isAcceptable(decoded) else { return nil }
            segments.append(decoded)
        }
        self.segments = segments
    }

    /// The path of `segments` (decoded), or `nil` when one is empty or would leave the folder.
    public init?(segments: [String]) {
        guard !segments.isEmpty, segments.allSatisfy(Self.isAcceptable) else { return nil }
        self.segments = segments
    }

    private static func isAcceptable(_ segment: String) -> Bool {
        guard !segment.isEmpty, segment != ".", segment != ".." else { return false }
        return !segment.unicodeScalars.contains { $0 == "/" || $0 == "\\" || $0.value < 0x20 || $0.value == 0x7F }
    }

    /// The path re-encoded for a URL: each segment percent-encoded on its own.
    public var percentEncoded: String {
        segments.map { $0.percentEncoded(allowing: URICharacters.isUnreserved) }.joined(separator: "/")
    }

    /// The last segment: the file name.
    public var fileName: String { segments.last ?? "" }

    public var description: String { segments.joined(separator: "/") }

    /// The URL of this path below `base` (whose path is treated as a folder).
    public func url(below base: URL) -> URL? {
        guard var components = URLComponents(url: base, resolvingAgainstBaseURL: false) else { return nil }
        var basePath = components.percentEncodedPath
        if !basePath.hasSuffix("/") { basePath += "/" }
        components.percentEncodedPath = basePath + percentEncoded
        return components.url
    }
}
