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

    /// Why a resource was evicted, for the log.
    enum EvictionReason: String, Sendable {
        case age = "not read for longer than the maximum age"
        case size = "the cache is over its maximum size"
        case freeSpace = "the volume has less than the minimum free space"
    }

    /// Whether any of the eviction settings is set.
    var evicts: Bool {
        configuration.maximumSize != nil || configuration.maximumAge != nil || configuration.minimumFreeSpace != nil
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
    /// A resource asked for (``resource(for:origin:)``) counts as used when it was asked for: one
    /// is asked for to be read, and its read may begin only once its caller has done something
    /// else first (`get` opens the cache, then its output file). Counted by its last read alone, a
    /// file older than the maximum age was evicted by the pass that runs as the cache opens, and
    /// then fetched again whole by the read it was asked for.
    func evictionPass(checkingAge: Bool, now: Date = Date()) async {
        let began = Date()
        do {
            let ageCutoff = checkingAge ? configuration.maximumAge.map { now - $0.timeInterval } : nil
            var total = try await store.totalCachedBytes()
            let overSize = configuration.maximumSize.map { total > $0 } ?? false
            let freeSpaceTarget = configuration.minimumFreeSpace.flatMap { minimum in
                freeSpace().map { $0 < minimum } == true ? minimum + minimum / 10 : nil
            }
            guard ageCutoff != nil || overSize || freeSpaceTarget != nil else { return }
            let busy = usage.busyKeys
            // Least recently used first, a resource asked for as used then.
            var candidates = try await store.entries().filter { !$0.pinned && !busy.contains($0.key) }.map { entry in
                var entry = entry
                if let asked = resources.existing(entry.key)?.askedForAt.withLock({ $0 }) { entry.lastAccessedAt = max(entry.lastAccessedAt, asked) }
                return entry
            }.sorted { $0.lastAccessedAt < $1.lastAccessedAt }
            if let ageCutoff {
                let aged = await evict(from: candidates, because: .age, unlessAskedForSince: began) { candidate, _ in candidate.lastAccessedAt < ageCutoff }
                candidates = aged.left
                total -= aged.freed
            }
            if let limit = configuration.maximumSize, total > limit {
                let target = limit - limit / 10
                candidates = await evict(from: candidates, because: .size, unlessAskedForSince: began) { _, freed in total - freed > target }.left
            }
            if let freeSpaceTarget {
                // The volume is asked again before each removal: what a removal frees is the
                // data file's blocks, not its byte count, and other programs write too.
                _ = await evict(from: candidates, because: .freeSpace, unlessAskedForSince: began) { _, _ in freeSpace().map { $0 < freeSpaceTarget } ?? false }
            }
        } catch {
            configuration.logger.info("eviction failed", metadata: ["error": "\(error)"])
        }
    }

    /// Evicts each of `candidates` (least recently used first) that `goes` picks, asked in turn
    /// with the bytes this call has freed so far; returns those left and the bytes freed. A
    /// candidate that cannot be removed (a read began) is left, and the next one is asked about.
    private func evict(from candidates: [CacheStore.Entry], because reason: EvictionReason, unlessAskedForSince began: Date,
                       picking goes: (CacheStore.Entry, _ freed: Int64) -> Bool) async -> (left: [CacheStore.Entry], freed: Int64) {
        var left: [CacheStore.Entry] = []
        var freed: Int64 = 0
        for candidate in candidates {
            if goes(candidate, freed), await evict(candidate, because: reason, unlessAskedForSince: began) {
                freed += candidate.spans.coveredByteCount
            } else {
                left.append(candidate)
            }
        }
        return (left, freed)
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
        configuration.logger.info("evicted", metadata: ["key": "\(entry.key)", "bytes": "\(entry.spans.coveredByteCount)", "why": "\(reason.rawValue)"])
        return true
    }
}
