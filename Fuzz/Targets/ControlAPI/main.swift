import Foundation
import Parsers

/// The control API's request bodies: any bytes decode or are refused, and what decodes survives an
/// encode/decode round trip unchanged.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzControlAPI(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Data(bytes: data, count: size)
    if let request = try? JSONDecoder().decode(ControlAPI.RegisterRequest.self, from: body) {
        let again = try! JSONDecoder().decode(ControlAPI.RegisterRequest.self, from: try! JSONEncoder().encode(request))
        precondition(again.url == request.url && again.headers == request.headers && again.key == request.key && again.name == request.name
                     && again.source == request.source && again.sourceAccess == request.sourceAccess)
    }
    if let prefetch = try? JSONDecoder().decode(ControlAPI.PrefetchRequest.self, from: body) {
        let again = try! JSONDecoder().decode(ControlAPI.PrefetchRequest.self, from: try! JSONEncoder().encode(prefetch))
        precondition(again.start == prefetch.start && again.end == prefetch.end)
    }
    return 0
}
