import Foundation
import StreamCache
import StreamCacheSources
import StreamCacheTestSupport
import Testing

/// Each service's file hash, read from its API as documented, checks the complete cached file:
/// the local servers publish the true digests of what they store.
@Suite struct ContentDigestSourceTests {
    static let services: [(String, ContentDigest.Algorithm)] = [
        ("yandex", .sha256), ("dropbox", .dropboxContentHash), ("gdrive", .md5), ("onedrive", .quickXor), ("box", .sha1),
    ]

    /// A prefetch completes the file and returns once its bytes matched the service's digest.
    @Test(arguments: services)
    func aCompleteFileMatchesTheServicesDigest(service: String, algorithm: ContentDigest.Algorithm) async throws {
        // Past one 4 MiB block, so that Dropbox's hash of block hashes has two.
        let data = TestData.random(count: 4_500_000, seed: 61)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
            let file = try await environment.source(service, path: "/Music/song.mp3").resolve()
            try await withTemporaryCache { cache in
                let resource = try await cache.resource(for: file)
                try await resource.prefetch()
                #expect(await resource.info?.contentDigest?.algorithm == algorithm)
                #expect(cache.statistics.contentMatches == 1)
                #expect(cache.statistics.contentMismatches == 0)
            }
            #expect(environment.server.downloadedBytes == Int64(data.count))
        }
    }

    /// A byte flipped between the service and the cache: the prefetch drops the file once and
    /// returns with the true bytes.
    @Test(arguments: services.map(\.0))
    func aFileCorruptedOnItsWayIsFetchedAgain(service: String) async throws {
        let data = TestData.random(count: 1_200_000, seed: 62)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
            environment.server.corruptDownloads(1, atOffset: 1000)
            let file = try await environment.source(service, path: "/Music/song.mp3").resolve()
            try await withTemporaryCache { cache in
                let resource = try await cache.resource(for: file)
                try await resource.prefetch()
                #expect(cache.statistics.contentMismatches == 1)
                #expect(cache.statistics.contentMatches == 1)
                #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(data))
            }
            #expect(environment.server.downloadedBytes == Int64(2 * data.count))
        }
    }
}
