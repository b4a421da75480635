#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheHLS

/// A resource the proxy serves at `/s/<id>/<file name>`.
///
/// It carries no secret but its ``id``, which is the unguessable part of its URL; the headers it
/// is fetched with stay inside the server.
public struct StreamRegistration: Sendable, Hashable {
    /// The random token in the stream URL; also the resource's id in the control API.
    public let id: String
    /// The file name at the end of the stream URL (players guess the type from it).
    public let fileName: String
    /// The cache key of the resource.
    public let key: CacheKey
    /// Where the bytes come from, for display: the URL without user info or query.
    public let sourceDescription: String

    /// The path of the stream URL, percent-encoded: `/s/<id>/<file name>`.
    public var path: String {
        "/s/\(id)/" + fileName.percentEncoded(allowing: URICharacters.isUnreserved)
    }
}

/// A remote folder the proxy serves at `/<token>/<relative path>`.
public struct FolderMount: Sendable, Hashable {
    /// The first path segment of every URL below the folder.
    public let token: String
    /// The folder's URL on the origin; `nil` for a folder whose files a resolver finds (a cloud
    /// or WebDAV folder, ``ProxyServer/mountFolder(named:token:resolvingFiles:listingFolders:)``).
    public let baseURL: URL?
    /// What the folder is, for people: its URL without secrets, or the name it was mounted with
    /// (a source reference).
    public let name: String

    /// The path of `relative` below the folder: `/<token>/<relative path>`.
    public func path(of relative: RelativePath) -> String { "/\(token)/\(relative.percentEncoded)" }
}

/// What the server knows about its streams and folders. Lookups take a lock for a moment; no
/// request waits on another.
final class StreamRegistry: Sendable {
    struct Stream: Sendable {
        var registration: StreamRegistration
        var origin: any Origin
        /// The URL and headers, when the stream has them: a playlist resolves its URIs against them.
        var location: HLSLocation?
        /// Whether the stream is an HLS playlist; `nil` when it is decided by name and type.
        var isPlaylist: Bool?
        /// Whether a playlist named it (rather than a user registering it); such streams are
        /// not listed and are forgotten first.
        var isDerived = false
        /// The resource of a stream a user registered, held while it is registered so that the
        /// cache keeps it in memory and the control API's statistics for it do not reset (the
        /// cache frees idle resources it is not asked for; see `StreamCache.existingResource(for:)`).
        var resource: Resource?
    }

    struct Folder: Sendable {
        var mount: FolderMount
        var headers: HTTPHeaders = [:]
        /// The transport for this folder's files, when not the server's own.
        var transport: (any HTTPTransport)?
        /// The files of a folder mounted with a resolver instead of a URL.
        var resolvedFiles: ResolvedFolderFiles?
        /// Lists a folder below it (`nil`: the mounted folder itself), when it can be listed.
        var listFolder: (@Sendable (RelativePath?) async throws -> [FolderListingEntry])?
    }

    /// A file a playlist names, kept small, since a live stream names new ones forever: its URL
    /// as a string, its key, and headers shared with the playlist that named it. Its ``Stream``
    /// is made when it is looked up. As a full ``Stream`` each took about 1.7 KB (50,000 segments
    /// of one playlist: 85 MiB).
    private struct DerivedFile: Sendable {
        var url: String
        var key: CacheKey
        var headers: HTTPHeaders
        var isPlaylist: Bool
    }

    private struct State {
        /// The streams users registered.
        var streams: [String: Stream] = [:]
        var idsByKey: [CacheKey: String] = [:]
        /// The files playlists named, by id and by key.
        var derived: [String: DerivedFile] = [:]
        var derivedIDsByKey: [CacheKey: String] = [:]
        var folders: [String: Folder] = [:]
        /// Ids of derived streams, oldest first.
        var derivedOrder: [String] = []
        var derivedOrderStart = 0
    }

    /// Streams named by playlists kept at most; a live stream names new segments forever, and the
    /// oldest are long gone from its playlist when they are forgotten.
    static let maximumDerivedStreams = 100_000

    /// Path segments that can never be a folder token, since other routes own them.
    static let reservedTokens: Set<String> = ["s", "api"]

    private let state = Locked(State())
    /// Makes the origin of a file a playlist names, when its stream is looked up.
    private let makeDerivedOrigin: @Sendable (HLSLocation) -> any Origin

    init(makeDerivedOrigin: @escaping @Sendable (HLSLocation) -> any Origin) {
        self.makeDerivedOrigin = makeDerivedOrigin
    }

    /// Registers a resource, or returns the existing registration of the same key with its origin
    /// replaced (so scripts can register again with fresh headers and keep the URL).
    func register(key: CacheKey, fileName: String, sourceDescription: String, origin: any Origin, location: HLSLocation? = nil,
                  resource: Resource? = nil) -> StreamRegistration {
        state.withLock { state in
            if let id = state.idsByKey[key], var stream = state.streams[id] {
                stream.origin = origin
                stream.location = location
                stream.resource = stream.resource ?? resource
                state.streams[id] = stream
                return stream.registration
            }
            // A file a playlist named keeps its URL once a user registers it.
            let id = state.derivedIDsByKey.removeValue(forKey: key) ?? SecretToken.make()
            state.derived[id] = nil
            let registration = StreamRegistration(id: id, fileName: fileName, key: key, sourceDescription: sourceDescription)
            state.streams[registration.id] = Stream(registration: registration, origin: origin, location: location, resource: resource)
            state.idsByKey[key] = registration.id
            return registration
        }
    }

    /// Registers a file a playlist names, or returns the registration its key already has.
    func registerDerived(_ location: HLSLocation, isPlaylist: Bool) -> StreamRegistration {
        let key = location.key
        return state.withLock { state in
            if let id = state.idsByKey[key], let stream = state.streams[id] { return stream.registration }
            if let id = state.derivedIDsByKey[key], let file = state.derived[id] {
                return Self.registration(id: id, location: HLSLocation(url: location.url, headers: file.headers), key: key, isPlaylist: file.isPlaylist)
            }
            // 11 random bytes make 15 characters, which a String holds without an allocation; 88
            // bits are as far beyond guessing as 128.
            let id = SecretToken.make(bytes: 11)
            state.derived[id] = DerivedFile(url: location.url.absoluteString, key: key, headers: location.headers, isPlaylist: isPlaylist)
            state.derivedIDsByKey[key] = id
            state.derivedOrder.append(id)
            if state.derivedOrder.count - state.derivedOrderStart > Self.maximumDerivedStreams {
                let oldest = state.derivedOrder[state.derivedOrderStart]
                state.derivedOrderStart += 1
                if let file = state.derived.removeValue(forKey: oldest) { state.derivedIDsByKey[file.key] = nil }
                if state.derivedOrderStart > Self.maximumDerivedStreams {
                    state.derivedOrder.removeFirst(state.derivedOrderStart)
                    state.derivedOrderStart = 0
                }
            }
            return Self.registration(id: id, location: location, key: key, isPlaylist: isPlaylist)
        }
    }

    private static func registration(id: String, location: HLSLocation, key: CacheKey, isPlaylist: Bool) -> StreamRegistration {
        StreamRegistration(id: id, fileName: location.fileName(fallback: isPlaylist ? "playlist.m3u8" : "file"), key: key,
                           sourceDescription: location.url.redactedDescription)
    }

    func stream(id: some StringProtocol) -> Stream? {
        // Dictionary lookup by an attacker-chosen key: the hash does not compare byte by byte, and
        // the final equality check is on a random value of 88 bits or more, so timing tells
        // nothing useful.
        let id = String(id)
        let (registered, derived) = state.withLock { ($0.streams[id], $0.derived[id]) }
        if let registered { return registered }
        guard let derived, let url = URL(string: derived.url) else { return nil }
        let location = HLSLocation(url: url, headers: derived.headers)
        return Stream(registration: Self.registration(id: id, location: location, key: derived.key, isPlaylist: derived.isPlaylist),
                      origin: makeDerivedOrigin(location), location: location, isPlaylist: derived.isPlaylist, isDerived: true)
    }

    /// The streams users registered (not those playlists named), by file name.
    var streams: [Stream] {
        state.withLock { Array($0.streams.values) }.sorted { $0.registration.fileName.naturallyPrecedes($1.registration.fileName) }
    }

    @discardableResult
    func unregister(id: String) -> StreamRegistration? {
        state.withLock { state in
            if let file = state.derived.removeValue(forKey: id) {
                state.derivedIDsByKey[file.key] = nil
                guard let url = URL(string: file.url) else { return nil }
                return Self.registration(id: id, location: HLSLocation(url: url, headers: file.headers), key: file.key, isPlaylist: file.isPlaylist)
            }
            guard let stream = state.streams.removeValue(forKey: id) else { return nil }
            state.idsByKey[stream.registration.key] = nil
            return stream.registration
        }
    }

    /// Mounts a folder under `token`.
    ///
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) when the token is malformed, reserved, or
    ///   already mounts another folder.
    func mount(_ baseURL: URL, headers: HTTPHeaders, token: String, transport: (any HTTPTransport)? = nil) throws -> FolderMount {
        try mount(Folder(mount: FolderMount(token: token, baseURL: baseURL, name: baseURL.redactedDescription), headers: headers, transport: transport))
    }

    /// Mounts a folder whose files `resolve` finds, and whose folders `list` lists (when given),
    /// under `token`.
    ///
    /// - Throws: as ``mount(_:headers:token:transport:)``.
    func mount(named name: String, token: String, resolvingFiles resolve: @escaping @Sendable (RelativePath) async throws -> SourceStream,
               listingFolders list: (@Sendable (RelativePath?) async throws -> [FolderListingEntry])?) throws -> FolderMount {
        try mount(Folder(mount: FolderMount(token: token, baseURL: nil, name: name), resolvedFiles: ResolvedFolderFiles(resolve: resolve), listFolder: list))
    }

    private func mount(_ folder: Folder) throws -> FolderMount {
        let token = folder.mount.token
        guard SecretToken.isValid(token), !Self.reservedTokens.contains(token) else {
            throw StreamCacheError(.invalidArgument, "The URL token must be 1–128 letters, digits, '-', '_', '.' or '~', and not 's' or 'api'.")
        }
        return try state.withLock { state in
            if let existing = state.folders[token], existing.mount != folder.mount {
                throw StreamCacheError(.invalidArgument, "The URL token \(token) already serves another folder.")
            }
            state.folders[token] = folder
            return folder.mount
        }
    }

    func unmount(token: String) {
        state.withLock { _ = $0.folders.removeValue(forKey: token) }
    }

    func folder(token: some StringProtocol) -> Folder? { state.withLock { $0.folders[String(token)] } }

    var folders: [FolderMount] { state.withLock { $0.folders.values.map(\.mount) } }
}
