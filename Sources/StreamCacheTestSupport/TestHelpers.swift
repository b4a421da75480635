import Crypto
import Foundation
import Logging
import StreamCache

/// Deterministic pseudo-random bytes, so failures reproduce.
public enum TestData {
    /// `count` bytes from `seed`.
    ///
    /// Each 4 KiB block is a stretch of a 1 MiB SplitMix64 pool, at an offset drawn from the seed
    /// and the block's number, and starts with 8 bytes of its own (the same draw): no two blocks
    /// are alike, so bytes put at a wrong offset never match. Drawing every word instead took
    /// 0.9 s per 40 MB in a debug build under ThreadSanitizer on an idle machine (0.27 s now), on
    /// the cooperative pool: tests that started together starved every other task, and
    /// AsyncHTTPClient requests passed their 30 s deadline before they were sent.
    public static func random(count: Int, seed: UInt64 = 1) -> Data {
        precondition(count >= 0)
        var data = Data(count: count)
        data.withUnsafeMutableBytes { raw in
            guard let base = raw.baseAddress else { return }
            Pool.bytes.withUnsafeBytes { pool in
                var offset = 0
                var block: UInt64 = 0
                while offset < count {
                    let length = min(Pool.blockSize, count - offset)
                    var generator = SeededGenerator(seed: seed &+ block &* 0xD134_2543_DE82_EF95)
                    var draw = generator.next()
                    let start = Int(draw % UInt64(Pool.size / 8)) * 8
                    (base + offset).copyMemory(from: pool.baseAddress! + start, byteCount: length)
                    withUnsafeBytes(of: &draw) { (base + offset).copyMemory(from: $0.baseAddress!, byteCount: min(8, length)) }
                    offset += length
                    block += 1
                }
            }
        }
        return data
    }

    /// The random bytes that blocks are copied from, made once per process.
    private enum Pool {
        static let blockSize = 4096
        static let size = 1 << 20
        /// `size` bytes and a block more, so a block may start at any 8-byte offset below `size`.
        static let bytes: [UInt64] = {
            var generator = SeededGenerator(seed: 0x5EED)
            return (0..<((size + blockSize) / 8)).map { _ in generator.next() }
        }()
    }

    /// Where two byte strings first differ, or `nil` when they are equal. Cheap to report, unlike a
    /// test framework's diff of two large `Data` values.
    public static func firstDifference(_ a: Data, _ b: Data) -> Int? {
        if a == b { return nil }
        let left = [UInt8](a)
        let right = [UInt8](b)
        let common = min(left.count, right.count)
        return (0..<common).first { left[$0] != right[$0] } ?? common
    }

    /// The SHA-256 of `data` in hex.
    public static func sha256(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }
}

/// A seeded random number generator (SplitMix64).
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64
    /// Creates a generator from `seed`.
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A fresh directory under the system's temporary directory, deleted afterwards.
public func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("streamcache-test-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: url) }
    return try await body(url)
}

/// A ``StreamCache`` in a fresh temporary directory, shut down and deleted afterwards.
public func withTemporaryCache<T>(
    configure: (inout StreamCache.Configuration) -> Void = { _ in },
    _ body: (StreamCache) async throws -> T
) async throws -> T {
    try await withTemporaryDirectory { directory in
        var configuration = StreamCache.Configuration(directory: directory)
        configure(&configuration)
        let cache = try StreamCache(configuration: configuration)
        return try await withAsyncCleanup { try await body(cache) } cleanup: { await cache.shutdown() }
    }
}

/// Runs `body`, then `cleanup` whether `body` returned or threw: the `defer` of async code, which
/// cannot `await`.
public func withAsyncCleanup<T>(_ body: () async throws -> T, cleanup: () async -> Void) async throws -> T {
    let result: T
    do {
        result = try await body()
    } catch {
        await cleanup()
        throw error
    }
    await cleanup()
    return result
}

/// The events `events` delivers, up to and including the first that `isLast` accepts; within
/// `limit` (a bound, not a wait), after which those that came so far.
public func collectEvents(_ events: ResourceEvents, within limit: Duration = .seconds(30),
                          until isLast: @escaping @Sendable (ResourceEvent) -> Bool) async -> [ResourceEvent] {
    let reading = Task {
        var received: [ResourceEvent] = []
        for await event in events {
            received.append(event)
            if isLast(event) { break }
        }
        return received
    }
    let timeout = Task {
        try await Task.sleep(for: limit)
        reading.cancel()
    }
    defer { timeout.cancel() }
    return await reading.value
}

/// A swift-log handler that keeps every message in memory, to prove what was (not) logged. Each
/// line begins with the wall-clock time it was logged at (seconds since 1970, to the millisecond),
/// which lines it up with an origin's access log (``Nginx/LogEntry/endedAt``).
public struct InMemoryLogHandler: LogHandler {
    /// The shared store of lines.
    public final class Store: @unchecked Sendable {
        // @unchecked: `lines` is guarded by `lock`.
        private let lock = NSLock()
        private var storage: [String] = []
        public init() {}
        func append(_ line: String) { lock.lock(); storage.append(line); lock.unlock() }
        /// Every line logged.
        public var lines: [String] { lock.lock(); defer { lock.unlock() }; return storage }
    }

    private let store: Store
    private let label: String
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace

    /// Creates a handler writing into `store`.
    public init(label: String, store: Store) {
        self.label = label
        self.store = store
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let merged = self.metadata.merging(event.metadata ?? [:]) { $1 }
        store.append(String(format: "%.3f ", Date().timeIntervalSince1970) + "\(event.level) \(label): \(event.message) \(merged)")
    }
}
