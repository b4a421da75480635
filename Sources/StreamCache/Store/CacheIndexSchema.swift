#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A row of the `resource` table: one cached resource.
///
/// Rows are read and written with explicit column lists: the columns' order in
/// ``ResourceRecord/columns`` is the order ``init(row:)`` reads them in. Dates are Unix timestamps;
/// the text dates of indexes written by earlier versions (`2026-11-20 09:15:02.123`, UTC) still
/// decode.
struct ResourceRecord: Sendable {
    var id: Int64?
    var key: String
    var dataFileName: String
    var totalLength: Int64?
    var mimeType: String?
    var originalFileName: String?
    var acceptsByteRanges: Bool
    var entityTag: String?
    var lastModified: String?
    var infoKnown: Bool
    var cachedBytes: Int64
    var pinned: Bool
    var createdAt: Date
    var lastAccessedAt: Date
    /// When the origin last confirmed that the cached bytes are its current version; `nil` when
    /// it never did, or for rows written by versions before the column existed.
    var verifiedAt: Date?
    /// The digest of the whole content the origin published (``ContentDigest/description``).
    var contentDigest: String?
    /// What checking the complete cached bytes found: the digest they matched, or
    /// `disputed:` and the digest the origin's bytes failed twice alike (they are kept unchecked);
    /// a digest other than ``contentDigest`` is of bytes since dropped.
    var contentMatched: String?

    /// The columns ``init(row:)`` reads, in order.
    static let columns = """
        "id", "key", "dataFileName", "totalLength", "mimeType", "originalFileName", "acceptsByteRanges", "entityTag", \
        "lastModified", "infoKnown", "cachedBytes", "pinned", "createdAt", "lastAccessedAt", "verifiedAt", "contentDigest", "contentMatched"
        """

    init(id: Int64?, key: String, dataFileName: String, totalLength: Int64?, mimeType: String?, originalFileName: String?,
         acceptsByteRanges: Bool, entityTag: String?, lastModified: String?, infoKnown: Bool, cachedBytes: Int64, pinned: Bool,
         createdAt: Date, lastAccessedAt: Date, verifiedAt: Date? = nil, contentDigest: String? = nil, contentMatched: String? = nil) {
        self.id = id
        self.key = key
        self.dataFileName = dataFileName
        self.totalLength = totalLength
        self.mimeType = mimeType
        self.originalFileName = originalFileName
        self.acceptsByteRanges = acceptsByteRanges
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.infoKnown = infoKnown
        self.cachedBytes = cachedBytes
        self.pinned = pinned
        self.createdAt = createdAt
        self.lastAccessedAt = lastAccessedAt
        self.verifiedAt = verifiedAt
        self.contentDigest = contentDigest
        self.contentMatched = contentMatched
    }

    /// Reads a row selected with ``columns``.
    init(row: SQLiteRow) {
        id = row.int64(0)
        key = row.text(1)
        // A name that is not one plain file name (an index edited by hand or damaged: `..`,
        // `../index.sqlite`, empty) would put the data file, and the removal of the resource,
        // outside the data directory: the key's own name stands for it.
        let name = row.text(2)
        dataFileName = Self.isPlainFileName(name) ? name : CacheStore.dataFileName(for: CacheKey(key))
        // A length no file can have (an index edited by hand, or damaged) would reach the
        // engine's ranges and stop the process; unknown, the next download tells it.
        totalLength = ByteRange.possibleLength(row.optionalInt64(3))
        mimeType = row.optionalText(4)
        originalFileName = row.optionalText(5)
        acceptsByteRanges = row.bool(6)
        entityTag = row.optionalText(7)
        lastModified = row.optionalText(8)
        infoKnown = row.bool(9)
        cachedBytes = row.int64(10)
        pinned = row.bool(11)
        createdAt = Self.date(row, 12)
        lastAccessedAt = Self.date(row, 13)
        verifiedAt = row.isNull(14) ? nil : Date(timeIntervalSince1970: row.double(14))
        contentDigest = row.optionalText(15)
        contentMatched = row.optionalText(16)
    }

    /// Whether `name` names a file in the directory it is appended to, and nothing else.
    static func isPlainFileName(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.utf8.contains(UInt8(ascii: "/")) && !name.utf8.contains(0)
    }

    /// Inserts the record and sets its ``id``.
    mutating func insert(_ connection: SQLiteConnection) throws {
        try connection.execute("""
            INSERT INTO "resource" ("key", "dataFileName", "totalLength", "mimeType", "originalFileName", "acceptsByteRanges", \
            "entityTag", "lastModified", "infoKnown", "cachedBytes", "pinned", "contentDigest", "contentMatched", "createdAt", "lastAccessedAt") \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [.text(key), .text(dataFileName)] + mutableValues + [.real(createdAt.timeIntervalSince1970), .real(lastAccessedAt.timeIntervalSince1970)])
        id = connection.lastInsertRowID
    }

    /// Writes the record's info, byte count, pin and access time to its row.
    func update(_ connection: SQLiteConnection) throws {
        guard let id else { return }
        try connection.execute("""
            UPDATE "resource" SET "totalLength" = ?, "mimeType" = ?, "originalFileName" = ?, "acceptsByteRanges" = ?, \
            "entityTag" = ?, "lastModified" = ?, "infoKnown" = ?, "cachedBytes" = ?, "pinned" = ?, "contentDigest" = ?, "contentMatched" = ?, \
            "lastAccessedAt" = ? \
            WHERE "id" = ?
            """, mutableValues + [.real(lastAccessedAt.timeIntervalSince1970), .integer(id)])
    }

    private var mutableValues: [SQLiteValue] {
        [SQLiteValue(totalLength), SQLiteValue(mimeType), SQLiteValue(originalFileName), SQLiteValue(acceptsByteRanges),
         SQLiteValue(entityTag), SQLiteValue(lastModified), SQLiteValue(infoKnown), .integer(cachedBytes), SQLiteValue(pinned),
         SQLiteValue(contentDigest), SQLiteValue(contentMatched)]
    }

    var info: ResourceInfo? {
        guard infoKnown else { return nil }
        return ResourceInfo(totalLength: totalLength, mimeType: mimeType, fileName: originalFileName, acceptsByteRanges: acceptsByteRanges,
                            validator: Validator(entityTag: entityTag, lastModified: lastModified), contentDigest: contentDigest.flatMap(ContentDigest.init))
    }

    mutating func apply(_ info: ResourceInfo?) {
        infoKnown = info != nil
        totalLength = info?.totalLength
        mimeType = info?.mimeType
        originalFileName = info?.fileName
        acceptsByteRanges = info?.acceptsByteRanges ?? false
        entityTag = info?.validator.entityTag
        lastModified = info?.validator.lastModified
        let digest = info?.contentDigest?.description
        if digest != contentDigest { contentMatched = nil }
        contentDigest = digest
    }

    /// A date column: a Unix timestamp, or the `yyyy-MM-dd HH:mm:ss[.SSS]` UTC text of earlier
    /// indexes; anything else is the epoch (the resource then looks old to the evictor).
    static func date(_ row: SQLiteRow, _ index: Int32) -> Date {
        switch row.storageClass(index) {
        case SQLITE_INTEGER, SQLITE_FLOAT: return Date(timeIntervalSince1970: row.double(index))
        default: return row.optionalText(index).flatMap(parseLegacyDate) ?? Date(timeIntervalSince1970: 0)
        }
    }

    static func parseLegacyDate(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        func number(_ range: Range<Int>) -> Int? {
            guard range.upperBound <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard bytes.count >= 19, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[13] == UInt8(ascii: ":"),
              let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var fraction = 0.0
        if bytes.count > 20, bytes[19] == UInt8(ascii: "."), let digits = number(20..<bytes.count) {
            fraction = Double(digits) / pow(10, Double(bytes.count - 20))
        }
        var time = tm()
        time.tm_year = Int32(year - 1900)
        time.tm_mon = Int32(month - 1)
        time.tm_mday = Int32(day)
        time.tm_hour = Int32(hour)
        time.tm_min = Int32(minute)
        time.tm_sec = Int32(second)
        return Date(timeIntervalSince1970: Double(timegm(&time)) + fraction)
    }
}

/// The index's schema and its version, in `PRAGMA user_version`.
///
/// Version 1 is the schema GRDB's migrator created under the name "v1" in earlier versions of
/// StreamCache, statement for statement, so their caches open unchanged (their
/// `grdb_migrations` table is left alone).
///
/// A nullable column that earlier versions can do without is added to version 1 in place
/// (``additiveColumns``) rather than by a new version: every statement names its columns, so an
/// earlier StreamCache reads and writes such an index as before, and going back to it keeps the
/// cache instead of refusing an index of a newer version.
enum CacheIndexSchema {
    static let version: Int64 = 1

    static let version1 = """
        CREATE TABLE IF NOT EXISTS "resource" (
            "id" INTEGER PRIMARY KEY AUTOINCREMENT,
            "key" TEXT NOT NULL UNIQUE,
            "dataFileName" TEXT NOT NULL UNIQUE,
            "totalLength" INTEGER,
            "mimeType" TEXT,
            "originalFileName" TEXT,
            "acceptsByteRanges" BOOLEAN NOT NULL DEFAULT 0,
            "entityTag" TEXT,
            "lastModified" TEXT,
            "infoKnown" BOOLEAN NOT NULL DEFAULT 0,
            "cachedBytes" INTEGER NOT NULL DEFAULT 0,
            "pinned" BOOLEAN NOT NULL DEFAULT 0,
            "createdAt" DATETIME NOT NULL,
            "lastAccessedAt" DATETIME NOT NULL);
        CREATE INDEX IF NOT EXISTS "resource_on_lastAccessedAt" ON "resource"("lastAccessedAt");
        CREATE TABLE IF NOT EXISTS "span" (
            "resourceId" INTEGER NOT NULL REFERENCES "resource"("id") ON DELETE CASCADE,
            "start" INTEGER NOT NULL,
            "end" INTEGER NOT NULL,
            PRIMARY KEY ("resourceId", "start"),
            CHECK (start >= 0 AND "end" > start));
        """

    /// Brings the index at `connection` to ``version``.
    ///
    /// - Throws: ``StreamCacheError`` (`cacheIOFailed`) for an index written by a newer version,
    ///   which this one must not change; ``SQLiteError`` when SQLite fails.
    static func migrate(_ connection: SQLiteConnection) throws {
        try connection.transaction(immediate: true) {
            let current = try connection.firstRow("PRAGMA user_version") { $0.int64(0) } ?? 0
            guard current <= version else {
                throw StreamCacheError(.cacheIOFailed, "The cache index has schema version \(current); this StreamCache knows version \(version) and leaves it alone.")
            }
            if current < 1 {
                try connection.executeScript(version1)
                try connection.executeScript("PRAGMA user_version = \(version)")
            }
            try connection.executeScript(additiveTables)
            let existing = Set(try connection.rows(#"PRAGMA table_info("resource")"#) { $0.text(1) })
            for (name, definition) in additiveColumns where !existing.contains(name) {
                try connection.execute(#"ALTER TABLE "resource" ADD COLUMN "\#(name)" \#(definition)"#)
            }
        }
    }

    /// Tables added after version 1, which the versions before them do not know of and leave alone.
    ///
    /// `hostConnections`: how many connections at once each origin host lately accepted, as it
    /// showed by refusing one more (``ConnectionAllowance/Snapshot``), so that a new process
    /// does not pay those refusals again. Times are Unix timestamps.
    ///
    /// `alias`: other names of a resource than its key (a cloud file's reference), with the file
    /// name it had, so that it plays from the cache when its service cannot resolve the name
    /// (``CacheStore/resource(aliased:)``). A resource's removal takes its aliases; a row whose key
    /// the index does not hold (yet) names nothing.
    static let additiveTables = """
        CREATE TABLE IF NOT EXISTS "hostConnections" (
            "host" TEXT PRIMARY KEY NOT NULL,
            "connections" INTEGER NOT NULL,
            "refusedAt" REAL NOT NULL,
            "taughtAt" REAL NOT NULL,
            "holdSeconds" REAL NOT NULL);
        CREATE TABLE IF NOT EXISTS "alias" (
            "alias" TEXT PRIMARY KEY NOT NULL,
            "key" TEXT NOT NULL,
            "fileName" TEXT NOT NULL);
        """

    /// Columns added to the `resource` table after version 1, each nullable and ignored by the
    /// versions before it.
    static let additiveColumns: [(name: String, definition: String)] = [
        ("verifiedAt", "REAL"),
        ("contentDigest", "TEXT"),
        ("contentMatched", "TEXT"),
    ]
}
