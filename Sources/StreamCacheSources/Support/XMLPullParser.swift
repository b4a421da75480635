/// A namespace-aware pull parser for the XML that WebDAV servers send, with no I/O and no
/// dependency: it replaces FoundationXML's `XMLParser`, which on Linux loads libxml2 (and, through
/// it, a second ICU) into every process that can list a WebDAV folder, and which crashed on
/// element names that are not UTF-8 and on `<?a?>` (found by `Fuzz/run propfind`).
///
/// It reads XML 1.0 as UTF-8 and checks well-formedness: one root element, matching end tags,
/// quoted attribute values, bound namespace prefixes, defined entities. It refuses a document type
/// declaration (`<!DOCTYPE`), so no entity is ever expanded beyond the five predefined ones and
/// character references, and nothing outside the document is fetched. Comments and processing
/// instructions are skipped; CDATA sections are text. Element names are resolved to their
/// namespace URI, so callers match `DAV:` elements whatever prefix a server chose.
///
/// ```swift
/// var parser = try XMLPullParser(bytes)
/// while let event = try parser.next() {
///     if case .start(let name) = event, name == .init(namespace: "DAV:", local: "href") { … }
/// }
/// ```
package struct XMLPullParser {
    /// An element's name: its namespace URI (`nil` when the element is in no namespace) and its
    /// local part.
    package struct Name: Hashable, Sendable {
        package var namespace: String?
        package var local: String

        package init(namespace: String?, local: String) {
            self.namespace = namespace
            self.local = local
        }
    }

    /// What the parser found next, in document order.
    package enum Event: Hashable, Sendable {
        /// A start tag, or an empty-element tag (which is followed by its `end` at once).
        case start(Name)
        /// An end tag, or the end of an empty-element tag.
        case end(Name)
        /// Character data inside the root element, with references decoded; one run of text
        /// between two pieces of markup, or one CDATA section.
        case text(String)
    }

    private let bytes: [UInt8]
    private var position = 0
    /// The open elements: their qualified names as written (to match end tags), resolved names,
    /// and the prefixes they bind.
    private var open: [(qualified: ArraySlice<UInt8>, name: Name, boundPrefixes: [String])] = []
    /// Namespace bindings in scope by prefix, innermost last; the prefix `""` is the default
    /// namespace, a `nil` URI undeclares it. A dictionary, so a hostile document with thousands of
    /// declarations costs no scan per element.
    private var bindings: [String: [String?]] = ["xml": ["http://www.w3.org/XML/1998/namespace"]]
    private var sawRoot = false
    /// The end event an empty-element tag still owes.
    private var pendingEnd: Name?

    /// Prepares to parse `bytes`, which must be UTF-8 (an optional byte order mark is skipped).
    ///
    /// - Throws: ``XMLSyntaxError`` when the bytes are not UTF-8 or hold a character XML forbids
    ///   (control characters other than tab, line feed and carriage return).
    package init(_ bytes: [UInt8]) throws {
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        decoding: while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: break decoding
            case .error: throw XMLSyntaxError("the document is not UTF-8", at: 0)
            }
        }
        if let bad = bytes.firstIndex(where: { $0 < 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }) {
            throw XMLSyntaxError("a control character is not allowed in XML", at: bad)
        }
        self.bytes = bytes
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3 }
    }

    /// The next event, or `nil` once the root element has closed and only whitespace, comments
    /// and processing instructions follow it.
    ///
    /// - Throws: ``XMLSyntaxError`` at the first thing that is not well-formed XML.
    package mutating func next() throws -> Event? {
        if let end = pendingEnd {
            pendingEnd = nil
            closeElement()
            return .end(end)
        }
        while position < bytes.count {
            if bytes[position] != UInt8(ascii: "<") {
                let text = try readText()
                if open.isEmpty {
                    guard text.allSatisfy(\.isXMLWhitespace) else {
                        throw XMLSyntaxError("text outside the root element", at: position)
                    }
                    continue
                }
                return .text(text)
            }
            if starts(with: "<!--") {
                try skip(past: "-->", from: position + 4, what: "comment")
            } else if starts(with: "<?") {
                try skip(past: "?>", from: position + 2, what: "processing instruction")
            } else if starts(with: "<![CDATA[") {
                guard !open.isEmpty else { throw XMLSyntaxError("a CDATA section outside the root element", at: position) }
                let start = position + 9
                let end = try find("]]>", from: start, what: "CDATA section")
                position = end + 3
                return .text(String(decoding: bytes[start..<end], as: UTF8.self))
            } else if starts(with: "<!") {
                throw XMLSyntaxError("document type declarations are not accepted", at: position)
            } else if starts(with: "</") {
                return .end(try readEndTag())
            } else {
                return .start(try readStartTag())
            }
        }
        guard sawRoot else { throw XMLSyntaxError("the document has no root element", at: position) }
        guard open.isEmpty else { throw XMLSyntaxError("the document ends inside an element", at: position) }
        return nil
    }

    // MARK: - Markup

    private mutating func readStartTag() throws -> Name {
        let tagStart = position
        guard open.isEmpty ? !sawRoot : true else { throw XMLSyntaxError("a second root element", at: tagStart) }
        position += 1
        let qualified = try readName()
        var attributes: [(name: ArraySlice<UInt8>, value: String)] = []
        var attributeNames: Set<ArraySlice<UInt8>> = []
        var selfClosing = false
        while true {
            let hadSpace = skipWhitespace()
            guard position < bytes.count else { throw XMLSyntaxError("the document ends inside a tag", at: tagStart) }
            if bytes[position] == UInt8(ascii: ">") {
                position += 1
                break
            }
            if starts(with: "/>") {
                position += 2
                selfClosing = true
                break
            }
            guard hadSpace else { throw XMLSyntaxError("attributes must be separated by whitespace", at: position) }
            let name = try readName()
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "=") else {
                throw XMLSyntaxError("an attribute without a value", at: position)
            }
            position += 1
            skipWhitespace()
            let value = try readAttributeValue()
            guard attributeNames.insert(name).inserted else { throw XMLSyntaxError("a repeated attribute", at: position) }
            attributes.append((name, value))
        }
        var boundPrefixes: [String] = []
        for attribute in attributes {
            if attribute.name.elementsEqual("xmlns".utf8) {
                bindings["", default: []].append(attribute.value.isEmpty ? nil : attribute.value)
                boundPrefixes.append("")
            } else if attribute.name.starts(with: "xmlns:".utf8) {
                let prefix = String(decoding: attribute.name.dropFirst(6), as: UTF8.self)
                guard !attribute.value.isEmpty, prefix != "xmlns", prefix != "xml" else {
                    throw XMLSyntaxError("namespace prefix \(prefix) cannot be bound to \"\(attribute.value)\"", at: tagStart)
                }
                bindings[prefix, default: []].append(attribute.value)
                boundPrefixes.append(prefix)
            }
        }
        // Bound before the name resolves: an element may use the prefix it declares.
        open.append((qualified, Name(namespace: nil, local: ""), boundPrefixes))
        let name = try resolve(qualified, at: tagStart)
        open[open.count - 1].name = name
        sawRoot = true
        if selfClosing { pendingEnd = name }
        return name
    }

    private mutating func readEndTag() throws -> Name {
        let tagStart = position
        position += 2
        let qualified = try readName()
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: ">") else {
            throw XMLSyntaxError("an end tag that does not close", at: tagStart)
        }
        position += 1
        guard let innermost = open.last, innermost.qualified.elementsEqual(qualified) else {
            throw XMLSyntaxError("an end tag that matches no open element", at: tagStart)
        }
        closeElement()
        return innermost.name
    }

    private mutating func closeElement() {
        for prefix in open.removeLast().boundPrefixes { bindings[prefix]?.removeLast() }
    }

    /// The namespace of `qualified` (`prefix:local` or `local`) in the current scope.
    private func resolve(_ qualified: ArraySlice<UInt8>, at offset: Int) throws -> Name {
        let colon = qualified.firstIndex(of: UInt8(ascii: ":"))
        let prefix = colon.map { String(decoding: qualified[..<$0], as: UTF8.self) } ?? ""
        let local = String(decoding: colon.map { qualified[($0 + 1)...] } ?? qualified, as: UTF8.self)
        guard !local.isEmpty, !local.utf8.contains(UInt8(ascii: ":")), colon.map({ $0 > qualified.startIndex }) ?? true else {
            throw XMLSyntaxError("a malformed qualified name", at: offset)
        }
        guard let uri = bindings[prefix]?.last else {
            if prefix.isEmpty { return Name(namespace: nil, local: local) }
            throw XMLSyntaxError("namespace prefix \(prefix) is not declared", at: offset)
        }
        return Name(namespace: uri, local: local)
    }

    // MARK: - Tokens

    /// A name: everything up to whitespace or a delimiter; it may not start with one that XML
    /// names cannot start with.
    private mutating func readName() throws -> ArraySlice<UInt8> {
        let start = position
        while position < bytes.count, !Self.endsName(bytes[position]) { position += 1 }
        guard position > start, !Self.cannotStartName(bytes[start]) else {
            throw XMLSyntaxError("a tag or attribute without a valid name", at: start)
        }
        return bytes[start..<position]
    }

    private mutating func readAttributeValue() throws -> String {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") || bytes[position] == UInt8(ascii: "'") else {
            throw XMLSyntaxError("an attribute value must be quoted", at: position)
        }
        let quote = bytes[position]
        let start = position + 1
        guard let end = bytes[start...].firstIndex(of: quote) else {
            throw XMLSyntaxError("an attribute value that does not end", at: position)
        }
        guard !bytes[start..<end].contains(UInt8(ascii: "<")) else { throw XMLSyntaxError("'<' in an attribute value", at: start) }
        position = end + 1
        return try decodeReferences(bytes[start..<end], at: start)
    }

    /// Character data up to the next `<`, references decoded.
    private mutating func readText() throws -> String {
        let start = position
        let end = bytes[start...].firstIndex(of: UInt8(ascii: "<")) ?? bytes.count
        position = end
        let raw = bytes[start..<end]
        if let close = raw.firstRange(of: Array("]]>".utf8)) {
            throw XMLSyntaxError("']]>' in text", at: close.lowerBound)
        }
        return try decodeReferences(raw, at: start)
    }

    /// `raw` with `&lt;`, `&gt;`, `&amp;`, `&quot;`, `&apos;`, `&#N;` and `&#xN;` replaced.
    private func decodeReferences(_ raw: ArraySlice<UInt8>, at offset: Int) throws -> String {
        guard raw.contains(UInt8(ascii: "&")) else { return String(decoding: raw, as: UTF8.self) }
        var result: [UInt8] = []
        result.reserveCapacity(raw.count)
        var index = raw.startIndex
        while index < raw.endIndex {
            guard raw[index] == UInt8(ascii: "&") else {
                result.append(raw[index])
                index += 1
                continue
            }
            guard let semicolon = raw[index...].prefix(12).firstIndex(of: UInt8(ascii: ";")) else {
                throw XMLSyntaxError("an '&' that starts no reference", at: index)
            }
            let reference = String(decoding: raw[(index + 1)..<semicolon], as: UTF8.self)
            let scalar: Unicode.Scalar?
            switch reference {
            case "lt": scalar = "<"
            case "gt": scalar = ">"
            case "amp": scalar = "&"
            case "quot": scalar = "\""
            case "apos": scalar = "'"
            default:
                let digits = reference.utf8.dropFirst()
                let value: UInt32?
                if reference.hasPrefix("#x") {
                    value = digits.count > 1 && digits.dropFirst().allSatisfy(\.isHexDigit) ? UInt32(String(reference.dropFirst(2)), radix: 16) : nil
                } else if reference.hasPrefix("#") {
                    value = !digits.isEmpty && digits.allSatisfy { (0x30...0x39).contains($0) } ? UInt32(String(reference.dropFirst()), radix: 10) : nil
                } else {
                    throw XMLSyntaxError("entity '&\(reference);' is not defined", at: index)
                }
                scalar = value.flatMap { Self.isXMLCharacter($0) ? Unicode.Scalar($0) : nil }
            }
            guard let scalar else { throw XMLSyntaxError("a character reference to no XML character", at: index) }
            result.append(contentsOf: Array(String(scalar).utf8))
            index = semicolon + 1
        }
        return String(decoding: result, as: UTF8.self)
    }

    // MARK: - Bytes

    private func starts(with literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - position >= count else { return false }
        return literal.withUTF8Buffer { bytes[position..<(position + count)].elementsEqual($0) }
    }

    /// The offset of `literal` at or after `start`.
    private func find(_ literal: StaticString, from start: Int, what: String) throws -> Int {
        let needle = literal.withUTF8Buffer { Array($0) }
        guard start <= bytes.count, let found = bytes[start...].firstRange(of: needle) else {
            throw XMLSyntaxError("a \(what) that does not end", at: position)
        }
        return found.lowerBound
    }

    private mutating func skip(past literal: StaticString, from start: Int, what: String) throws {
        position = try find(literal, from: start, what: what) + literal.utf8CodeUnitCount
    }

    @discardableResult
    private mutating func skipWhitespace() -> Bool {
        let start = position
        while position < bytes.count, bytes[position].isXMLWhitespace { position += 1 }
        return position > start
    }

    private static func endsName(_ byte: UInt8) -> Bool {
        byte.isXMLWhitespace || byte == UInt8(ascii: ">") || byte == UInt8(ascii: "/") || byte == UInt8(ascii: "=")
            || byte == UInt8(ascii: "<") || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'")
    }

    private static func cannotStartName(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "&")
            || byte == UInt8(ascii: "!") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: ";")
    }

    /// XML 1.0's `Char` production.
    private static func isXMLCharacter(_ value: UInt32) -> Bool {
        value == 0x9 || value == 0xA || value == 0xD || (0x20...0xD7FF).contains(value) || (0xE000...0xFFFD).contains(value)
            || (0x10000...0x10FFFF).contains(value)
    }
}

/// Why ``XMLPullParser`` refused a document, and the byte offset where it stopped.
package struct XMLSyntaxError: Error, Hashable, Sendable, CustomStringConvertible {
    package var reason: String
    package var offset: Int

    package init(_ reason: String, at offset: Int) {
        self.reason = reason
        self.offset = offset
    }

    package var description: String { "\(reason) (at byte \(offset))" }
}

extension UInt8 {
    fileprivate var isXMLWhitespace: Bool { self == 0x20 || self == 0x09 || self == 0x0A || self == 0x0D }
    fileprivate var isHexDigit: Bool { (0x30...0x39).contains(self) || (0x41...0x46).contains(self) || (0x61...0x66).contains(self) }
}

extension Character {
    fileprivate var isXMLWhitespace: Bool { self == " " || self == "\t" || self == "\n" || self == "\r" || self == "\r\n" }
}
