import StreamCache

/// The origin of a file resolved from the cache while its service could not be reached
/// (``StreamCache/StreamCache/resolve(_:retryingAfter:)``). A request asks the service again once
/// `retryInterval` has passed since the last try, and goes to the origin it then gives, as does
/// every request after; until then each request fails with the error the last try met. So the
/// cached bytes play at once, the others fail as the service did, and all play once it is back.
///
/// The cached bytes' version is unconfirmed meanwhile (``isProvisional``): when a try is due, a
/// read of cached bytes asks for the current version first (``currentInfo()``), and once the
/// service answers, the engine compares it with the cached one, so a file replaced at the service
/// while it was out of reach is fetched anew rather than played old. A try runs to its end even
/// when the read that started it stops waiting (the engine waits for the version a short while),
/// and the next read asks the origin it found.
final class OfflineOrigin: Origin {
    private struct State {
        var failure: StreamCacheError
        var triedAt: ContinuousClock.Instant
        var found: (any Origin)?
        /// The try under way, shared by whoever asks meanwhile.
        var attempt: Task<any Origin, any Error>?
        /// Whether the engine has compared an answer of the origin found with the cached version
        /// (``versionWasChecked()``).
        var confirmed = false
    }

    private let name: String
    private let retryInterval: Duration
    private let resolveAgain: (@Sendable () async throws -> any Origin)?
    private let state: Locked<State>

    /// - Parameters:
    ///   - failure: what the resolution met, thrown until a new try finds the service.
    ///   - resolveAgain: resolves the file anew; `nil` never tries again.
    init(name: String, failure: StreamCacheError, retryInterval: Duration, resolveAgain: (@Sendable () async throws -> any Origin)?) {
        self.name = name
        self.retryInterval = retryInterval
        self.resolveAgain = resolveAgain
        self.state = Locked(State(failure: failure, triedAt: .now, found: nil))
    }

    var logDescription: String { state.withLock { $0.found?.logDescription } ?? "\(name), offline" }

    func open(_ request: OriginRequest) async throws -> OriginResponse {
        try await reached().open(request)
    }

    func currentInfo() async throws -> ResourceInfo {
        try await reached().currentInfo()
    }

    /// Confirmed by the engine's comparison, not by the answer's arrival: an answer that came
    /// after the read stopped waiting for it (on a loaded machine, even one that came just as the
    /// wait ended) was never compared, and a file replaced at the service went on playing its
    /// old bytes with nothing asking again.
    func versionWasChecked() {
        state.withLock { if $0.found != nil { $0.confirmed = true } }
    }

    var isProvisional: Bool {
        guard resolveAgain != nil else { return false }
        let now = ContinuousClock.now
        return state.withLock { state in
            if state.found != nil { return !state.confirmed }
            return state.attempt == nil && now - state.triedAt >= retryInterval
        }
    }

    /// The origin the service gave: the one found, or a new try's once the interval has passed
    /// (joining the try under way); else the last try's failure.
    private func reached() async throws -> any Origin {
        /// What one look at the state finds: the origin, the try to wait for, or why neither.
        enum Look {
            case found(any Origin)
            case trying(Task<any Origin, any Error>)
            case failed(StreamCacheError)
        }
        let now = ContinuousClock.now
        let shared = state
        let look = shared.withLock { current -> Look in
            if let found = current.found { return .found(found) }
            if let attempt = current.attempt { return .trying(attempt) }
            guard let resolveAgain, now - current.triedAt >= retryInterval else { return .failed(current.failure) }
            current.triedAt = now
            let attempt = Task {
                do {
                    let origin = try await resolveAgain()
                    shared.withLock {
                        $0.found = origin
                        $0.attempt = nil
                    }
                    return origin
                } catch {
                    shared.withLock { current in
                        if let failure = error as? StreamCacheError, failure.code == .originUnavailable { current.failure = failure }
                        current.attempt = nil
                    }
                    throw error
                }
            }
            current.attempt = attempt
            return .trying(attempt)
        }
        switch look {
        case .found(let origin): return origin
        case .trying(let attempt): return try await attempt.value
        case .failed(let failure): throw failure
        }
    }

    var maximumRequestLength: Int64? { state.withLock { $0.found }?.maximumRequestLength }
    var servesMultipleRanges: Bool { state.withLock { $0.found }?.servesMultipleRanges ?? false }
    var connectionLimit: OriginConnectionLimit? { state.withLock { $0.found }?.connectionLimit }
    var downloadExecutor: (any TaskExecutor)? { state.withLock { $0.found }?.downloadExecutor }
}
