/// The ``Resource`` objects a cache has in memory: one per key for as long as anything holds it,
/// and the most recently used ones even when nothing does.
///
/// A cache used to keep every resource it had made until the process ended, with its cached
/// ranges, info and statistics: about 10 KB each, so a server that had probed a library of 50,000
/// tracks held half a gigabyte for files nobody was playing. Now the map holds resources weakly,
/// and a bounded list holds the ``limit`` most recently asked for strongly. A resource nobody holds
/// and that has fallen off the list is freed; the next request for its key makes a new one, which
/// loads its state from the index.
///
/// Freeing never splits a key in two: whatever still uses a resource holds it (a caller, a read,
/// a download, a commit waiting in its store chain, a subscriber to its events), so while it is
/// alive every request for its key gets that same object, and "one download per byte" holds.
final class ResidentResources: Sendable {
    private struct WeakResource: Sendable {
        weak var resource: Resource?
    }

    private struct State: Sendable {
        var resources: [CacheKey: WeakResource] = [:]
        /// The recently asked-for resources, held strongly, with the time of their last request.
        var recent: [CacheKey: (resource: Resource, lastUse: UInt64)] = [:]
        var clock: UInt64 = 0
        /// When ``resources`` reaches this size, entries of freed resources are swept out.
        var sweepAt = 64
    }

    /// How many recently used resources stay in memory while nothing else holds them.
    let limit: Int
    private let state = Locked(State())

    init(limit: Int) { self.limit = max(0, limit) }

    /// The resource for `key`: the one in memory, else a new one from `make`.
    ///
    /// - Parameter makesRecent: Whether the request counts as a use, which keeps the resource in
    ///   memory for a while (not for one made only to be removed).
    /// - Returns: The resource, and whether `make` made it.
    func resource(for key: CacheKey, makesRecent: Bool = true, make: () -> Resource) -> (resource: Resource, isNew: Bool) {
        // A resource dropped from the recent list may be freed right there, and freeing one must
        // not happen under the lock; so the dropped one leaves the lock in `released`.
        var released: Resource?
        let result = state.withLock { state -> (Resource, Bool) in
            state.clock += 1
            if let existing = state.resources[key]?.resource {
                // One that fell off the list but is still held (a commit, a download) comes back
                // on it: the list must drop its oldest then too, or it outgrows its limit until
                // a new resource is made, which may be never.
                if makesRecent { released = makeRecent(existing, for: key, in: &state) }
                return (existing, false)
            }
            let created = make()
            state.resources[key] = WeakResource(resource: created)
            if makesRecent { released = makeRecent(created, for: key, in: &state) }
            if state.resources.count >= state.sweepAt {
                state.resources = state.resources.filter { $0.value.resource != nil }
                state.sweepAt = max(64, 2 * state.resources.count)
            }
            return (created, true)
        }
        _ = released
        return result
    }

    /// Puts `resource` at the recent end of the list, and returns the one that falls off it.
    private func makeRecent(_ resource: Resource, for key: CacheKey, in state: inout State) -> Resource? {
        guard limit > 0 else { return nil }
        state.recent[key] = (resource, state.clock)
        guard state.recent.count > limit, let oldest = state.recent.min(by: { $0.value.lastUse < $1.value.lastUse })?.key else { return nil }
        return state.recent.removeValue(forKey: oldest)?.resource
    }

    /// The resource for `key` if one is in memory, without making it more recent.
    func existing(_ key: CacheKey) -> Resource? {
        state.withLock { $0.resources[key]?.resource }
    }

    /// Every resource in memory.
    var all: [Resource] {
        state.withLock { state in state.resources.values.compactMap(\.resource) }
    }

    /// The number of resources in memory.
    var count: Int { all.count }
}
