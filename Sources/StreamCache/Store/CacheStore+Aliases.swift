extension CacheStore {
    // Names a user reads a resource by, besides its key: a cloud file's reference
    // (`yandex:/Music/a.mp3`), whose key holds what only the service tells (an account, a file
    // id). Kept so that the file plays from the cache when the service cannot be asked.

    /// What `alias` last named: a key the index still holds, and the file name it had then.
    public func resource(aliased alias: String) async throws -> (key: CacheKey, fileName: String)? {
        let named = try await database.read { db in
            try db.firstRow(#"SELECT "key", "fileName" FROM "alias" WHERE "alias" = ?"#, [.text(alias)]) { row in
                (CacheKey(row.text(0)), row.text(1))
            }
        }
        guard let named, knows(named.0) else { return nil }
        return named
    }

    /// Records that `alias` names `key`, a file named `fileName` (replacing what it named before).
    public func setAlias(_ alias: String, for key: CacheKey, fileName: String) async throws {
        try await writer().write { db in
            try db.execute(#"INSERT OR REPLACE INTO "alias" ("alias", "key", "fileName") VALUES (?, ?, ?)"#, [.text(alias), .text(key.rawValue), .text(fileName)])
        }
    }
}
