import Foundation
import GRDB
@testable import StreamCache
import StreamCacheTestSupport
import Testing

/// The index on disk: caches made by earlier versions (whose index GRDB wrote) open with their
/// bytes, and an index from a newer version is refused rather than changed.
@Suite struct CacheIndexTests {
    /// The index earlier versions created: GRDB's migrator, "v1", dates as GRDB's default text.
    static func makeGRDBIndex(at path: String, key: CacheKey, dataFileName: String, spans: [(Int64, Int64)]) throws {
        let queue = try DatabaseQueue(path: path)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "resource") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("key", .text).notNull().unique()
                t.column("dataFileName", .text).notNull().unique()
                t.column("totalLength", .integer)
                t.column("mimeType", .text)
                t.column("originalFileName", .text)
                t.column("acceptsByteRanges", .boolean).notNull().defaults(to: false)
                t.column("entityTag", .text)
                t.column("lastModified", .text)
                t.column("infoKnown", .boolean).notNull().defaults(to: false)
                t.column("cachedBytes", .integer).notNull().defaults(to: 0)
                t.column("pinned", .boolean).notNull().defaults(to: false)
                t.column("createdAt", .datetime).notNull()
                t.column("lastAccessedAt", .datetime).notNull().indexed()
            }
            try db.create(table: "span") { t in
                t.column("resourceId", .integer).notNull().references("resource", onDelete: .cascade)
                t.column("start", .integer).notNull()
                t.column("end", .integer).notNull()
                t.primaryKey(["resourceId", "start"])
                t.check(sql: "start >= 0 AND \"end\" > start")
            }
        }
        try migrator.migrate(queue)
        try queue.write { db in
            try db.execute(sql: """
                INSERT INTO resource (key, dataFileName, totalLength, mimeType, originalFileName, acceptsByteRanges, entityTag,
                                      infoKnown, cachedBytes, pinned, createdAt, lastAccessedAt)
                VALUES (?, ?, 4096, 'audio/mpeg', 'song.mp3', 1, '"v1"', 1, 0, 1, '2026-11-20 09:15:02.123', '2026-11-21 10:00:00.500')
                """, arguments: [key.rawValue, dataFileName])
            let id = db.lastInsertedRowID
            for (start, end) in spans {
                try db.execute(sql: "INSERT INTO span (resourceId, start, \"end\") VALUES (?, ?, ?)", arguments: [id, start, end])
            }
        }
    }

    /// A cache in `directory` as earlier versions left it: one resource, `test:song`, with a data
    /// file of `fileBytes` random bytes and an index (GRDB's) claiming `spans`.
    static func makeEarlierVersionsCache(in directory: URL, fileBytes: Int, spans: [(Int64, Int64)]) throws -> CacheKey {
        let key = CacheKey("test:song")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("data"), withIntermediateDirectories: true)
        try TestData.random(count: fileBytes).write(to: directory.appendingPathComponent("data/\(key.fileStem).data"))
        try makeGRDBIndex(at: directory.appendingPathComponent("index.sqlite").path, key: key, dataFileName: "\(key.fileStem).data", spans: spans)
        return key
    }

    @Test func anIndexWrittenByGRDBOpensWithItsResourcesSpansAndDates() async throws {
        try await withTemporaryDirectory { directory in
            let key = CacheKey("test:song")
            let data = TestData.random(count: 4096)
            try FileManager.default.createDirectory(at: directory.appendingPathComponent("data"), withIntermediateDirectories: true)
            try data.write(to: directory.appendingPathComponent("data/\(key.fileStem).data"))
            try Self.makeGRDBIndex(at: directory.appendingPathComponent("index.sqlite").path, key: key, dataFileName: "\(key.fileStem).data",
                                   spans: [(0, 1024), (2048, 4096)])

            let store = try CacheStore(directory: directory)
            let entry = try #require(try await store.entry(for: key))
            #expect(entry.spans == RangeSet([ByteRange(0, 1024), ByteRange(2048, 4096)]))
            #expect(entry.info?.totalLength == 4096 && entry.info?.fileName == "song.mp3" && entry.info?.validator.entityTag == "\"v1\"")
            #expect(entry.pinned)
            // 2026-11-21 10:00:00.500 UTC
            #expect(abs(entry.lastAccessedAt.timeIntervalSince1970 - 1_795_255_200.5) < 0.001)
            #expect(try await store.totalCachedBytes() == 3072)
            // The column for the origin's word came in place, without a new schema version, so
            // the StreamCache that wrote the index can still open it.
            #expect(entry.verifiedAt == nil)
            let confirmed = Date(timeIntervalSince1970: 1_795_300_000.25)
            try await store.recordVerification(resourceID: entry.id, at: confirmed)
            #expect(try await store.entry(for: key)?.verifiedAt == confirmed)
            let version = try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).read { db in
                try Int.fetchOne(db, sql: "PRAGMA user_version")
            }
            #expect(version == 1)

            // It is written to as any index: a new span, then the resource's removal with its spans.
            try await store.commit(resourceID: entry.id, spans: RangeSet([ByteRange(0, 4096)]), file: try DataFile(path: entry.dataPath))
            #expect(try await store.entry(for: key)?.spans == RangeSet([ByteRange(0, 4096)]))
            #expect(try await store.remove(key))
            let spansLeft = try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).read { db in
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM span") ?? -1
            }
            #expect(spansLeft == 0)
        }
    }

    /// An index that claims bytes past its resource's length (a hand-edited index, or one whose
    /// length was learnt after the spans) claims up to the length only, even when the data file
    /// holds more: no byte past the end is counted against the cache's limit or served.
    @Test func spansPastTheResourcesLengthAreCutWhenTheCacheOpens() async throws {
        try await withTemporaryDirectory { directory in
            let key = try Self.makeEarlierVersionsCache(in: directory, fileBytes: 8192, spans: [(0, 8192)])
            let store = try CacheStore(directory: directory)
            #expect(try await store.entry(for: key)?.spans == RangeSet([ByteRange(0, 4096)]))
            #expect(try await store.totalCachedBytes() == 4096)
        }
    }

    /// A data file name in the index that is not one plain file name (an index edited by hand
    /// or damaged) stands for the key's own name: the data file, the reconciliation at open and
    /// the removal of the resource stay inside the data directory, and its bytes stay cached.
    /// Before, opening the cache deleted the real data file as one the index did not know, and
    /// removing the resource removed what the name pointed to: for `..` the whole cache
    /// directory, for `../index.sqlite` the index, for `../../notes.txt` a file beside the cache.
    @Test(arguments: ["..", "../index.sqlite", "../../notes.txt", "", "."])
    func aDataFileNameOutsideTheDataDirectoryIsNotFollowed(name: String) async throws {
        try await withTemporaryDirectory { root in
            let directory = root.appendingPathComponent("cache")
            let notes = root.appendingPathComponent("notes.txt")
            try Data("keep me".utf8).write(to: notes)
            let key = CacheKey("test:song")
            let dataFile = directory.appendingPathComponent("data/\(key.fileStem).data")
            try FileManager.default.createDirectory(at: directory.appendingPathComponent("data"), withIntermediateDirectories: true)
            try TestData.random(count: 4096).write(to: dataFile)
            try Self.makeGRDBIndex(at: directory.appendingPathComponent("index.sqlite").path, key: key, dataFileName: name, spans: [(0, 4096)])
            do {
                let store = try CacheStore(directory: directory)
                let entry = try #require(try await store.entry(for: key))
                #expect(entry.dataPath == dataFile.path)
                #expect(entry.spans == RangeSet([ByteRange(0, 4096)]))
                #expect(try await store.remove(key))
                store.releaseDirectory()
            }
            #expect(try Data(contentsOf: notes) == Data("keep me".utf8))
            #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("index.sqlite").path))
            #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("data").path))
            #expect(!FileManager.default.fileExists(atPath: dataFile.path), "the resource's own data file goes with it")
        }
    }

    /// A host's row no StreamCache wrote (a time or hold that is not a finite number of seconds
    /// a process keeps, a count past any host's, as an index edited by hand or damaged may hold)
    /// is left out, and a cache opens on the directory with the rows that are sound: such a
    /// time became a `Duration`, which traps, when the cache opened, and such a count overflowed
    /// when one more was tried.
    @Test func aHostRowWithTimesNoProcessKeepsIsLeftOut() async throws {
        try await withTemporaryDirectory { directory in
            // Whole seconds, which the index's seconds since 1970 keep exactly.
            let refused = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 60).rounded())
            let sound = ["http://127.0.0.1:8080": ConnectionAllowance.Snapshot(connections: 2, refusedAt: refused, taughtAt: refused, hold: .seconds(600))]
            do {
                let store = try CacheStore(directory: directory)
                try await store.saveHostConnectionAllowances { sound }
                store.releaseDirectory()
            }
            let now = refused.timeIntervalSince1970
            try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).write { db in
                let rows: [(String, Int64, Double, Double)] = [("http://a:1", 3, now, .infinity), ("http://b:1", 3, -1e300, 60), ("http://c:1", 3, now, 1e300),
                                                               ("http://d:1", 3, 1e300, 60), ("http://e:1", Int64.max, now, 60)]
                for (host, connections, refusedAt, hold) in rows {
                    try db.execute(sql: #"INSERT INTO "hostConnections" ("host", "connections", "refusedAt", "taughtAt", "holdSeconds") VALUES (?, ?, ?, ?, ?)"#,
                                   arguments: [host, connections, refusedAt, refusedAt, hold])
                }
            }
            do {
                let store = try CacheStore(directory: directory)
                #expect(store.hostConnectionAllowances() == sound)
                store.releaseDirectory()
            }
            let cache = try StreamCache(configuration: StreamCache.Configuration(directory: directory))
            try await withAsyncCleanup {
                #expect(cache.hostConnectionAllowances.mapValues(\.connections) == ["http://127.0.0.1:8080": 2])
            } cleanup: { await cache.shutdown() }
        }
    }

    /// What hosts' refusals taught is kept in a table of its own, which an index of an earlier
    /// version gains in place (no new schema version, so that version still opens it), and which
    /// the next store on the directory reads back.
    @Test func hostsConnectionAllowancesAreKeptForTheNextStore() async throws {
        try await withTemporaryDirectory { directory in
            let key = try Self.makeEarlierVersionsCache(in: directory, fileBytes: 4096, spans: [(0, 4096)])
            let refused = Date(timeIntervalSince1970: 1_800_000_000.25)
            let allowances = [
                "https://downloader.disk.yandex.ru:443": ConnectionAllowance.Snapshot(connections: 2, refusedAt: refused, taughtAt: refused + 60, hold: .seconds(120)),
                "http://127.0.0.1:8080": ConnectionAllowance.Snapshot(connections: 1, refusedAt: refused, taughtAt: refused, hold: .seconds(60)),
            ]
            do {
                let store = try CacheStore(directory: directory)
                #expect(store.hostConnectionAllowances().isEmpty)
                try await store.saveHostConnectionAllowances { allowances }
                // Each save replaces what was kept.
                try await store.saveHostConnectionAllowances { allowances }
                store.releaseDirectory()
            }
            let store = try CacheStore(directory: directory)
            #expect(store.hostConnectionAllowances() == allowances)
            #expect(try await store.entry(for: key)?.spans == RangeSet([ByteRange(0, 4096)]))
            let version = try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).read { db in
                try Int.fetchOne(db, sql: "PRAGMA user_version")
            }
            #expect(version == 1)
        }
    }

    /// An alias names its resource for the next store too (an index of an earlier version gains
    /// the table), and goes with the resource.
    @Test func aliasesAreKeptForTheNextStoreWhileTheirResourceIs() async throws {
        try await withTemporaryDirectory { directory in
            let key = try Self.makeEarlierVersionsCache(in: directory, fileBytes: 4096, spans: [(0, 4096)])
            do {
                let store = try CacheStore(directory: directory)
                #expect(try await store.resource(aliased: "yandex:/Music/a.mp3") == nil)
                try await store.setAlias("yandex:/Music/a.mp3", for: CacheKey("yandex:9:/Music/old.mp3"), fileName: "old.mp3")
                // The newest word holds.
                try await store.setAlias("yandex:/Music/a.mp3", for: key, fileName: "a.mp3")
                store.releaseDirectory()
            }
            let store = try CacheStore(directory: directory)
            let named = try await store.resource(aliased: "yandex:/Music/a.mp3")
            #expect(named?.key == key && named?.fileName == "a.mp3")
            try await store.setAlias("yandex:/Music/b.mp3", for: CacheKey("yandex:9:/Music/never-cached.mp3"), fileName: "b.mp3")
            #expect(try await store.resource(aliased: "yandex:/Music/b.mp3") == nil, "an alias of a key the index does not hold names nothing")
            _ = try await store.remove(key)
            #expect(try await store.resource(aliased: "yandex:/Music/a.mp3") == nil)
            let rows = try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).read { db in
                try String.fetchAll(db, sql: #"SELECT "alias" FROM "alias""#)
            }
            #expect(rows == ["yandex:/Music/b.mp3"], "the removed resource's alias went with it")
        }
    }

    @Test func anIndexFromANewerVersionIsRefusedAndLeftAlone() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("index.sqlite").path
            try await DatabaseQueue(path: path).write { db in
                try db.execute(sql: "CREATE TABLE future (x); PRAGMA user_version = 7")
            }
            #expect {
                try CacheStore(directory: directory)
            } throws: { error in
                (error as? StreamCacheError)?.code == .cacheIOFailed && "\(error)".contains("schema version 7")
            }
            let version = try await DatabaseQueue(path: path).read { db in try Int.fetchOne(db, sql: "PRAGMA user_version") }
            #expect(version == 7)
        }
    }

    @Test func legacyTextDatesParseAsUTC() {
        #expect(ResourceRecord.parseLegacyDate("1970-01-01 00:00:00")?.timeIntervalSince1970 == 0)
        #expect(ResourceRecord.parseLegacyDate("2026-11-20 09:15:02.123").map { abs($0.timeIntervalSince1970 - 1_795_166_102.123) < 0.0005 } == true)
        #expect(ResourceRecord.parseLegacyDate("2026-13-20 09:15:02") == nil)
        #expect(ResourceRecord.parseLegacyDate("yesterday") == nil)
    }
}
