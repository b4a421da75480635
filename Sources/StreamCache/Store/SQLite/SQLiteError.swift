import CSQLite

/// An error SQLite reported: its extended result code, its message and the statement that failed.
///
/// Statement arguments are never part of the error: the index holds nothing secret, but a caller
/// that binds a key should not find it in a log line either.
package struct SQLiteError: Error, Sendable, CustomStringConvertible {
    /// SQLite's extended result code (`SQLITE_BUSY`, `SQLITE_FULL`, `SQLITE_CONSTRAINT_UNIQUE`, …).
    package let code: Int32
    /// SQLite's message for the failure.
    package let message: String
    /// The SQL text that failed, when the failure belongs to a statement.
    package let sql: String?

    package init(code: Int32, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    /// The primary result code (`SQLITE_CONSTRAINT` for every kind of constraint failure).
    package var primaryCode: Int32 { code & 0xFF }

    package var description: String {
        let statement = sql.map { " in `\($0)`" } ?? ""
        return "SQLite error \(code): \(message)\(statement)"
    }
}
