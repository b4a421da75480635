/// Where a download stops writing, shared between the resource's actor and the download's writer,
/// which runs off the actor.
///
/// The writer learns of a cut (a seek far ahead that takes over the rest, a part split off for
/// another connection) at its next report. On a busy machine the chunks that piled up meanwhile
/// are written as one run before that report, up to
/// ``Resource/largestWrittenRun`` past the cut, into bytes another download brings: written twice,
/// and on the disk's time. The actor moves this mark with the download's limit, and the writer
/// reads it before each piece.
final class DownloadStop: Sendable {
    private let offset: Locked<Int64>

    init(_ offset: Int64) {
        self.offset = Locked(offset)
    }

    /// The offset the download writes up to, not including it.
    var value: Int64 { offset.withLock { $0 } }

    func set(_ newValue: Int64) {
        offset.withLock { $0 = newValue }
    }
}
