/// Holds the downloads no reader waits for (prefetches, background fills) to a number of bytes
/// per second together, across every resource of a cache
/// (``StreamCache/Configuration/backgroundDownloadRate``): a "download for offline" on a phone's
/// metered link, or beside a family's video calls on a home line, takes no more than the user
/// gives it. A player's read is never held back: a stalled song costs more than a slower download.
///
/// Pacing works on what the download takes in: it waits before taking more, the transport stops
/// reading the socket once its buffer is full, and TCP slows the origin to the same rate, as
/// curl's `--limit-rate` and rclone's `--bwlimit` do. The allowance is a virtual clock (the
/// generic cell rate algorithm): each run of bytes moves it on by the time those bytes take at the
/// rate, and a download waits until the clock, less ``burst``, has caught up with now. An idle
/// pacer saves no credit beyond ``burst``, so a download that starts after a pause does not rush.
///
/// A pacer of one's own holds the prefetches given it (``Resource/prefetch(_:pinning:pacedBy:)``)
/// to its rate together, within the cache's background rate: an album downloaded slowly beside
/// another that goes at full speed. Its rate may be set again while they run.
///
/// ```swift
/// let slowly = DownloadPacer(bytesPerSecond: 500_000)
/// for track in album { try await cache.resource(for: track).prefetch(pinning: true, pacedBy: slowly) }
/// ```
public final class DownloadPacer: Sendable {
    /// How far the allowance may run ahead of now before a download waits: what goes at once
    /// after a pause, and what a run of bytes may take beyond its share without waiting for
    /// the time it is due (so a run of a few kilobytes does not wait at all).
    static let burst: Duration = .milliseconds(250)

    private struct State {
        var bytesPerSecond: Int64?
        /// When the bytes taken so far will have had their time at the rate.
        var due: ContinuousClock.Instant?
        /// How many times the rate was set.
        var changes = 0
    }

    private let state: Locked<State>

    /// Creates a pacer.
    ///
    /// - Parameter bytesPerSecond: the rate, `nil` or `0` (or less) for none.
    public init(bytesPerSecond: Int64?) {
        state = Locked(State(bytesPerSecond: Self.rate(bytesPerSecond)))
    }

    /// The rate, `nil` for none. Setting it applies to the next bytes taken, and a download that
    /// waits for its turn at the old rate goes on at once; the allowance starts again from now.
    public var bytesPerSecond: Int64? {
        get { state.withLock { $0.bytesPerSecond } }
        set {
            state.withLock { state in
                state.bytesPerSecond = Self.rate(newValue)
                state.due = nil
                state.changes += 1
            }
        }
    }

    /// How many times the rate was set: a download that waits for its turn at the old rate
    /// sees a change and goes on at the new one (``waitFor(_:)``).
    var changes: Int { state.withLock { $0.changes } }

    /// Waits until `turn` has come, or until the rate is set again after its bytes were counted:
    /// then the time was counted at a rate that no longer holds. Looks every
    /// ``changeCheckInterval``.
    func waitFor(_ turn: Turn) async {
        while changes == turn.rateSetting {
            let left = turn.until - .now
            guard left > .zero else { return }
            do { try await Task.sleep(for: min(left, Self.changeCheckInterval)) } catch { return }
        }
    }

    /// How often a wait looks whether the rate was set again.
    static let changeCheckInterval: Duration = .milliseconds(250)

    /// Whether a rate is set.
    var limits: Bool { bytesPerSecond != nil }

    /// A download's wait for its turn: until when, at the rate set when it was counted.
    struct Turn: Equatable {
        /// When the bytes taken have had their time, less the allowance.
        let until: ContinuousClock.Instant
        /// ``changes`` when the bytes were counted: a rate set after that ends the wait.
        let rateSetting: Int
    }

    /// Counts `bytes` taken at `now` and returns the wait of the download that took them, `nil`
    /// when it need not wait: no rate is set, or the bytes are within the allowance.
    func take(_ bytes: Int64, at now: ContinuousClock.Instant = .now) -> Turn? {
        state.withLock { state in
            guard let rate = state.bytesPerSecond, bytes > 0 else { return nil }
            let from = max(state.due ?? now, now)
            let due = from + .seconds(Double(bytes) / Double(rate))
            state.due = due
            let until = due - Self.burst
            return until > now ? Turn(until: until, rateSetting: state.changes) : nil
        }
    }

    /// The wait of a download about to ask for more bytes: until the bytes taken so far have had
    /// their time, less the allowance; `nil` when it need not wait. Nothing is counted.
    func pendingTurn(at now: ContinuousClock.Instant = .now) -> Turn? {
        state.withLock { state in
            guard state.bytesPerSecond != nil, let due = state.due else { return nil }
            let until = due - Self.burst
            return until > now ? Turn(until: until, rateSetting: state.changes) : nil
        }
    }

    /// How many connections side by side the rate has use for, when one connection brings
    /// `connectionSpeed` bytes per second: more would each be held to a share of it, holding
    /// connections a reader may want. `nil` when no rate is set.
    func usefulConnections(atConnectionSpeed connectionSpeed: Double?) -> Int? {
        guard let rate = bytesPerSecond else { return nil }
        guard let connectionSpeed, connectionSpeed > 0 else { return 1 }
        // Bounded before the conversion: a rate near `Int64.max` over a connection that drips
        // (a byte a second) is past `Int.max`, and any count past the connections allowed is as good.
        return max(1, Int(min((Double(rate) / connectionSpeed).rounded(.up), Double(ConnectionAllowance.mostConnections))))
    }

    private static func rate(_ bytesPerSecond: Int64?) -> Int64? {
        guard let bytesPerSecond, bytesPerSecond > 0 else { return nil }
        return bytesPerSecond
    }
}
