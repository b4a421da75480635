#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What hosts did when asked for several byte ranges in one request.
///
/// A reader that crosses cached bytes needs the gaps on either side of them. Asked for together
/// (`Range: bytes=a-b,c-d`), they come in one `multipart/byteranges` response: one request and
/// one round trip instead of one per gap, and no cached byte fetched again. Servers may answer
/// such a request with the first range only or with the whole file instead (RFC 9110 §14.2), and
/// many cloud storage hosts do; ``HTTPOrigin`` then asks that host for one range at a time from
/// then on. Origins that share one memory (those of one `serve --folder`) try each host once.
public final class MultipleRangesMemory: Sendable {
    private let answers = Locked<[String: Bool]>([:])

    /// Creates an empty memory: every host is tried.
    public init() {}

    /// Whether the host at `url` may be asked for several ranges: it served them, or was not asked yet.
    public func mayAsk(_ url: URL) -> Bool {
        answers.withLock { $0[url.hostKey] } ?? true
    }

    /// Records whether the host at `url` answered a request for several ranges with them.
    public func record(_ url: URL, served: Bool) {
        answers.withLock { $0[url.hostKey] = served }
    }
}
