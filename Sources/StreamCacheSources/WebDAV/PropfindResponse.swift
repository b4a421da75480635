import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import StreamCache

/// A WebDAV `207 Multi-Status` answer to `PROPFIND` (RFC 4918 §9.1), reduced to what a media
/// cache needs. Elements are matched by namespace URI (`DAV:`), never by prefix.
public struct PropfindResponse: Sendable, Hashable {
    /// One `d:response`: a resource and its properties.
    public struct Resource: Sendable, Hashable {
        /// The `d:href`, percent-decoded.
        public var href: String
        /// `d:getcontentlength`.
        public var contentLength: Int64?
        /// `d:getcontenttype`.
        public var contentType: String?
        /// `d:getetag`, quotes and any `W/` kept.
        public var entityTag: String?
        /// `d:getlastmodified` (an RFC 1123 date).
        public var lastModified: String?
        /// Whether `d:resourcetype` holds `d:collection`.
        public var isCollection: Bool
    }

    /// The resources, in document order.
    public var resources: [Resource]

    /// Parses a multi-status document.
    ///
    /// - Throws: ``StreamCache/StreamCacheError`` (`badResponse`) for anything that is not a
    ///   well-formed multi-status document.
    public init(xml data: Data) throws {
        // swift-corelibs-foundation's XMLParser crashes on element names that are not valid UTF-8 and
        // on a processing instruction without data (`<?a?>`: strlen of NULL), both found by
        // `Fuzz/run propfind`. A WebDAV server is not trusted input, so such documents are refused
        // before they reach it: multi-status bodies are UTF-8 and hold no processing instruction
        // besides the XML declaration.
        guard !data.contains(0), String(data: data, encoding: .utf8) != nil, Self.hasNoProcessingInstructions(data) else {
            throw StreamCacheError(.badResponse, "The WebDAV server's PROPFIND answer is not a plain UTF-8 XML document.")
        }
        let delegate = Delegate()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = true
        parser.shouldResolveExternalEntities = false
        parser.delegate = delegate
        guard parser.parse(), delegate.sawMultistatus, delegate.closedMultistatus else {
            throw StreamCacheError(.badResponse, "The WebDAV server's PROPFIND answer is not a multi-status XML document.")
        }
        resources = delegate.resources
    }

    /// Whether `<?` appears nowhere but in a leading XML declaration.
    private static func hasNoProcessingInstructions(_ data: Data) -> Bool {
        let bytes = [UInt8](data)
        let start = bytes.firstIndex { ![0x20, 0x09, 0x0A, 0x0D, 0xEF, 0xBB, 0xBF].contains($0) } ?? bytes.count
        for index in bytes.indices.dropLast() where bytes[index] == UInt8(ascii: "<") && bytes[index + 1] == UInt8(ascii: "?") {
            let isDeclaration = index == start && bytes[index...].starts(with: Array("<?xml ".utf8))
            if !isDeclaration { return false }
        }
        return true
    }

    private final class Delegate: NSObject, XMLParserDelegate {
        var resources: [Resource] = []
        var sawMultistatus = false
        var closedMultistatus = false
        private var current: Resource?
        private var text = ""
        private var inPropstatOK = true
        private var propstatProps: [String: String] = [:]
        private var propstatCollection = false

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                    attributes: [String: String] = [:]) {
            text = ""
            guard namespaceURI == "DAV:" else { return }
            switch name {
            case "multistatus": sawMultistatus = true
            case "response": current = Resource(href: "", isCollection: false)
            case "propstat":
                propstatProps = [:]
                propstatCollection = false
                inPropstatOK = true
            case "collection": propstatCollection = true
            default: break
            }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            if namespaceURI == "DAV:", name == "multistatus" { closedMultistatus = true }
            guard namespaceURI == "DAV:", current != nil else { return }
            let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
            switch name {
            case "href" where current?.href.isEmpty == true: current?.href = value.removingPercentEncoding ?? value
            case "status": inPropstatOK = value.contains(" 200 ") || value.hasSuffix(" 200")
            case "getcontentlength", "getcontenttype", "getetag", "getlastmodified": propstatProps[name] = value
            case "propstat":
                // Properties in a non-200 propstat are ones the server does not have.
                guard inPropstatOK else { break }
                if let length = propstatProps["getcontentlength"] { current?.contentLength = Int64(length) }
                if let type = propstatProps["getcontenttype"], !type.isEmpty { current?.contentType = type }
                if let tag = propstatProps["getetag"], !tag.isEmpty { current?.entityTag = tag }
                if let date = propstatProps["getlastmodified"], !date.isEmpty { current?.lastModified = date }
                if propstatCollection { current?.isCollection = true }
            case "response":
                if let current { resources.append(current) }
                current = nil
            default: break
            }
            text = ""
        }
    }
}
