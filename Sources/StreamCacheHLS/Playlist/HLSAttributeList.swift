/// The value of an HLS tag such as `#EXT-X-KEY:METHOD=AES-128,URI="key.bin"`: comma-separated
/// `NAME=value` pairs (RFC 8216 §4.2).
///
/// Values keep their raw spelling, so a list that is parsed and written back is unchanged except
/// for the attributes set through ``setQuotedString(_:for:)``. A quoted string may hold commas
/// and `=`; it ends at the next `"`, since the format has no escapes.
///
/// ```swift
/// var list = try HLSAttributeList(parsing: #"METHOD=AES-128,URI="k.bin",IV=0x1"#)
/// list["URI"]                      // "k.bin"
/// list.setQuotedString("/s/x/k.bin", for: "URI")
/// list.description                 // METHOD=AES-128,URI="/s/x/k.bin",IV=0x1
/// ```
public struct HLSAttributeList: Sendable, Hashable, CustomStringConvertible {
    /// One `NAME=value` pair.
    public struct Attribute: Sendable, Hashable {
        /// The attribute name, such as `URI` or `BANDWIDTH`.
        public var name: String
        /// The value as written: quoted strings keep their quotes.
        public var rawValue: String

        /// The value without the quotes of a quoted string.
        public var value: String {
            rawValue.count >= 2 && rawValue.hasPrefix("\"") && rawValue.hasSuffix("\"") ? String(rawValue.dropFirst().dropLast()) : rawValue
        }
    }

    /// The attributes in the order written.
    public private(set) var attributes: [Attribute]

    /// Parses an attribute list.
    ///
    /// - Throws: A description of the first syntax error (an attribute without `=`, an empty name,
    ///   an unterminated quoted string), for the playlist parser to place on its line.
    public init(parsing text: Substring) throws(HLSSyntaxError) {
        var attributes: [Attribute] = []
        var rest = text[...]
        while !rest.isEmpty {
            guard let equals = rest.firstIndex(of: "=") else {
                throw HLSSyntaxError("attribute '\(rest.prefix(40))' has no '='")
            }
            let name = rest[..<equals].trimmingSpaces
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw HLSSyntaxError("attribute name '\(name.prefix(40))' is not a valid name")
            }
            var valueStart = rest.index(after: equals)
            while valueStart < rest.endIndex, rest[valueStart] == " " { valueStart = rest.index(after: valueStart) }
            let valueEnd: Substring.Index
            if valueStart < rest.endIndex, rest[valueStart] == "\"" {
                guard let closing = rest[rest.index(after: valueStart)...].firstIndex(of: "\"") else {
                    throw HLSSyntaxError("the quoted value of \(name) has no closing '\"'")
                }
                valueEnd = rest.index(after: closing)
                let after = rest[valueEnd...].trimmingSpaces
                guard after.isEmpty || after.first == "," else {
                    throw HLSSyntaxError("unexpected text after the quoted value of \(name)")
                }
            } else {
                valueEnd = rest[valueStart...].firstIndex(of: ",") ?? rest.endIndex
            }
            attributes.append(Attribute(name: String(name), rawValue: String(rest[valueStart..<valueEnd].trimmingSpaces)))
            rest = rest[valueEnd...].trimmingSpaces
            if rest.first == "," { rest = rest.dropFirst() }
        }
        self.attributes = attributes
    }

    /// The value of the first attribute named `name`, quotes removed.
    public subscript(name: String) -> String? {
        attributes.first { $0.name == name }?.value
    }

    /// Replaces the value of the attribute named `name` with a quoted string, or appends it.
    ///
    /// `value` must not contain `"`, CR or LF (the format cannot express them).
    public mutating func setQuotedString(_ value: String, for name: String) {
        precondition(!value.contains(where: { $0 == "\"" || $0 == "\n" || $0 == "\r" }), "An HLS quoted string cannot hold quotes or line breaks")
        if let index = attributes.firstIndex(where: { $0.name == name }) {
            attributes[index].rawValue = "\"\(value)\""
        } else {
            attributes.append(Attribute(name: name, rawValue: "\"\(value)\""))
        }
    }

    /// The list written back: `NAME=value` pairs joined by commas.
    public var description: String {
        attributes.map { "\($0.name)=\($0.rawValue)" }.joined(separator: ",")
    }
}

/// What is wrong with one line of a playlist; ``HLSPlaylist`` adds the line number.
public struct HLSSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The problem, without the line number.
    public var reason: String

    /// Creates an error.
    public init(_ reason: String) { self.reason = reason }

    public var description: String { reason }
}

extension Substring {
    var trimmingSpaces: Substring {
        var result = self
        while let first = result.first, first == " " || first == "\t" { result = result.dropFirst() }
        while let last = result.last, last == " " || last == "\t" { result = result.dropLast() }
        return result
    }
}
