#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

extension StreamCache.Configuration {
    /// Settings for a cache behind a server that streams to many clients at once: each read
    /// holds at most `readBufferLimit` bytes ahead of its client (512 KiB in 256 KiB chunks
    /// instead of 4 MiB in 1 MiB chunks), so memory stays flat as clients are added.
    ///
    /// Measured with `Benchmarks/peak-rss-serve.sh` (16 clients of a 200 MB file): see
    /// docs/benchmarks.md.
    public static func proxy(directory: URL, maximumSize: Int64? = nil) -> Self {
        var configuration = Self(directory: directory, maximumSize: maximumSize)
        configuration.chunkSize = 256 * 1024
        configuration.readBufferLimit = 512 * 1024
        return configuration
    }
}
