import Foundation
import StreamCache
import StreamCacheHTTPClient
@testable import StreamCacheSources
import StreamCacheTestSupport
import Testing

/// How long a cloud link vouches for its file's version, and what happens when asking again fails.
@Suite struct ResolvingLocatorTests {
    static func target(_ name: String, version: String) -> DownloadTarget {
        DownloadTarget(url: URL(string: "https://content.example/\(name)")!, sendsCredentials: false, expires: true,
                       version: Validator(entityTag: "\"\(version)\""), totalLength: 1000)
    }

    /// Within its lifetime a link is used without a question; after it, the next download gets a
    /// newly resolved one. A link whose downloads tell their version needs no lifetime.
    @Test func aLinkIsResolvedAgainOnceItsWordOnTheVersionIsOld() async throws {
        let resolutions = Locked(0)
        let resolve: @Sendable () async throws -> DownloadTarget = {
            let count = resolutions.withLock { $0 += 1; return $0 }
            return Self.target("link\(count)", version: "v\(count)")
        }
        let lasting = ResolvingLocator(logDescription: "test", initial: Self.target("link0", version: "v0"), versionLifetime: .seconds(3600), resolve: resolve)
        #expect(try await lasting.target().url.lastPathComponent == "link0")
        #expect(resolutions.withLock { $0 } == 0)

        let brief = ResolvingLocator(logDescription: "test", initial: Self.target("link0", version: "v0"), versionLifetime: .zero, resolve: resolve)
        #expect(try await brief.target().url.lastPathComponent == "link1")
        let unresolved = ResolvingLocator(logDescription: "test", versionLifetime: .seconds(3600), resolve: resolve)
        #expect(try await unresolved.target().url.lastPathComponent == "link2")
        #expect(try await unresolved.target().url.lastPathComponent == "link2", "a new link holds for its own lifetime")

        var confirming = Self.target("dropbox", version: "rev1")
        confirming.versionHeader = VersionHeader(name: "Dropbox-API-Result", jsonKey: "rev")
        let selfConfirming = ResolvingLocator(logDescription: "test", initial: confirming, versionLifetime: .zero, resolve: resolve)
        #expect(try await selfConfirming.target().url.lastPathComponent == "dropbox")
        #expect(resolutions.withLock { $0 } == 2)
    }

    /// When the service cannot be asked, every download waiting for the answer goes on with the
    /// old link; with no link yet, the failure is the answer.
    @Test func downloadsWaitingForAFailedQuestionKeepTheOldLink() async throws {
        let released = Locked(false)
        let resolve: @Sendable () async throws -> DownloadTarget = {
            // The question stays out until released (at most 10 s), then fails.
            try await waitWhile(tries: 1000, every: .milliseconds(10)) { !released.withLock({ $0 }) }
            throw StreamCacheError(.originUnavailable, "the API is down")
        }
        let locator = ResolvingLocator(logDescription: "test", initial: Self.target("old", version: "v1"), versionLifetime: .zero, resolve: resolve)
        async let first = locator.target()
        async let second = locator.target()
        // Both ask while the question is out (a download that came after it would fall back alike).
        try await Task.sleep(for: .milliseconds(100))
        released.withLock { $0 = true }
        #expect(try await first.url.lastPathComponent == "old")
        #expect(try await second.url.lastPathComponent == "old")

        let fresh = ResolvingLocator(logDescription: "test", versionLifetime: .zero, resolve: resolve)
        await #expect(throws: StreamCacheError.self) { try await fresh.target() }
    }

    /// Downloads side by side share a link. One that comes back to the link another download
    /// resolved may find it dead too (a service's budget of bytes per link spent by the others'
    /// answers): it resolves once more instead of reporting a missing file. A request asks
    /// twice at most, and never twice for the same dead link.
    @Test func aDownloadThatFindsTheNewLinkDeadTooResolvesOnceMore() async throws {
        let origin = try TestOrigin()
        defer { origin.stop() }
        let data = TestData.random(count: 300_000, seed: 90)
        origin.setFile("/file", data: data)
        // The first `dead` links answer 404 (no file there), the next ones serve the file.
        func read(deadLinks dead: Int, sameDeadLinkAgain: Bool = false) async throws -> Data {
            let resolutions = Locked(0)
            let locator = ResolvingLocator(logDescription: "test", initial: DownloadTarget(url: origin.url("/gone0"), sendsCredentials: false, expires: true),
                                           versionLifetime: .seconds(3600)) {
                let count = resolutions.withLock { $0 += 1; return $0 }
                let path = sameDeadLinkAgain ? "/gone0" : count < dead ? "/gone\(count)" : "/file"
                return DownloadTarget(url: origin.url(path), sendsCredentials: false, expires: true)
            }
            return try await withTemporaryCache { cache in
                let url = origin.url("/file")
                return try await cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(locator: locator, transport: AsyncHTTPClientTransport.shared))
                    .read(from: 0).collect()
            }
        }
        func deadRequests() -> [String] { origin.requests.map(\.path).filter { $0.hasPrefix("/gone") } }

        #expect(TestData.sha256(try await read(deadLinks: 2)) == TestData.sha256(data))
        #expect(deadRequests() == ["/gone0", "/gone1"])

        origin.resetRecords()
        let missing = await #expect(throws: StreamCacheError.self) { try await read(deadLinks: 3) }
        #expect(missing?.code == .notFound)
        #expect(deadRequests() == ["/gone0", "/gone1", "/gone2"], "asked for a third link")

        origin.resetRecords()
        await #expect(throws: StreamCacheError.self) { try await read(deadLinks: 1, sameDeadLinkAgain: true) }
        #expect(deadRequests() == ["/gone0", "/gone0"], "the same dead link asked for again")
    }
}
