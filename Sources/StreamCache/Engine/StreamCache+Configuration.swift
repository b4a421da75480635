#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CoreMetrics
import Logging

extension StreamCache {
    /// Settings of a ``StreamCache``.
    public struct Configuration: Sendable {
        /// The cache directory; see ``StreamCache/defaultDirectory()``.
        public var directory: URL
        /// The most bytes the cache keeps before evicting least recently used resources, or `nil`
        /// for no limit. Resources being read and pinned resources are never evicted.
        public var maximumSize: Int64?
        /// How long a resource stays cached without being read, or `nil` for as long as it may.
        /// Older ones are evicted (pinned ones and those being read excepted) when the cache
        /// opens and once a minute while it is open: a cache that holds last month's podcast
        /// episodes gives their space back without a size limit chosen in advance.
        public var maximumAge: Duration?
        /// The bytes to leave free on the volume that holds the cache, or `nil` for no such rule.
        /// When a commit (or the check once a minute) finds less free for the cache's process,
        /// least recently used resources are evicted, pinned ones and those being read excepted,
        /// until a tenth more than this is free or none is left to evict. A phone's storage is
        /// the user's first: the cache yields it to photos and updates, where ``maximumSize``
        /// alone would keep its bytes while the disk fills.
        public var minimumFreeSpace: Int64?
        /// How the bytes free for this process on the volume that holds `directory` are found
        /// (`statvfs`'s available blocks); a test puts a volume of its own in its place.
        package var volumeFreeSpace: @Sendable (URL) -> Int64? = VolumeSpace.available(at:)
        /// Resources the process opens the cache to read (`get` and `prefetch` open it for one):
        /// an eviction pass counts them as asked for when the cache opened. The pass that runs as
        /// the cache opens may remove a resource before its caller could ask for it
        /// (``StreamCache/resource(for:origin:)``); under a loaded test suite it did, a `get
        /// --max-age` of a file past the age, which then fetched the file again whole.
        package var keysToBeRead: Set<CacheKey> = []
        /// As ``keysToBeRead``, for resources known by an alias (``StreamCache/setAlias(_:for:fileName:)``)
        /// whose keys the process learns only once it asks their service: a folder's files that
        /// `prefetch` resolves one at a time.
        package var aliasesToBeRead: Set<String> = []
        /// How often an open cache looks at its resources' age and its volume's free space, which
        /// change without a commit (time passes; other programs fill the disk); a test shortens it.
        package var evictionCheckInterval: Duration = .seconds(60)
        /// The largest chunk handed to a reader, and the unit of disk reads.
        public var chunkSize: Int = 1 << 20
        /// Bytes a read may hold ahead of its consumer before it waits.
        public var readBufferLimit: Int = 4 << 20
        /// A read whose offset a running download will reach within this many bytes waits for that
        /// download; a read further ahead starts its own (seeks never wait behind a sequential
        /// download), unless the request in flight brings its bytes within ``maximumJoinWait``.
        public var joinDistance: Int64 = 1 << 20
        /// How long a read may wait for a request in flight to reach its offset. A read further
        /// ahead inside that request (a seek on a slow link) gets a request of its own, and the
        /// one in flight is cut where the read begins: the origin's bytes already on the wire
        /// past that point are lost (on a slow link, a round trip's worth or a socket buffer's),
        /// which costs less than the seek's wait. Requests themselves are not bounded in time,
        /// so a long read costs few requests (see ``maximumSegmentSize``). By the same measure, a
        /// request in flight that no reader needs any more is finished when it ends within this
        /// time, and is otherwise cut where the idle read-ahead ends (``idleReadAhead``).
        public var maximumJoinWait: Duration = .milliseconds(500)
        /// The first request of a download asks for this many bytes; later ones double, except
        /// while a long range is split across connections (``parallelDownloads``), where each
        /// connection's second request asks for its share of what is left. A read
        /// that wants less (a probe, a short seek) asks for what it wants, but at least a quarter of this.
        public var initialSegmentSize: Int64 = 1 << 20
        /// The most bytes one origin request asks for; a download's requests double up to it.
        /// While a long range is split across connections (``parallelDownloads``), requests stay
        /// within ``parallelPartSize``, so that a range's tail can still go to another
        /// connection. An origin may ask for less (``Origin/maximumRequestLength``:
        /// ``HTTPOrigin`` over URLSession on Linux, which cannot hold back a slow consumer, keeps
        /// requests at 4 MiB).
        public var maximumSegmentSize: Int64 = 128 << 20
        /// How long a download that no reader needs goes on: it then stops at the end of its
        /// request in flight (bytes already on the wire are not thrown away; see
        /// ``maximumJoinWait`` for a long request on a slow link). Once its last reader
        /// has left, a download that makes no progress for this long (a stalled origin) is cancelled.
        public var idleDownloadGracePeriod: Duration = .seconds(5)
        /// The most bytes a download that no reader needs may still fetch past its request in
        /// flight (within the grace period). The read-ahead grows with what its readers took (as
        /// many bytes as the most one read was handed, up to this): a player reconnecting after a close
        /// or a short seek finds its bytes ready, and a 2-byte probe pulls little. A read split
        /// across connections reads ahead once, where its reader was: its parts further on only
        /// finish their request in flight.
        public var idleReadAhead: Int64 = 4 << 20
        /// The fewest bytes a download that no reader needs fetches past where its readers left
        /// (within the grace period, and at most ``idleReadAhead``): a player that plays the same
        /// stretch again reads a little further than the first time (ffmpeg's second play of a
        /// seek read 30 KB further under load), and finds those bytes cached too.
        public var minimumIdleReadAhead: Int64 = 1 << 20
        /// How many origin connections one long read, prefetch or background fill may use at once.
        /// Cloud services cap each connection's speed, so several ranges fetched side by side
        /// fill a file several times faster; 1 turns it off. The part a reader waits for always
        /// has a connection of its own, and the others start only once its first bytes arrived
        /// and the reader streams (it read a quarter of ``initialSegmentSize`` of a read to the
        /// end, or the whole of it): a player's request that it drops at once starts no other.
        /// Where the origin refuses one more connection (HTTP 429 or 503: a service that limits a
        /// user's downloads at once), the refused one gives way and the files of that host use
        /// no more connections than it accepted, one more after each ``connectionProbeInterval``
        /// that used them (``OriginRequest/givesWayWhenBusy``).
        public var parallelDownloads: Int = 4
        /// After an origin refuses one more connection, how long the files of its host stay on
        /// the connections it accepted before one more is tried; another this long after the
        /// origin answered the one more (the count grows only while it is used). A try the
        /// origin refuses again teaches the count again and doubles the interval, up to ten
        /// times this: a service that was busy for a moment gets its connections back within
        /// minutes, and one whose limit stays is asked for one more connection less and less
        /// often. A refusal is forgotten after sixty times this; until then the cache's index
        /// keeps what was learned for its next process. Taken as at least a millisecond and at
        /// most a day.
        public var connectionProbeInterval: Duration = ConnectionAllowance.defaultFirstHold
        /// The bytes each extra connection fetches before it takes the next part; a player's read
        /// is split only when more than twice this is missing ahead of it, or more than twice
        /// ``initialSegmentSize`` that one connection takes long to bring (``longReadDuration``).
        /// A prefetch or a background fill, which wants every byte, is split from twice
        /// ``initialSegmentSize``.
        public var parallelPartSize: Int64 = 8 << 20
        /// How long one connection may take for what a player's read still misses (more than twice
        /// ``initialSegmentSize`` of it) before the read is split like a long one, at the speed
        /// one connection alone was measured to reach. Two parts take about 4 s at a cloud
        /// connection's 4 MB/s, so only a service that throttles each connection harder is
        /// concerned: at 400 kB/s a 7 MB song read whole by a player that fills its cache as fast
        /// as it can (mpv, `ffmpeg`) comes in a third of the time. `nil` splits a player's read by
        /// its length only.
        public var longReadDuration: Duration? = .seconds(4)
        /// Of the connections the transport opens to one host (``Origin/connectionLimit``: 8 for
        /// both bundled transports), how many the downloads no reader waits for (prefetches,
        /// background fills, the extra parts of a long read) leave free, across every resource
        /// of the cache, so that a reader's request never queues behind them. Those downloads
        /// wait for a free place instead, in the order they started; one a reader comes to wait
        /// for goes at once. `nil` does not hold them back.
        public var connectionsKeptForReaders: Int? = 2
        /// A long range is split across connections only while one connection brings less than
        /// this many bytes per second (at the speed the resource's connections last reached;
        /// before any was measured it is split). Extra connections beat a cloud service's cap on
        /// each one (4-10 MB/s); a connection faster than this already fills the link, so more of
        /// them only add requests and compete for it. `nil` splits at any speed.
        public var parallelDownloadThroughputLimit: Double? = 40_000_000
        /// Long ranges and short reads are split across connections only while several
        /// connections, once measured, fetch at least this many times what one does alone.
        /// Cloud services cap each connection, so there each one keeps its speed and two fetch
        /// twice as fast; on a link all connections share (a home line, one traffic shaper) they
        /// divide its speed, so extra connections only add requests and slow down the part a
        /// reader waits for. Until a resource has measured both, a long range gets one part
        /// first, whose short first request finds out, and the others once it shows a gain; a
        /// measurement of several connections stands for 30 s. Where it shows none, a part its
        /// reader has not reached waits until the downloads before it are done: the read goes on
        /// in order, at the link's speed. `nil` never checks (and splits as the other settings say).
        public var minimumParallelSpeedup: Double? = 1.4
        /// A short read (a seek, a player's bounded request of less than ``initialSegmentSize``)
        /// on a slow connection is split across up to ``parallelDownloads`` connections while each
        /// extra one saves at least this much of its transfer time, at the speed the resource's
        /// connections last reached. Cloud services cap each connection: at 4 MB/s a 256 KiB seek
        /// takes a round trip and 64 ms of transfer on one connection, 32 ms on two. On fast links
        /// the whole transfer is shorter than this, so reads are never split there. `nil` turns
        /// it off.
        public var minimumParallelGain: Duration? = .milliseconds(20)
        /// After a short read that names its end (a seek, a probe: less than
        /// ``initialSegmentSize``), how long its read-ahead waits to see whether the player asks
        /// for another place at once. If it does, the player is skimming and the read-ahead is
        /// dropped: it would fetch bytes nobody is about to play, and on a shared link slow down
        /// the read the player waits for. A read that reaches into the read-ahead, or none, lets it
        /// go on. `nil` reads ahead at once.
        public var skimmingWindow: Duration? = .milliseconds(50)
        /// While every reader of a download plays in real time (it comes back for cached bytes at
        /// its own pace, its media's bitrate), the download stays at most this much playing time
        /// ahead of them, at the rate they were seen to read, and the next one starts once half
        /// of it is played: watching the first minutes of a long video does not pull the whole
        /// file over a metered link, and playback never waits for the origin. Readers that wait
        /// for the origin, or read faster than anything plays (a tool, a copy), are never held
        /// back; nor are prefetches, nor anything when ``completesResourcesInBackground`` is on.
        /// `nil` never holds a download back.
        public var playbackReadAhead: Duration? = .seconds(60)
        /// The fewest bytes a download stays ahead of a player in real time (see
        /// ``playbackReadAhead``): smaller files, and a minute of most audio, are fetched whole.
        public var minimumPlaybackReadAhead: Int64 = 32 << 20
        /// Whether downloads go on to fill the file when no reader needs them (for offline use).
        public var completesResourcesInBackground: Bool = false
        /// The bytes per second the downloads no reader waits for take together, across every
        /// resource: prefetches (``Resource/prefetch(_:)``, a served `--prefetch`, an HLS
        /// prefetch), background fills (``completesResourcesInBackground``, the small holes a
        /// read leaves). A player's or a tool's read is never held back, nor the download of a
        /// prefetch whose bytes a reader waits for, while it waits. Such downloads use no more
        /// connections side by side than the rate has use for at the speed one connection
        /// reached. `nil` (the default) sets no limit; ``StreamCache/backgroundDownloadRate``
        /// changes it while the cache is open.
        public var backgroundDownloadRate: Int64?
        /// Whether a resource whose bytes are all cached is hashed and checked against the digest its
        /// origin publishes (``ResourceInfo/contentDigest``), and dropped when they differ. About
        /// 0.6 s of one core per GB for SHA-256 (`streamcache-bench digest`), once per file; a
        /// device that cannot spare it, or an origin whose published digests are known to be wrong,
        /// turns it off.
        public var checksContentDigests: Bool = true
        /// How long the origin's word that the cached bytes are its current version holds. A read
        /// that would serve cached bytes after this long first asks the origin (one request for
        /// the first byte, compared by `ETag`, `Last-Modified` and length): a file replaced at
        /// the origin is then dropped and fetched anew, never played from the old bytes. Every
        /// response a download gets counts as the origin's word, so reads that download do not
        /// ask again (a read that would take its first bytes from a request sent before it began
        /// asks, when the word is due). Readers that start while a question is out share it when
        /// it was sent within this interval, and otherwise share the next one, sent once it is
        /// answered: no read takes a word older than the interval (with `.zero`, none older than
        /// the read itself). When the origin does not answer within ``revalidationTimeout`` or
        /// fails, the cached bytes are served (a cache is most useful offline) and the origin is
        /// asked again on a read at least 30 s later. The time of the last word is kept in the
        /// index, so it holds across processes.
        ///
        /// `nil` (the default) trusts cached bytes until a download meets another version: a
        /// file cached whole is then served with no request at all, which a player offline or
        /// on a metered link may want. Cloud sources that report a file's revision (see
        /// ``Resource/expectVersion(_:totalLength:)``) are checked whenever they are resolved.
        public var revalidationInterval: Duration?
        /// How long a read waits for the origin to confirm the cached version (see
        /// ``revalidationInterval``) before it serves the cached bytes without the answer; twice
        /// this for a read that waits for the question after the one out.
        public var revalidationTimeout: Duration = .seconds(2)
        /// Whether a resource nobody reads fetches its small holes: gaps of at most
        /// ``joinDistance`` that follow cached bytes (a player that plays a stretch again reads a
        /// little further than the first time). Larger gaps, and the start of a file, are left to
        /// readers.
        public var fillsSmallGaps: Bool = true
        /// How many resources may keep their data file open at once. Beyond it, the least recently
        /// used idle resources close theirs and reopen it on their next read, so a long-running
        /// server that has played thousands of files does not run out of file descriptors (256 per
        /// process by default on macOS, shared with every socket). Resources being read or
        /// downloaded keep theirs open regardless.
        public var maximumOpenDataFiles: Int = 64
        /// How many recently used resources stay in memory while nothing uses them, with their
        /// cached ranges, info, statistics and connection speed (about 10 KB each). A resource
        /// being read, downloaded, committed, held by a caller or watched through
        /// ``Resource/events()`` stays in memory regardless; one freed is made again, from the
        /// index, when its key is next asked for. A server that probes a library of thousands
        /// of files so keeps a bounded footprint.
        public var maximumRecentResources: Int = 256
        /// Written bytes are synced and recorded in the index after this many bytes…
        public var commitBatchBytes: Int64 = 8 << 20
        /// …or after this long, whichever comes first.
        public var commitInterval: Duration = .milliseconds(500)
        /// Where the engine logs (at `.info` and below, never a secret).
        public var logger: Logger = Logger(label: "streamcache", factory: { _ in SwiftLogNoOpLogHandler() })
        /// Where the engine's metrics go (swift-metrics); `nil` (the default) uses the factory the
        /// process bootstrapped with `MetricsSystem.bootstrap`, which records nothing until an app
        /// chooses a backend (Prometheus, StatsD, OpenTelemetry, …).
        ///
        /// The labels, for dashboards (the same figures as ``StreamCache/statistics``):
        ///
        /// | label | kind | dimensions |
        /// |---|---|---|
        /// | `streamcache_reads_total` | counter | |
        /// | `streamcache_served_bytes_total` | counter | `source`: `cache` (cached when the read began) or `origin` |
        /// | `streamcache_downloaded_bytes_total` | counter | |
        /// | `streamcache_origin_requests_total` | counter | |
        /// | `streamcache_first_byte_seconds` | timer | `source`: where a read's first byte was |
        /// | `streamcache_downloads_in_flight` | meter | |
        /// | `streamcache_errors_total` | counter | `code`: ``StreamCacheError/Code`` |
        /// | `streamcache_version_changes_total` | counter | |
        /// | `streamcache_revalidations_total` | counter | `result`: `confirmed`, `changed` or `failed` |
        /// | `streamcache_evictions_total`, `streamcache_evicted_bytes_total` | counter | |
        ///
        /// `streamcache_first_byte_seconds` with `source=origin` is the wait a seek to an uncached
        /// place costs a player; one minus downloaded over served bytes is what the cache spared the
        /// origin.
        public var metricsFactory: (any MetricsFactory)?

        /// Creates a configuration for the cache in `directory`.
        public init(directory: URL, maximumSize: Int64? = nil) {
            self.directory = directory
            self.maximumSize = maximumSize
        }
    }

    /// The default cache directory: `$STREAMCACHE_CACHE_DIR`, else `$XDG_CACHE_HOME/streamcache`,
    /// else `~/.cache/streamcache` (the user's Caches directory on Apple platforms).
    public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        if let explicit = environment["STREAMCACHE_CACHE_DIR"], !explicit.isEmpty {
            return URL(fileURLWithPath: explicit, isDirectory: true)
        }
        #if canImport(Darwin)
        if let caches = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first {
            return caches.appendingPathComponent("streamcache", isDirectory: true)
        }
        #endif
        if let xdg = environment["XDG_CACHE_HOME"], !xdg.isEmpty {
            return URL(fileURLWithPath: xdg, isDirectory: true).appendingPathComponent("streamcache", isDirectory: true)
        }
        let home = environment["HOME"].map { URL(fileURLWithPath: $0, isDirectory: true) } ?? FileManager.default.homeDirectoryForCurrentUser
        return home.appendingPathComponent(".cache/streamcache", isDirectory: true)
    }
}
