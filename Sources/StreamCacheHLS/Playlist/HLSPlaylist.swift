#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// An HLS playlist (RFC 8216): a master playlist that lists variant streams, or a media playlist
/// that lists segments.
///
/// The parser keeps every line, so ``rewritten(_:)`` can write the playlist back with only its
/// URIs replaced: the proxy uses it to point every variant, rendition, key, initialization
/// section and segment at itself. It checks what a player relies on and rejects the rest with a
/// clear error, rather than passing on a playlist no player could use:
///
/// - the first line is `#EXTM3U`, the text is UTF-8 without control characters;
/// - every `#EXT-X-STREAM-INF` and `#EXTINF` is followed by its URI, and no URI line lacks one;
/// - a media playlist has `#EXT-X-TARGETDURATION`; master and media tags are not mixed;
/// - attribute lists parse; `#EXT-X-MAP`, `#EXT-X-I-FRAME-STREAM-INF` and encrypting
///   `#EXT-X-KEY` tags have a `URI`;
/// - `#EXT-X-BYTERANGE` is `length[@offset]`, and a range without an offset follows a range of the
///   same URI;
/// - `{$NAME}` references name an `#EXT-X-DEFINE` of the playlist.
///
/// ```swift
/// let playlist = try HLSPlaylist(parsing: text)
/// if playlist.kind == .media, playlist.isLive { … refresh every targetDuration / 2 … }
/// let local = playlist.rewritten { reference in proxyPath(for: reference.uri) }
/// ```
public struct HLSPlaylist: Sendable {
    /// Whether the playlist lists variant streams or media segments.
    public enum Kind: String, Sendable, Hashable {
        /// A multivariant ("master") playlist: `#EXT-X-STREAM-INF`, `#EXT-X-MEDIA`, …
        case master
        /// A media playlist: `#EXTINF` segments.
        case media
    }

    /// What a URI in the playlist names.
    public enum Role: String, Sendable, Hashable {
        /// The media playlist of a variant stream (`#EXT-X-STREAM-INF`).
        case variantPlaylist
        /// The media playlist of an I-frame stream (`#EXT-X-I-FRAME-STREAM-INF`).
        case iFramePlaylist
        /// The media playlist of an alternative rendition (`#EXT-X-MEDIA`).
        case renditionPlaylist
        /// A media segment.
        case segment
        /// A media initialization section (`#EXT-X-MAP`).
        case initializationSection
        /// A decryption key (`#EXT-X-KEY`).
        case key
        /// A decryption key named in a master playlist (`#EXT-X-SESSION-KEY`).
        case sessionKey
        /// Session data, a JSON file (`#EXT-X-SESSION-DATA`).
        case sessionData
        /// A partial segment of low-latency HLS (`#EXT-X-PART`).
        case partialSegment
        /// A resource the server hints the client to load next (`#EXT-X-PRELOAD-HINT`).
        case preloadHint
        /// Another rendition's playlist, in a low-latency rendition report.
        case renditionReport

        /// Whether the URI names another playlist.
        public var isPlaylist: Bool {
            switch self {
            case .variantPlaylist, .iFramePlaylist, .renditionPlaylist, .renditionReport: true
            default: false
            }
        }
    }

    /// One URI the playlist names.
    public struct Reference: Sendable, Hashable {
        /// The URI as written, with `{$NAME}` variables substituted; often relative.
        public var uri: String
        /// What it names.
        public var role: Role
        /// The bytes of the URI's resource meant, for byte-range segments and maps.
        public var byteRange: ByteRange?
        /// The 1-based line it is on.
        public var line: Int
    }

    /// A variant stream of a master playlist.
    public struct Variant: Sendable, Hashable {
        /// Its media playlist.
        public var reference: Reference
        /// The peak bit rate in bits per second (`BANDWIDTH`), 0 when missing.
        public var bandwidth: Int
        /// `RESOLUTION`, such as `1280x720`.
        public var resolution: String?
        /// `CODECS`.
        public var codecs: String?
        /// The `GROUP-ID`s of the renditions it plays with, by type (`AUDIO`, `VIDEO`, `SUBTITLES`).
        public var renditionGroups: [String: String]
        /// Whether it is an I-frame-only stream (for trick play), not a normal variant.
        public var isIFrameOnly: Bool
    }

    /// An alternative rendition (`#EXT-X-MEDIA`): an audio language, subtitles, …
    public struct Rendition: Sendable, Hashable {
        /// `TYPE`: `AUDIO`, `VIDEO`, `SUBTITLES` or `CLOSED-CAPTIONS`.
        public var type: String
        /// `GROUP-ID`.
        public var groupID: String
        /// `NAME`.
        public var name: String?
        /// Its media playlist; `nil` when the rendition is carried in the variant's own segments.
        public var reference: Reference?
    }

    /// A media segment.
    public struct Segment: Sendable, Hashable {
        /// The segment's URI and byte range.
        public var reference: Reference
        /// Its duration in seconds (`#EXTINF`).
        public var duration: Double
        /// The initialization section it needs (`#EXT-X-MAP`), if any.
        public var initializationSection: Reference?
        /// The key it is encrypted with (`#EXT-X-KEY`), if any.
        public var key: Reference?
    }

    /// Master or media.
    public let kind: Kind
    /// `#EXT-X-TARGETDURATION` in seconds (media playlists).
    public let targetDuration: Int?
    /// `#EXT-X-MEDIA-SEQUENCE`, 0 when missing.
    public let mediaSequence: Int
    /// Whether `#EXT-X-ENDLIST` is present: no segment will ever be added.
    public let hasEndList: Bool
    /// `#EXT-X-PLAYLIST-TYPE`: `VOD`, `EVENT` or `nil`.
    public let playlistType: String?
    /// The variant streams, I-frame streams included (master playlists).
    public let variants: [Variant]
    /// The alternative renditions (master playlists).
    public let renditions: [Rendition]
    /// The segments in order (media playlists).
    public let segments: [Segment]
    /// Every URI the playlist names, in order.
    public let references: [Reference]

    /// Whether the origin may still change the playlist: a media playlist with neither
    /// `#EXT-X-ENDLIST` nor `#EXT-X-PLAYLIST-TYPE:VOD`. Such a playlist must be reloaded.
    public var isLive: Bool { kind == .media && !hasEndList && playlistType != "VOD" }

    /// The largest playlist accepted: far above any real one (a 24-hour VOD playlist of 2-second
    /// segments is about 3 MB), small enough that a wrongly named media file is refused quickly.
    public static let maximumSize = 16 << 20

    private let lines: [Line]

    private enum Line: Sendable {
        /// Written back unchanged.
        case verbatim(String)
        /// A URI line.
        case uri(written: String, Reference)
        /// A tag whose `URI` attribute is a reference.
        case tag(name: String, attributes: HLSAttributeList, written: String, Reference)
        /// Left out of the rewritten playlist (it would send the player to the origin).
        case omitted
    }

    /// Parses a playlist from the bytes an origin sent.
    ///
    /// - Throws: ``StreamCacheError`` (`invalidPlaylist`) when the bytes are larger than
    ///   ``maximumSize``, not UTF-8, hold control characters, or do not parse (see ``init(parsing:)``).
    public init(data: Data) throws(StreamCacheError) {
        guard data.count <= Self.maximumSize else {
            throw StreamCacheError(.invalidPlaylist, "The playlist is larger than \(Self.maximumSize >> 20) MiB; it is not an HLS playlist.")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw StreamCacheError(.invalidPlaylist, "The playlist is not UTF-8 text.")
        }
        try self.init(parsing: text)
    }

    /// Parses a playlist.
    ///
    /// - Throws: ``StreamCacheError`` (`invalidPlaylist`) with the line number and the rule broken.
    public init(parsing text: String) throws(StreamCacheError) {
        var parser = Parser()
        do {
            try parser.parse(text)
        } catch {
            let place = parser.lineNumber > 0 ? "line \(parser.lineNumber): " : ""
            throw StreamCacheError(.invalidPlaylist, "The playlist is malformed (\(place)\(error.reason)).")
        }
        kind = parser.sawMasterTag ? .master : .media
        targetDuration = parser.targetDuration
        mediaSequence = parser.mediaSequence
        hasEndList = parser.hasEndList
        playlistType = parser.playlistType
        variants = parser.variants
        renditions = parser.renditions
        segments = parser.segments
        references = parser.references
        lines = parser.lines
    }

    /// The playlist written back with URIs replaced.
    ///
    /// - Parameter replacement: Returns the new URI for a reference, or `nil` to keep it. The new
    ///   URI must not contain `"` or line breaks.
    /// - Returns: The playlist text, lines ending in `\n`. Tags that would send the player
    ///   elsewhere and cannot be rewritten (`#EXT-X-CONTENT-STEERING`) are left out.
    public func rewritten(_ replacement: (Reference) throws -> String?) rethrows -> String {
        var output = ""
        output.reserveCapacity(lines.count * 48)
        for line in lines {
            switch line {
            case .verbatim(let text):
                output += text
            case .uri(let written, let reference):
                output += try replacement(reference) ?? written
            case .tag(let name, var attributes, let written, let reference):
                if let uri = try replacement(reference) {
                    attributes.setQuotedString(uri, for: "URI")
                    output += "#\(name):\(attributes)"
                } else {
                    output += written
                }
            case .omitted:
                continue
            }
            output += "\n"
        }
        return output
    }

    // MARK: Parsing

    private struct Parser {
        var lineNumber = 0
        var sawMasterTag = false
        var sawMediaTag = false
        var targetDuration: Int?
        var mediaSequence = 0
        var hasEndList = false
        var playlistType: String?
        var variants: [Variant] = []
        var renditions: [Rendition] = []
        var segments: [Segment] = []
        var references: [Reference] = []
        var lines: [Line] = []

        private var pendingVariant: (attributes: HLSAttributeList, line: Int)?
        private var pendingDuration: (seconds: Double, line: Int)?
        private var pendingByteRange: (length: Int64, offset: Int64?)?
        private var previousByteRange: (uri: String, end: Int64)?
        private var currentMap: Reference?
        private var currentKey: Reference?
        private var variables: [String: String] = [:]

        mutating func parse(_ text: String) throws(HLSSyntaxError) {
            guard !text.isEmpty else { throw HLSSyntaxError("the playlist is empty") }
            var first = true
            // "\r\n" is one Character in Swift, so both line ends are named.
            for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
                lineNumber += 1
                var line = rawLine.trimmingSpaces
                if line.last == "\r" { line = line.dropLast().trimmingSpaces }
                if first {
                    if line.hasPrefix("\u{FEFF}") { line = line.dropFirst() }
                    guard line == "#EXTM3U" else { throw HLSSyntaxError("the first line is not #EXTM3U, so this is not an HLS playlist") }
                    first = false
                    lines.append(.verbatim("#EXTM3U"))
                    continue
                }
                if let bad = line.unicodeScalars.first(where: { $0.value < 0x20 && $0 != "\t" || $0.value == 0x7F }) {
                    throw HLSSyntaxError("control character U+\(String(bad.value, radix: 16, uppercase: true))")
                }
                if line.isEmpty {
                    // Blank lines carry nothing; dropping them keeps the output compact.
                    continue
                } else if line.hasPrefix("#EXT") {
                    try parseTag(line)
                } else if line.hasPrefix("#") {
                    lines.append(.verbatim(String(line)))
                } else {
                    try parseURILine(line)
                }
            }
            if first { throw HLSSyntaxError("the playlist is empty") }
            if let pendingVariant {
                lineNumber = pendingVariant.line
                throw HLSSyntaxError("#EXT-X-STREAM-INF is not followed by a URI")
            }
            if let pendingDuration {
                lineNumber = pendingDuration.line
                throw HLSSyntaxError("#EXTINF is not followed by a segment URI")
            }
            lineNumber = 0
            if sawMasterTag && sawMediaTag { throw HLSSyntaxError("it mixes master playlist tags with media playlist tags") }
            if !sawMasterTag && targetDuration == nil { throw HLSSyntaxError("a media playlist needs #EXT-X-TARGETDURATION") }
        }

        private mutating func parseTag(_ line: Substring) throws(HLSSyntaxError) {
            let colon = line.firstIndex(of: ":")
            let name = String(line[line.index(after: line.startIndex)..<(colon ?? line.endIndex)])
            let value = colon.map { line[line.index(after: $0)...] } ?? ""
            // Tags whose case below records no line of their own are written back as they were.
            let linesBefore = lines.count
            defer { if lines.count == linesBefore { lines.append(.verbatim(String(line))) } }
            switch name {
            case "EXT-X-TARGETDURATION":
                sawMediaTag = true
                // RFC 8216 asks for an integer; a few packagers write "6.0", which players accept.
                guard let seconds = Double(value), seconds >= 0, seconds < 86_400 else { throw HLSSyntaxError("#EXT-X-TARGETDURATION '\(value.prefix(20))' is not a number of seconds") }
                targetDuration = Int(seconds.rounded(.up))
            case "EXT-X-MEDIA-SEQUENCE":
                sawMediaTag = true
                guard let sequence = Int(value), sequence >= 0 else { throw HLSSyntaxError("#EXT-X-MEDIA-SEQUENCE '\(value.prefix(20))' is not an integer") }
                mediaSequence = sequence
            case "EXT-X-ENDLIST":
                sawMediaTag = true
                hasEndList = true
            case "EXT-X-PLAYLIST-TYPE":
                sawMediaTag = true
                playlistType = String(value)
            case "EXTINF":
                sawMediaTag = true
                let durationText = value.split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                guard let seconds = Double(durationText.trimmingSpaces), seconds >= 0, seconds.isFinite else {
                    throw HLSSyntaxError("#EXTINF duration '\(durationText.prefix(20))' is not a number")
                }
                guard pendingDuration == nil else { throw HLSSyntaxError("two #EXTINF tags without a segment URI between them") }
                pendingDuration = (seconds, lineNumber)
            case "EXT-X-BYTERANGE":
                sawMediaTag = true
                pendingByteRange = try Self.parseByteRange(value, tag: name)
            case "EXT-X-STREAM-INF":
                sawMasterTag = true
                guard pendingVariant == nil else { throw HLSSyntaxError("two #EXT-X-STREAM-INF tags without a URI between them") }
                pendingVariant = (try attributeList(value, tag: name), lineNumber)
            case "EXT-X-I-FRAME-STREAM-INF":
                sawMasterTag = true
                let attributes = try attributeList(value, tag: name)
                let reference = try uriReference(attributes, tag: name, role: .iFramePlaylist, required: true)!
                variants.append(Self.variant(attributes, reference: reference, isIFrameOnly: true))
                lines.append(.tag(name: name, attributes: attributes, written: String(line), reference))
            case "EXT-X-MEDIA":
                sawMasterTag = true
                let attributes = try attributeList(value, tag: name)
                guard let type = attributes["TYPE"], let group = attributes["GROUP-ID"] else { throw HLSSyntaxError("#EXT-X-MEDIA needs TYPE and GROUP-ID") }
                if type == "CLOSED-CAPTIONS", attributes["URI"] != nil { throw HLSSyntaxError("#EXT-X-MEDIA of TYPE=CLOSED-CAPTIONS cannot have a URI") }
                let reference = try uriReference(attributes, tag: name, role: .renditionPlaylist, required: false)
                renditions.append(Rendition(type: type, groupID: group, name: attributes["NAME"], reference: reference))
                lines.append(reference.map { .tag(name: name, attributes: attributes, written: String(line), $0) } ?? .verbatim(String(line)))
            case "EXT-X-KEY", "EXT-X-SESSION-KEY":
                if name == "EXT-X-SESSION-KEY" { sawMasterTag = true }
                let attributes = try attributeList(value, tag: name)
                guard let method = attributes["METHOD"] else { throw HLSSyntaxError("#\(name) needs METHOD") }
                let reference = try uriReference(attributes, tag: name, role: name == "EXT-X-KEY" ? .key : .sessionKey, required: method != "NONE")
                if name == "EXT-X-KEY" { currentKey = method == "NONE" ? nil : reference }
                lines.append(reference.map { .tag(name: name, attributes: attributes, written: String(line), $0) } ?? .verbatim(String(line)))
            case "EXT-X-MAP":
                let attributes = try attributeList(value, tag: name)
                var reference = try uriReference(attributes, tag: name, role: .initializationSection, required: true)!
                if let range = attributes["BYTERANGE"] {
                    let parsed = try Self.parseByteRange(range[...], tag: "EXT-X-MAP BYTERANGE")
                    reference.byteRange = try Self.byteRange(offset: parsed.offset ?? 0, length: parsed.length, tag: "EXT-X-MAP BYTERANGE")
                }
                currentMap = reference
                references[references.count - 1] = reference
                lines.append(.tag(name: name, attributes: attributes, written: String(line), reference))
            case "EXT-X-SESSION-DATA", "EXT-X-PART", "EXT-X-PRELOAD-HINT", "EXT-X-RENDITION-REPORT":
                let role: Role = switch name {
                case "EXT-X-SESSION-DATA": .sessionData
                case "EXT-X-PART": .partialSegment
                case "EXT-X-PRELOAD-HINT": .preloadHint
                default: .renditionReport
                }
                let attributes = try attributeList(value, tag: name)
                let reference = try uriReference(attributes, tag: name, role: role, required: name != "EXT-X-SESSION-DATA")
                lines.append(reference.map { .tag(name: name, attributes: attributes, written: String(line), $0) } ?? .verbatim(String(line)))
            case "EXT-X-CONTENT-STEERING":
                // Its server URI and the pathways it returns would lead the player to the origin.
                lines.append(.omitted)
            case "EXT-X-DEFINE":
                let attributes = try attributeList(value, tag: name)
                guard let variable = attributes["NAME"], let definition = attributes["VALUE"] else {
                    throw HLSSyntaxError("#EXT-X-DEFINE with IMPORT or QUERYPARAM is not supported; only NAME and VALUE")
                }
                variables[variable] = definition
            default:
                break
            }
        }

        private mutating func parseURILine(_ line: Substring) throws(HLSSyntaxError) {
            let uri = try substitute(line)
            if let variant = pendingVariant {
                let reference = Reference(uri: uri, role: .variantPlaylist, line: lineNumber)
                references.append(reference)
                variants.append(Self.variant(variant.attributes, reference: reference, isIFrameOnly: false))
                pendingVariant = nil
                lines.append(.uri(written: String(line), reference))
                return
            }
            if sawMasterTag { throw HLSSyntaxError("a URI line that no #EXT-X-STREAM-INF introduces") }
            guard let duration = pendingDuration else { throw HLSSyntaxError("a segment URI without #EXTINF") }
            var reference = Reference(uri: uri, role: .segment, line: lineNumber)
            if let range = pendingByteRange {
                let offset: Int64
                if let explicit = range.offset {
                    offset = explicit
                } else if let previous = previousByteRange, previous.uri == uri {
                    offset = previous.end
                } else {
                    throw HLSSyntaxError("#EXT-X-BYTERANGE without an offset must follow a byte range of the same URI")
                }
                reference.byteRange = try Self.byteRange(offset: offset, length: range.length, tag: "EXT-X-BYTERANGE")
                previousByteRange = (uri, offset + range.length)
            } else {
                previousByteRange = nil
            }
            pendingByteRange = nil
            pendingDuration = nil
            references.append(reference)
            segments.append(Segment(reference: reference, duration: duration.seconds, initializationSection: currentMap, key: currentKey))
            lines.append(.uri(written: String(line), reference))
        }

        private func attributeList(_ value: Substring, tag: String) throws(HLSSyntaxError) -> HLSAttributeList {
            do {
                return try HLSAttributeList(parsing: value)
            } catch {
                throw HLSSyntaxError("#\(tag): \(error.reason)")
            }
        }

        /// The tag's `URI` attribute as a reference, recorded in ``references``.
        private mutating func uriReference(_ attributes: HLSAttributeList, tag: String, role: Role, required: Bool) throws(HLSSyntaxError) -> Reference? {
            guard let raw = attributes["URI"] else {
                if required { throw HLSSyntaxError("#\(tag) needs a URI") }
                return nil
            }
            guard !raw.isEmpty else { throw HLSSyntaxError("#\(tag) has an empty URI") }
            let reference = Reference(uri: try substitute(raw[...]), role: role, line: lineNumber)
            references.append(reference)
            return reference
        }

        /// Replaces `{$NAME}` with the value `#EXT-X-DEFINE` gave it (RFC 8216bis §4.3).
        private func substitute(_ text: Substring) throws(HLSSyntaxError) -> String {
            guard text.contains("{$") else { return String(text) }
            var result = ""
            var rest = text
            while let start = rest.firstRange(of: "{$") {
                result += rest[..<start.lowerBound]
                guard let end = rest[start.upperBound...].firstIndex(of: "}") else { throw HLSSyntaxError("an unterminated {$ variable reference") }
                let name = String(rest[start.upperBound..<end])
                guard let value = variables[name] else { throw HLSSyntaxError("the variable '\(name.prefix(40))' is not defined by #EXT-X-DEFINE") }
                result += value
                rest = rest[rest.index(after: end)...]
            }
            return result + rest
        }

        private static func variant(_ attributes: HLSAttributeList, reference: Reference, isIFrameOnly: Bool) -> Variant {
            var groups: [String: String] = [:]
            for type in ["AUDIO", "VIDEO", "SUBTITLES"] { groups[type] = attributes[type] }
            return Variant(reference: reference, bandwidth: attributes["BANDWIDTH"].flatMap { Int($0) } ?? 0,
                           resolution: attributes["RESOLUTION"], codecs: attributes["CODECS"], renditionGroups: groups, isIFrameOnly: isIFrameOnly)
        }

        /// `length` bytes from `offset`; an origin's playlist may name any two numbers, and a range
        /// that ends past the largest offset is refused, not computed (it would stop the process).
        private static func byteRange(offset: Int64, length: Int64, tag: String) throws(HLSSyntaxError) -> ByteRange {
            guard offset <= Int64.max - length else { throw HLSSyntaxError("#\(tag) runs past the largest offset") }
            return ByteRange(offset: offset, length: length)
        }

        /// `length[@offset]`.
        private static func parseByteRange(_ value: Substring, tag: String) throws(HLSSyntaxError) -> (length: Int64, offset: Int64?) {
            let parts = value.trimmingSpaces.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)
            guard let length = Int64(parts[0]), length > 0 else { throw HLSSyntaxError("#\(tag) '\(value.prefix(40))' is not length[@offset]") }
            guard parts.count == 2 else { return (length, nil) }
            guard let offset = Int64(parts[1]), offset >= 0 else { throw HLSSyntaxError("#\(tag) '\(value.prefix(40))' is not length[@offset]") }
            return (length, offset)
        }
    }
}
