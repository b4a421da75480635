import CSQLite

/// The current row of a statement, valid only inside the closure it is passed to.
///
/// Columns are read by index, in the order of the query's result columns; a value of another
/// storage class is converted as SQLite converts it (`sqlite3_column_int64` of a text is its
/// numeric prefix).
package struct SQLiteRow {
    let handle: OpaquePointer

    /// Whether column `index` is NULL.
    package func isNull(_ index: Int32) -> Bool { sqlite3_column_type(handle, index) == SQLITE_NULL }

    /// The storage class of column `index` (`SQLITE_INTEGER`, `SQLITE_FLOAT`, `SQLITE_TEXT`, …).
    package func storageClass(_ index: Int32) -> Int32 { sqlite3_column_type(handle, index) }

    package func int64(_ index: Int32) -> Int64 { sqlite3_column_int64(handle, index) }

    package func optionalInt64(_ index: Int32) -> Int64? { isNull(index) ? nil : int64(index) }

    package func double(_ index: Int32) -> Double { sqlite3_column_double(handle, index) }

    package func bool(_ index: Int32) -> Bool { int64(index) != 0 }

    package func text(_ index: Int32) -> String { optionalText(index) ?? "" }

    package func optionalText(_ index: Int32) -> String? {
        guard let bytes = sqlite3_column_text(handle, index) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, index))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }
}
