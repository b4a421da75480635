/// The largest of the values recorded within a sliding time window: how TCP BBR estimates a
/// path's bandwidth, and for the same reason. Whatever goes wrong while a speed is measured (a
/// task that waits for a thread, a machine busy with something else, a consumer that lags) only
/// ever lowers it, so the best recent sample is the closest to what the path can do, and one
/// unlucky sample does not turn a decision.
///
/// Keeps only the samples that can still be the maximum: each one larger than every later one.
/// The newest sample is always among them.
struct WindowedMaximum: Sendable {
    private struct Sample: Sendable {
        let value: Double
        let at: ContinuousClock.Instant
    }

    /// How long a sample counts.
    let window: Duration
    /// Oldest first; values decrease from each to the next, and the last is the newest sample.
    private var candidates: [Sample] = []

    /// More candidates than this only come from a long run of ever smaller samples; the oldest
    /// (largest) then go first.
    private static let mostCandidates = 32

    init(window: Duration) {
        self.window = window
    }

    /// Records `value`, measured at `now`.
    mutating func record(_ value: Double, at now: ContinuousClock.Instant) {
        candidates.removeAll { $0.value <= value || now - $0.at >= window }
        candidates.append(Sample(value: value, at: now))
        if candidates.count > Self.mostCandidates {
            candidates.removeFirst(candidates.count - Self.mostCandidates)
        }
    }

    /// The largest value recorded within the window before `now`; `nil` when none was.
    func maximum(at now: ContinuousClock.Instant) -> Double? {
        candidates.first { now - $0.at < window }?.value
    }

    /// The value recorded last, however long ago; `nil` before the first.
    var newest: Double? { candidates.last?.value }
}
