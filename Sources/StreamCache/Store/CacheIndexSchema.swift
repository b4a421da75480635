import Foundation
import GRDB

/// A row of the `resource` table: one cached resource.
///
/// Rows are read and written by hand rather than through `Codable`: Codable records make the Swift
/// runtime look up protocol conformances on first use, which in a binary of this size took over
/// 10 ms on a player's first request. Dates are Unix timestamps (GRDB's default text format goes
/// through `DateFormatter`, which loads ICU and time-zone data); text dates of older indexes still decode.
struct ResourceRecord: FetchableRecord, MutablePersistableRecord, Sendable {
    static let databaseTableName = "resource"

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

    init(id: Int64?, key: String, dataFileName: String, totalLength: Int64?, mimeType: String?, originalFileName: String?,
         acceptsByteRanges: Bool, entityTag: String?, lastModified: String?, infoKnown: Bool, cachedBytes: Int64, pinned: Bool,
         createdAt: Date, lastAccessedAt: Date) {
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
    }

    init(row: Row) throws {
        id = row["id"]
        key = row["key"]
        dataFileName = row["dataFileName"]
        totalLength = row["totalLength"]
        mimeType = row["mimeType"]
        originalFileName = row["originalFileName"]
        acceptsByteRanges = row["acceptsByteRanges"]
        entityTag = row["entityTag"]
        lastModified = row["lastModified"]
        infoKnown = row["infoKnown"]
        cachedBytes = row["cachedBytes"]
        pinned = row["pinned"]
        createdAt = Date.fromDatabaseValue(row["createdAt"]) ?? Date(timeIntervalSince1970: 0)
        lastAccessedAt = Date.fromDatabaseValue(row["lastAccessedAt"]) ?? Date(timeIntervalSince1970: 0)
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["id"] = id
        container["key"] = key
        container["dataFileName"] = dataFileName
        container["totalLength"] = totalLength
        container["mimeType"] = mimeType
        container["originalFileName"] = originalFileName
        container["acceptsByteRanges"] = acceptsByteRanges
        container["entityTag"] = entityTag
        container["lastModified"] = lastModified
        container["infoKnown"] = infoKnown
        container["cachedBytes"] = cachedBytes
        container["pinned"] = pinned
        container["createdAt"] = createdAt.timeIntervalSince1970
        container["lastAccessedAt"] = lastAccessedAt.timeIntervalSince1970
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }

    var info: ResourceInfo? {
        guard infoKnown else { return nil }
        return ResourceInfo(totalLength: totalLength, mimeType: mimeType, fileName: originalFileName, acceptsByteRanges: acceptsByteRanges,
                            validator: Validator(entityTag: entityTag, lastModified: lastModified))
    }

    mutating func apply(_ info: ResourceInfo?) {
        infoKnown = info != nil
        totalLength = info?.totalLength
        mimeType = info?.mimeType
        originalFileName = info?.fileName
        acceptsByteRanges = info?.acceptsByteRanges ?? false
        entityTag = info?.validator.entityTag
        lastModified = info?.validator.lastModified
    }
}

/// A row of the `span` table: bytes `[start, end)` of a resource are durably in its data file.
struct SpanRecord: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "span"
    var resourceId: Int64
    var start: Int64
    var end: Int64

    init(resourceId: Int64, start: Int64, end: Int64) {
        self.resourceId = resourceId
        self.start = start
        self.end = end
    }

    init(row: Row) throws {
        resourceId = row["resourceId"]
        start = row["start"]
        end = row["end"]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["resourceId"] = resourceId
        container["start"] = start
        container["end"] = end
    }
}

enum CacheIndexSchema {
    static var migrator: DatabaseMigrator {
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
        return migrator
    }
}
