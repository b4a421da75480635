/// Bounds how many resources keep their data file open.
///
/// A resource opens its data file on first use and would otherwise keep it until it is evicted,
/// so a server that has played a few thousand files would hold a descriptor for each: past the
/// process's limit (256 by default on macOS, 1024 on many Linux systems, shared with every
/// socket) no file or connection can be opened any more. Resources report each use of their
/// file here; when more than ``limit`` are open, the least recently used are asked to close
/// theirs (``Resource/closeFileIfIdle()``). Only idle ones do, and they reopen it on their next
/// use; readers and downloads hold the file object they were given, so closing never cuts one
/// short.
final class OpenDataFiles: Sendable {
    private struct State {
        var lastUse: [CacheKey: UInt64] = [:]
        var clock: UInt64 = 0
        var closer: (@Sendable ([CacheKey]) -> Void)?
    }

    /// How many data files may stay open before idle ones are closed.
    let limit: Int
    private let state = Locked(State())

    init(limit: Int) { self.limit = max(1, limit) }

    /// Sets what asks resources to close their files (the cache, which knows its resources).
    func setCloser(_ closer: @escaping @Sendable ([CacheKey]) -> Void) {
        state.withLock { $0.closer = closer }
    }

    /// Records a use of `key`'s open file, and asks the least recently used others to close
    /// theirs while more than ``limit`` are open.
    func used(_ key: CacheKey) {
        let (surplus, closer) = state.withLock { state -> ([CacheKey], (@Sendable ([CacheKey]) -> Void)?) in
            state.clock += 1
            state.lastUse[key] = state.clock
            let excess = state.lastUse.count - limit
            guard excess > 0 else { return ([], nil) }
            let oldest = state.lastUse.filter { $0.key != key }.sorted { $0.value < $1.value }.prefix(excess)
            return (oldest.map(\.key), state.closer)
        }
        if !surplus.isEmpty { closer?(surplus) }
    }

    /// Marks `key`'s open file as just used, without closing others: a resource that was asked
    /// to close it while in use.
    func refresh(_ key: CacheKey) {
        state.withLock { state in
            guard state.lastUse[key] != nil else { return }
            state.clock += 1
            state.lastUse[key] = state.clock
        }
    }

    /// Records that `key`'s file is closed (idle, evicted or removed).
    func closed(_ key: CacheKey) {
        state.withLock { _ = $0.lastUse.removeValue(forKey: key) }
    }

    /// The number of resources whose data file is open.
    var count: Int { state.withLock { $0.lastUse.count } }
}
