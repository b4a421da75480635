import Foundation
import Parsers

/// The control API's request bodies (a resource to register, a prefetch, a prune, a settings
/// change): any bytes decode or are refused, and what decodes survives an encode/decode round trip
/// unchanged.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzControlAPI(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Data(bytes: data, count: size)
    if let request = try? JSONDecoder().decode(ControlAPI.RegisterRequest.self, from: body) {
        let again = try! JSONDecoder().decode(ControlAPI.RegisterRequest.self, from: try! JSONEncoder().encode(request))
        precondition(again.url == request.url && again.headers == request.headers && again.key == request.key && again.name == request.name
                     && again.source == request.source && again.sourceAccess == request.sourceAccess && again.aliases == request.aliases)
    }
    if let prefetch = try? JSONDecoder().decode(ControlAPI.PrefetchRequest.self, from: body) {
        let again = try! JSONDecoder().decode(ControlAPI.PrefetchRequest.self, from: try! JSONEncoder().encode(prefetch))
        precondition(again.start == prefetch.start && again.end == prefetch.end && again.variants == prefetch.variants
                     && again.segments == prefetch.segments && again.pin == prefetch.pin && again.rate == prefetch.rate)
    }
    // A number too large for a Double may decode as infinity, which JSON cannot write back; the
    // server refuses such an age before it uses it.
    if let prune = try? JSONDecoder().decode(ControlAPI.PruneRequest.self, from: body), prune.maximumAgeSeconds?.isFinite ?? true {
        let again = try! JSONDecoder().decode(ControlAPI.PruneRequest.self, from: try! JSONEncoder().encode(prune))
        precondition(again == prune)
    }
    _ = try? JSONDecoder().decode(ControlAPI.SettingsChange.self, from: body)
    return 0
}
