#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

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
/// for good: one ``hold`` after the refusal, one connection more is allowed, the way TCP probes for
/// bandwidth after a loss. A split the service accepts at that count makes it the count
/// (``recordAcceptance(whileUsing:at:)``), and one more is allowed a hold later; a split past what
/// the service accepts is refused again, which doubles the hold (up to ``longestHold``). A service
/// that was busy for a moment gets its connections back a minute apart, one at a time; one whose
/// limit stays pays one refused connection per probe, fewer and fewer often. A refusal ``memory``
/// ago or longer is forgotten.
///
/// The count grows only while it is used, as TCP's congestion window does (RFC 7661): a host left
/// alone for ten holds used to be asked for ten connections more than it last accepted, and every
/// one of the split's extra parts past its limit was refused (twice each, before it gave way).
/// Now it is asked for one more, and only one part is refused if the limit stayed.
///
/// What a cache learned is kept in its index (``Snapshot``), so a new process does not pay the
/// refusals again.
struct ConnectionAllowance: Sendable, Equatable {
    /// How long the count learned from a first refusal holds before one more connection is
    /// tried (``StreamCache/Configuration/connectionProbeInterval``, a minute by default): past
    /// a moment's burst of load, short beside a song.
    let firstHold: Duration
    /// ``firstHold`` unless configured otherwise: the default of
    /// ``StreamCache/Configuration/connectionProbeInterval``.
    static let defaultFirstHold: Duration = .seconds(60)
    /// More connections at once than any host allows: the bound on a count that comes from
    /// outside (a quotient of rates, a row of the index), so that a caller's own limit is the one
    /// that counts and the arithmetic on it cannot overflow.
    static let mostConnections = 1 << 20
    /// The longest hold, reached by doubling while each probe is refused: ten times the first.
    /// A service's limit on a user's downloads stays as it is for far longer than one song, and
    /// each probe costs a refused request or two.
    var longestHold: Duration { firstHold * 10 }
    /// How long a refusal counts at all, sixty times the first hold: after it, the count grown
    /// by then is let go, and the next refusal starts with ``firstHold`` again.
    var memory: Duration { firstHold * 60 }

    private var connections = 0
    private var refusedAt: ContinuousClock.Instant?
    /// When ``connections`` was last taught, by a refusal or by a probe accepted: one more is
    /// allowed a ``hold`` after it.
    private var taughtAt: ContinuousClock.Instant?
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
    /// A refusal within the hold of the count's last lesson (a second part refused with the
    /// first, or the answers under way counted a moment apart) keeps the fewer count and the
    /// hold. One after it is a probe refused: the count is what was in use, and the hold doubles.
    mutating func recordRefusal(whileUsing inUse: Int, at now: ContinuousClock.Instant = .now) {
        let allowed = max(1, inUse)
        if let refusedAt, let taughtAt, now - refusedAt < memory {
            if now - taughtAt < hold {
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
        taughtAt = now
    }

    /// Records that the origin answered while `inUse` downloads of this kind had its answers at
    /// `now`: a probe past the count, accepted, is the count from then on, and the next probe
    /// comes a hold later. Nothing changes within the count, before the probe is due (answers
    /// of requests sent before the refusal), or with no refusal remembered.
    mutating func recordAcceptance(whileUsing inUse: Int, at now: ContinuousClock.Instant = .now) {
        guard let refusedAt, let lastTaught = taughtAt, now - refusedAt < memory, now - lastTaught >= hold, inUse > connections else { return }
        // One more at a time: the probe is one past the count.
        connections += 1
        taughtAt = now
    }

    /// The connections the origin is taken to accept at `now`: what it accepted when it was last
    /// taught, and one more once a ``hold`` has passed since; `nil` when it refused none within
    /// ``memory`` before `now`.
    func connections(at now: ContinuousClock.Instant = .now) -> Int? {
        guard let refusedAt, let taughtAt, now - refusedAt < memory else { return nil }
        return connections + (now - taughtAt >= hold ? 1 : 0)
    }

    /// An allowance as a cache's index keeps it: a continuous clock's instants mean nothing to
    /// another process, so its times are the wall clock's.
    struct Snapshot: Sendable, Equatable {
        /// The connections the origin last accepted (before any probe due).
        var connections: Int
        /// When it last refused one more.
        var refusedAt: Date
        /// When the count was last taught, by that refusal or by a probe accepted.
        var taughtAt: Date
        /// How long after ``taughtAt`` one more is tried.
        var hold: Duration
    }

    /// The allowance as of `now` (`wallNow` on the wall clock); `nil` when it remembers no refusal.
    func snapshot(at now: ContinuousClock.Instant = .now, wallNow: Date = Date()) -> Snapshot? {
        guard let refusedAt, let taughtAt, now - refusedAt < memory else { return nil }
        func date(_ instant: ContinuousClock.Instant) -> Date { wallNow - (now - instant).timeInterval }
        return Snapshot(connections: connections, refusedAt: date(refusedAt), taughtAt: date(taughtAt), hold: hold)
    }

    /// The allowance `snapshot` describes, placed on this process's clock by `now` and `wallNow`.
    /// Times ahead of `wallNow` (a clock set back since) count as `wallNow`, and the hold is
    /// kept within this allowance's first and longest.
    init(_ snapshot: Snapshot, firstHold: Duration = defaultFirstHold, at now: ContinuousClock.Instant = .now, wallNow: Date = Date()) {
        self.init(firstHold: firstHold)
        func instant(_ date: Date) -> ContinuousClock.Instant { now - .seconds(max(0, wallNow.timeIntervalSince(date))) }
        connections = max(1, snapshot.connections)
        refusedAt = instant(snapshot.refusedAt)
        taughtAt = instant(max(snapshot.taughtAt, snapshot.refusedAt))
        hold = min(max(snapshot.hold, self.firstHold), longestHold)
    }
}
