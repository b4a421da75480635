#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging

/// The durable half of the cache: one sparse data file per resource plus an SQLite index of
/// resources, their info and the byte spans that are safely on disk (and, beside them, how many
/// connections each origin host lately accepted: ``ConnectionAllowance/Snapshot``).
///
/// **Record after write** (invariant 2): a span reaches the index only through
/// ``commit(resourceID:spans:file:)``, which syncs the data file first. After a kill -9 or a power
/// cut the index may claim less than the file holds, never more. ``init(directory:logger:)``
/// reconciles files and index: spans past a file's end are cut, rows without a file lose their
/// spans, files without a row are deleted.
///
/// **One store per directory.** A store claims its directory (an exclusive `flock` on `lock`)
/// until ``releaseDirectory()`` or its end; a second one, in this process or another, is refused
/// with ``StreamCacheError/Code/cacheInUse``. To look at a cache another process uses, open it
/// with ``init(inspecting:logger:)``.
///
/// Layout of the cache directory (mode 0700):
/// ```
/// index.sqlite            the index (WAL mode)
/// lock                    the claim of the store that has it open (its process id and name)
/// data/<sha256(key)>.data one sparse file per resource
/// ```
public final class CacheStore: Sendable {
    /// A resource as the index knows it.
    public struct Entry: Sendable {
        /// The row id.
        public var id: Int64
        /// The cache key.
        public var key: CacheKey
        /// The info, when a first request has been made.
        public var info: ResourceInfo?
        /// The bytes durably cached.
        public var spans: RangeSet
        /// Whether the resource is kept for offline use (never evicted).
        public var pinned: Bool
        /// When the resource was last read.
        public var lastAccessedAt: Date
        /// When the origin last confirmed that the cached bytes are its current version, if it did.
        public var verifiedAt: Date?
        /// The content digest the complete cached bytes were found to match, when they were
        /// checked against the one in ``info``.
        public var contentMatched: ContentDigest?
        /// The content digest in ``info`` that the origin's bytes failed twice alike: they are
        /// kept as the origin serves them, and not checked again.
        public var contentDisputed: ContentDigest?
        /// The data file's path.
        public var dataPath: String
    }

    /// The cache directory.
    public let directory: URL
    let dataDirectory: URL
    let database: SQLiteDatabase
    private let logger: Logger
    /// The keys the index holds, kept in memory so that a resource the cache has never seen is
    /// recognised without a database round trip on a player's first request.
    private let knownKeys = Locked(Set<String>())
    /// This store's claim on the directory; `nil` for a store that only inspects it.
    private let claim: CacheDirectoryLock?

    /// Opens (creating if needed) the cache in `directory`, claims it, and reconciles its files
    /// and index.
    ///
    /// - Throws: ``StreamCacheError`` with ``StreamCacheError/Code/cacheInUse`` when another
    ///   store has the directory open (a server, a download, another `StreamCache` of this
    ///   process), with ``StreamCacheError/Code/cacheIOFailed`` when the directory or the index
    ///   cannot be opened.
    public init(directory: URL, logger: Logger = Logger(label: "streamcache.store", factory: { _ in SwiftLogNoOpLogHandler() })) throws {
        self.directory = directory
        self.dataDirectory = directory.appendingPathComponent("data", isDirectory: true)
        self.logger = logger
        do {
            try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw StreamCacheError(.cacheIOFailed, "Could not open the cache at \(directory.path): \(error)", underlying: SendableErrorDescription(error))
        }
        // Claimed before the index is touched: reconciling deletes files another store may be
        // writing.
        claim = try CacheDirectoryLock(directory: directory)
        database = try Self.openIndex(in: directory)
        try reconcile()
    }

    /// Opens the index of the cache in `directory` to read it, without claiming the directory:
    /// for a look at a cache that a server or a download is using (``entries()``,
    /// ``entry(for:)``, ``totalCachedBytes()``). What it shows is what the other store last
    /// committed. It changes nothing: its files are not reconciled, and every method that would
    /// write throws ``StreamCacheError/Code/cacheInUse``.
    ///
    /// - Throws: ``StreamCacheError`` with ``StreamCacheError/Code/cacheIOFailed`` when there is no
    ///   cache in `directory` or its index cannot be read.
    public init(inspecting directory: URL, logger: Logger = Logger(label: "streamcache.store", factory: { _ in SwiftLogNoOpLogHandler() })) throws {
        self.directory = directory
        self.dataDirectory = directory.appendingPathComponent("data", isDirectory: true)
        self.logger = logger
        claim = nil
        guard FileManager.default.fileExists(atPath: directory.appendingPathComponent("index.sqlite").path) else {
            throw StreamCacheError(.cacheIOFailed, "There is no cache at \(directory.path).")
        }
        database = try Self.openIndex(in: directory)
        do {
            let keys = try database.readAndWait { db in try db.rows(#"SELECT "key" FROM "resource""#, []) { $0.text(0) } }
            knownKeys.withLock { $0 = Set(keys) }
        } catch {
            throw StreamCacheError(.cacheIOFailed, "Could not read the cache index at \(directory.path): \(error)", underlying: SendableErrorDescription(error))
        }
    }

    private static func openIndex(in directory: URL) throws -> SQLiteDatabase {
        do {
            return try SQLiteDatabase(path: directory.appendingPathComponent("index.sqlite").path, label: "streamcache.index",
                                      prepare: CacheIndexSchema.migrate)
        } catch let error as StreamCacheError {
            throw error
        } catch {
            throw StreamCacheError(.cacheIOFailed, "Could not open the cache at \(directory.path): \(error)", underlying: SendableErrorDescription(error))
        }
    }

    /// Gives the directory up, so that another store (in this process or another) may open it.
    /// ``StreamCache/shutdown()`` calls it. Afterwards the store still reads, but every method
    /// that would write throws ``StreamCacheError/Code/cacheInUse``: the directory may be another
    /// store's by then, and a late removal would delete that store's row and data file.
    public func releaseDirectory() {
        claim?.release()
    }

    /// The index's writer, for a store that holds its claim on the directory.
    func writer() throws -> SQLiteDatabase {
        guard let claim else {
            throw StreamCacheError(.cacheInUse, "The cache at \(directory.path) was opened for inspection only; open it with CacheStore(directory:) to change it.")
        }
        guard claim.isHeld else {
            throw StreamCacheError(.cacheInUse, "The cache at \(directory.path) was shut down and gave its directory up; open it again to change it.")
        }
        return database
    }

    func dataPath(forFileName name: String) -> String { dataDirectory.appendingPathComponent(name).path }

    /// The data file of `key`, whether or not the index knows it yet.
    public func dataPath(for key: CacheKey) -> String { dataPath(forFileName: Self.dataFileName(for: key)) }

    static func dataFileName(for key: CacheKey) -> String { key.fileStem + ".data" }

    /// Cuts spans that claim bytes past their file's end, drops spans of missing files and
    /// deletes files the index does not know.
    private func reconcile() throws {
        let fileManager = FileManager.default
        do {
            try database.writeAndWait { db in
                let records = try db.rows("SELECT \(ResourceRecord.columns) FROM \"resource\"", [], ResourceRecord.init(row:))
                var known: Set<String> = []
                for record in records {
                    guard let id = record.id else { continue }
                    known.insert(record.dataFileName)
                    var spans = try Self.spans(db, id: id)
                    let original = spans
                    if let size = Self.fileSize(atPath: dataPath(forFileName: record.dataFileName)) {
                        spans.truncate(toLength: size)
                    } else {
                        spans = RangeSet()
                    }
                    if let total = record.totalLength { spans.truncate(toLength: total) }
                    if spans != original {
                        logger.info("reconciled the index with a data file", metadata: ["key": "\(record.key)", "before": "\(original.coveredByteCount)", "after": "\(spans.coveredByteCount)"])
                        try Self.replaceSpans(db, id: id, spans: spans)
                    } else if spans.coveredByteCount != record.cachedBytes {
                        try db.execute(#"UPDATE "resource" SET "cachedBytes" = ? WHERE "id" = ?"#, [.integer(spans.coveredByteCount), .integer(id)])
                    }
                }
                knownKeys.withLock { $0 = Set(records.map(\.key)) }
                for name in (try? fileManager.contentsOfDirectory(atPath: dataDirectory.path)) ?? [] where !known.contains(name) {
                    try? fileManager.removeItem(atPath: dataPath(forFileName: name))
                }
            }
        } catch let error as SQLiteError {
            throw StreamCacheError(.cacheIOFailed, "Could not read the cache index at \(directory.path): \(error)", underlying: SendableErrorDescription(error))
        }
    }

    /// The size of the file at `path`, or `nil` when there is none.
    private static func fileSize(atPath path: String) -> Int64? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return Int64(status.st_size)
    }

    private static func spans(_ db: SQLiteConnection, id: Int64) throws -> RangeSet {
        RangeSet(try db.rows(#"SELECT "start", "end" FROM "span" WHERE "resourceId" = ? ORDER BY "start""#, [.integer(id)]) {
            ByteRange($0.int64(0), $0.int64(1))
        })
    }

    private static func replaceSpans(_ db: SQLiteConnection, id: Int64, spans: RangeSet) throws {
        try db.execute(#"DELETE FROM "span" WHERE "resourceId" = ?"#, [.integer(id)])
        for range in spans {
            try db.execute(#"INSERT INTO "span" ("resourceId", "start", "end") VALUES (?, ?, ?)"#,
                           [.integer(id), .integer(range.lowerBound), .integer(range.upperBound)])
        }
        try db.execute(#"UPDATE "resource" SET "cachedBytes" = ? WHERE "id" = ?"#, [.integer(spans.coveredByteCount), .integer(id)])
    }

    private static func record(_ db: SQLiteConnection, key: CacheKey) throws -> ResourceRecord? {
        try db.firstRow("SELECT \(ResourceRecord.columns) FROM \"resource\" WHERE \"key\" = ?", [.text(key.rawValue)], ResourceRecord.init(row:))
    }

    private static func record(_ db: SQLiteConnection, id: Int64) throws -> ResourceRecord? {
        try db.firstRow("SELECT \(ResourceRecord.columns) FROM \"resource\" WHERE \"id\" = ?", [.integer(id)], ResourceRecord.init(row:))
    }

    private func entry(_ record: ResourceRecord, _ db: SQLiteConnection) throws -> Entry {
        let id = record.id!
        return Entry(id: id, key: CacheKey(record.key), info: record.info, spans: try Self.spans(db, id: id), pinned: record.pinned,
                     lastAccessedAt: record.lastAccessedAt, verifiedAt: record.verifiedAt,
                     contentMatched: Self.checkedDigest(record, disputed: false), contentDisputed: Self.checkedDigest(record, disputed: true),
                     dataPath: dataPath(forFileName: record.dataFileName))
    }

    /// Runs the index's write path once and rolls it back, so the first real request does not pay
    /// for the Swift runtime's one-time type and conformance lookups (milliseconds in a large
    /// binary). Servers call it at start; nothing is written.
    public func warmUp() async {
        struct Rollback: Error {}
        _ = try? await database.write { db in
            var record = ResourceRecord(id: nil, key: "streamcache:warm-up", dataFileName: "warm-up", totalLength: 1, mimeType: nil,
                                        originalFileName: nil, acceptsByteRanges: true, entityTag: nil, lastModified: nil, infoKnown: true,
                                        cachedBytes: 0, pinned: false, createdAt: Date(), lastAccessedAt: Date())
            try record.insert(db)
            if let id = record.id {
                try Self.replaceSpans(db, id: id, spans: RangeSet([ByteRange(0, 1)]))
                _ = try Self.record(db, key: CacheKey(record.key)).map { try self.entry($0, db) }
                try db.execute(#"UPDATE "resource" SET "lastAccessedAt" = ? WHERE "key" = ?"#, [.real(Date().timeIntervalSince1970), .text(record.key)])
            }
            throw Rollback()
        }
    }

    /// Whether the index holds `key` (answered from memory).
    public func knows(_ key: CacheKey) -> Bool { knownKeys.withLock { $0.contains(key.rawValue) } }

    /// The entry for `key`, or `nil` when the cache has never seen it (answered from memory).
    public func entry(for key: CacheKey) async throws -> Entry? {
        guard knownKeys.withLock({ $0.contains(key.rawValue) }) else { return nil }
        return try await database.read { db in
            guard let record = try Self.record(db, key: key) else { return nil }
            return try self.entry(record, db)
        }
    }

    /// The entry for `key`, created empty if needed; marks it as accessed now.
    public func openEntry(for key: CacheKey) async throws -> Entry {
        try await writer().write { db in
            let now = Date()
            if var record = try Self.record(db, key: key) {
                record.lastAccessedAt = now
                try record.update(db)
                return try self.entry(record, db)
            }
            var record = ResourceRecord(id: nil, key: key.rawValue, dataFileName: Self.dataFileName(for: key), totalLength: nil, mimeType: nil,
                                        originalFileName: nil, acceptsByteRanges: false, entityTag: nil, lastModified: nil, infoKnown: false,
                                        cachedBytes: 0, pinned: false, createdAt: now, lastAccessedAt: now)
            try record.insert(db)
            self.knownKeys.withLock { _ = $0.insert(key.rawValue) }
            return try self.entry(record, db)
        }
    }

    /// Stores the info of resource `id`.
    public func updateInfo(resourceID id: Int64, info: ResourceInfo?) async throws {
        try await writer().write { db in
            guard var record = try Self.record(db, id: id) else { return }
            record.apply(info)
            try record.update(db)
        }
    }

    /// Records that the origin confirmed resource `id`'s cached version at `date`.
    func recordVerification(resourceID id: Int64, at date: Date) async throws {
        try await writer().write { db in
            try db.execute(#"UPDATE "resource" SET "verifiedAt" = ? WHERE "id" = ?"#, [.real(date.timeIntervalSince1970), .integer(id)])
        }
    }

    /// The digest a check of `record`'s complete bytes found to match (or, `disputed`, that the
    /// origin's bytes failed twice alike), if it is the one its info holds now.
    private static func checkedDigest(_ record: ResourceRecord, disputed: Bool) -> ContentDigest? {
        guard var text = record.contentMatched, text.hasPrefix(disputedPrefix) == disputed else { return nil }
        if disputed { text.removeFirst(disputedPrefix.count) }
        return ContentDigest(text).flatMap { $0 == record.info?.contentDigest ? $0 : nil }
    }

    private static let disputedPrefix = "disputed:"

    /// Records that resource `id`'s complete cached bytes match `digest` (or, `disputed`, that
    /// the origin's bytes failed it twice alike), unless its info has since changed to another digest.
    func recordContentCheck(resourceID id: Int64, digest: ContentDigest, disputed: Bool) async throws {
        try await writer().write { db in
            try db.execute(#"UPDATE "resource" SET "contentMatched" = ? WHERE "id" = ? AND "contentDigest" = ?"#,
                           [.text((disputed ? Self.disputedPrefix : "") + digest.description), .integer(id), .text(digest.description)])
        }
    }

    /// Records that `spans` (the complete set) of resource `id` are on disk, after syncing `file`.
    ///
    /// The sync comes first: that is what makes the index trustworthy after a crash. It runs on
    /// the index's writer queue, before the transaction, rather than in the caller's task: an
    /// `fdatasync` of megabytes takes tens of milliseconds on a busy disk (more on a slow one), and
    /// a blocked thread of the cooperative pool is one of the few (as many as cores) that every
    /// task in the process shares. Commits of different resources now wait for each other's
    /// syncs on that queue, as they already did for their transactions.
    func commit(resourceID id: Int64, spans: RangeSet, file: DataFile) async throws {
        try await writer().writeWithoutTransaction { db in
            try file.sync()
            try db.transaction(immediate: true) {
                try Self.replaceSpans(db, id: id, spans: spans)
            }
        }
    }

    /// Forgets the bytes of resource `id` in `lost`, which its data file no longer holds. Only
    /// those: commits queued before this one may have recorded them, and later ones never will.
    func forget(_ lost: ByteRange, resourceID id: Int64) async throws {
        try await writer().write { db in
            var spans = try Self.spans(db, id: id)
            spans.remove(lost)
            try Self.replaceSpans(db, id: id, spans: spans)
        }
    }

    /// Forgets every cached byte of resource `id` and its info (the origin's version changed).
    func reset(resourceID id: Int64) async throws {
        try await writer().write { db in
            guard var record = try Self.record(db, id: id) else { return }
            record.apply(nil)
            try record.update(db)
            try Self.replaceSpans(db, id: id, spans: RangeSet())
        }
    }

    /// Marks resource `key` as accessed now.
    public func touch(_ key: CacheKey) async throws {
        try await writer().write { db in
            try db.execute(#"UPDATE "resource" SET "lastAccessedAt" = ? WHERE "key" = ?"#, [.real(Date().timeIntervalSince1970), .text(key.rawValue)])
        }
    }

    /// Pins or unpins `key`: pinned resources are never evicted.
    ///
    /// - Returns: `false` when the cache does not know `key`.
    @discardableResult
    public func setPinned(_ pinned: Bool, for key: CacheKey) async throws -> Bool {
        try await writer().write { db in
            try db.execute(#"UPDATE "resource" SET "pinned" = ? WHERE "key" = ?"#, [SQLiteValue(pinned), .text(key.rawValue)])
            return db.changes > 0
        }
    }

    /// Every resource in the index, most recently used first.
    public func entries() async throws -> [Entry] {
        try await database.read { db in
            try db.rows("SELECT \(ResourceRecord.columns) FROM \"resource\" ORDER BY \"lastAccessedAt\" DESC", [], ResourceRecord.init(row:))
                .map { try self.entry($0, db) }
        }
    }

    /// The bytes the index claims over all resources.
    public func totalCachedBytes() async throws -> Int64 {
        try await database.read { db in try db.firstRow(#"SELECT COALESCE(SUM("cachedBytes"), 0) FROM "resource""#) { $0.int64(0) } ?? 0 }
    }

    /// Deletes resource `key`: its row, spans and data file.
    ///
    /// - Returns: `false` when the cache does not know `key`.
    @discardableResult
    public func remove(_ key: CacheKey) async throws -> Bool {
        let name: String? = try await writer().write { db in
            guard let record = try Self.record(db, key: key), let id = record.id else { return nil }
            try db.execute(#"DELETE FROM "resource" WHERE "id" = ?"#, [.integer(id)])
            try db.execute(#"DELETE FROM "alias" WHERE "key" = ?"#, [.text(key.rawValue)])
            self.knownKeys.withLock { _ = $0.remove(key.rawValue) }
            return record.dataFileName
        }
        guard let name else { return false }
        try? FileManager.default.removeItem(atPath: dataPath(forFileName: name))
        return true
    }
}
