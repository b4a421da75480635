import StreamCache
import StreamCacheHLS

/// The background prefetches one server runs for the control API and the app, by registration:
/// which one runs, how it ended, and the starts on their way to one.
///
/// A start and a stop of the same registration's prefetch can come at once, from two clients or
/// from Ctrl-C on `streamcache prefetch`; the rule between them is that a stop wins over every
/// start that arrived before it (see ``arriving(of:_:)``) and over the start it names, whenever
/// that one arrives (``ControlAPI/PrefetchRequest/requestID``), and once the server has stopped
/// (``stopAll()``) nothing starts again.
final class ServerPrefetches: Sendable {
    private let state = Locked(State())

    /// When a request to start a prefetch arrived: a stop of the same registration's prefetch
    /// (or the server's) that comes after it, before the prefetch starts, wins.
    struct Arrival: Sendable {
        fileprivate let id: String
        fileprivate let stops: Int
        /// The name the start's request gave itself (``ControlAPI/PrefetchRequest/requestID``).
        fileprivate var requestID: String?

        /// This arrival, for a request that gave itself `requestID` (known once its body is read).
        func named(_ requestID: String?) -> Arrival {
            var named = self
            named.requestID = requestID
            return named
        }
    }

    /// What a prefetch downloads, which tells whether a start for a registration whose prefetch
    /// runs goes on with that one or replaces it.
    enum Plan: Equatable, Sendable {
        /// A file's bytes: `range`, or the whole file when `nil`.
        case bytes(range: ByteRange?, pinning: Bool)
        /// A playlist's variants and segments.
        case playlist(variants: HLSVariantSelection, segmentLimit: Int?, pinning: Bool)

        /// Whether a start for `self`, while a prefetch for `running` is under way, lets that one
        /// go on: one that downloads the same (the same range or the whole file, the same
        /// variants and segments of a playlist) and pins at least as much; cancelled and started
        /// again, a playlist's files under way would lose the bytes on the wire. Any other start
        /// replaces it: a range's prefetch ends at the range's end, so it does not serve a start
        /// for the whole file.
        func isServed(byRunning running: Plan) -> Bool {
            switch (self, running) {
            case (.bytes(let range, let pinning), .bytes(let runningRange, let runningPins)):
                range == runningRange && (runningPins || !pinning)
            case (.playlist(let variants, let segmentLimit, let pinning), .playlist(let runningVariants, let runningLimit, let runningPins)):
                variants == runningVariants && segmentLimit == runningLimit && (runningPins || !pinning)
            default:
                false
            }
        }
    }

    /// What the control API's status tells of a registration's prefetch.
    struct Report: Sendable {
        var running = false
        /// How the last one failed, and the failure's ``StreamCacheError/Code`` (or `cancelled`).
        var error: String?
        var errorCode: String?
        /// The rate of its own a running one has, in bytes per second.
        var rate: Int64?
        /// A playlist's progress, the last one reported.
        var playlist: HLSPrefetchProgress?
    }

    /// The work of one prefetch: download with `pacer`, and report a playlist's progress.
    typealias Work = @Sendable (_ pacer: DownloadPacer, _ report: @escaping @Sendable (HLSPrefetchProgress) -> Void) async throws -> Void

    private struct State {
        /// Per registration, the latest prefetch: running, or ended (how it ended is reported).
        var latest: [String: Prefetch] = [:]
        /// Per registration, the starts that arrived and have not started their prefetch yet
        /// (telling a playlist may cost an origin request first), and the stops that came meanwhile.
        var arriving: [String: Arrivals] = [:]
        /// The starts that stops named, by registration, which do not start when they come:
        /// the newest ``mostNamedStops``, oldest first.
        var namedStops: [NamedStop] = []
        /// Whether the server has stopped: nothing starts after that.
        var isClosed = false
        /// The number of the latest start.
        var serial = 0

        struct Arrivals {
            var count = 0
            var stops = 0
        }

        struct NamedStop: Equatable {
            let id: String
            let requestID: String
        }

        /// How many named stops are kept. A client names the start it stops within a moment of
        /// sending it, so the newest few hundred cover every start still on its way; an old one
        /// forgotten costs a start that lost its race by minutes, which no client has.
        static let mostNamedStops = 256

        /// Whether a stop came for `arrival`'s registration after it arrived, or one named it,
        /// or the server stopped.
        func isStopped(since arrival: Arrival) -> Bool {
            if isClosed || (arriving[arrival.id]?.stops ?? 0) != arrival.stops { return true }
            guard let requestID = arrival.requestID else { return false }
            return namedStops.contains(NamedStop(id: arrival.id, requestID: requestID))
        }

        /// Records a stop of `id`'s prefetch: its latest one is returned, to be cancelled, and
        /// the starts on their way do not start one, nor a later one named `requestID`.
        mutating func stop(_ id: String, requestID: String? = nil) -> Prefetch? {
            arriving[id]?.stops += 1
            if let requestID {
                namedStops.append(NamedStop(id: id, requestID: requestID))
                if namedStops.count > Self.mostNamedStops { namedStops.removeFirst(namedStops.count - Self.mostNamedStops) }
            }
            return latest.removeValue(forKey: id)
        }
    }

    private struct Prefetch {
        var task: Task<Void, Never>
        /// Which start this is: the task of a prefetch replaced by a newer one may still end, and
        /// must not mark the newer one finished or failed.
        let serial: Int
        let plan: Plan
        /// Its own rate, which a request for the same prefetch while it runs sets again.
        let pacer: DownloadPacer
        var finished = false
        var error: String?
        var errorCode: String?
        var playlist: HLSPrefetchProgress?
    }

    /// Whether the server has stopped (``stopAll()``), after which no prefetch starts.
    var hasStopped: Bool { state.withLock(\.isClosed) }

    /// Runs `start` for a request to start `id`'s prefetch, with the arrival it hands to
    /// ``start(_:plan:rate:arrival:work:)``.
    ///
    /// Between a request's arrival and its prefetch's start, the server reads the body and may
    /// ask the origin whether the file is a playlist, a round trip or more. A stop that came
    /// meanwhile (`DELETE …/prefetch`, the registration removed, the server stopping) used to
    /// find nothing running, answer that the prefetch had stopped, and the prefetch then started
    /// and ran to the end of the file: Ctrl-C on `streamcache prefetch` beside a server, pressed
    /// in that moment, said the server had stopped it while the server downloaded on. Now the
    /// stop wins, as it would had the prefetch started at once.
    func arriving<Result>(of id: String, _ start: (Arrival) async throws -> Result) async rethrows -> Result {
        let arrival = state.withLock { state in
            state.arriving[id, default: State.Arrivals()].count += 1
            return Arrival(id: id, stops: state.arriving[id]?.stops ?? 0)
        }
        defer {
            state.withLock { state in
                state.arriving[id]?.count -= 1
                if state.arriving[id]?.count == 0 { state.arriving[id] = nil }
            }
        }
        return try await start(arrival)
    }

    /// Whether `arrival`'s start should not start: a stop came after it arrived, or named it, or
    /// the server has stopped. Asked before a start costs an origin request; the start itself
    /// asks again (``start(_:plan:rate:arrival:work:)``), as a stop may come meanwhile.
    func isStopped(_ arrival: Arrival) -> Bool {
        state.withLock { $0.isStopped(since: arrival) }
    }

    /// Starts `work` as `id`'s prefetch, or returns the prefetch already running when it serves
    /// `plan` (``Plan/isServed(byRunning:)``), then at `rate`; any other one is cancelled.
    ///
    /// - Parameter rate: The bytes per second the prefetch takes at most, besides the cache's
    ///   background rate; `nil` for none.
    /// - Returns: The prefetch's task; `nil` when a stop came after `arrival`, or the server has
    ///   stopped.
    func start(_ id: String, plan: Plan, rate: Int64?, arrival: Arrival, work: @escaping Work) -> Task<Void, Never>? {
        let shared = state  // the task's: inside the lock below, `state` names the value
        return state.withLock { state -> Task<Void, Never>? in
            guard !state.isStopped(since: arrival) else { return nil }
            if let running = state.latest[id], !running.finished, plan.isServed(byRunning: running.plan) {
                if running.pacer.bytesPerSecond != rate { running.pacer.bytesPerSecond = rate }
                return running.task
            }
            state.latest[id]?.task.cancel()
            state.serial += 1
            let serial = state.serial
            let pacer = DownloadPacer(bytesPerSecond: rate)
            let task = Task {
                do {
                    try await work(pacer) { progress in
                        shared.withLock { if $0.latest[id]?.serial == serial { $0.latest[id]?.playlist = progress } }
                    }
                    Self.finish(serial, of: id, with: nil, in: shared)
                } catch {
                    Self.finish(serial, of: id, with: error, in: shared)
                }
            }
            state.latest[id] = Prefetch(task: task, serial: serial, plan: plan, pacer: pacer)
            return task
        }
    }

    /// Records how prefetch `serial` of `id` ended, unless a newer one replaced it.
    private static func finish(_ serial: Int, of id: String, with error: (any Error)?, in state: Locked<State>) {
        state.withLock { state in
            guard state.latest[id]?.serial == serial else { return }
            state.latest[id]?.finished = true
            if let error {
                state.latest[id]?.error = "\(error)"
                state.latest[id]?.errorCode = (error as? StreamCacheError)?.code.description ?? (error is CancellationError ? "cancelled" : nil)
            }
        }
    }

    /// Whether `id`'s prefetch is under way, at what rate of its own, and how the last one failed.
    func report(for id: String) -> Report {
        state.withLock { state in
            guard let prefetch = state.latest[id] else { return Report() }
            return Report(running: !prefetch.finished, error: prefetch.error, errorCode: prefetch.errorCode,
                          rate: prefetch.finished ? nil : prefetch.pacer.bytesPerSecond, playlist: prefetch.playlist)
        }
    }

    /// Stops `id`'s prefetch, if one runs, and returns once it has ended: its downloads have been
    /// cut (see `Resource.endDownloadsOfEndedPrefetch(finished:)`), and what they fetched is in
    /// the cache. A start that arrived before the stop does not start one, nor the start named
    /// `requestID` whenever it arrives.
    func stop(_ id: String, requestID: String? = nil) async {
        let task = state.withLock { $0.stop(id, requestID: requestID) }?.task
        task?.cancel()
        await task?.value
    }

    /// Cancels `id`'s prefetch, if one runs or is starting, without waiting for it to end.
    func cancel(_ id: String) {
        state.withLock { $0.stop(id) }?.task.cancel()
    }

    /// Stops every prefetch and the starts on their way, and returns once they have ended. No
    /// prefetch starts afterwards: the server has stopped.
    func stopAll() async {
        let tasks = state.withLock { state -> [Task<Void, Never>] in
            defer { state.latest.removeAll() }
            state.isClosed = true
            return state.latest.values.map(\.task)
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }
}
