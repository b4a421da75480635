#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A WebDAV `207 Multi-Status` answer to `PROPFIND` (RFC 4918 §9.1), reduced to what a media
/// cache needs. Elements are matched by namespace URI (`DAV:`), never by prefix.
public struct PropfindResponse: Sendable, Hashable {
    /// One `d:response`: a resource and its properties.
    public struct Resource: Sendable, Hashable {
        /// The `d:href`, percent-decoded.
        public var href: String
        /// `d:getcontentlength`; `nil` when it is no file's length (``StreamCache/ByteRange/isPossibleLength(_:)``).
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
    ///   well-formed multi-status document (`XMLPullParser` says what is wrong and where).
    public init(xml data: Data) throws {
        var reader = MultistatusReader()
        do {
            var parser = try XMLPullParser([UInt8](data))
            while let event = try parser.next() { reader.consume(event) }
        } catch let error as XMLSyntaxError {
            throw StreamCacheError(.badResponse, "The WebDAV server's PROPFIND answer is not well-formed XML: \(error).")
        }
        guard reader.sawMultistatus, reader.closedMultistatus else {
            throw StreamCacheError(.badResponse, "The WebDAV server's PROPFIND answer is not a multi-status XML document.")
        }
        resources = reader.resources
    }

    /// Collects resources from the events of a multi-status document. Only `DAV:` elements count.
    private struct MultistatusReader {
        var resources: [Resource] = []
        var sawMultistatus = false
        var closedMultistatus = false
        private var current: Resource?
        private var text = ""
        private var inPropstatOK = true
        private var propstatProps: [String: String] = [:]
        private var propstatCollection = false

        mutating func consume(_ event: XMLPullParser.Event) {
            switch event {
            case .start(let name): start(name)
            case .end(let name): end(name)
            case .text(let string): text += string
            }
        }

        private mutating func start(_ name: XMLPullParser.Name) {
            text = ""
            guard name.namespace == "DAV:" else { return }
            switch name.local {
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

        private mutating func end(_ name: XMLPullParser.Name) {
            defer { text = "" }
            guard name.namespace == "DAV:" else { return }
            if name.local == "multistatus" { closedMultistatus = true }
            guard current != nil else { return }
            let value = text.trimmingWhitespace()
            switch name.local {
            case "href" where current?.href.isEmpty == true: current?.href = value.percentDecoded ?? value
            case "status": inPropstatOK = value.contains(" 200 ") || value.hasSuffix(" 200")
            case "getcontentlength", "getcontenttype", "getetag", "getlastmodified": propstatProps[name.local] = value
            case "propstat":
                // Properties in a non-200 propstat are ones the server does not have.
                guard inPropstatOK else { break }
                if let length = propstatProps["getcontentlength"] { current?.contentLength = ByteRange.possibleLength(Int64(length)) }
                if let type = propstatProps["getcontenttype"], !type.isEmpty { current?.contentType = type }
                if let tag = propstatProps["getetag"], !tag.isEmpty { current?.entityTag = tag }
                if let date = propstatProps["getlastmodified"], !date.isEmpty { current?.lastModified = date }
                if propstatCollection { current?.isCollection = true }
            case "response":
                if let current { resources.append(current) }
                current = nil
            default: break
            }
        }
    }
}
