import Foundation
import StreamCache
import StreamCacheHLS
@testable import StreamCacheServer
import Testing

/// The files playlists name are stored small and made into streams when looked up; these tests
/// pin what a lookup gives back and how they meet registrations by users.
@Suite struct StreamRegistryTests {
    /// The origin a derived stream is made with, so a test can see what it was given.
    struct RecordedOrigin: Origin {
        let location: HLSLocation
        var logDescription: String { location.url.absoluteString }
        func open(_ request: OriginRequest) async throws -> OriginResponse {
            throw StreamCacheError(.originUnavailable, "not used")
        }
    }

    static func registry() -> StreamRegistry { StreamRegistry { RecordedOrigin(location: $0) } }

    static let playlist = HLSLocation(url: URL(string: "https://media.example/show/index.m3u8")!, headers: ["Authorization": "Bearer a"])

    @Test func aDerivedFileIsMadeIntoItsStreamWhenLookedUp() throws {
        let registry = Self.registry()
        let segment = try #require(Self.playlist.resolve("seg-001.ts?sig=abc"))
        let key = try #require(Self.playlist.resolve("key.bin"))
        let cdn = try #require(Self.playlist.resolve("https://cdn.example/seg-002.ts"))
        let variant = try #require(Self.playlist.resolve("720p/index.m3u8"))

        for (location, isPlaylist) in [(segment, false), (key, false), (cdn, false), (variant, true)] {
            let registration = registry.registerDerived(location, isPlaylist: isPlaylist)
            #expect(registry.registerDerived(location, isPlaylist: isPlaylist) == registration, "the same file keeps its URL")
            #expect(registration.id.count == 15)
            let stream = try #require(registry.stream(id: registration.id))
            #expect(stream.registration == registration)
            #expect(stream.registration.key == location.key)
            #expect(stream.location == location, "URL and headers as the playlist resolved them")
            #expect((stream.origin as? RecordedOrigin)?.location == location)
            #expect(stream.isPlaylist == isPlaylist)
            #expect(stream.isDerived)
        }
        #expect(registry.stream(id: segment.key.rawValue) == nil)
        #expect(registry.streams.isEmpty, "files playlists name are not listed")
        #expect(registry.stream(id: "AAAAAAAAAAAAAAA") == nil)
    }

    @Test func aUserRegisteringADerivedFileKeepsItsURL() throws {
        let registry = Self.registry()
        let segment = try #require(Self.playlist.resolve("seg-001.ts"))
        let derived = registry.registerDerived(segment, isPlaylist: false)
        let registered = registry.register(key: segment.key, fileName: "seg-001.ts", sourceDescription: "user", origin: RecordedOrigin(location: segment),
                                           location: segment)
        #expect(registered.id == derived.id)
        #expect(registry.streams.map(\.registration) == [registered])
        let stream = try #require(registry.stream(id: derived.id))
        #expect(!stream.isDerived)
        #expect(stream.registration.sourceDescription == "user")
        // A playlist naming it again gets the user's registration.
        #expect(registry.registerDerived(segment, isPlaylist: false) == registered)
    }

    /// A live playlist names new segments for as long as it plays: the registry keeps the most
    /// recent 100,000 files playlists named and forgets the oldest, so a server that ran for weeks
    /// does not hold every segment it ever listed. A forgotten file named again gets a new URL.
    @Test func theOldestDerivedFilesAreForgottenPastTheLimit() throws {
        let registry = Self.registry()
        let limit = StreamRegistry.maximumDerivedStreams
        var first: [StreamRegistration] = []
        for index in 0..<(limit + 2) {
            let registration = registry.registerDerived(try #require(Self.playlist.resolve("seg-\(index).ts")), isPlaylist: false)
            if index < 2 { first.append(registration) }
        }
        #expect(first.allSatisfy { registry.stream(id: $0.id) == nil }, "the two oldest are forgotten")
        let third = try #require(Self.playlist.resolve("seg-2.ts"))
        #expect(registry.stream(id: registry.registerDerived(third, isPlaylist: false).id)?.location == third, "the third oldest is kept")
        let newest = try #require(Self.playlist.resolve("seg-\(limit + 1).ts"))
        #expect(registry.stream(id: registry.registerDerived(newest, isPlaylist: false).id)?.location == newest)
        let again = registry.registerDerived(try #require(Self.playlist.resolve("seg-0.ts")), isPlaylist: false)
        #expect(again.id != first[0].id)
    }

    @Test func unregisteringADerivedFileForgetsIt() throws {
        let registry = Self.registry()
        let segment = try #require(Self.playlist.resolve("seg-001.ts"))
        let derived = registry.registerDerived(segment, isPlaylist: false)
        #expect(registry.unregister(id: derived.id) == derived)
        #expect(registry.stream(id: derived.id) == nil)
        #expect(registry.registerDerived(segment, isPlaylist: false).id != derived.id)
    }
}
