import StreamCache

/// The origin of a file resolved from the cache while its service could not be reached
/// (``StreamCache/StreamCache/resolve(_:retryingAfter:)``). A request asks the service again once
/// `retryInterval` has passed since the last try, and goes to the origin it then gives, as does
/// every request after; until then each request fails with the error the last try met. So the
/// cached bytes play at once, the others fail as the service did, and all play once it is back.
final class OfflineOrigin: Origin {
    private struct State {
        var failure: StreamCacheError
        var triedAt: ContinuousClock.Instant
        var found: (any Origin)?
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
        let now = ContinuousClock.now
        let (found, tries) = state.withLock { state -> ((any Origin)?, Bool) in
            if let found = state.found { return (found, false) }
            guard resolveAgain != nil, now - state.triedAt >= retryInterval else { return (nil, false) }
            state.triedAt = now
            return (nil, true)
        }
        if let found { return try await found.open(request) }
        guard tries, let resolveAgain else { throw state.withLock { $0.failure } }
        do {
            let origin = try await resolveAgain()
            state.withLock { $0.found = origin }
            return try await origin.open(request)
        } catch let failure as StreamCacheError where failure.code == .originUnavailable {
            state.withLock { $0.failure = failure }
            throw failure
        }
    }

    var maximumRequestLength: Int64? { state.withLock { $0.found }?.maximumRequestLength }
    var servesMultipleRanges: Bool { state.withLock { $0.found }?.servesMultipleRanges ?? false }
    var connectionLimit: OriginConnectionLimit? { state.withLock { $0.found }?.connectionLimit }
    var downloadExecutor: (any TaskExecutor)? { state.withLock { $0.found }?.downloadExecutor }
}
