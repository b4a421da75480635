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

    /// The aliases that begin with `prefix` and name a key the index still holds, by alias: the
    /// cached files below a folder, by the references they were read by.
    public func aliases(under prefix: String) async throws -> [(alias: String, key: CacheKey, fileName: String)] {
        let named = try await database.read { db in
            try db.rows(#"SELECT "alias", "key", "fileName" FROM "alias" WHERE substr("alias", 1, length(?1)) = ?1 ORDER BY "alias""#, [.text(prefix)]) { row in
                (alias: row.text(0), key: CacheKey(row.text(1)), fileName: row.text(2))
            }
        }
        return named.filter { knows($0.key) && $0.alias.hasPrefix(prefix) }
    }

    /// The keys that `aliases` last named (those the index still holds or not).
    func keys(aliasedBy aliases: Set<String>) async throws -> Set<CacheKey> {
        try await database.read { db in
            var keys: Set<CacheKey> = []
            for alias in aliases {
                if let key = try db.firstRow(#"SELECT "key" FROM "alias" WHERE "alias" = ?"#, [.text(alias)], { CacheKey($0.text(0)) }) { keys.insert(key) }
            }
            return keys
        }
    }

    /// Records that `alias` names `key`, a file named `fileName` (replacing what it named before).
    public func setAlias(_ alias: String, for key: CacheKey, fileName: String) async throws {
        try await writer().write { db in
            try db.execute(#"INSERT OR REPLACE INTO "alias" ("alias", "key", "fileName") VALUES (?, ?, ?)"#, [.text(alias), .text(key.rawValue), .text(fileName)])
        }
    }
}
