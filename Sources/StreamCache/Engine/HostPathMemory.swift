#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the transfers of each origin host's resources showed about the path to it, shared by
/// every resource of a cache: the best speed of one request alone and of several side by side
/// within ``ParallelGain/memory``, as each resource's ``ParallelGain`` records them.
///
/// A resource otherwise finds out on its own whether its connections gain, and that costs
/// requests: on a link the connections share, a song's prefetch spent two or three requests
/// more than the four it needs (a part first measures, then waits for the bytes before it); on
/// cloud storage that caps each connection, its parts waited for that measurement before they
/// asked for their shares. The songs of an album come from one host, over one path, a few
/// seconds apart; what the first one measured holds for the next. A resource's own samples still
/// come first (``Resource/connectionsGain(minimumSpeedup:now:)``): only what it has not measured
/// yet is taken from here.
final class HostPathMemory: Sendable {
    /// The best recent samples of one host's requests.
    private struct Path {
        var alone = WindowedMaximum(window: ParallelGain.memory)
        var together = WindowedMaximum(window: ParallelGain.memory)
    }

    /// The most hosts remembered: each is two short arrays, and a cache talks to a handful. One
    /// more than that makes room by forgetting the one measured longest ago.
    private static let mostHosts = 64

    private let paths = Locked([String: (path: Path, updated: ContinuousClock.Instant)]())
    private let allowances = Locked([String: ConnectionAllowance]())
    /// The first hold of each host's ``ConnectionAllowance``.
    private let connectionProbeInterval: Duration
    /// Told when a host's allowance changes, so that the cache keeps it (``allowanceSnapshots(at:wallNow:)``).
    private let allowancesChanged: @Sendable (HostPathMemory) -> Void

    /// - Parameters:
    ///   - connectionProbeInterval: how long a host's refusal of one more connection holds its
    ///     files to the connections it accepted before one more is tried
    ///     (``StreamCache/Configuration/connectionProbeInterval``).
    ///   - remembered: the allowances an earlier process learned, as the cache's index kept them.
    ///   - allowancesChanged: called, outside the memory's lock, after a refusal or an accepted
    ///     probe changed a host's allowance.
    init(connectionProbeInterval: Duration = ConnectionAllowance.defaultFirstHold,
         remembered: [String: ConnectionAllowance.Snapshot] = [:],
         allowancesChanged: @escaping @Sendable (HostPathMemory) -> Void = { _ in }) {
        self.connectionProbeInterval = connectionProbeInterval
        self.allowancesChanged = allowancesChanged
        let now = ContinuousClock.now, wallNow = Date()
        let restored = remembered.mapValues { ConnectionAllowance($0, firstHold: connectionProbeInterval, at: now, wallNow: wallNow) }
        allowances.withLock { $0 = restored.filter { $0.value.connections(at: now) != nil } }
    }

    /// Records `sample`, which a request (or a split read's parts together) to `host` gave at `now`.
    func record(_ sample: ParallelGain.Sample, host: String, at now: ContinuousClock.Instant = .now) {
        paths.withLock { paths in
            var path = paths[host]?.path ?? Path()
            switch sample {
            case .alone(let rate): path.alone.record(rate, at: now)
            case .together(let rate): path.together.record(rate, at: now)
            }
            paths[host] = (path, now)
            if paths.count > Self.mostHosts, let oldest = paths.min(by: { $0.value.updated < $1.value.updated })?.key {
                paths[oldest] = nil
            }
        }
    }

    /// The best speed of one request alone and of several together that `host`'s requests reached
    /// within ``ParallelGain/memory`` before `now`; `nil` where none was measured.
    func rates(of host: String, at now: ContinuousClock.Instant = .now) -> (alone: Double?, together: Double?) {
        paths.withLock { paths in
            guard let path = paths[host]?.path else { return (nil, nil) }
            return (path.alone.maximum(at: now), path.together.maximum(at: now))
        }
    }

    /// Records that `host` refused one more connection at `now` while `inUse` were open to it
    /// (``ConnectionAllowance``): the next files of the host split across no more.
    func recordRefusal(host: String, whileUsing inUse: Int, at now: ContinuousClock.Instant = .now) {
        allowances.withLock { allowances in
            allowances[host, default: ConnectionAllowance(firstHold: connectionProbeInterval)].recordRefusal(whileUsing: inUse, at: now)
            if allowances.count > Self.mostHosts {
                allowances = allowances.filter { $0.value.connections(at: now) != nil }
            }
        }
        allowancesChanged(self)
    }

    /// Records that `host` answered while `inUse` of a file's downloads had its answers at `now`:
    /// a probe past the count it last accepted raises the count (``ConnectionAllowance/recordAcceptance(whileUsing:at:)``).
    func recordAcceptance(host: String, whileUsing inUse: Int, at now: ContinuousClock.Instant = .now) {
        let changed = allowances.withLock { allowances -> Bool in
            guard let before = allowances[host] else { return false }
            allowances[host]?.recordAcceptance(whileUsing: inUse, at: now)
            return allowances[host] != before
        }
        if changed { allowancesChanged(self) }
    }

    /// Every host's allowance that still remembers a refusal at `now`, with wall-clock times, for
    /// the cache's index.
    func allowanceSnapshots(at now: ContinuousClock.Instant = .now, wallNow: Date = Date()) -> [String: ConnectionAllowance.Snapshot] {
        allowances.withLock { $0.compactMapValues { $0.snapshot(at: now, wallNow: wallNow) } }
    }

    /// The connections `host` is taken to accept at once at `now` (``ConnectionAllowance``): what
    /// it accepted when it last refused one more, and one more for each hold since; `nil` when it
    /// refused none within ``ConnectionAllowance/memory``.
    func allowedConnections(of host: String, at now: ContinuousClock.Instant = .now) -> Int? {
        allowances.withLock { $0[host]?.connections(at: now) }
    }
}
