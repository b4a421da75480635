import Foundation
import Parsers
import StreamCache

/// WebDAV `207 Multi-Status` bodies: any bytes give resources or a `StreamCacheError`, never a
/// crash, and the same bytes always give the same answer (external entities are not resolved).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPropfind(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Data(bytes: data, count: size)
    do {
        let answer = try PropfindResponse(xml: body)
        precondition((try? PropfindResponse(xml: body)) == answer, "two parses of the same bytes differ")
    } catch is StreamCacheError {
    } catch {
        fatalError("unexpected error type \(type(of: error))")
    }
    return 0
}
