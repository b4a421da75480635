import StreamCache
import Foundation

/// `multipart/byteranges` bodies from an origin: any bytes, split anywhere, parse or are refused
/// without a crash; the payload never exceeds the ranges asked for, a body that finishes carries
/// exactly them, and how the bytes were split never changes the outcome.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMultipartByteRanges(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    // The first byte picks the split; the rest is the body.
    let split = Int(data[0]) % 17 + 1
    let body = Data(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let expected = [ByteRange(0, 10), ByteRange(20, 25), ByteRange(100, 101)]
    let wanted = expected.reduce(Int64(0)) { $0 + $1.count }

    func run(chunkSize: Int) -> (payload: Data, outcome: String) {
        var parser = MultipartByteRangesParser(boundary: "B", expected: expected)
        var payload = Data()
        var offset = 0
        do {
            while offset < body.count {
                let chunk = body[offset..<min(body.count, offset + chunkSize)]
                for piece in try parser.parse(Data(chunk)) { payload.append(piece) }
                precondition(Int64(payload.count) <= wanted, "more payload than asked: \(payload.count)")
                offset += chunkSize
            }
            try parser.finish()
            precondition(Int64(payload.count) == wanted, "finished with \(payload.count) of \(wanted) bytes")
            return (payload, "finished")
        } catch {
            return (payload, "\(error)")
        }
    }
    let whole = run(chunkSize: max(1, body.count))
    let pieces = run(chunkSize: split)
    precondition(whole.outcome == pieces.outcome, "split \(split) changed the outcome: \(whole.outcome) / \(pieces.outcome)")
    if whole.outcome == "finished" { precondition(whole.payload == pieces.payload, "split \(split) changed the payload") }
    return 0
}
