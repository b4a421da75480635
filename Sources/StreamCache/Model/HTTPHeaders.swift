/// An ordered list of HTTP header fields with case-insensitive look-up.
///
/// Order is kept because some origins care about it and because repeated fields are legal.
///
/// ```swift
/// var headers: HTTPHeaders = ["Authorization": "OAuth y0_abc"]
/// headers["authorization"]   // "OAuth y0_abc"
/// ```
public struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible {
    /// One header field.
    public struct Field: Sendable, Hashable {
        /// The field name as given (compared case-insensitively).
        public var name: String
        /// The field value.
        public var value: String

        /// Creates a field.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The fields in order.
    public private(set) var fields: [Field]

    /// Creates a header list from fields.
    public init(_ fields: [Field] = []) { self.fields = fields }

    /// Creates a header list from name-value pairs.
    public init(_ pairs: [(String, String)]) { self.fields = pairs.map { Field(name: $0.0, value: $0.1) } }

    public init(dictionaryLiteral elements: (String, String)...) { self.init(elements) }

    /// The first value of the field called `name` (case-insensitive), or `nil`. Setting replaces every field of that name.
    public subscript(name: String) -> String? {
        get { fields.first { $0.name.caseInsensitiveEquals(name) }?.value }
        set {
            remove(name)
            if let newValue { fields.append(Field(name: name, value: newValue)) }
        }
    }

    /// Whether a field called `name` exists.
    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// Appends a field, keeping existing fields of the same name.
    public mutating func add(name: String, value: String) { fields.append(Field(name: name, value: value)) }

    /// Removes every field called `name`.
    public mutating func remove(_ name: String) { fields.removeAll { $0.name.caseInsensitiveEquals(name) } }

    /// Adds every field of `other`, replacing fields of the same names.
    public mutating func merge(_ other: HTTPHeaders) {
        for name in Set(other.fields.map { $0.name.lowercased() }) { remove(name) }
        fields.append(contentsOf: other.fields)
    }

    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// Whether `value` may be sent as a field value (RFC 9110 §5.5): visible characters, spaces
    /// and tabs, no other control character. A CR or LF would end the field and start one its
    /// giver never meant (header injection). Checked by bytes: in a `String`, `"\r\n"` is one
    /// `Character`, which neither `contains("\r")` nor `contains("\n")` finds.
    public static func isValidFieldValue(_ value: some StringProtocol) -> Bool {
        value.utf8.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }
    }

    /// Names only: values may hold secrets, so they never reach a description.
    public var description: String { "[" + fields.map(\.name).joined(separator: ", ") + "]" }
}

extension String {
    func caseInsensitiveEquals(_ other: String) -> Bool {
        count == other.count && lowercased() == other.lowercased()
    }
}
