import Foundation
import Logging
import StreamCache
import StreamCacheSources
import StreamCacheTestSupport
import Testing

/// The five cloud services, each against a local server that follows its documented API.
@Suite struct CloudSourceTests {
    static let services = ["yandex", "dropbox", "gdrive", "onedrive", "box"]

    /// Every service: the file resolves to a stable key without secrets, its bytes arrive exact
    /// through the cache, each byte once, and a pre-signed content host never gets the token.
    @Test(arguments: services)
    func aFileStreamsThroughTheCache(service: String) async throws {
        let data = TestData.random(count: 3_000_000, seed: 51)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/Ünïcode song.mp3", data: data, mimeType: "audio/mpeg")
            let file = try await environment.source(service, path: "/Music/Ünïcode song.mp3").resolve()
            #expect(file.key.rawValue.hasPrefix("\(service):"))
            #expect(!file.key.rawValue.contains(CloudTestEnvironment.accessToken) && !file.key.rawValue.contains("http"))
            #expect(file.fileName == "Ünïcode song.mp3")
            #expect(file.size == Int64(data.count))
            #expect(file.version != nil)
            try await withTemporaryCache { cache in
                let resource = cache.resource(for: file.key, origin: file.origin)
                let bytes = try await resource.read(from: 0).collect()
                #expect(TestData.sha256(bytes) == TestData.sha256(data))
                let again = try await resource.read(ByteRange(1000, 2000)).collect()
                #expect(again == data[1000..<2000])
            }
            let records = environment.server.records
            #expect(environment.server.downloadedBytes == Int64(data.count), "each byte once")
            for record in records where record.host == .content && service != "yandex" {
                #expect(record.authorization == nil, "the token went to the content host: \(record.path)")
            }
            if service == "onedrive" || service == "box" {
                #expect(records.contains { $0.host == .content && $0.isDownload }, "the download must follow the redirect")
            }
        }
    }

    /// The cache key names the account the service says the token is of, and the file's id (its
    /// path, for Yandex.Disk, whose API has no ids): the same path or id in two accounts never
    /// shares cached bytes, and the key stays what it was for caches already on disk.
    @Test(arguments: services)
    func theKeyNamesTheAccountAndTheFile(service: String) async throws {
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/a.mp3", data: TestData.random(count: 100, seed: 52))
            let id = try #require(environment.server.fileID("/Music/a.mp3"))
            let file = try await environment.source(service, path: "/Music/a.mp3").resolve()
            let expected = switch service {
            case "yandex": "yandex:y-uid-7:/Music/a.mp3"
            case "dropbox": "dropbox:dbid:AAB7:id:\(id)"
            case "gdrive": "gdrive:g-perm-3:\(id)"
            case "onedrive": "onedrive:od-drive-9:\(id)"
            default: "box:box-user-11:\(id)"
            }
            #expect(file.key.rawValue == expected)
        }
    }

    /// A folder named where a file is wanted is refused with `invalidArgument` and a message
    /// that says to list it, before anything is downloaded.
    @Test(arguments: services)
    func aFolderIsRefusedWhereAFileIsWanted(service: String) async throws {
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/a.mp3", data: TestData.random(count: 100, seed: 53))
            let source = try environment.folder(service)
            await #expect { try await source.resolve() } throws: { error in
                (error as? StreamCacheError)?.code == .invalidArgument && "\(error)".contains("folder")
            }
            #expect(environment.server.downloadedBytes == 0)
        }
    }

    /// Acceptance 2: a Yandex download link that expires after 1 MB is resolved again mid-stream
    /// and the download carries on from the same byte; the origin sends each byte once and hands
    /// out at most one new link per expiry.
    @Test func anExpiringYandexLinkIsResolvedAgainMidStream() async throws {
        let data = TestData.random(count: 5_500_000, seed: 52)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/long.mp3", data: data, mimeType: "audio/mpeg")
            environment.server.expireLinks(afterBytes: 1_000_000)
            let file = try await environment.source("yandex", path: "/Music/long.mp3").resolve()
            try await withTemporaryCache { cache in
                let bytes = try await cache.resource(for: file.key, origin: file.origin).read(from: 0).collect()
                #expect(TestData.sha256(bytes) == TestData.sha256(data))
            }
            let expiries = (data.count + 999_999) / 1_000_000 - 1
            #expect(environment.server.downloadedBytes == Int64(data.count), "each byte once")
            #expect(environment.server.linksIssued <= expiries + 1, "\(environment.server.linksIssued) links for \(expiries) expiries")
            #expect(environment.server.linksIssued >= 2, "the link never expired: the test proves nothing")
        }
    }

    /// Acceptance 3: an access token that expires mid-stream is refreshed once (refresh-token
    /// grant) and the stream goes on; cached bytes are kept.
    @Test(arguments: ["gdrive", "yandex", "dropbox"])
    func aTokenThatExpiresMidStreamIsRefreshedOnce(service: String) async throws {
        let data = TestData.random(count: 6_000_000, seed: 53)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
            let token = environment.refreshingToken()
            let file = try await environment.source(service, path: "/Music/song.mp3", token: token).resolve()
            environment.server.expireTokens(afterBytes: 1_500_000)
            try await withTemporaryCache { cache in
                let resource = cache.resource(for: file.key, origin: file.origin)
                let bytes = try await resource.read(from: 0).collect()
                #expect(TestData.sha256(bytes) == TestData.sha256(data))
                #expect(try await resource.cachedRanges.coveredByteCount == Int64(data.count))
            }
            #expect(environment.server.tokenGrants == 1)
            #expect(environment.server.records.contains { $0.status == 401 }, "the token never expired: the test proves nothing")
            #expect(environment.server.downloadedBytes == Int64(data.count))
            #expect(try await token.accessToken() != CloudTestEnvironment.accessToken)
        }
    }

    /// A token the endpoint granted moments ago that the service rejects as well is not refreshed
    /// again on every read: the refusal is not about its age (a revoked grant), and each read
    /// cost a call to the token endpoint before (three here). Once the service takes the token,
    /// reads go on with it.
    @Test(arguments: ["gdrive", "dropbox"])
    func aTokenRejectedRightAfterItsRefreshIsNotRefreshedOnEveryRead(service: String) async throws {
        let data = TestData.random(count: 500_000, seed: 69)
        try await CloudTestEnvironment.with { environment in
            let server = environment.server
            server.setFile("/Music/song.mp3", data: data)
            let token = environment.refreshingToken()
            let resolved = try await environment.source(service, path: "/Music/song.mp3", token: token).resolve()
            server.failDownloads(100, status: 401)
            for _ in 0..<3 {
                let error = try await Self.failureOfAWholeRead(of: resolved)
                #expect(error?.code == .authenticationFailed, "\(String(describing: error))")
            }
            #expect(server.tokenGrants == 1, "one refresh for the first rejection, none for a token seconds old")
            server.failDownloads(0, status: 401)
            try await withTemporaryCache { cache in
                let resource = try await cache.resource(for: resolved)
                #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(data))
            }
            #expect(server.tokenGrants == 1)
            #expect(try await token.accessToken() != CloudTestEnvironment.accessToken)
        }
    }

    /// A file replaced on the service (new revision) drops the cached bytes of the old version:
    /// what is read afterwards is all new, never a mix.
    @Test(arguments: ["dropbox", "gdrive", "onedrive", "box", "yandex"])
    func aNewVersionDropsTheOldCachedBytes(service: String) async throws {
        let old = TestData.random(count: 2_000_000, seed: 54)
        let new = TestData.random(count: 2_100_000, seed: 55)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: old)
            try await withTemporaryCache { cache in
                let first = try await environment.source(service, path: "/Music/song.mp3").resolve()
                let oldResource = try await cache.resource(for: first)
                let head = try await oldResource.read(ByteRange(0, 500_000)).collect()
                #expect(head == old[0..<500_000])
                // The whole old version is cached (a prefetch rather than the idle read-ahead, whose
                // time limit a slow sanitizer run can hit).
                try await oldResource.prefetch()
                #expect(try await oldResource.cachedRanges.coveredByteCount == Int64(old.count))
                environment.server.setFile("/Music/song.mp3", data: new)
                let second = try await environment.source(service, path: "/Music/song.mp3").resolve()
                #expect(second.key == first.key, "the key names the file, not its version")
                #expect(second.version != first.version)
                let resource = try await cache.resource(for: second)
                #expect(try await resource.cachedRanges.isEmpty, "the old version's bytes must be dropped before any read")
                let bytes = try await resource.read(from: 0).collect()
                #expect(TestData.sha256(bytes) == TestData.sha256(new))
            }
        }
    }

    /// Reads `file` whole through a fresh cache and returns the error the read failed with;
    /// records an issue (and returns `nil`) when the read succeeds.
    static func failureOfAWholeRead(of file: ResolvedSource) async throws -> StreamCacheError? {
        var failure: StreamCacheError?
        try await withTemporaryCache { cache in
            let resource = try await cache.resource(for: file)
            do {
                _ = try await resource.read(from: 0).collect()
                Issue.record("the read was expected to fail")
            } catch let error as StreamCacheError {
                failure = error
            }
        }
        return failure
    }

    /// One process holds `service`'s `/Music/song.mp3` (1.5 MB, `old`) in a cache that asks the
    /// origin before every read; `replace()` puts `new`, of the same length, in its place.
    static func withFileReplacedBehindALiveLink(
        _ service: String, seed: UInt64,
        _ body: (_ resource: Resource, _ old: Data, _ new: Data, _ replace: () -> Void, _ environment: CloudTestEnvironment) async throws -> Void
    ) async throws {
        let old = TestData.random(count: 1_500_000, seed: seed)
        let new = TestData.random(count: 1_500_000, seed: seed + 1)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: old)
            try await withTemporaryCache(configure: {
                $0.revalidationInterval = .zero
                // Answered, however loaded the machine: the bound is not a wait (an answer ends
                // it), and 2 s was too short for a slower machine running the whole suite.
                $0.revalidationTimeout = TestTiming.time(.seconds(20))
            }) { cache in
                let file = try await environment.source(service, path: "/Music/song.mp3").resolve()
                let resource = try await cache.resource(for: file)
                try await body(resource, old, new, { environment.server.setFile("/Music/song.mp3", data: new) }, environment)
            }
        }
    }

    /// A file replaced on the service while one process keeps its link (a long-running `serve`):
    /// with a revalidation interval, the next read asks the service and gets the new version, even
    /// when the old and new files are the same length and the old link still works.
    @Test(arguments: ["dropbox", "gdrive", "onedrive", "box", "yandex"])
    func revalidationSeesANewVersionBehindALiveLink(service: String) async throws {
        try await Self.withFileReplacedBehindALiveLink(service, seed: 56) { resource, old, new, replace, environment async throws in
            #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(old))
            replace()
            #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(new), "\(service) served the old version")
            // The version asked again: the same answer, the cached bytes served.
            let downloaded = environment.server.downloadedBytes
            #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(new))
            #expect(environment.server.downloadedBytes - downloaded <= 1, "an unchanged version is read from the cache")
        }
    }

    /// The same, for a file cached in part: a read that starts on a missing byte and runs into
    /// the cached ones must not join the new version's bytes to the old one's, though its
    /// download's answer repeats the old version for every service whose version comes from its API.
    @Test(arguments: ["dropbox", "gdrive", "onedrive", "box", "yandex"])
    func revalidationKeepsAPartlyCachedFileFromMixingVersions(service: String) async throws {
        try await Self.withFileReplacedBehindALiveLink(service, seed: 58) { resource, _, new, replace, _ async throws in
            try await resource.prefetch(ByteRange(600_000, 1_500_000))
            replace()
            do {
                let whole = try await resource.read(from: 0).collect()
                #expect(TestData.sha256(whole) == TestData.sha256(new), "\(service) mixed two versions")
            } catch let error as StreamCacheError {
                // Dropbox's download reports the new version itself, and a read its download
                // finds changed ends with `resourceChanged` (a player asks again), as for any origin.
                #expect(error.code == .resourceChanged && service == "dropbox", "\(error)")
            }
            #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(new))
        }
    }

    /// `service`'s `/Music/song.mp3` (`data`, 1.5 MB) resolved in a fresh cache with no
    /// revalidation, its last 900 KB cached; links that do not name their version vouch for it
    /// for `linkVersionLifetime`. With `revisionsReadable` false the Drive user is a viewer who
    /// may not read revisions, so Drive's links do not name theirs.
    static func withPartlyCachedSong(
        _ service: String, data: Data, linkVersionLifetime: Duration, revisionsReadable: Bool = true,
        _ body: (_ resource: Resource, _ cache: StreamCache, _ environment: CloudTestEnvironment) async throws -> Void
    ) async throws {
        try await CloudTestEnvironment.with(configure: { $0.linkVersionLifetime = linkVersionLifetime }) { environment in
            environment.server.setFile("/Music/song.mp3", data: data)
            environment.server.allowReadingRevisions(revisionsReadable)
            try await withTemporaryCache { cache in
                let resource = try await cache.resource(for: try await environment.source(service, path: "/Music/song.mp3").resolve())
                try await resource.prefetch(ByteRange(600_000, 1_500_000))
                try await body(resource, cache, environment)
            }
        }
    }

    /// With no revalidation at all (the default), in a process that keeps its link: a file
    /// replaced by one of the same length is never joined to the cached part of the old one. Once
    /// the word on the version of a link that does not name it is old (here at once), a download
    /// asks the service again. (Links that name their version: `aPinnedLinkServesItsVersion`.)
    @Test(arguments: ["dropbox", "gdrive", "onedrive", "yandex"])
    func aPartlyCachedFileIsNeverJoinedToAReplacementOfTheSameLength(service: String) async throws {
        let new = TestData.random(count: 1_500_000, seed: 61)
        try await Self.withPartlyCachedSong(service, data: TestData.random(count: 1_500_000, seed: 60), linkVersionLifetime: .zero,
                                            revisionsReadable: false) { resource, _, environment async throws in
            environment.server.setFile("/Music/song.mp3", data: new)
            let whole: Data
            do {
                whole = try await resource.read(from: 0).collect()
            } catch let error as StreamCacheError where error.code == .resourceChanged {
                // The read's own download met the new version: a player asks again.
                whole = try await resource.read(from: 0).collect()
            }
            #expect(TestData.sha256(whole) == TestData.sha256(new), "\(service) joined two versions, or served the old one")
        }
    }

    /// A link whose word on the version grew old is still used while the service's API cannot be
    /// asked (down, rate-limited, refusing): the bytes play on.
    @Test(arguments: ["gdrive", "onedrive", "yandex"])
    func anOldLinkStillServesWhileTheAPICannotBeAsked(service: String) async throws {
        let data = TestData.random(count: 1_500_000, seed: 64)
        try await Self.withPartlyCachedSong(service, data: data, linkVersionLifetime: .zero, revisionsReadable: false) { resource, _, environment async throws in
            environment.server.failAPICalls(1_000, status: 403)
            #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(data))
            #expect(environment.server.records.contains { $0.host == .api && $0.status == 403 }, "the API was never asked: the test proves nothing")
        }
    }

    /// Box and Google Drive downloads name the file version they were resolved with, so their
    /// links keep their word on their bytes however old it is (here the lifetime is zero): a
    /// replaced file's download still brings the old version's bytes, whole and never joined to
    /// the new one's, with no call to the API; the next resolution (a revalidation's, a new
    /// process's) brings the new version, and the old bytes are dropped.
    @Test(arguments: ["box", "gdrive"])
    func aPinnedLinkServesItsVersion(service: String) async throws {
        let old = TestData.random(count: 1_500_000, seed: 62)
        let new = TestData.random(count: 1_500_000, seed: 63)
        try await Self.withPartlyCachedSong(service, data: old, linkVersionLifetime: .zero) { resource, cache, environment async throws in
            environment.server.setFile("/Music/song.mp3", data: new)
            // Metadata calls: not the downloads, nor Box's redirects to its content host.
            let metadataCalls = {
                environment.server.records.filter { $0.host == .api && !$0.isDownload && !$0.path.contains("/revisions/") && !$0.path.hasSuffix("/content") }.count
            }
            let callsBefore = metadataCalls()
            #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(old))
            #expect(environment.server.records.contains { ($0.path.hasSuffix("/content") && $0.status == 302) || $0.path.contains("/revisions/") })
            #expect(metadataCalls() == callsBefore, "the service was asked again")

            let resolvedAgain = try await cache.resource(for: try await environment.source(service, path: "/Music/song.mp3").resolve())
            #expect(TestData.sha256(try await resolvedAgain.read(from: 0).collect()) == TestData.sha256(new))
        }
    }

    /// A pinned version the service no longer keeps (Box without version history, a Drive
    /// revision replaced and dropped) is not a missing file: the link is resolved again and the
    /// new version is read, never joined to the old one's cached bytes.
    @Test(arguments: ["box", "gdrive"])
    func aPinnedVersionThatIsGoneIsResolvedAgain(service: String) async throws {
        let new = TestData.random(count: 1_500_000, seed: 66)
        try await Self.withPartlyCachedSong(service, data: TestData.random(count: 1_500_000, seed: 65), linkVersionLifetime: .seconds(3600)) { resource, _, environment async throws in
            environment.server.setFile("/Music/song.mp3", data: new)
            environment.server.forgetEarlierVersions()
            let whole: Data
            do {
                whole = try await resource.read(from: 0).collect()
            } catch let error as StreamCacheError where error.code == .resourceChanged {
                // The read's own download met the new version: a player asks again.
                whole = try await resource.read(from: 0).collect()
            }
            #expect(TestData.sha256(whole) == TestData.sha256(new))
            #expect(environment.server.records.contains { $0.status == 404 }, "the old version was never asked for: the test proves nothing")
        }
    }

    /// A Google Docs Editors file (a document, a sheet) has no bytes to stream: resolving it is a
    /// clear error that says so, not the download's 403 `fileNotDownloadable`.
    @Test func aGoogleDocumentIsRefusedWithAClearError() async throws {
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Docs/notes", data: Data("text".utf8), mimeType: "application/vnd.google-apps.document")
            do {
                _ = try await environment.source("gdrive", path: "/Docs/notes").resolve()
                Issue.record("a Google document has no bytes to stream")
            } catch let error as StreamCacheError {
                #expect(error.code == .invalidArgument, "\(error)")
                #expect(error.message.contains("Google application/vnd.google-apps.document document"), "\(error.message)")
            }
            #expect(environment.server.records.filter(\.isDownload).isEmpty)
        }
    }

    /// A Drive user who may not read a file's revisions (a viewer of someone else's file) gets
    /// its current bytes from `files/{id}?alt=media`.
    @Test func aDriveViewerWhoMayNotReadRevisionsGetsTheCurrentBytes() async throws {
        let data = TestData.random(count: 1_500_000, seed: 67)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: data)
            environment.server.allowReadingRevisions(false)
            try await withTemporaryCache { cache in
                let resource = try await cache.resource(for: try await environment.source("gdrive", path: "/Music/song.mp3").resolve())
                #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(data))
            }
            let downloads = environment.server.records.filter(\.isDownload)
            #expect(!downloads.isEmpty && downloads.allSatisfy { !$0.path.contains("/revisions/") })
        }
    }

    /// Google Drive answers a user's rate limit with 403 and a `userRateLimitExceeded` reason (its
    /// documented format), to be waited out like a 429: the API calls and the downloads both go
    /// on after it, without refreshing the token or resolving the link again. A 403 with another
    /// reason is a refusal, at once, and its error says the reason rather than "check the token".
    @Test func aDriveRateLimitIsWaitedOutAndARefusalSaysWhy() async throws {
        let data = TestData.random(count: 1_000_000, seed: 68)
        try await CloudTestEnvironment.with { environment in
            let server = environment.server
            server.setFile("/Music/song.mp3", data: data)
            let token = environment.refreshingToken()
            server.failAPICalls(2, status: 403, body: CloudTestServer.driveRateLimitBody)
            let resolved = try await environment.source("gdrive", path: "/Music/song.mp3", token: token).resolve()
            #expect(server.records.filter { $0.status == 403 }.count == 2)
            let metadataCalls = { server.records.filter { $0.path.hasPrefix("/drive/v3/files/") && !$0.path.contains("/revisions/") }.count }
            let resolutions = metadataCalls()

            server.failDownloads(2, status: 403, body: CloudTestServer.driveRateLimitBody)
            try await withTemporaryCache { cache in
                let resource = try await cache.resource(for: resolved)
                #expect(TestData.sha256(try await resource.read(from: 0).collect()) == TestData.sha256(data))
            }
            #expect(server.records.filter { $0.status == 403 }.count == 4)
            #expect(metadataCalls() == resolutions, "a rate limit is not a dead link")
            #expect(server.tokenGrants == 0, "a rate limit is not an expired token")

            server.failAPICalls(1, status: 403, body: #"{"error": {"errors": [{"reason": "insufficientFilePermissions"}], "code": 403}}"#)
            do {
                _ = try await environment.source("gdrive", path: "/Music/song.mp3", token: token).resolve()
                Issue.record("a refusal must fail the call")
            } catch let error as StreamCacheError {
                #expect(error.code == .authenticationFailed, "\(error)")
                #expect(error.message.contains("insufficientFilePermissions") && !error.message.contains("token"), "\(error.message)")
            }
            #expect(server.records.filter { $0.status == 403 }.count == 5, "a refusal is not asked again")

            // A download refused for a reason a token cannot fix says the reason (the token is
            // refreshed once all the same, as after any 403, and refused again).
            server.failDownloads(2, status: 403, body: #"{"error": {"errors": [{"domain": "usageLimits", "reason": "downloadQuotaExceeded"}], "code": 403}}"#)
            let refusal = try await Self.failureOfAWholeRead(of: resolved)
            #expect(refusal?.code == .authenticationFailed, "\(String(describing: refusal))")
            #expect(refusal?.message.contains("downloadQuotaExceeded") == true && refusal?.message.contains("token") == false,
                    "\(refusal?.message ?? "no error")")

            // A rate limit that outlasts the retry policy says so.
            server.failAPICalls(100, status: 403, body: CloudTestServer.driveRateLimitBody)
            do {
                _ = try await environment.source("gdrive", path: "/Music/song.mp3", token: token).resolve()
                Issue.record("a service that keeps limiting must fail the call")
            } catch let error as StreamCacheError {
                #expect(error.code == .originUnavailable)
                #expect(error.message.contains("limiting"), "\(error.message)")
            }
            server.failAPICalls(0, status: 503)
        }
    }

    /// Rate limits and brief outages of a service's API (429 or 503 with `Retry-After`, as each
    /// documents them) are waited out, for as long as `Retry-After` says: two in a row still
    /// resolve the file. A service down for
    /// longer than the retry policy waits is `originUnavailable`, naming the service and the status.
    @Test(arguments: services)
    func aRateLimitedAPIIsTriedAgain(service: String) async throws {
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: TestData.random(count: 1000))
            let source = try environment.source(service, path: "/Music/song.mp3")
            environment.server.failAPICalls(2, status: 429, retryAfter: "0")
            #expect(try await source.resolve().size == 1000)
            #expect(environment.server.records.filter { $0.status == 429 }.count == 2)
            // The wait the service asks for is kept, not the policy's first back-off (0.1 s); a
            // loaded machine can only make it longer.
            environment.server.failAPICalls(1, status: 429, retryAfter: "1")
            let began = ContinuousClock.now
            #expect(try await environment.source(service, path: "/Music/song.mp3").resolve().size == 1000)
            #expect(ContinuousClock.now - began >= .seconds(1))
            // Down for longer than the policy's five attempts (0.1 + 0.2 + 0.4 + 0.8 s apart).
            environment.server.failAPICalls(100, status: 503)
            do {
                _ = try await environment.source(service, path: "/Music/song.mp3").resolve()
                Issue.record("a service down for good must fail the call")
            } catch let error as StreamCacheError {
                #expect(error.code == .originUnavailable)
                #expect(error.httpStatus == 503)
                #expect(error.message.contains("HTTP 503"), "\(error.message)")
            }
            environment.server.failAPICalls(0, status: 503)
        }
    }

    /// A rejected token that cannot be refreshed is `authenticationFailed`, with no token in the message.
    @Test(arguments: services)
    func aRejectedTokenIsAClearError(service: String) async throws {
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/song.mp3", data: TestData.random(count: 1000))
            let source = try SourceReference.parse(environment.reference(service, path: "/Music/song.mp3"),
                                                   credentials: SourceCredentials(token: "wrong-token-31337"), configuration: environment.configuration)
            do {
                _ = try await source.resolve()
                Issue.record("a wrong token was accepted")
            } catch let error as StreamCacheError {
                #expect(error.code == .authenticationFailed)
                #expect(!error.description.contains("wrong-token-31337"))
            }
        }
    }

    /// Folder listings give names, sizes and references that resolve.
    @Test(arguments: services)
    func foldersList(service: String) async throws {
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/a.mp3", data: TestData.random(count: 100))
            environment.server.setFile("/Music/b.flac", data: TestData.random(count: 200))
            environment.server.setFile("/Music/Live/c.mp3", data: TestData.random(count: 300))
            let source = try environment.folder(service)
            let entries = try await source.list()
            #expect(entries.map(\.name).sorted() == ["Live", "a.mp3", "b.flac"])
            #expect(entries.first { $0.name == "b.flac" }?.size == 200)
            #expect(entries.first { $0.name == "Live" }?.isFolder == true)
            let b = try #require(entries.first { $0.name == "b.flac" })
            let resolved = try await SourceReference.parse(b.reference, credentials: SourceCredentials(token: CloudTestEnvironment.accessToken),
                                                           configuration: environment.configuration).resolve()
            #expect(resolved.size == 200)
        }
    }

    /// A size no file can have in a service's metadata (negative, or past
    /// ``StreamCache/ByteRange/largestLength``) is a `badResponse` that names the field, for the
    /// file and for its folder's listing, and the version cached before stays whole. A negative
    /// size of a new version once reached a byte range and stopped the process.
    @Test(arguments: services)
    func aSizeNoFileCanHaveIsABadResponseThatLosesNothing(service: String) async throws {
        let old = TestData.random(count: 100_000, seed: 54)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/a.mp3", data: old)
            try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
                let first = try await environment.source(service, path: "/Music/a.mp3").resolve()
                let cached = try await cache.resource(for: first).read(from: 0).collect()
                #expect(TestData.sha256(cached) == TestData.sha256(old))
                environment.server.setFile("/Music/a.mp3", data: TestData.random(count: 90_000, seed: 55))
                for size in [-5, ByteRange.largestLength + 1, Int64.max] {
                    environment.server.misstateSize("/Music/a.mp3", as: size)
                    await #expect {
                        let file = try await environment.source(service, path: "/Music/a.mp3").resolve()
                        _ = try await cache.resource(for: file).read(from: 0).collect()
                    } throws: { error in
                        guard let error = error as? StreamCacheError else { return false }
                        return error.code == .badResponse && error.message.contains("`size`: ") && error.message.contains("is not a size in bytes")
                    }
                    // The listing's only file is its first entry: `entries.[0].size` for Dropbox.
                    await #expect { try await environment.folder(service).list() } throws: { error in
                        guard let error = error as? StreamCacheError else { return false }
                        return error.code == .badResponse && error.message.contains(".[0].size`: ") && error.message.contains("is not a size in bytes")
                    }
                }
                #expect(try await cache.resource(for: first.key, origin: first.origin).cachedRanges == RangeSet([ByteRange(0, Int64(old.count))]))
                #expect(environment.server.downloadedBytes == Int64(old.count))
            }
        }
    }

    /// An answer the client cannot decode is a `badResponse` that says what was wrong, and where,
    /// without quoting a value (which may be a token or a signed link).
    @Test(arguments: services)
    func anAnswerThatDoesNotDecodeSaysWhereAndWhy(service: String) async throws {
        try await CloudTestEnvironment.with { (environment: CloudTestEnvironment) async throws -> Void in
            environment.server.setFile("/Music/a.mp3", data: TestData.random(count: 100))
            for (body, reason) in [("{\"secret\": \"value-31337\"}", "(no `"), ("<html>busy</html>", "(not JSON)")] {
                environment.server.failAPICalls(10, status: 200, body: body)
                await #expect { try await environment.source(service, path: "/Music/a.mp3").resolve() } throws: { error in
                    guard let error = error as? StreamCacheError else { return false }
                    return error.code == .badResponse && error.message.contains("JSON this client does not understand \(reason)")
                        && !error.message.contains("value-31337")
                }
            }
            environment.server.failAPICalls(0, status: 200)
            #expect(try await environment.source(service, path: "/Music/a.mp3").resolve().size == 100)
        }
    }

    /// A new version whose size in the service's metadata is not the length its download states
    /// (a service's slip) plays whole, each byte downloaded once: the download's length stands.
    /// Before, its first download dropped the version the metadata announced and failed the
    /// read, and every later resolution announced it again, so the file never played.
    @Test(arguments: services)
    func aSizeTheDownloadContradictsCostsNoRead(service: String) async throws {
        let old = TestData.random(count: 100_000, seed: 56)
        let new = TestData.random(count: 120_000, seed: 57)
        try await CloudTestEnvironment.with { environment in
            environment.server.setFile("/Music/a.mp3", data: old)
            try await withTemporaryCache { (cache: StreamCache) async throws -> Void in
                let first = try await environment.source(service, path: "/Music/a.mp3").resolve()
                _ = try await cache.resource(for: first).read(from: 0).collect()
                environment.server.setFile("/Music/a.mp3", data: new)
                environment.server.misstateSize("/Music/a.mp3", as: 100)
                for _ in 0..<2 {
                    let file = try await environment.source(service, path: "/Music/a.mp3").resolve()
                    #expect(file.size == 100)
                    let bytes = try await cache.resource(for: file).read(from: 0).collect()
                    #expect(TestData.sha256(bytes) == TestData.sha256(new))
                }
                #expect(environment.server.downloadedBytes == Int64(old.count + new.count), "each byte once")
            }
        }
    }

    /// Acceptance 4 (sources part): after streams from every service, with token refreshes and
    /// expiring links, no token, refresh token or signed link is in the cache directory, the
    /// index or the logs.
    @Test func noSecretReachesTheCacheTheIndexOrTheLogs() async throws {
        let store = InMemoryLogHandler.Store()
        let logger = Logger(label: "test") { InMemoryLogHandler(label: $0, store: store) }
        let data = TestData.random(count: 2_500_000, seed: 56)
        try await CloudTestEnvironment.with { base in
            var configuration = base.configuration
            configuration.logger = logger
            let environment = CloudTestEnvironment(server: base.server, configuration: configuration)
            environment.server.setFile("/Music/song.mp3", data: data, mimeType: "audio/mpeg")
            environment.server.expireLinks(afterBytes: 700_000)
            try await withTemporaryDirectory { directory in
                var cacheConfiguration = StreamCache.Configuration(directory: directory)
                cacheConfiguration.logger = logger
                let cache = try StreamCache(configuration: cacheConfiguration)
                for service in Self.services {
                    // The tokens granted for the services before expire too, seconds old.
                    let token = environment.refreshingToken(minimumTokenAge: .zero)
                    let file = try await environment.source(service, path: "/Music/song.mp3", token: token).resolve()
                    environment.server.expireTokens(afterBytes: 900_000)
                    let bytes = try await cache.resource(for: file.key, origin: file.origin).read(from: 0).collect()
                    #expect(bytes.count == data.count)
                }
                await cache.shutdown()
                var secrets = [CloudTestEnvironment.accessToken, environment.server.refreshToken, "tempauth", "fsize="]
                secrets += environment.server.records.compactMap { $0.authorization?.split(separator: " ").last.map(String.init) }
                // The signatures of the links the services handed out.
                secrets += environment.server.records.filter { $0.host == .content }.compactMap { $0.path.split(separator: "/").last.map(String.init) }
                #expect(secrets.count > 10)
                let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
                #expect(!files.isEmpty)
                for file in files {
                    guard let content = try? Data(contentsOf: file) else { continue }
                    for secret in secrets where content.range(of: Data(secret.utf8)) != nil {
                        Issue.record("\(file.lastPathComponent) holds a secret (\(secret.prefix(8))…)")
                    }
                }
                let logs = store.lines.joined(separator: "\n")
                #expect(logs.contains("resolved again"), "the log should show the link resolutions")
                for secret in Set(secrets) where logs.contains(secret) {
                    Issue.record("the logs hold a secret (\(secret.prefix(8))…): \(store.lines.first { $0.contains(secret) } ?? "")")
                }
            }
        }
    }
}
