/// Which variant streams of a master playlist a prefetch downloads.
///
/// I-frame-only streams (trick play) are never chosen. Renditions (`#EXT-X-MEDIA`: audio
/// languages, subtitles) that a chosen variant plays with are downloaded with it.
public enum HLSVariantSelection: Sendable, Hashable, CustomStringConvertible {
    /// Every variant: what a player that opens all of them at start (ffmpeg does) needs offline.
    case all
    /// The variant with the highest `BANDWIDTH`: the best quality.
    case highestBandwidth
    /// The variant with the lowest `BANDWIDTH`: the smallest download.
    case lowestBandwidth
    /// The variant at this 0-based position among the master playlist's `#EXT-X-STREAM-INF` tags.
    case index(Int)

    /// Parses `all`, `highest`, `lowest` or an index.
    public init?(_ text: String) {
        switch text.lowercased() {
        case "all": self = .all
        case "highest": self = .highestBandwidth
        case "lowest": self = .lowestBandwidth
        default:
            guard let index = Int(text), index >= 0 else { return nil }
            self = .index(index)
        }
    }

    public var description: String {
        switch self {
        case .all: "all"
        case .highestBandwidth: "highest"
        case .lowestBandwidth: "lowest"
        case .index(let index): String(index)
        }
    }

    /// The chosen variants of a master playlist, or `nil` when an index is out of range.
    public func choose(from variants: [HLSPlaylist.Variant]) -> [HLSPlaylist.Variant]? {
        let normal = variants.filter { !$0.isIFrameOnly }
        switch self {
        case .all: return normal
        case .highestBandwidth: return normal.max { $0.bandwidth < $1.bandwidth }.map { [$0] } ?? []
        case .lowestBandwidth: return normal.min { $0.bandwidth < $1.bandwidth }.map { [$0] } ?? []
        case .index(let index): return normal.indices.contains(index) ? [normal[index]] : nil
        }
    }
}
