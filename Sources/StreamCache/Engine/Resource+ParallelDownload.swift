#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension Resource {
    /// Keeps up to ``StreamCache/Configuration/parallelDownloads`` downloads busy inside `wanted`,
    /// a long range some reader, prefetch or background fill still needs.
    ///
    /// Downloads own disjoint windows, so extra connections come from splitting windows, never
    /// from overlapping them: the download with the most bytes left past its request in flight
    /// keeps one part of them (an equal share of `wanted`, at most
    /// ``StreamCache/Configuration/parallelPartSize``) and hands the rest to a new download.
    /// Repeated, this gives the reader's download the first part and each new connection the next
    /// one, with the last holding the tail; when a part is done, the tail is split again. A range
    /// no download covers (one stopped early) gets a download first.
    ///
    /// Nothing happens before the download at the start of `wanted` has answered: the reader's
    /// first bytes never share the link with the parts after them. Nothing happens either while
    /// one connection is fast (``StreamCache/Configuration/parallelDownloadThroughputLimit``), nor
    /// once connections side by side were measured to fetch no faster than one
    /// (``StreamCache/Configuration/minimumParallelSpeedup``: a link they all share).
    func addParallelDownloads(in wanted: ByteRange, kind: Download.Kind) {
        let maximum = configuration.parallelDownloads
        guard maximum > 1, configuration.parallelPartSize > 0, let info, info.acceptsByteRanges, let total = info.totalLength else { return }
        if let ceiling = configuration.parallelDownloadThroughputLimit, let throughput = connectionThroughput, throughput >= ceiling { return }
        guard parallelConnectionsMayHelp else { return }
        let wanted = wanted.clamped(toLength: total)
        if let head = downloads.values.first(where: { $0.window.contains(wanted.lowerBound) }), !head.opened { return }
        // Equal shares of what is left, so the connections finish together; never more than the
        // part size, so the reader's connection stays close to the next one; never less than one
        // request.
        let part = min(configuration.parallelPartSize, max(configuration.initialSegmentSize, wanted.count / Int64(maximum)))
        for _ in 0..<maximum {
            let active = downloads.values.filter { $0.window.overlaps(wanted) }
            guard active.count < maximum else { return }
            // A read starts splitting only when it is long; once split, it goes on splitting its
            // tail in smaller parts, so the last bytes do not trail on one connection.
            guard active.count > 1 || wanted.count > 2 * configuration.parallelPartSize else { return }
            var covered = available
            for download in downloads.values where !download.window.isEmpty { covered.insert(download.window) }
            // A stretch nobody fetches, beyond the reader's own download, is taken first.
            if let gap = covered.gaps(in: wanted).first(where: { $0.lowerBound > wanted.lowerBound }) {
                startDownload(at: gap.lowerBound, limit: gap.upperBound, kind: kind, continuesStream: true)
                continue
            }
            func spare(_ download: Download) -> Int64 { min(download.limit, wanted.upperBound) - max(download.position, download.segmentEnd) }
            // The donor keeps a part; what it hands over must be worth a connection (a request at least).
            guard let donor = active.max(by: { spare($0) < spare($1) }), spare(donor) > part + configuration.initialSegmentSize else { return }
            let split = max(donor.segmentEnd, donor.position + part)
            downloads[donor.id]?.limit = split
            startDownload(at: split, limit: donor.limit, kind: kind, continuesStream: true)
        }
    }

    /// Re-plans parallel downloads for everyone who still needs a long range: after a download
    /// answered (its reader's first bytes are in) or finished its part, and when the last reader
    /// left a resource that is filled in the background.
    func replanParallelDownloads() {
        guard configuration.parallelDownloads > 1 else { return }
        for reader in readers.values {
            addParallelDownloads(in: ByteRange(reader.position, max(reader.position, reader.end)), kind: reader.isPrefetch ? .prefetch : .read)
        }
        if readers.isEmpty, configuration.completesResourcesInBackground {
            // Filling the file for offline use: every download left is a fill.
            for download in downloads.values {
                addParallelDownloads(in: download.window, kind: .background)
            }
        }
    }
}
