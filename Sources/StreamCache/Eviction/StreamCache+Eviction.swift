#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension StreamCache {
    // Which resources leave the cache, and when: least recently used first, never a pinned one
    // or one being read, for three reasons a configuration may name (``Configuration/maximumSize``,
    // ``Configuration/maximumAge``, ``Configuration/minimumFreeSpace``), in that order of cost:
    // age costs nothing the user wants, size was agreed on, free space is the device's.

    /// The rules every pass of this cache follows, as its configuration names them.
    var configuredEvictionRules: EvictionRules {
        EvictionRules(maximumSize: configuration.maximumSize, maximumAge: configuration.maximumAge, minimumFreeSpace: configuration.minimumFreeSpace)
    }

    /// Whether any of the eviction settings is set.
    var evicts: Bool { !configuredEvictionRules.isEmpty }

    /// Runs one eviction pass by `rules` now, whatever the cache's own settings, and returns what
    /// it evicted, least recently used first: `streamcache cache prune`, or an app's "free up
    /// space". With `dryRun`, nothing is removed: the pass returns what it would evict, counting
    /// the free space each removal would give by the bytes it frees.
    ///
    /// The pass passes over pinned resources and those being read, downloaded or asked for
    /// while it runs (see ``EvictionRules``); it may run beside one the cache's own settings
    /// started.
    ///
    /// - Throws: ``StreamCacheError`` (`cacheInUse`) after ``shutdown()``; (`cacheIOFailed`) when
    ///   the index cannot be read.
    public func evict(_ rules: EvictionRules, dryRun: Bool = false) async throws -> [EvictedResource] {
        try checkNotShutDown()
        return try await evictionPass(following: rules, checkingAge: true, dryRun: dryRun)
    }

    /// Runs an eviction pass when the cache opens, and every
    /// ``Configuration/evictionCheckInterval`` after when a maximum age or a minimum free space
    /// is set; ``shutdown()`` ends it.
    func startEvictionWatch() {
        guard evicts else { return }
        enforceEvictionPolicy(checkingAge: true)
        guard configuration.maximumAge != nil || configuration.minimumFreeSpace != nil else { return }
        let interval = configuration.evictionCheckInterval
        let watch = Task { [weak self] in
            while true {
                do { try await Task.sleep(for: interval) } catch { return }
                guard let self else { return }
                self.enforceEvictionPolicy(checkingAge: true)
            }
        }
        eviction.withLock { $0.watch = watch }
    }

    /// Evicts what the settings call for: after a commit (the cache grew, the volume filled),
    /// and with `checkingAge`, when the cache opens and on its watch. One pass runs at a time; a
    /// pass asked for during one runs after it.
    func enforceEvictionPolicy(checkingAge: Bool = false) {
        guard evicts else { return }
        eviction.withLock { state in
            guard state.task == nil else {
                state.againCheckingAge = (state.againCheckingAge ?? false) || checkingAge
                return
            }
            state.task = Task { [weak self] in
                var checkingAge = checkingAge
                while let self {
                    await self.evictionPass(checkingAge: checkingAge)
                    let again = self.eviction.withLock { state -> Bool? in
                        defer { state.againCheckingAge = nil }
                        if state.againCheckingAge == nil { state.task = nil }
                        return state.againCheckingAge
                    }
                    guard let again else { break }
                    checkingAge = again
                }
            }
        }
    }

    /// One pass: resources not read within the maximum age (`checkingAge`); then, least
    /// recently used first, down to 90 % of the maximum size when the cache is over it (so a
    /// full cache does not run a pass after every commit), and until the volume has a tenth more
    /// than the minimum free space when it has less.
    ///
    /// A resource asked for (``resource(for:origin:)``) counts as used when it was asked for, and
    /// one the process opened the cache to read (``Configuration/keysToBeRead``, or by an alias:
    /// ``Configuration/aliasesToBeRead``) when it opened
    /// it: one is asked for to be read, and its read may begin only once its caller has done
    /// something else first. Counted by its last read alone, a file older than the maximum age
    /// was evicted by the pass that runs as the cache opens, and then fetched again whole by the
    /// read it was asked for.
    func evictionPass(checkingAge: Bool, now: Date = Date()) async {
        do {
            _ = try await evictionPass(following: configuredEvictionRules, checkingAge: checkingAge, now: now)
        } catch {
            configuration.logger.info("eviction failed", metadata: ["error": "\(error)"])
        }
    }

    /// A pass by `rules` (the age rule only with `checkingAge`); returns what it evicted, or with
    /// `dryRun` what it would.
    func evictionPass(following rules: EvictionRules, checkingAge: Bool, now: Date = Date(), dryRun: Bool = false) async throws -> [EvictedResource] {
        let began = Date()
        let ageCutoff = checkingAge ? rules.maximumAge.map { now - $0.timeInterval } : nil
        var total = try await store.totalCachedBytes()
        let overSize = rules.maximumSize.map { total > $0 } ?? false
        let freeAtStart = freeSpace()
        // A tenth more than the minimum, at most the largest count: a minimum near `Int64.max`
        // (the control API's prune takes any count) stopped the process here.
        let freeSpaceTarget = rules.minimumFreeSpace.flatMap { minimum in
            freeAtStart.map { $0 < minimum } == true ? Self.saturatingSum(minimum, minimum / 10) : nil
        }
        guard ageCutoff != nil || overSize || freeSpaceTarget != nil else { return [] }
        let busy = usage.busyKeys
        // An alias is a hint: an index that cannot tell what one names costs its resource this protection only.
        let toBeRead = configuration.aliasesToBeRead.isEmpty ? configuration.keysToBeRead
            : configuration.keysToBeRead.union((try? await store.keys(aliasedBy: configuration.aliasesToBeRead)) ?? [])
        // Least recently used first, a resource asked for as used then (one the process opened
        // the cache to read, when it opened it).
        var candidates = try await store.entries().filter { !$0.pinned && !busy.contains($0.key) }.map { entry in
            var entry = entry
            if let asked = resources.existing(entry.key)?.askedForAt.withLock({ $0 }) { entry.lastAccessedAt = max(entry.lastAccessedAt, asked) }
            if toBeRead.contains(entry.key) { entry.lastAccessedAt = max(entry.lastAccessedAt, openedAt) }
            return entry
        }.sorted { $0.lastAccessedAt < $1.lastAccessedAt }
        var evicted: [EvictedResource] = []
        func evict(because reason: EvictionReason, picking goes: (CacheStore.Entry, _ freed: Int64) -> Bool) async -> Int64 {
            var left: [CacheStore.Entry] = []
            var freed: Int64 = 0
            for candidate in candidates {
                // A candidate that cannot be removed (a read began, it was asked for) is left,
                // and the next one is asked about.
                guard goes(candidate, freed) else {
                    left.append(candidate)
                    continue
                }
                if !dryRun, !(await self.evict(candidate, because: reason, unlessAskedForSince: began)) {
                    left.append(candidate)
                    continue
                }
                freed += candidate.spans.coveredByteCount
                evicted.append(EvictedResource(key: candidate.key, bytes: candidate.spans.coveredByteCount, reason: reason))
            }
            candidates = left
            return freed
        }
        if let ageCutoff {
            total -= await evict(because: .age) { candidate, _ in candidate.lastAccessedAt < ageCutoff }
        }
        if let limit = rules.maximumSize, total > limit {
            let target = limit - limit / 10
            total -= await evict(because: .size) { _, freed in total - freed > target }
        }
        if let freeSpaceTarget {
            // The volume is asked again before each removal: what a removal frees is the data
            // file's blocks, not its byte count, and other programs write too. A dry run frees
            // nothing, and counts by bytes.
            let freedBefore = evicted.reduce(Int64(0)) { $0 + $1.bytes }
            _ = await evict(because: .freeSpace) { _, freed in
                let free = dryRun ? freeAtStart.map { $0 + freedBefore + freed } : freeSpace()
                return free.map { $0 < freeSpaceTarget } ?? false
            }
        }
        return evicted
    }

    private static func saturatingSum(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflows) = a.addingReportingOverflow(b)
        return overflows ? (b > 0 ? .max : .min) : sum
    }

    /// The bytes still free for the cache on its volume (``Configuration/volumeFreeSpace``).
    private func freeSpace() -> Int64? {
        configuration.volumeFreeSpace(configuration.directory)
    }

    /// Removes `entry` and counts it; `false` when it could not be removed. A read may begin, or
    /// the resource be asked for, between the pass's look at what is used (`began`) and the
    /// removal, which then refuses: the pass goes on to the next candidate rather than leaving
    /// the cache over its limit.
    private func evict(_ entry: CacheStore.Entry, because reason: EvictionReason, unlessAskedForSince began: Date) async -> Bool {
        let removed: Bool
        do {
            removed = try await removeResource(entry.key, unlessAskedForSince: began)
        } catch {
            configuration.logger.debug("not evicted", metadata: ["key": "\(entry.key)", "reason": "\(error)"])
            return false
        }
        guard removed else { return false }
        metrics.recordEviction(bytes: entry.spans.coveredByteCount)
        configuration.logger.info("evicted", metadata: ["key": "\(entry.key)", "bytes": "\(entry.spans.coveredByteCount)", "why": "\(reason)"])
        return true
    }
}
