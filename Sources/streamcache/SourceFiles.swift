import StreamCache
import StreamCacheSources

/// The files a source reference names: the file itself, or the files of its folder by name (and,
/// when asked, of its subfolders, depth first), for `streamcache serve` and `prefetch`.
struct SourceFiles {
    /// A file found, with the reference `ls` would print for it.
    struct File {
        let reference: String
        /// Its path below the folder (`CD2/03.mp3`); its name alone when the reference named the file.
        let path: String
        /// The file resolved; `nil` for a file of a folder found without resolving it
        /// (``find(_:parse:recursive:resolvingFiles:resolvingFirst:resolve:)``).
        let resolved: ResolvedSource?
    }

    /// Subfolders deeper than this are passed over, as folders are without `--recursive`: a
    /// server whose links make a folder its own descendant cannot keep the walk going.
    static let maximumDepth = 32

    private(set) var files: [File] = []
    /// Folders left out: all subfolders without `recursive`, those past ``maximumDepth`` with it.
    private(set) var foldersLeftOut: [String] = []
    /// Entries that could not be resolved or listed, each with its error; the others go on.
    private(set) var failures: [(reference: String, error: any Error)] = []

    /// Whether the reference named a folder.
    private(set) var isFolder = false
    /// The reference as its source gives it back (without a secret the user put in it).
    private(set) var name = ""

    /// Resolves `reference` with the sources `parse` makes. Its own lookup failing fails the
    /// whole (there is nothing to download); a file or subfolder in it that fails is recorded.
    ///
    /// - Parameter resolvingFiles: resolve each file of a folder now (`serve`, which registers
    ///   them all before it serves); without it, a folder's files are only listed, and each is
    ///   resolved when its turn comes (`prefetch`: a folder of hundreds of files, each an API call
    ///   or two to resolve, begins its first download at once, and a server it hands them to
    ///   resolves each once, not twice).
    /// - Parameter resolvingFirst: resolve the reference as a file, and list it only when its
    ///   source refuses it as a folder (as ``Source/resolvedOrListed()`` does), instead of asking
    ///   what it is (``Source/contents()``). A WebDAV file then needs no request, so `serve` plays a
    ///   cached one with its server unreachable; a collection's reference must end with `/`.
    /// - Throws: ``StreamCacheError`` from the reference's own lookup, `CancellationError`.
    /// - Parameter resolve: how a file is resolved (`serve` has its cache fall back on what it
    ///   holds when the service is out of reach: ``StreamCache/StreamCache/resolve(_:)``).
    static func find(_ reference: String, parse: (String) throws -> any Source, recursive: Bool, resolvingFiles: Bool = true, resolvingFirst: Bool = false,
                     resolve: (any Source) async throws -> ResolvedSource = { try await $0.resolve() }) async throws -> SourceFiles {
        var found = SourceFiles()
        let source = try parse(reference)
        found.name = source.reference
        let contents: SourceContents
        if resolvingFirst {
            do {
                contents = .file(try await resolve(source))
            } catch let refusal as StreamCacheError where refusal.code == .invalidArgument {
                guard let entries = try? await source.list() else { throw refusal }
                contents = .folder(entries)
            }
        } else {
            contents = try await source.contents()
        }
        switch contents {
        case .file(let file):
            found.files.append(File(reference: source.reference, path: file.fileName, resolved: file))
        case .folder(let entries):
            found.isFolder = true
            try await found.add(entries, below: "", parse: parse, resolvingFiles: resolvingFiles, resolve: resolve, recursive: recursive, depth: 1)
        }
        return found
    }

    /// Adds the files of `entries`, the folder at `path` (`""` or ending with `/`), resolved with
    /// `resolve` when `resolvingFiles`, and, when `recursive`, those below their folders.
    private mutating func add(_ entries: [SourceEntry], below path: String, parse: (String) throws -> any Source, resolvingFiles: Bool,
                              resolve: (any Source) async throws -> ResolvedSource, recursive: Bool, depth: Int) async throws {
        let byName = entries.sorted { $0.name.naturallyPrecedes($1.name) }
        for entry in byName where !entry.isFolder {
            do {
                files.append(File(reference: entry.reference, path: path + entry.name,
                                  resolved: resolvingFiles ? try await resolve(try parse(entry.reference)) : nil))
            } catch {
                try Task.checkCancellation()
                failures.append((entry.reference, error))
            }
        }
        for entry in byName where entry.isFolder {
            guard recursive, depth < Self.maximumDepth else {
                foldersLeftOut.append(entry.reference)
                continue
            }
            do {
                let listed = try await parse(entry.reference).list()
                try await add(listed, below: path + entry.name + "/", parse: parse, resolvingFiles: resolvingFiles, resolve: resolve, recursive: recursive,
                              depth: depth + 1)
            } catch {
                try Task.checkCancellation()
                failures.append((entry.reference, error))
            }
        }
    }
}
