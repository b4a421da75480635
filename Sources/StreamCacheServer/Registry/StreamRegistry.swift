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
    /// The folder's URL on the origin.
    public let baseURL: URL

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
        var headers: HTTPHeaders
        /// The transport for this folder's files, when not the server's own.
        var transport: (any HTTPTransport)?
    }

    private struct State {
        var streams: [String: Stream] = [:]
        var idsByKey: [CacheKey: String] = [:]
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

    /// Registers a resource, or returns the existing registration of the same key with its origin
    /// replaced (so scripts can register again with fresh headers and keep the URL).
    func register(key: CacheKey, fileName: String, sourceDescription: String, origin: any Origin, location: HLSLocation? = nil,
                  resource: Resource? = nil) -> StreamRegistration {
        state.withLock { state in
            if let id = state.idsByKey[key], var stream = state.streams[id] {
                stream.origin = origin
                stream.location = location
                stream.isDerived = false
                stream.resource = stream.resource ?? resource
                state.streams[id] = stream
                return stream.registration
            }
            let registration = StreamRegistration(id: SecretToken.make(), fileName: fileName, key: key, sourceDescription: sourceDescription)
            state.streams[registration.id] = Stream(registration: registration, origin: origin, location: location, resource: resource)
            state.idsByKey[key] = registration.id
            return registration
        }
    }

    /// Registers a file a playlist names, or returns the registration its URL already has.
    ///
    /// - Parameter makeOrigin: Called only when the file is new.
    func registerDerived(_ location: HLSLocation, isPlaylist: Bool, makeOrigin: () -> any Origin) -> StreamRegistration {
        let key = location.key
        return state.withLock { state in
            if let id = state.idsByKey[key], let stream = state.streams[id] { return stream.registration }
            let name = location.fileName(fallback: isPlaylist ? "playlist.m3u8" : "file")
            let registration = StreamRegistration(id: SecretToken.make(), fileName: name, key: key, sourceDescription: location.url.redactedDescription)
            state.streams[registration.id] = Stream(registration: registration, origin: makeOrigin(), location: location, isPlaylist: isPlaylist, isDerived: true)
            state.idsByKey[key] = registration.id
            state.derivedOrder.append(registration.id)
            if state.derivedOrder.count - state.derivedOrderStart > Self.maximumDerivedStreams {
                let oldest = state.derivedOrder[state.derivedOrderStart]
                state.derivedOrderStart += 1
                if let stream = state.streams[oldest], stream.isDerived {
                    state.streams[oldest] = nil
                    state.idsByKey[stream.registration.key] = nil
                }
                if state.derivedOrderStart > Self.maximumDerivedStreams {
                    state.derivedOrder.removeFirst(state.derivedOrderStart)
                    state.derivedOrderStart = 0
                }
            }
            return registration
        }
    }

    func stream(id: some StringProtocol) -> Stream? {
        // Dictionary lookup by an attacker-chosen key: the hash does not compare byte by byte, and
        // the final equality check is on a 128-bit random value, so timing tells nothing useful.
        state.withLock { $0.streams[String(id)] }
    }

    /// The streams users registered (not those playlists named), by file name.
    var streams: [Stream] {
        state.withLock { $0.streams.values.filter { !$0.isDerived } }.sorted { $0.registration.fileName < $1.registration.fileName }
    }

    @discardableResult
    func unregister(id: String) -> StreamRegistration? {
        state.withLock { state in
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
        guard SecretToken.isValid(token), !Self.reservedTokens.contains(token) else {
            throw StreamCacheError(.invalidArgument, "The URL token must be 1–128 letters, digits, '-', '_', '.' or '~', and not 's' or 'api'.")
        }
        return try state.withLock { state in
            if let existing = state.folders[token], existing.mount.baseURL != baseURL {
                throw StreamCacheError(.invalidArgument, "The URL token \(token) already serves another folder.")
            }
            let mount = FolderMount(token: token, baseURL: baseURL)
            state.folders[token] = Folder(mount: mount, headers: headers, transport: transport)
            return mount
        }
    }

    func unmount(token: String) {
        state.withLock { _ = $0.folders.removeValue(forKey: token) }
    }

    func folder(token: some StringProtocol) -> Folder? { state.withLock { $0.folders[String(token)] } }

    var folders: [FolderMount] { state.withLock { $0.folders.values.map(\.mount) } }
}
