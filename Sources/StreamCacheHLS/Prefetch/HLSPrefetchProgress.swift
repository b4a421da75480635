/// How far an ``HLSPrefetcher`` has got.
public struct HLSPrefetchProgress: Sendable, Hashable, Codable {
    /// Files to download: segments, initialization sections and keys, each file once.
    public var files: Int
    /// Media segments in the chosen playlists (several byte-range segments may share a file).
    public var segments: Int
    /// Files now cached.
    public var filesDone: Int = 0
    /// The bytes those files (or the ranges wanted of them) hold.
    public var bytes: Int64 = 0

    /// Creates a progress value.
    public init(files: Int, segments: Int, filesDone: Int = 0, bytes: Int64 = 0) {
        self.files = files
        self.segments = segments
        self.filesDone = filesDone
        self.bytes = bytes
    }

    /// Whether every file is cached.
    public var isComplete: Bool { filesDone == files }
}
