/// How fast a player consumes one read, as the engine sees it: the rate at which the reader asks
/// for the next bytes while they are already cached.
///
/// A player that plays in real time (AVPlayer, mpv, a browser's `<video>`) reads at its media's
/// bitrate once its own buffer is full, and holds the connection back in between; a player that
/// waits for the origin, or a tool that reads as fast as it can, never shows such a rate. The
/// engine keeps a download that serves only readers with a known rate within
/// ``StreamCache/Configuration/playbackReadAhead`` of playing time ahead of them (see
/// ``Resource/playbackWindow(of:)``), so watching the first minutes of a long video does not pull
/// the whole file over a metered link, while the read-ahead still covers a minute of playback.
///
/// The reader's position only moves when it asks for its next step, so steps start at
/// ``StreamCache/Configuration/chunkSize`` (1 MiB) and double while the reader comes back for more
/// faster than media plays (a reader that drains the cache at disk speed gets 200 MB of cached
/// bytes in 8 steps, each one region for `sendfile`; a read whose cached run reaches its end gets
/// it in one), and fall back to one chunk when it comes back late: a player's position is then
/// known to a chunk, its read buffer and its socket buffers, and its rate within its first
/// seconds. A player also comes back at once while it fills its sockets' buffers at first, so
/// faster growth makes its steps long before its rate is known: with steps growing fourfold from
/// 1 or 4 MiB, the cloud profile's four connections had fetched 129–155 MB of a 200 MB file by
/// then, instead of 84 MB (`Benchmarks/playback-window.sh`).
struct PlaybackPace {
    /// A rate is measured over a stretch at least this long, during which the reader never waited.
    static let measuringInterval: Duration = .seconds(1)
    /// A reader back for its next step sooner than this rate allows (bytes per second) drains the
    /// cache faster than any media plays (20 MB/s is 160 Mbit/s, a chunk of 1 MiB in 52 ms): its
    /// steps grow. A rate, not a time: a step of 8 MiB takes 8 times as long to copy as one of
    /// 1 MiB, and a fixed time let one late return on a loaded machine start the steps over.
    static let quickDrainRate: Double = 20_000_000
    /// How much longer each step is than the one before, while the reader takes its steps faster
    /// than ``quickDrainRate``.
    static let growth: Int64 = 2

    /// Where the current measuring stretch began; `nil` while the reader waits for a download.
    private var stretchStart: (at: ContinuousClock.Instant, position: Int64)?
    /// When the last step was handed out, and how many bytes it held.
    private var lastStep: (at: ContinuousClock.Instant, bytes: Int64)?
    /// The bytes per second the reader consumed over its last two complete stretches (the lower
    /// of the two), or its first, if it has one and has not waited since. A player first fills
    /// its own buffer and the sockets' at the speed of the cache; the lower figure is its bitrate.
    private(set) var rate: Double?
    /// The rate of the last complete stretch alone.
    private var lastStretchRate: Double?
    /// The most bytes the reader's next step hands out.
    private(set) var stepLimit: Int64
    private let smallestStep: Int64

    init(smallestStep: Int64) {
        self.smallestStep = max(1, smallestStep)
        stepLimit = self.smallestStep
    }

    /// The reader asks for its next bytes at `position`; `cached` tells whether they are cached
    /// (it consumes at its own pace) or it must wait for a download (its rate is then unknown).
    mutating func reader(at position: Int64, cached: Bool, now: ContinuousClock.Instant = .now) {
        guard cached else {
            stretchStart = nil
            rate = nil
            lastStretchRate = nil
            stepLimit = smallestStep
            return
        }
        if let lastStep {
            let quick = (now - lastStep.at).timeInterval * Self.quickDrainRate <= Double(lastStep.bytes)
            stepLimit = !quick ? smallestStep : stepLimit > Int64.max / Self.growth ? .max : stepLimit * Self.growth
        }
        guard let start = stretchStart else {
            stretchStart = (now, position)
            return
        }
        let elapsed = now - start.at
        guard elapsed >= Self.measuringInterval else { return }
        let stretchRate = Double(max(0, position - start.position)) / elapsed.timeInterval
        rate = min(stretchRate, lastStretchRate ?? stretchRate)
        lastStretchRate = stretchRate
        stretchStart = (now, position)
    }

    /// A step of `bytes` was handed out to the reader.
    mutating func handedOutStep(bytes: Int64, now: ContinuousClock.Instant = .now) {
        lastStep = (now, bytes)
    }
}
