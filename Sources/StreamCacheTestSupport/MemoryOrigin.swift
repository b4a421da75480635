import Foundation
import StreamCache

/// An ``Origin`` of an app's own, in memory: it serves `file`'s bytes for each request and
/// records what it was asked. With `misstate`, each answer breaks the `Origin` contract one way
/// (a wrong offset, length or total, bytes past the stated ones), for the tests of the engine's
/// checks; an `HTTPOrigin` cannot answer so, but an app's own origin may.
public final class MemoryOrigin: Origin, Sendable {
    /// One answer, before it becomes an ``OriginResponse``: what `misstate` may change.
    public struct Answer: Sendable {
        /// The offset of the body's first byte.
        public var offset: Int64
        /// The length the answer states.
        public var length: Int64?
        /// The resource's length the answer states.
        public var totalLength: Int64?
        /// The body.
        public var body: Data
    }

    /// The file's bytes.
    public let file: Data
    public let logDescription: String
    public let maximumRequestLength: Int64?
    private let chunkSize: Int
    private let version: (@Sendable () -> ResourceInfo)?
    private let misstate: @Sendable (inout Answer) -> Void
    private let asked = Locked<[ByteRange]>([])
    private let versionsAsked = Locked(0)

    /// The version every answer states (an entity tag of `"v1"`).
    public static let validator = Validator(entityTag: "\"v1\"")

    /// Creates an origin that serves `file`.
    ///
    /// - Parameters:
    ///   - maximumRequestLength: Its ``Origin/maximumRequestLength``.
    ///   - chunkSize: The most bytes of a body's chunk (by default the whole body in one).
    ///   - misstate: Changes each answer before it is given.
    ///   - version: What ``currentInfo()`` answers; by default the info of the file's first byte,
    ///     as `Origin`'s own default asks.
    public init(file: Data, name: String = "memory origin", maximumRequestLength: Int64? = nil, chunkSize: Int = .max,
                misstate: @escaping @Sendable (inout Answer) -> Void = { _ in }, version: (@Sendable () -> ResourceInfo)? = nil) {
        self.file = file
        self.logDescription = name
        self.maximumRequestLength = maximumRequestLength
        self.chunkSize = max(1, chunkSize)
        self.version = version
        self.misstate = misstate
    }

    /// The ranges asked for, in order (the whole file for a request without one).
    public var rangesAsked: [ByteRange] { asked.withLock { $0 } }

    /// How often ``currentInfo()`` was asked.
    public var versionQuestions: Int { versionsAsked.withLock { $0 } }

    public func open(_ request: OriginRequest) async throws -> OriginResponse {
        let range = request.range ?? ByteRange(0, Int64(file.count))
        asked.withLock { $0.append(range) }
        let start = min(range.lowerBound, Int64(file.count))
        let end = min(max(start, range.upperBound), Int64(file.count))
        var answer = Answer(offset: start, length: end - start, totalLength: Int64(file.count), body: file[Int(start)..<Int(end)])
        misstate(&answer)
        let info = ResourceInfo(totalLength: answer.totalLength, mimeType: nil, acceptsByteRanges: true, validator: Self.validator)
        let body = answer.body
        let chunks = stride(from: 0, to: body.count, by: chunkSize).map { start in
            Data(body[(body.startIndex + start)..<(body.startIndex + min(body.count, start + chunkSize))])
        }
        return OriginResponse(info: info, offset: answer.offset, length: answer.length, body: HTTPBody(chunks: chunks))
    }

    public func currentInfo() async throws -> ResourceInfo {
        versionsAsked.withLock { $0 += 1 }
        if let version { return version() }
        return try await infoFromFirstByte()
    }
}
