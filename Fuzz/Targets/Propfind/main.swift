import Foundation
import Parsers
import StreamCache

/// WebDAV `207 Multi-Status` bodies: any bytes give resources or a `StreamCacheError`, never a
/// crash, and the same bytes always give the same answer (no entity is expanded beyond the
/// predefined ones, nothing outside the document is read). Under it, `XMLPullParser`'s events
/// always nest: each end names the innermost open start, and a finished document closed them all.
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
    var open: [XMLPullParser.Name] = []
    do {
        var parser = try XMLPullParser(Array(UnsafeBufferPointer(start: data, count: size)))
        var events = 0
        while let event = try parser.next() {
            events += 1
            precondition(events <= 2 * size + 1, "more events than the bytes can hold")
            switch event {
            case .start(let name): open.append(name)
            case .end(let name): precondition(open.popLast() == name, "an end event for an element that is not the innermost open one")
            case .text: precondition(!open.isEmpty, "text outside the root element")
            }
        }
        precondition(open.isEmpty, "the document finished with elements open")
    } catch is XMLSyntaxError {
    } catch {
        fatalError("unexpected error type \(type(of: error))")
    }
    return 0
}
