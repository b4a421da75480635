import StreamCache

/// What a reference names: one file, ready to be read, or a folder and the entries it holds.
///
/// A user who writes `yandex:/Music/Album` to download it for offline play need not say whether it
/// is a file or a folder; ``Source/contents()`` finds out, in one call to the service where it can.
public enum SourceContents: Sendable {
    /// The reference names a file.
    case file(ResolvedSource)
    /// The reference names a folder (a WebDAV collection); its entries as ``Source/list()`` gives them.
    case folder([SourceEntry])
}

extension Source {
    /// The default: ``resolvedOrListed()``.
    public func contents() async throws -> SourceContents { try await resolvedOrListed() }

    /// The reference resolved as a file, or listed when ``resolve()`` refuses it as a folder
    /// (`invalidArgument`): a file costs no request beyond its resolution (none for WebDAV, so a
    /// cached file plays with its server unreachable). A reference that is neither (a Google
    /// document) fails with the resolution's error.
    ///
    /// - Throws: ``StreamCache/StreamCacheError`` (`notFound`, `authenticationFailed`,
    ///   `originUnavailable`, `badResponse`, `invalidArgument`).
    public func resolvedOrListed() async throws -> SourceContents {
        do {
            return .file(try await resolve())
        } catch let refusal as StreamCacheError where refusal.code == .invalidArgument {
            guard let entries = try? await list() else { throw refusal }
            return .folder(entries)
        }
    }
}
