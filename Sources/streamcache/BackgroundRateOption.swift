import ArgumentParser
import StreamCache

/// `--limit-rate RATE` of the commands that prefetch (`prefetch`, `serve`):
/// ``StreamCache/Configuration/backgroundDownloadRate``, the bytes per second prefetches and
/// background fills take together, for a metered or shared link. What a player or a `get` reads
/// is never held back, so `get` has no such option.
struct BackgroundRateOption: ParsableArguments {
    @Option(name: .customLong("limit-rate"),
            help: ArgumentHelp("Prefetches and background fills take at most this many bytes per second together, e.g. 1MB or 500KiB.",
                               discussion: "A player's read is never held back, nor the prefetch's download a player waits for. A prefetch handed to the server that holds the cache keeps to this rate besides the server's. Default: no limit.",
                               valueName: "rate"))
    var limitRate: String?

    func validate() throws {
        if let limitRate { _ = try Self.bytesPerSecond(limitRate) }
    }

    /// The rate given, `nil` for none.
    func apply(to configuration: inout StreamCache.Configuration) throws {
        configuration.backgroundDownloadRate = try limitRate.map(Self.bytesPerSecond)
    }

    /// A rate such as `1MB`, `1MB/s` or `500KiB`: a size (``ArgumentParsing/byteCount(_:)``) per
    /// second, at least one byte.
    static func bytesPerSecond(_ text: String) throws -> Int64 {
        var size = Substring(text)
        if size.lowercased().hasSuffix("/s") { size = size.dropLast(2) }
        guard let rate = try? ArgumentParsing.byteCount(String(size)), rate > 0 else {
            throw ValidationError("'\(text)' is not a rate such as 1MB, 1MB/s or 500KiB (bytes per second, more than 0).")
        }
        return rate
    }
}
