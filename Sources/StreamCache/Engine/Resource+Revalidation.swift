#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Asking the origin, now and then, whether the cached bytes are still its current version
/// (``StreamCache/Configuration/revalidationInterval``).
///
/// A download's response already carries the origin's version, and a changed one drops the old
/// bytes before they are served further. What no download ever checks is a range a reader gets
/// entirely from the cache: a file cached whole would be the old version for good. So a read
/// that starts while the origin's last word is older than the interval first asks for the
/// file's first byte and compares the answer's version.
///
/// Readers that start while that question is out wait for its answer when it was sent recently
/// enough for them: within the interval. Those that came later (with an interval of zero, every
/// one) wait together for one more question, sent once the first is answered. A question sent
/// before a read began can carry the version the origin had before it, and the read must never
/// take a word older than the interval allows: with an interval of zero, a file replaced just
/// before a read starts is never served from its old bytes. Queueing keeps the cost of a crowd
/// at two questions, not one per reader.
extension Resource {
    /// A question to the origin about its version, and when it was sent.
    struct VersionQuestion: Sendable {
        let answer: Task<Void, Never>
        let sentAt: ContinuousClock.Instant
    }

    /// The question that goes out once the one in flight is answered, and how many reads wait for it.
    struct QueuedVersionQuestion: Sendable {
        let answer: Task<Void, Never>
        var readers: Int
    }

    /// What the resource knows of the origin's word on its version.
    struct Verification: Sendable {
        /// When the origin last confirmed the version the cache holds (wall-clock time: it is
        /// kept in the index and read by later processes).
        var confirmedAt: Date?
        /// When asking the origin last failed or timed out.
        var failedAt: ContinuousClock.Instant?

        /// How long after a failed question the next one waits, whatever the interval: an origin
        /// that stalls would otherwise hold up each of a player's requests for the whole timeout.
        static let pauseAfterFailure: Duration = .seconds(30)

        /// Whether a read now must ask the origin first, when its word holds for `interval`;
        /// `afterFailures` false asks again however recently asking failed (an origin that keeps
        /// its own pace between tries: ``Origin/isProvisional``).
        func isDue(every interval: Duration, afterFailures: Bool = true, now: Date = Date(), clock: ContinuousClock.Instant = .now) -> Bool {
            if afterFailures, let failedAt, clock - failedAt < Self.pauseAfterFailure { return false }
            guard let confirmedAt else { return true }
            let age = now.timeIntervalSince(confirmedAt)
            // A clock set back (age < 0) cannot vouch for the bytes either.
            return age >= interval.timeInterval || age < 0
        }
    }

    /// Whether a read that starts now asks the origin for its version first (see
    /// ``StreamCache/Configuration/revalidationInterval``). Answered without waiting for the
    /// resource: a server that finds it `false` may answer from ``knownInfo`` at once.
    public nonisolated var isRevalidationDue: Bool {
        guard knownInfo != nil else { return false }
        return isVersionQuestionDue()
    }

    /// Whether a read that starts now asks for the version first: the configured interval has
    /// passed since the origin's last word, or the origin is provisional and would try to reach
    /// its service now (``Origin/isProvisional``: a file resolved from the cache while its
    /// service was out of reach, whose tries keep their own pace). So a file replaced at the
    /// service while it was out of reach does not go on playing its old bytes once it is back.
    nonisolated func isVersionQuestionDue() -> Bool {
        if originBox.withLock({ $0 }).isProvisional { return verification.withLock { $0.isDue(every: .zero, afterFailures: false) } }
        guard let interval = configuration.revalidationInterval else { return false }
        return verification.withLock { $0.isDue(every: interval) }
    }

    /// Records that the origin has just confirmed the version the resource holds.
    ///
    /// - Parameter storeAtOnce: Whether to write it to the index now; otherwise (a download's
    ///   response, of which there may be dozens a second) at most every few seconds.
    func markVerified(storeAtOnce: Bool = false) {
        let now = Date()
        origin.versionWasChecked()
        verification.withLock {
            $0.confirmedAt = now
            $0.failedAt = nil
        }
        guard storeAtOnce || verificationStoredAt.map({ ContinuousClock.now - $0 > .seconds(5) }) ?? true else { return }
        verificationStoredAt = .now
        let store = self.store
        enqueueStoreOperation {
            // A resource without an index row yet records it when the row is made.
            guard let id = await self.entryID else { return }
            try? await store.recordVerification(resourceID: id, at: now)
        }
    }

    /// Asks the origin for its version when cached bytes are about to be served and its last
    /// word is too old; returns once it answered, failed, or took longer than
    /// ``StreamCache/Configuration/revalidationTimeout``. A changed version drops the cached
    /// bytes, so the read that follows fetches the new ones.
    ///
    /// A question already out is shared when it was sent within the interval; otherwise the read
    /// waits for the next one, so it may wait up to twice the timeout.
    ///
    /// - Parameter forARequestInFlight: The read takes its first bytes from a request already
    ///   sent (``startsInARequestAlreadySent(at:)``), so the question is worth asking even when
    ///   nothing is cached yet.
    func revalidateIfDue(forARequestInFlight: Bool = false) async {
        guard info != nil, !available.isEmpty || forARequestInFlight else { return }
        if let current = revalidation {
            if mayTakeTheAnswer(ofAQuestionSentAt: current.sentAt) { return await current.answer.value }
            return await waitForTheQuestionAfter(current)
        }
        guard isVersionQuestionDue() else { return }
        await askTheVersion()
    }

    /// Whether a read that starts now may take the answer to a question sent at `sentAt`: the word
    /// it brings is no older than the interval allows. A provisional origin's tries keep their own
    /// pace (``Origin/isProvisional``), so any try under way will do.
    nonisolated func mayTakeTheAnswer(ofAQuestionSentAt sentAt: ContinuousClock.Instant) -> Bool {
        if originBox.withLock({ $0 }).isProvisional { return true }
        guard let interval = configuration.revalidationInterval else { return true }
        return ContinuousClock.now - sentAt < interval
    }

    /// Whether a read that starts at the missing byte `offset` would take it from a download's
    /// request in flight: one sent before the read began (or about to be, past the gate), whose
    /// bytes are the version the origin had when it reached it, perhaps before a replacement the
    /// read came after. Such a read asks first, as a read of cached bytes does; one whose bytes
    /// come from a request planned after it began needs not, nor one that joins a download still
    /// waiting at the gate (``Download/waitsAtTheGate``): its request goes out after the read began.
    func startsInARequestAlreadySent(at offset: Int64) -> Bool {
        downloads.values.contains { download in
            !download.waitsAtTheGate && download.window.contains(offset) && offset < download.segmentEnd && joins(download, at: offset)
        }
    }

    /// How many reads wait for the question that goes out after the one in flight.
    var readsWaitingForTheNextQuestion: Int { queuedRevalidation?.readers ?? 0 }

    /// Sends a question (one is in flight at a time) and waits for its answer.
    private func askTheVersion() async {
        let question = Task { await self.revalidate() }
        revalidation = VersionQuestion(answer: question, sentAt: .now)
        await question.value
    }

    /// Waits, with every read that came too late for `current`, for the question after it.
    private func waitForTheQuestionAfter(_ current: VersionQuestion) async {
        var queued = queuedRevalidation ?? QueuedVersionQuestion(answer: Task {
            await current.answer.value
            await self.askTheQueuedQuestion()
        }, readers: 0)
        queued.readers += 1
        queuedRevalidation = queued
        await queued.answer.value
    }

    private func askTheQueuedQuestion() async {
        queuedRevalidation = nil
        guard info != nil, !available.isEmpty || !downloads.isEmpty else { return }
        // A read that found no question out may have sent one since the last was answered: sent
        // after every queued read began, it serves them all.
        if let current = revalidation { return await current.answer.value }
        // A question that failed pauses the next ones (``Verification/pauseAfterFailure``): the
        // cached bytes are served, as for any read in that pause.
        guard isVersionQuestionDue() else { return }
        await askTheVersion()
    }

    private func revalidate() async {
        defer { revalidation = nil }
        let asked = generation
        statistics.originRequests += 1
        let answer = await Self.askVersion(of: origin, timeout: configuration.revalidationTimeout)
        switch answer {
        case .success(let current):
            // A download that answered meanwhile has decided the version already.
            guard generation == asked, let known = info else {
                metrics?.recordRevalidation(.changed)
                return
            }
            let isSame = known.isSameVersion(as: current)
            metrics?.recordRevalidation(isSame ? .confirmed : .changed)
            do {
                if !isSame { try resetForNewVersion(current) }
                markVerified(storeAtOnce: true)
            } catch {
                logger.info("could not drop the old version's bytes", metadata: ["key": "\(key)", "error": "\(error)"])
            }
        case .failure(let error):
            metrics?.recordRevalidation(.failed)
            verification.withLock { $0.failedAt = .now }
            // Offline, or an origin that fails: the cached bytes are the best there is.
            logger.info("could not ask the origin whether the cached version is current; serving it",
                        metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }

    /// The origin's version (``Origin/currentInfo()``), or why it could not be had within `timeout`.
    ///
    /// A version whose length no resource can have is no answer (`badResponse`), and the cached
    /// bytes are served as after any failed question: taken as a new version, an app's own
    /// origin's length of −5 became the resource's, and the next gap it planned stopped the process.
    static func askVersion(of origin: any Origin, timeout: Duration) async -> Result<ResourceInfo, any Error> {
        let answer = await FirstAnswer.of({ try await origin.currentInfo() }, within: timeout) {
            StreamCacheError(.originUnavailable, "The origin did not say within \(timeout) whether the cached version is current.")
        }
        if case .success(let current) = answer, let total = current.totalLength, !ByteRange.isPossibleLength(total) {
            return .failure(StreamCacheError(.badResponse, "The origin stated a total length of \(total), which no resource can have."))
        }
        return answer
    }
}
