/// Bytes a download wrote to the cache file one after the other and has not reported to its
/// resource yet: where they start, how many, and when each chunk of them arrived.
///
/// A download slower than its socket finds several chunks waiting when it comes back for the
/// next; it writes them all and reports them as one run. Each report costs a hop to the resource's
/// actor and a wake-up of the readers waiting on the bytes, so under load the cost per byte falls
/// as the runs grow, and a download that keeps up still reports each chunk as it comes.
struct WrittenRun: Sendable {
    /// One chunk's bytes in the run and when the transport received them.
    struct Arrival: Sendable {
        var count: Int64
        var at: ContinuousClock.Instant
    }

    /// Where the run starts in the file.
    let start: Int64
    /// The run's length in bytes.
    private(set) var count: Int64 = 0
    /// The chunks' arrivals in order; the pieces of one chunk count as one.
    private(set) var arrivals: [Arrival] = []

    init(start: Int64) { self.start = start }

    /// The bytes the run covers.
    var range: ByteRange { ByteRange(offset: start, length: count) }

    /// Appends `bytes` written right after the run, received at `arrivedAt`.
    mutating func add(_ bytes: Int64, arrivedAt: ContinuousClock.Instant) {
        count += bytes
        if let last = arrivals.indices.last, arrivals[last].at == arrivedAt {
            arrivals[last].count += bytes
        } else {
            arrivals.append(Arrival(count: bytes, at: arrivedAt))
        }
    }
}
