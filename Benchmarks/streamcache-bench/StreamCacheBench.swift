import ArgumentParser
import Foundation
import StreamCache
import StreamCacheHTTPClient
import StreamCacheTestSupport
import StreamCacheURLSession
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Release-build micro-benchmarks of the engine. Run with
/// `swift run -c release streamcache-bench <benchmark>`; see docs/benchmarks.md.
@main
struct StreamCacheBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "streamcache-bench",
        abstract: "StreamCache micro-benchmarks (build with -c release).",
        subcommands: [CacheHit.self, RangeSetOps.self, Planning.self, TransportLatency.self, DigestCost.self]
    )
}

/// Cache-hit read throughput through the engine, as a ratio to `pread` of the same file.
struct CacheHit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cache-hit", abstract: "Engine cache-hit reads vs pread of the same file.")

    @Option(help: "File size in MiB.") var sizeMiB = 256
    @Option(help: "Repetitions; the median is reported.") var repeats = 5

    func run() async throws {
        let size = sizeMiB << 20
        try await withTemporaryDirectory { directory in
            let server = try TestOrigin()
            server.setFile("/bench.bin", data: TestData.random(count: size, seed: 99))
            let url = server.url("/bench.bin")
            let cache = try StreamCache(configuration: .init(directory: directory.appendingPathComponent("cache")))
            let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
            try await resource.prefetch()
            await cache.flush()
            server.stop()
            let path = try require(try await cache.store.entry(for: CacheKey(url: url))).dataPath
            let chunk = cache.configuration.chunkSize

            var engine: [Double] = []
            var direct: [Double] = []
            for _ in 0..<repeats {
                // pread of the same file with the same chunk size (page cache warm for both).
                let fd = open(path, O_RDONLY)
                var buffer = [UInt8](repeating: 0, count: chunk)
                var start = ContinuousClock.now
                var offset = 0
                var checksum: UInt64 = 0
                while offset < size {
                    let got = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, chunk, off_t(offset)) }
                    guard got > 0 else { break }
                    checksum &+= UInt64(buffer[0])
                    offset += got
                }
                direct.append(Double(size) / (ContinuousClock.now - start).seconds / 1e6)
                close(fd)

                start = .now
                var total = 0
                for try await piece in resource.read(from: 0) {
                    total += piece.data.count
                    checksum &+= UInt64(piece.data.first ?? 0)
                }
                precondition(total == size, "short read")
                engine.append(Double(size) / (ContinuousClock.now - start).seconds / 1e6)
                if checksum == 42 { print("") }
            }
            await cache.shutdown()
            let e = engine.sorted()[engine.count / 2]
            let d = direct.sorted()[direct.count / 2]
            print(String(format: "cache-hit read of %d MiB, chunk %d KiB, median of %d: engine %.0f MB/s, pread %.0f MB/s, ratio %.2f",
                         sizeMiB, chunk >> 10, repeats, e, d, e / d))
        }
    }
}

/// RangeSet insert / contains / gaps on a fragmented set.
struct RangeSetOps: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rangeset", abstract: "RangeSet operations per second on a set of many ranges.")

    @Option(help: "Ranges in the set.") var ranges = 10_000
    @Option(help: "Operations per kind.") var operations = 1_000_000

    func run() async throws {
        var generator = SeededGenerator(seed: 5)
        var set = RangeSet()
        for index in 0..<ranges { set.insert(ByteRange(Int64(index) * 100, Int64(index) * 100 + 50)) }
        let universe = Int64(ranges) * 100
        var hits = 0
        var start = ContinuousClock.now
        for _ in 0..<operations where set.contains(Int64.random(in: 0..<universe, using: &generator)) { hits += 1 }
        let contains = Double(operations) / (ContinuousClock.now - start).seconds
        start = .now
        var gapCount = 0
        for _ in 0..<operations {
            let lower = Int64.random(in: 0..<universe, using: &generator)
            gapCount += set.gaps(in: ByteRange(lower, lower + 1_000)).count
        }
        let gaps = Double(operations) / (ContinuousClock.now - start).seconds
        start = .now
        var copy = set
        for _ in 0..<operations {
            let lower = Int64.random(in: 0..<universe, using: &generator)
            copy.insert(ByteRange(lower, lower + 30))
        }
        let inserts = Double(operations) / (ContinuousClock.now - start).seconds
        print(String(format: "RangeSet with %d ranges: contains %.1f M/s, gaps(1 kB window) %.1f M/s, insert %.2f M/s (%d hits, %d gaps)",
                     ranges, contains / 1e6, gaps / 1e6, inserts / 1e6, hits, gapCount))
    }
}

/// Request planning: one read across a cache with many holes, each hole its own origin request,
/// against an origin in memory, so the figure is the engine's own cost per request it plans:
/// finding the hole, planning and opening the request, writing its bytes, handing on the cached
/// runs and the downloaded ones in order.
struct Planning: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "planning",
                                                    abstract: "Origin requests planned per second by a read across many cached islands.")

    @Option(help: "Holes in the read (one origin request each), with a cached island after each.") var holes = 1000
    @Option(help: "Size of each hole and each island, in KiB.") var blockKiB = 16
    @Option(help: "Repetitions; the median is reported.") var repeats = 5

    func run() async throws {
        let block = Int64(blockKiB) << 10
        let size = 2 * Int64(holes) * block
        let data = TestData.random(count: Int(size), seed: 11)
        try await withTemporaryDirectory { directory in
            var configuration = StreamCache.Configuration(directory: directory.appendingPathComponent("cache"))
            // The holes are the benchmark: nothing may fill them before the read, and one
            // connection keeps the request count exact.
            configuration.fillsSmallGaps = false
            configuration.parallelDownloads = 1
            let cache = try StreamCache(configuration: configuration)
            var perSecond: [Double] = []
            var regionsPerRead = 0
            for round in 0..<repeats {
                let origin = MemoryOrigin(data: data)
                let resource = cache.resource(for: CacheKey("bench:planning:\(round)"), origin: origin)
                for index in 0..<Int64(holes) {
                    try await resource.prefetch(ByteRange((2 * index + 1) * block, (2 * index + 2) * block))
                }
                let requestsBefore = origin.opens
                let start = ContinuousClock.now
                var regions = 0
                var bytes: Int64 = 0
                for try await region in resource.regions(ByteRange(0, size)) {
                    regions += 1
                    bytes += region.range.count
                }
                let elapsed = (ContinuousClock.now - start).seconds
                let requests = origin.opens - requestsBefore
                precondition(bytes == size, "the read came short")
                precondition(requests == holes, "\(requests) origin requests for \(holes) holes")
                if round == 0 {
                    var copy = Data()
                    for try await chunk in resource.read(ByteRange(0, size)) { copy.append(chunk.data) }
                    precondition(copy == data, "the cache does not hold the origin's bytes")
                }
                perSecond.append(Double(requests) / elapsed)
                regionsPerRead = regions
            }
            await cache.shutdown()
            let median = perSecond.sorted()[perSecond.count / 2]
            print(String(format: "read across %d holes of %d KiB (one origin request each, origin in memory), median of %d: "
                         + "%.0f requests planned/s, %.1f µs per request, %d regions handed on per read",
                         holes, blockKiB, repeats, median, 1e6 / median, regionsPerRead))
        }
    }
}

/// An origin that serves a file from memory, in 64 KiB chunks, and counts its requests.
final class MemoryOrigin: Origin, @unchecked Sendable {
    // @unchecked: `count` is guarded by `lock`; `data` is immutable.
    private let data: Data
    private let lock = NSLock()
    private var count = 0

    init(data: Data) { self.data = data }

    var logDescription: String { "memory" }

    /// Requests opened so far.
    var opens: Int { lock.withLock { count } }

    func open(_ request: OriginRequest) async throws -> OriginResponse {
        lock.withLock { count += 1 }
        let total = Int64(data.count)
        let range = (request.range ?? ByteRange(0, total)).clamped(toLength: total)
        let info = ResourceInfo(totalLength: total, mimeType: "application/octet-stream", acceptsByteRanges: true,
                                validator: Validator(entityTag: "\"memory\""))
        let chunks = stride(from: range.lowerBound, to: range.upperBound, by: 64 << 10).map { offset in
            data.subdata(in: Int(offset)..<Int(min(offset + (64 << 10), range.upperBound)))
        }
        return OriginResponse(info: info, offset: range.lowerBound, length: range.count, body: HTTPBody(chunks: chunks))
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

func require<T>(_ value: T?) throws -> T {
    guard let value else { throw StreamCacheError(.cacheIOFailed, "The benchmark resource is not in the cache.") }
    return value
}

/// Time to the response head and to the last byte of small ranged GETs on a keep-alive
/// connection, per transport: what an origin request costs the proxy before any byte moves.
struct TransportLatency: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "transport-latency", abstract: "Latency of 2-byte ranged GETs per transport.")

    @Option(help: "The URL to fetch (default: a built-in loopback origin).") var url: String?
    @Option(name: .customShort("H"), help: "A header, 'Name: value'.") var header: [String] = []
    @Option(help: "Requests per transport.") var count = 300

    func run() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        server.setFile("/small.bin", data: TestData.random(count: 1 << 20, seed: 7))
        let target = url.flatMap(URL.init(string:)) ?? server.url("/small.bin")
        var headers: HTTPHeaders = ["Range": "bytes=0-1"]
        for field in header {
            let parts = field.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { headers.add(name: String(parts[0]), value: parts[1].trimmingCharacters(in: .whitespaces)) }
        }
        let transports: [(String, any HTTPTransport)] = [("AsyncHTTPClient", AsyncHTTPClientTransport()), ("URLSession", URLSessionTransport())]
        for (name, transport) in transports {
            var heads: [Double] = []
            var totals: [Double] = []
            for _ in 0..<count {
                let start = ContinuousClock.now
                let response = try await transport.send(HTTPRequest(url: target, headers: headers))
                heads.append((ContinuousClock.now - start).microseconds)
                _ = try await response.body.collect(upTo: 1 << 20)
                totals.append((ContinuousClock.now - start).microseconds)
            }
            heads.sort()
            totals.sort()
            print("\(name): head median \(Int(heads[heads.count / 2])) µs, body done median \(Int(totals[totals.count / 2])) µs (\(count) requests)")
        }
    }
}

extension Duration {
    fileprivate var microseconds: Double {
        let parts = components
        return Double(parts.seconds) * 1e6 + Double(parts.attoseconds) / 1e12
    }
}

/// What checking a complete file against its origin's digest costs: each algorithm's throughput
/// over a buffer in memory, fed in the check's 1 MiB pieces, and a prefetch from a loopback
/// origin with and without a `Repr-Digest` (the check's time on top of the download's).
struct DigestCost: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "digest",
                                                    abstract: "Content digest throughput per algorithm, and a prefetch with and without the check.")

    @Option(help: "Size in MiB.") var sizeMiB = 256
    @Option(help: "Repetitions; the median is reported.") var repeats = 5

    func run() async throws {
        let size = sizeMiB << 20
        let data = TestData.random(count: size, seed: 7)
        for algorithm in ContentDigest.Algorithm.allCases {
            var rates: [Double] = []
            var last: ContentDigest?
            for _ in 0..<repeats {
                let start = ContinuousClock.now
                var hasher = ContentHasher(algorithm)
                data.withUnsafeBytes { bytes in
                    var offset = 0
                    while offset < size {
                        let end = min(size, offset + (1 << 20))
                        hasher.update(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
                        offset = end
                    }
                }
                last = hasher.finalize()
                rates.append(Double(size) / (ContinuousClock.now - start).seconds / 1e6)
            }
            print(String(format: "%@ over %d MiB, median of %d: %.0f MB/s (%@…)", algorithm.rawValue, sizeMiB, repeats,
                         rates.sorted()[rates.count / 2], String(last?.hex.prefix(8) ?? "")))
        }

        let server = try TestOrigin()
        defer { server.stop() }
        let digest = Data(ContentHasher.digest(.sha256, of: data).bytes).base64EncodedString()
        server.setFile("/plain.bin", data: data)
        server.setFile("/checked.bin", data: data, extraHeaders: ["Repr-Digest": "sha-256=:\(digest):"])
        var times: [String: [Double]] = [:]
        for _ in 0..<repeats {
            for path in ["/plain.bin", "/checked.bin"] {
                try await withTemporaryDirectory { directory in
                    let cache = try StreamCache(configuration: .init(directory: directory))
                    let url = server.url(path)
                    let resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url))
                    let start = ContinuousClock.now
                    try await resource.prefetch()
                    times[path, default: []].append((ContinuousClock.now - start).seconds)
                    precondition(path == "/plain.bin" || cache.statistics.contentMatches == 1, "the check did not match")
                    await cache.shutdown()
                }
            }
        }
        let plain = times["/plain.bin"]!.sorted()[repeats / 2]
        let checked = times["/checked.bin"]!.sorted()[repeats / 2]
        print(String(format: "prefetch of %d MiB from loopback, median of %d: %.2f s without a digest, %.2f s with the sha-256 check (+%.2f s)",
                     sizeMiB, repeats, plain, checked, checked - plain))
    }
}
