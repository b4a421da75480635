import CSQLite

/// A prepared statement, kept by its connection and reused: preparing is most of the cost of a
/// small query.
final class SQLiteStatement {
    let handle: OpaquePointer
    let sql: String

    init(handle: OpaquePointer, sql: String) {
        self.handle = handle
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// Binds `arguments` to the statement's parameters, in order, after a reset.
    func bind(_ arguments: [SQLiteValue], connection: OpaquePointer) throws {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        guard arguments.count == Int(sqlite3_bind_parameter_count(handle)) else {
            throw SQLiteError(code: SQLITE_RANGE, message: "\(arguments.count) arguments for \(sqlite3_bind_parameter_count(handle)) parameters", sql: sql)
        }
        for (offset, argument) in arguments.enumerated() {
            let index = Int32(offset + 1)
            let result: Int32
            switch argument {
            case .null: result = sqlite3_bind_null(handle, index)
            case .integer(let value): result = sqlite3_bind_int64(handle, index, value)
            case .real(let value): result = sqlite3_bind_double(handle, index, value)
            case .text(let value):
                result = value.utf8CString.withUnsafeBufferPointer { text in
                    csqlite_bind_text_transient(handle, index, text.baseAddress, Int32(text.count - 1))
                }
            }
            guard result == SQLITE_OK else { throw SQLiteConnection.error(result, connection, sql: sql) }
        }
    }

    /// Advances to the next row: `true` when there is one, `false` when the statement is done.
    func step(connection: OpaquePointer) throws -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let result:
            // The statement's own error code is the extended one once it has been reset.
            sqlite3_reset(handle)
            throw SQLiteConnection.error(result, connection, sql: sql)
        }
    }
}
