/// A value bound to a statement's `?` parameter.
package enum SQLiteValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)

    package init(_ value: Int64?) { self = value.map(SQLiteValue.integer) ?? .null }
    package init(_ value: String?) { self = value.map(SQLiteValue.text) ?? .null }
    /// Booleans are stored as 0 and 1, as SQLite itself does.
    package init(_ value: Bool) { self = .integer(value ? 1 : 0) }
}
