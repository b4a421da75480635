import ArgumentParser
import StreamCache

/// The eviction rules of a command that opens the cache itself (`serve`, and `get` and
/// `prefetch` when no server has the directory): ``StreamCache/Configuration/maximumSize``,
/// ``StreamCache/Configuration/maximumAge`` and ``StreamCache/Configuration/minimumFreeSpace``.
/// They act when the cache opens, after each commit, and (age, free space) once a minute; for
/// `cache prune`, once, at once (``StreamCache/evict(_:dryRun:)``).
struct EvictionOptions: ParsableArguments {
    @Option(name: .customLong("max-cache-size"), help: ArgumentHelp("Evict least recently used resources above this size, e.g. 2GB.", valueName: "size"))
    var maxCacheSize: String?

    @Option(name: .customLong("max-age"),
            help: ArgumentHelp("Evict resources not read for this long, e.g. 30d.", valueName: "time"),
            transform: ArgumentParsing.duration)
    var maxAge: Duration?

    @Option(name: .customLong("min-free-space"),
            help: ArgumentHelp("Evict least recently used resources while the cache's disk has less free than this, e.g. 5GB.", valueName: "size"))
    var minFreeSpace: String?

    /// The options given (``DownloadOptions/namesGiven``).
    var namesGiven: [String] {
        [maxCacheSize != nil ? "--max-cache-size" : nil, maxAge != nil ? "--max-age" : nil, minFreeSpace != nil ? "--min-free-space" : nil].compactMap { $0 }
    }

    func validate() throws {
        if let maxCacheSize { _ = try ArgumentParsing.byteCount(maxCacheSize) }
        if let minFreeSpace { _ = try ArgumentParsing.byteCount(minFreeSpace) }
    }

    /// The rules given on the command line (those not given are `nil`).
    func rules() throws -> EvictionRules {
        EvictionRules(maximumSize: try maxCacheSize.map(ArgumentParsing.byteCount), maximumAge: maxAge,
                      minimumFreeSpace: try minFreeSpace.map(ArgumentParsing.byteCount))
    }

    /// Sets the rules given on the command line; the others stay as they are.
    func apply(to configuration: inout StreamCache.Configuration) throws {
        let rules = try rules()
        if let size = rules.maximumSize { configuration.maximumSize = size }
        if let age = rules.maximumAge { configuration.maximumAge = age }
        if let space = rules.minimumFreeSpace { configuration.minimumFreeSpace = space }
    }
}
