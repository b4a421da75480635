/// How many connections at once an origin host lately accepted from one file's downloads, as it showed by
/// refusing one more for now (HTTP 429, 503, or Google's 403 `rateLimitExceeded`), and when to try
/// one more again.
///
/// Services limit a user's downloads at once, not only their speed: nginx's `limit_conn` answers
/// the connection past its limit with 503, a file host with 429. A read split across four
/// connections there used to fail whole: the origin refused the third and fourth parts, each
/// retried its five attempts against a limit that stayed, and a part the reader was waiting for
/// failed the read, while a player talking to the origin directly, one connection at a time,
/// played on. A part refused twice in a row now gives way instead (``OriginRequest/givesWayWhenBusy``),
/// its bytes left to the downloads that were accepted, and the resource and the other files of
/// its host (``HostPathMemory``) split across no more connections than were in use when it was
/// refused.
///
/// A refusal may also come from a service that was busy for a moment, so the count is not held
/// for good: it grows by one connection each ``hold`` after the refusal, the way TCP probes for
/// bandwidth after a loss, and a split past what the service accepts is refused again, which
/// doubles the hold (up to ``longestHold``). A service that was busy for a moment gets its
/// connections back a minute later, one at a time; one whose limit stays pays one refused
/// connection per probe, fewer and fewer often. A refusal ``memory`` ago or longer is forgotten.
struct ConnectionAllowance: Sendable {
    /// How long the count learned from a first refusal holds before one more connection is
    /// tried (``StreamCache/Configuration/connectionProbeInterval``, a minute by default): past
    /// a moment's burst of load, short beside a song.
    let firstHold: Duration
    /// ``firstHold`` unless configured otherwise: the default of
    /// ``StreamCache/Configuration/connectionProbeInterval``.
    static let defaultFirstHold: Duration = .seconds(60)
    /// The longest hold, reached by doubling while each probe is refused: ten times the first.
    /// A service's limit on a user's downloads stays as it is for far longer than one song, and
    /// each probe costs a refused request or two.
    var longestHold: Duration { firstHold * 10 }
    /// How long a refusal counts at all, sixty times the first hold: after it, the count grown
    /// by then is let go, and the next refusal starts with ``firstHold`` again.
    var memory: Duration { firstHold * 60 }

    private var connections = 0
    private var refusedAt: ContinuousClock.Instant?
    private var hold: Duration

    /// - Parameter firstHold: the hold after a first refusal, kept within a millisecond and a
    ///   day (the holds are divided into and multiplied).
    init(firstHold: Duration = defaultFirstHold) {
        self.firstHold = min(max(firstHold, .milliseconds(1)), .seconds(86_400))
        hold = self.firstHold
    }

    /// Records that the origin refused one more connection at `now` while `inUse` of this
    /// download's kind were open to it: from then on at most that many (one at least).
    ///
    /// A refusal within the hold of the one before (a second part refused with the first, or
    /// the answers under way counted a moment apart) keeps the fewer count and the hold. One
    /// after it is a probe refused: the count is what was in use, and the hold doubles.
    mutating func recordRefusal(whileUsing inUse: Int, at now: ContinuousClock.Instant = .now) {
        let allowed = max(1, inUse)
        if let refusedAt, now - refusedAt < memory {
            if now - refusedAt < hold {
                connections = min(connections, allowed)
            } else {
                connections = allowed
                hold = min(hold * 2, longestHold)
            }
        } else {
            connections = allowed
            hold = firstHold
        }
        refusedAt = now
    }

    /// The connections the origin is taken to accept at `now`: what it accepted when it last
    /// refused one more, plus one for each ``hold`` since; `nil` when it refused none within
    /// ``memory`` before `now`.
    func connections(at now: ContinuousClock.Instant = .now) -> Int? {
        guard let refusedAt, now - refusedAt < memory else { return nil }
        let probes = Int((now - refusedAt) / hold)
        return connections + probes
    }
}
