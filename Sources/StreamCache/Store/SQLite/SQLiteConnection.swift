import CSQLite

/// One connection to an SQLite database file.
///
/// A connection is not thread-safe: ``SQLiteDatabase`` confines each of its connections to one
/// serial queue. It keeps its prepared statements, so a query that runs on every request is
/// parsed once.
package final class SQLiteConnection {
    private let handle: OpaquePointer
    private var statements: [String: SQLiteStatement] = [:]

    /// Opens (creating if needed) the database at `path`.
    ///
    /// - Parameter busyTimeout: How long a statement waits for another process's lock before it
    ///   fails with `SQLITE_BUSY`.
    package init(path: String, busyTimeout: Duration = .seconds(10)) throws {
        var opened: OpaquePointer?
        // NOMUTEX: the connection is used from one queue at a time, so SQLite's own per-call
        // mutex would only add cost.
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let result = sqlite3_open_v2(path, &opened, flags, nil)
        guard result == SQLITE_OK, let opened else {
            let message = opened.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "cannot open \(path)"
            sqlite3_close_v2(opened)
            throw SQLiteError(code: result, message: message)
        }
        handle = opened
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, Int32(busyTimeout.components.seconds * 1000 + busyTimeout.components.attoseconds / 1_000_000_000_000_000))
    }

    deinit {
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Runs `sql`, which may hold several statements, none with parameters (schema, pragmas).
    package func executeScript(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        let result = sqlite3_exec(handle, sql, nil, nil, &message)
        defer { sqlite3_free(message) }
        guard result == SQLITE_OK else {
            throw SQLiteError(code: sqlite3_extended_errcode(handle), message: message.map { String(cString: $0) } ?? "error \(result)", sql: sql)
        }
    }

    /// Runs one statement to completion.
    package func execute(_ sql: String, _ arguments: [SQLiteValue] = []) throws {
        let statement = try prepared(sql)
        try statement.bind(arguments, connection: handle)
        defer { sqlite3_reset(statement.handle) }
        while try statement.step(connection: handle) {}
    }

    /// Runs a query and maps each row it returns.
    package func rows<Element>(_ sql: String, _ arguments: [SQLiteValue] = [], _ map: (SQLiteRow) throws -> Element) throws -> [Element] {
        let statement = try prepared(sql)
        try statement.bind(arguments, connection: handle)
        defer { sqlite3_reset(statement.handle) }
        var elements: [Element] = []
        while try statement.step(connection: handle) {
            elements.append(try map(SQLiteRow(handle: statement.handle)))
        }
        return elements
    }

    /// Runs a query and maps its first row, if any.
    package func firstRow<Element>(_ sql: String, _ arguments: [SQLiteValue] = [], _ map: (SQLiteRow) throws -> Element) throws -> Element? {
        let statement = try prepared(sql)
        try statement.bind(arguments, connection: handle)
        defer { sqlite3_reset(statement.handle) }
        guard try statement.step(connection: handle) else { return nil }
        return try map(SQLiteRow(handle: statement.handle))
    }

    /// The rows the last `INSERT`, `UPDATE` or `DELETE` changed.
    package var changes: Int { Int(sqlite3_changes(handle)) }

    /// The row id of the last successful `INSERT`.
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    ///
    /// - Parameter immediate: Takes the write lock at once (`BEGIN IMMEDIATE`), so a transaction
    ///   that writes never fails half-way with `SQLITE_BUSY`; readers use a deferred one, which is
    ///   a consistent snapshot in WAL mode.
    package func transaction<Result>(immediate: Bool, _ body: () throws -> Result) throws -> Result {
        try execute(immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            // A failed COMMIT or statement may already have ended the transaction.
            if sqlite3_get_autocommit(handle) == 0 { try? execute("ROLLBACK") }
            throw error
        }
    }

    private func prepared(_ sql: String) throws -> SQLiteStatement {
        if let statement = statements[sql] { return statement }
        var prepared: OpaquePointer?
        let result = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil)
        guard result == SQLITE_OK, let prepared else { throw Self.error(result, handle, sql: sql) }
        let statement = SQLiteStatement(handle: prepared, sql: sql)
        statements[sql] = statement
        return statement
    }

    static func error(_ result: Int32, _ connection: OpaquePointer, sql: String?) -> SQLiteError {
        SQLiteError(code: sqlite3_extended_errcode(connection), message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }
}
