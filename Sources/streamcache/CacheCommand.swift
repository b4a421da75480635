import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheHTTPClient
import StreamCacheServer
import StreamCacheSources

/// `streamcache cache …`: inspect and manage the cache directory.
struct CacheCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cache",
        abstract: "Inspect and manage the cache.",
        subcommands: [List.self, Info.self, Pin.self, Unpin.self, Clear.self, Prune.self, Verify.self]
    )

    /// One resource as `list`/`info` print it (and as `--json` encodes it).
    struct Summary: Codable {
        var key: String
        var size: Int64?
        var cachedBytes: Int64
        var cachedPercent: Double?
        var cachedRanges: [[Int64]]
        var mimeType: String?
        var uti: String?
        var entityTag: String?
        var pinned: Bool
        var lastAccessed: Date
        /// When the origin last confirmed the cached version (a download's answer, or a check
        /// under `--revalidate-after`).
        var verified: Date?
        /// The digest of the whole file the origin publishes (`sha256:…`), if it publishes one.
        var contentDigest: String?
        /// Whether the complete cached bytes were found to match ``contentDigest``.
        var contentMatched: Bool
        /// Whether the origin's bytes failed ``contentDigest`` twice alike, and were kept as served.
        var contentDisputed: Bool

        init(_ entry: CacheStore.Entry) {
            key = entry.key.rawValue
            size = entry.info?.totalLength
            cachedBytes = entry.spans.coveredByteCount
            let cached = entry.spans.coveredByteCount
            cachedPercent = entry.info?.totalLength.map { $0 > 0 ? Double(cached) / Double($0) * 100 : 100 }
            cachedRanges = entry.spans.ranges.map { [$0.lowerBound, $0.upperBound] }
            mimeType = entry.info?.mimeType
            uti = entry.info?.uniformTypeIdentifier
            entityTag = entry.info?.validator.entityTag
            pinned = entry.pinned
            lastAccessed = entry.lastAccessedAt
            verified = entry.verifiedAt
            contentDigest = entry.info?.contentDigest?.description
            contentMatched = entry.contentMatched != nil
            contentDisputed = entry.contentDisputed != nil
        }
    }

    /// The cache's store, or the server that holds the directory (``RunningServer``), which
    /// then does what the command would.
    static func open(_ options: CacheOptions, waiting: CacheWaitOptions) async throws -> CacheWaitOptions.Claim<CacheStore> {
        do {
            let claim = try await waiting.claim({ try CacheStore(directory: options.directory) }, orServerIn: options.directory, transport: AsyncHTTPClientTransport.shared)
            if case .server(let server) = claim {
                server.tellHandOver(of: options.directory, "it does this")
            }
            return claim
        } catch {
            throw Failure.exit(error)
        }
    }

    /// A look at the cache to list or show, which never claims the directory, so a server or a
    /// download that starts meanwhile is not turned away: what the index records, including what
    /// a process using the cache has committed so far. `nil` when there is no cache yet.
    static func openToRead(_ options: CacheOptions) throws -> CacheStore? {
        guard FileManager.default.fileExists(atPath: options.directory.appendingPathComponent("index.sqlite").path) else { return nil }
        do { return try CacheStore(inspecting: options.directory) } catch { throw Failure.exit(error) }
    }

    static func printJSON(_ value: some Encodable) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        print(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    /// A bar of `width` cells; each is full (#), partly (+) or not (.) cached.
    static func bar(_ spans: RangeSet, total: Int64?, width: Int = 40) -> String {
        guard let total, total > 0 else { return spans.isEmpty ? String(repeating: ".", count: width) : "?" }
        // `total * cell / width` without the product, which overflows past 2.3 × 10^17 bytes (a
        // length an origin may state).
        let (whole, part) = total.quotientAndRemainder(dividingBy: Int64(width))
        let boundary = { (cell: Int) in whole * Int64(cell) + part * Int64(cell) / Int64(width) }
        return String((0..<width).map { cell -> Character in
            let lower = boundary(cell)
            let upper = max(lower + 1, boundary(cell + 1))
            let covered = spans.coveredByteCount(in: ByteRange(lower, upper))
            return covered == upper - lower ? "#" : covered > 0 ? "+" : "."
        })
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List cached resources: size, cached share and a bar of cached ranges.")
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var cache: CacheOptions

        func run() async throws {
            let store = try CacheCommand.openToRead(cache)
            let entries: [CacheStore.Entry]
            do { entries = try await store?.entries() ?? [] } catch { throw Failure.exit(error) }
            if json { return try CacheCommand.printJSON(entries.map(Summary.init)) }
            if entries.isEmpty { print("The cache at \(cache.directory.path) is empty.") }
            for entry in entries {
                let summary = Summary(entry)
                let size = summary.size.map(ByteFormat.string) ?? "?"
                let percent = summary.cachedPercent.map { ($0.fixed(1) + "%").leftPadded(to: 6) } ?? "    ?"
                print("\(percent) [\(CacheCommand.bar(entry.spans, total: entry.info?.totalLength))] \(size)\(entry.pinned ? " pinned" : "")  \(entry.key)")
            }
        }
    }

    struct Info: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one cached resource.")
        @Argument(help: "The cache key (as `list` prints it).") var key: String
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var cache: CacheOptions

        func run() async throws {
            let store = try CacheCommand.openToRead(cache)
            guard let entry = try await store?.entry(for: CacheKey(key)) else {
                throw Failure.exit(StreamCacheError(.invalidArgument, "The cache has no resource with key \(key)."))
            }
            let summary = Summary(entry)
            if json { return try CacheCommand.printJSON(summary) }
            print("key:           \(summary.key)")
            print("size:          \(summary.size.map { "\($0) bytes" } ?? "unknown")")
            print("cached:        \(summary.cachedBytes) bytes\(summary.cachedPercent.map { " (" + $0.fixed(1) + "%)" } ?? "")")
            print("ranges:        \(entry.spans.ranges.map { "\($0.lowerBound)-\($0.httpLast)" }.joined(separator: ", "))")
            print("bar:           [\(CacheCommand.bar(entry.spans, total: summary.size))]")
            print("type:          \(summary.mimeType ?? "unknown") (\(summary.uti ?? "-"))")
            print("etag:          \(summary.entityTag ?? "-")")
            print("pinned:        \(summary.pinned)")
            print("last accessed: \(summary.lastAccessed)")
            print("verified:      \(summary.verified.map { "\($0)" } ?? "never")")
            let check = summary.contentMatched ? "the cached bytes match"
                : summary.contentDisputed ? "the origin's bytes do not match it, twice alike; kept as served" : "not checked yet"
            print("digest:        \(summary.contentDigest.map { "\($0) (\(check))" } ?? "none published")")
        }
    }

    /// Sets the pinned flag of what `name` names (``keys(named:options:)``); a clear error when
    /// it names nothing the cache holds.
    static func setPinned(_ pinned: Bool, name: String, options: CacheOptions, waiting: CacheWaitOptions) async throws {
        let keys = try await Self.keys(named: name, options: options)
        guard !keys.isEmpty else {
            throw Failure.exit(StreamCacheError(.invalidArgument, "The cache has no resource named \(name) (a key as `cache list` prints it, or the URL or source reference it was read by)."))
        }
        do {
            let claim = try await open(options, waiting: waiting)
            for key in keys {
                let known = switch claim {
                case .opened(let store): try await store.setPinned(pinned, for: key)
                case .server(let server): try await server.setPinned(pinned, key: key.rawValue)
                }
                // Gone since it was looked up (evicted, cleared): nothing to say of it.
                if known { print("\(pinned ? "pinned" : "unpinned") \(key)") }
            }
        } catch let error as ExitCode {
            throw error
        } catch {
            throw Failure.exit(error)
        }
    }

    /// The keys `name` names, by what the index holds (no service is asked, so it works offline):
    /// a key it holds; else the key of an `http(s)` URL; else the file a source reference named
    /// when it was read or prefetched (`yandex:/Music/Album/01.mp3`); else every file cached below
    /// a folder's reference (`yandex:/Music/Album`: an album prefetched with `--pin` is let go at
    /// once).
    static func keys(named name: String, options: CacheOptions) async throws -> [CacheKey] {
        do {
            guard let store = try openToRead(options) else { return [] }
            if store.knows(CacheKey(name)) { return [CacheKey(name)] }
            if let url = URL(string: name), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), store.knows(CacheKey(url: url)) {
                return [CacheKey(url: url)]
            }
            for spelling in referenceSpellings(of: name) {
                if let file = try await store.resource(aliased: spelling) { return [file.key] }
            }
            var seen = Set<CacheKey>()
            var keys: [CacheKey] = []
            for spelling in referenceSpellings(of: name) {
                let folder = spelling.hasSuffix("/") ? spelling : spelling + "/"
                keys += try await store.aliases(under: folder).map(\.key).filter { seen.insert($0).inserted }
            }
            return keys
        } catch let error as ExitCode {
            throw error
        } catch {
            throw Failure.exit(error)
        }
    }

    /// `name` as given, and, for a service whose references name a path (`yandex:`, `dropbox:`,
    /// `onedrive:`), the same path spelled with or without its leading slash: the index holds the
    /// reference as it was typed when the file was read, and the services take both.
    static func referenceSpellings(of name: String) -> [String] {
        guard let service = SourceReference.service(of: name), ["yandex", "dropbox", "onedrive"].contains(service),
              let colon = name.firstIndex(of: ":") else { return [name] }
        let scheme = name[...colon]
        let path = name[name.index(after: colon)...]
        if path.hasPrefix("id:") || path.isEmpty { return [name] }
        return [name, String(scheme) + (path.hasPrefix("/") ? String(path.dropFirst()) : "/" + path)]
    }

    struct Pin: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Keep a resource: pinned resources are never evicted.")
        @Argument(help: Self.nameHelp) var key: String
        @OptionGroup var cache: CacheOptions
        @OptionGroup var cacheWait: CacheWaitOptions

        func run() async throws { try await CacheCommand.setPinned(true, name: key, options: cache, waiting: cacheWait) }

        /// What `cache pin` and `unpin` take.
        static let nameHelp = ArgumentHelp("The cache key; or the URL or source reference it was read by; or a source folder's reference: every file cached below it.",
                                           valueName: "key")
    }

    struct Unpin: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Let a pinned resource be evicted again.")
        @Argument(help: Pin.nameHelp) var key: String
        @OptionGroup var cache: CacheOptions
        @OptionGroup var cacheWait: CacheWaitOptions

        func run() async throws { try await CacheCommand.setPinned(false, name: key, options: cache, waiting: cacheWait) }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Hash complete cached files again and compare them with the digest their origin publishes.",
            discussion: "Every resource, or the keys given. Files whose bytes differ (rotted on the disk, changed behind the cache's back) are dropped, to be fetched again by the next read; no request reaches an origin. Beside a running serve, the server does it. Exit 8 when one differed.")
        @Argument(help: "Only these keys.") var keys: [String] = []
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var cache: CacheOptions
        @OptionGroup var cacheWait: CacheWaitOptions

        func run() async throws {
            let directory = cache.directory
            var rows: [ControlAPI.ContentCheck] = []
            do {
                switch try await cacheWait.claim({ try StreamCache(configuration: StreamCache.Configuration(directory: directory)) },
                                                 orServerIn: directory, transport: AsyncHTTPClientTransport.shared) {
                case .opened(let streamCache):
                    do {
                        let keys = self.keys.isEmpty ? try await streamCache.store.entries().map(\.key.rawValue) : self.keys
                        for key in keys {
                            guard let result = try await streamCache.checkContent(of: CacheKey(key)) else { throw Self.unknown(key) }
                            rows.append(report(ControlAPI.ContentCheck(key: CacheKey(key), result: result)))
                        }
                    } catch {
                        await streamCache.shutdown()
                        throw error
                    }
                    await streamCache.shutdown()
                case .server(let server):
                    server.tellHandOver(of: directory, "it does this")
                    let keys = self.keys.isEmpty ? try await CacheCommand.openToRead(cache)?.entries().map(\.key.rawValue) ?? [] : self.keys
                    for key in keys {
                        guard let row = try await server.checkContent(key: key) else { throw Self.unknown(key) }
                        rows.append(report(row))
                    }
                }
            } catch let error as ExitCode {
                throw error
            } catch {
                throw Failure.exit(error)
            }
            if json { try CacheCommand.printJSON(rows) }
            if rows.contains(where: { $0.result == "mismatched" }) { throw ExitCode(8) }
        }

        /// Prints `row` as a line, unless the rows go out as JSON at the end.
        private func report(_ row: ControlAPI.ContentCheck) -> ControlAPI.ContentCheck {
            if !json {
                print(row.result + String(repeating: " ", count: max(1, 12 - row.result.count)) + row.key
                      + (row.expected.map { " \($0)" } ?? "") + (row.found.map { ", found \($0); dropped" } ?? ""))
            }
            return row
        }

        private static func unknown(_ key: String) -> StreamCacheError {
            StreamCacheError(.invalidArgument, "The cache has no resource with key \(key).")
        }
    }

    struct Prune: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Evict resources by size, age or free space, once, now.",
            discussion: "Least recently used first, never a pinned resource nor one in use: those not read within --max-age, then down to 90% of --max-cache-size, then until the disk has a tenth more free than --min-free-space. For a cron job, or a cache no serve keeps within its limits. Beside a running serve, the server does it. --dry-run prints what would go.")
        @OptionGroup var eviction: EvictionOptions
        @Flag(help: "Only print what would be evicted.") var dryRun = false
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var cache: CacheOptions
        @OptionGroup var cacheWait: CacheWaitOptions

        func validate() throws {
            guard !(try eviction.rules()).isEmpty else {
                throw ValidationError("Name at least one rule: --max-cache-size, --max-age or --min-free-space.")
            }
        }

        func run() async throws {
            let rules = try eviction.rules()
            let directory = cache.directory
            var pruning: ControlAPI.Pruning
            do {
                // The cache is opened without rules of its own: its pass at open would evict
                // before this one could tell what it did (or, in a dry run, evict at all).
                switch try await cacheWait.claim({ try StreamCache(configuration: StreamCache.Configuration(directory: directory)) },
                                                 orServerIn: directory, transport: AsyncHTTPClientTransport.shared) {
                case .opened(let streamCache):
                    let evicted: [EvictedResource]
                    do {
                        evicted = try await streamCache.evict(rules, dryRun: dryRun)
                    } catch {
                        await streamCache.shutdown()
                        throw error
                    }
                    await streamCache.shutdown()
                    pruning = ControlAPI.Pruning(evicted, dryRun: dryRun)
                case .server(let server):
                    server.tellHandOver(of: directory, "it does this")
                    pruning = try await server.prune(ControlAPI.PruneRequest(maximumSize: rules.maximumSize, maximumAgeSeconds: rules.maximumAge?.timeInterval,
                                                                             minimumFreeSpace: rules.minimumFreeSpace, dryRun: dryRun))
                }
            } catch let error as ExitCode {
                throw error
            } catch {
                throw Failure.exit(error)
            }
            if json { return try CacheCommand.printJSON(pruning) }
            for row in pruning.evicted {
                let reason = EvictionReason(rawValue: row.reason).map { "(\($0))" } ?? "(\(row.reason))"
                print("\(dryRun ? "would evict" : "evicted")  \(ByteFormat.string(row.bytes).leftPadded(to: 10))  \(row.key)  \(reason)")
            }
            let bytes = pruning.evicted.reduce(Int64(0)) { $0 + $1.bytes }
            print(pruning.evicted.isEmpty ? "nothing to evict" : "\(dryRun ? "would evict" : "evicted") \(pruning.evicted.count) resource(s), \(ByteFormat.string(bytes))")
        }
    }

    struct Clear: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete cached resources (all, or one key).")
        @Argument(help: "Only this key.") var key: String?
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var cache: CacheOptions
        @OptionGroup var cacheWait: CacheWaitOptions

        func run() async throws {
            var removed = 0
            var kept = 0
            do {
                switch try await CacheCommand.open(cache, waiting: cacheWait) {
                case .opened(let store):
                    if let key {
                        removed = try await store.remove(CacheKey(key)) ? 1 : 0
                    } else {
                        for entry in try await store.entries() where try await store.remove(entry.key) { removed += 1 }
                    }
                case .server(let server):
                    if let key {
                        removed = try await server.remove(key: key) ? 1 : 0
                    } else {
                        let removal = try await server.removeAll()
                        (removed, kept) = (removal.removed, removal.kept)
                    }
                }
            } catch let error as ExitCode {
                throw error
            } catch {
                throw Failure.exit(error)
            }
            if json {
                try CacheCommand.printJSON(["removed": removed, "kept": kept])
            } else {
                print("removed \(removed) resource(s)" + (kept > 0 ? "; \(kept) in use by the server kept" : ""))
            }
        }
    }
}
