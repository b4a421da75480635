import Foundation
import StreamCacheHLS
import StreamCache

/// HLS playlists from an origin: any bytes parse or are refused with `invalidPlaylist`, never a
/// crash; a parsed playlist rewritten (every URI replaced, the same URI by the same path, as the
/// proxy does) parses again to the same kind, references and segments, and kept as it is, to the
/// same again.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHLSPlaylist(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Data(UnsafeBufferPointer(start: data, count: size))
    let playlist: HLSPlaylist
    do {
        playlist = try HLSPlaylist(data: bytes)
    } catch {
        precondition(error.code == .invalidPlaylist, "unexpected error \(error)")
        return 0
    }
    var paths: [String: String] = [:]
    var calls = 0
    let rewritten = playlist.rewritten { reference in
        calls += 1
        if let path = paths[reference.uri] { return path }
        let path = "/s/id\(paths.count)/file.ts"
        paths[reference.uri] = path
        return path
    }
    precondition(calls == playlist.references.count, "rewriting saw \(calls) of \(playlist.references.count) references")
    for text in [rewritten, playlist.rewritten { _ in nil }] {
        guard let again = try? HLSPlaylist(parsing: text) else { preconditionFailure("a written playlist does not parse:\n\(text)") }
        precondition(again.kind == playlist.kind && again.isLive == playlist.isLive && again.targetDuration == playlist.targetDuration)
        precondition(again.references.map(\.role) == playlist.references.map(\.role))
        precondition(again.references.map(\.byteRange) == playlist.references.map(\.byteRange))
        precondition(again.segments.count == playlist.segments.count && again.variants.count == playlist.variants.count)
    }
    return 0
}
