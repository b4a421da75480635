import Foundation
import GRDB

/// A row of the `resource` table: one cached resource.
struct ResourceRecord: Codable, FetchableRecord, MutablePersistableRecord, Sendable {
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
struct SpanRecord: Codable, FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "span"
    var resourceId: Int64
    var start: Int64
    var end: Int64
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
