import StreamCache
import StreamCacheServer
import StreamCacheSources

/// Finds the files below a source folder by their paths, for `serve --folder SOURCE`: one level
/// at a time through the folder's listings, since a path means the same on every service while
/// references do not (Google Drive and Box name files by id). Each listing is kept for
/// ``listingLifetime``, so an album played track after track lists its folder once; a name a
/// kept listing lacks has its folder listed again.
///
/// A service found out of reach (`originUnavailable`) is not asked again for
/// ``outOfReachInterval``: each question would wait out the retries first (1.5 s against a refused
/// connection), and a player offline asks for each file several times (every range request
/// looks a file up again while it is found offline), so each track began seconds late. After the
/// interval, the request that asks again waits for the answer ``lateAnswerWait`` at most, then
/// goes on as offline while the question runs on: a service back on the network answers within
/// that, and one still out of reach no longer holds up a track every interval (1.5 s against a
/// refused connection, 10 s where the network drops packets and the connection times out). The
/// question's outcome, whenever it comes, says whether the service is back.
final class SourceFolderPaths: Sendable {
    static let listingLifetime: Duration = .seconds(60)

    /// The folder's reference as the user gave it.
    let folder: String
    /// How long a service found out of reach is not asked again.
    let outOfReachInterval: Duration
    /// How long a request waits for a question to a service found out of reach before (once
    /// ``outOfReachInterval`` has passed) it goes on as offline.
    static let lateAnswerWait: Duration = .milliseconds(500)
    private let parse: @Sendable (String) throws -> any Source
    private let listings = Locked([String: (entries: [SourceEntry], listedAt: ContinuousClock.Instant)]())
    /// When the service was last found out of reach, and with what error.
    private let outOfReach = Locked<(since: ContinuousClock.Instant, failure: StreamCacheError)?>(nil)

    init(folder: String, outOfReachInterval: Duration = .seconds(30), parse: @escaping @Sendable (String) throws -> any Source) {
        self.folder = folder
        self.outOfReachInterval = outOfReachInterval
        self.parse = parse
    }

    /// Runs `question` to the service, unless it was found out of reach less than
    /// ``outOfReachInterval`` ago (then fails as it did); records it out of reach when it is.
    /// Asking a service found out of reach again, it waits ``lateAnswerWait`` at most for the
    /// answer, and fails as the service last did if none came by then.
    private func ask<Answer: Sendable>(_ question: @escaping @Sendable () async throws -> Answer) async throws -> Answer {
        let now = ContinuousClock.now
        // Read and claimed at once: of the requests that find the interval over, one asks.
        let last = outOfReach.withLock { state -> (since: ContinuousClock.Instant, failure: StreamCacheError)? in
            guard let known = state else { return nil }
            if now - known.since >= outOfReachInterval { state = (now, known.failure) }
            return known
        }
        guard let last else { return try await Self.asking(question, recordingIn: outOfReach) }
        if now - last.since < outOfReachInterval { throw last.failure }
        // Not the request's own task: the question goes on after the wait, and its outcome says
        // whether the service is back.
        let asking = Task { [outOfReach] in try await Self.asking(question, recordingIn: outOfReach) }
        return try await FirstAnswer.of({ try await asking.value }, within: Self.lateAnswerWait, timedOut: { last.failure }).get()
    }

    /// Runs `question`, and records in `outOfReach` whether it found the service.
    private static func asking<Answer>(_ question: () async throws -> Answer,
                                       recordingIn outOfReach: Locked<(since: ContinuousClock.Instant, failure: StreamCacheError)?>) async throws -> Answer {
        do {
            let answer = try await question()
            outOfReach.withLock { $0 = nil }
            return answer
        } catch let failure as StreamCacheError where failure.code == .originUnavailable {
            outOfReach.withLock { $0 = (.now, failure) }
            throw failure
        }
    }

    /// The file at `path` below the folder, resolved.
    ///
    /// - Throws: ``StreamCacheError``: `notFound` when a segment names nothing (or a folder where a
    ///   file ends the path), else the service's error.
    func file(at path: RelativePath) async throws -> ResolvedSource {
        guard let reference = try await reference(of: path.segments, endsWithAFile: true) else {
            throw StreamCacheError(.notFound, "\(folder) holds no file \(path).")
        }
        let source = try parse(reference)
        return try await ask { try await source.resolve() }
    }

    /// The entries of the folder at `path` below the folder (`nil`: the folder itself), for its
    /// listing; a kept listing will do.
    ///
    /// - Throws: ``StreamCacheError``: `notFound` when a segment names no folder, else the
    ///   service's error.
    func entries(at path: RelativePath?) async throws -> [SourceEntry] {
        guard let reference = try await reference(of: path?.segments ?? [], endsWithAFile: false) else {
            throw StreamCacheError(.notFound, "\(folder) holds no folder \(path.map(String.init(describing:)) ?? "").")
        }
        return try await listing(of: reference)
    }

    /// The reference of what `segments` name below the folder, found one level at a time through
    /// the listings: each a folder, but the last one a file when `endsWithAFile`. `nil` when a
    /// segment names nothing of its kind. A kept listing that lacks the name is asked for again:
    /// the entry may be new.
    private func reference(of segments: [String], endsWithAFile: Bool) async throws -> String? {
        var reference = folder
        for (index, segment) in segments.enumerated() {
            let isFile = endsWithAFile && index == segments.count - 1
            let matches = { (entry: SourceEntry) in entry.name == segment && entry.isFolder != isFile }
            var entry = try await listing(of: reference).first(where: matches)
            if entry == nil { entry = try await listing(of: reference, keptOnesWillDo: false).first(where: matches) }
            guard let entry else { return nil }
            reference = entry.reference
        }
        return reference
    }

    /// The folder's entries (`reference` itself by default): what `serve` asks once at start to
    /// tell a wrong token or folder before the first play.
    func listing(of reference: String? = nil, keptOnesWillDo: Bool = true) async throws -> [SourceEntry] {
        let reference = reference ?? folder
        let now = ContinuousClock.now
        if keptOnesWillDo, let kept = listings.withLock({ $0[reference] }), now - kept.listedAt < Self.listingLifetime { return kept.entries }
        let source = try parse(reference)
        // Kept by the question itself: a late answer (one that came after the request stopped
        // waiting for it, ``lateAnswerWait``) is kept too, and the next request needs no other.
        return try await ask { [listings] in
            let entries = try await source.list()
            listings.withLock { $0[reference] = (entries, now) }
            return entries
        }
    }
}
