import StreamCache

/// The files of a folder mounted with a resolver (``ProxyServer/mountFolder(named:token:resolvingFiles:listingFolders:)``):
/// each is resolved at its first request and kept, so a player's many range requests for one
/// file cost the service one lookup. Requests that come together for a file share its lookup; a
/// lookup that failed, or found the file while its service was out of reach
/// (``SourceStream/isProvisional``), is not kept (the next request asks again).
final class ResolvedFolderFiles: Sendable {
    /// Files kept at most; the oldest lookups are forgotten first (asked again if requested).
    static let maximumFiles = 10_000

    private let resolve: @Sendable (RelativePath) async throws -> SourceStream
    private struct State {
        var lookups: [RelativePath: Task<SourceStream, any Error>] = [:]
        var order: [RelativePath] = []
    }
    private let state = Locked(State())

    init(resolve: @escaping @Sendable (RelativePath) async throws -> SourceStream) {
        self.resolve = resolve
    }

    /// The file at `path`, resolved once.
    ///
    /// - Throws: what the resolver threw (``StreamCacheError``).
    func file(at path: RelativePath) async throws -> SourceStream {
        let lookup = state.withLock { state -> Task<SourceStream, any Error> in
            if let lookup = state.lookups[path] { return lookup }
            let resolve = self.resolve
            let lookup = Task { try await resolve(path) }
            state.lookups[path] = lookup
            state.order.append(path)
            if state.order.count > Self.maximumFiles { state.lookups[state.order.removeFirst()] = nil }
            return lookup
        }
        do {
            let file = try await lookup.value
            if file.isProvisional { forget(lookup, at: path) }
            return file
        } catch {
            forget(lookup, at: path)
            throw error
        }
    }

    private func forget(_ lookup: Task<SourceStream, any Error>, at path: RelativePath) {
        state.withLock { state in
            guard state.lookups[path] == lookup else { return }
            state.lookups[path] = nil
            state.order.removeAll { $0 == path }
        }
    }
}
