import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StreamCache

/// `streamcache`: play-while-downloading cache for media, from the command line.
@main
struct StreamCacheCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "streamcache",
        abstract: "Stream media over HTTP(S) with your own headers, through a durable range-aware disk cache.",
        discussion: """
        Exit codes: 0 success; 1 other failure; 2 invalid request (for example an unknown cache key); 64 bad arguments; 3 the origin failed or was unreachable; \
        4 the origin rejected the credentials; 5 not found; 6 the cache directory failed (disk full, I/O).
        """,
        subcommands: [GetCommand.self, PrefetchCommand.self, ServeCommand.self, LsCommand.self, AuthCommand.self, DemoCommand.self, CacheCommand.self]
    )
}

/// Options every subcommand that touches the cache shares.
struct CacheOptions: ParsableArguments {
    @Option(name: .customLong("cache-dir"), help: ArgumentHelp("The cache directory.", discussion: "Default: $STREAMCACHE_CACHE_DIR, else $XDG_CACHE_HOME/streamcache, else ~/.cache/streamcache.", valueName: "dir"))
    var cacheDirectory: String?

    var directory: URL {
        cacheDirectory.map { URL(fileURLWithPath: $0, isDirectory: true) } ?? StreamCache.defaultDirectory()
    }
}

/// How long a command that writes the cache waits for a directory another process uses.
struct CacheWaitOptions: ParsableArguments {
    @Option(name: .customLong("wait-for-cache"),
            help: ArgumentHelp("How long to wait while another process uses the cache directory (90s, 15m, 2h; 0: give up at once).",
                               discussion: "One process at a time may use a cache directory: a get started beside another waits for it to end (beside a serve, get, prefetch and the cache commands hand their work to the server instead). Default: 10m; then exit 7.",
                               valueName: "time"),
            transform: ArgumentParsing.duration)
    var waitForCache: Duration?

    /// How long ``claim(_:)`` waits by default: long enough for a batch of downloads started side
    /// by side to take their turns, short enough that a script behind a server that
    /// never ends still stops.
    static let defaultWait = Duration.seconds(600)

    /// Opens the cache with `open`, waiting while another process holds the directory, as `cargo`
    /// waits for its package cache: two downloads started side by side take turns instead of the
    /// second one failing. Says once on stderr whom it waits for. A wait that runs out ends in the
    /// `cacheInUse` error (exit 7).
    func claim<T>(_ open: () throws -> T) async throws -> T {
        guard case .opened(let value) = try await claim(open, handingOverTo: { nil }) else { preconditionFailure("nothing to hand over to") }
        return value
    }

    /// What ``claim(_:orServerIn:transport:)`` came to: the cache, or the server that has it.
    enum Claim<T> {
        case opened(T)
        case server(RunningServer)
    }

    /// Opens the cache with `open` as ``claim(_:)`` does, unless a `streamcache serve` holds the
    /// directory (``RunningServer``): a command that can hand its work to it does so rather than
    /// wait for a server that may never end.
    func claim<T>(_ open: () throws -> T, orServerIn directory: URL, transport: any HTTPTransport) async throws -> Claim<T> {
        try await claim(open, handingOverTo: { await RunningServer.find(in: directory, transport: transport) })
    }

    private func claim<T>(_ open: () throws -> T, handingOverTo server: () async -> RunningServer?) async throws -> Claim<T> {
        let clock = ContinuousClock()
        let wait = waitForCache ?? Self.defaultWait
        let deadline = clock.now + wait
        var toldWhy = false
        while true {
            do {
                return .opened(try open())
            } catch let error as StreamCacheError where error.code == .cacheInUse {
                if let server = await server() { return .server(server) }
                let left = deadline - clock.now
                guard left > .zero else {
                    guard toldWhy else { throw error }
                    let seconds = Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18
                    throw StreamCacheError(error.code, "\(error.message) Gave up after waiting \(seconds.fixed(1)) s (--wait-for-cache).")
                }
                if !toldWhy {
                    toldWhy = true
                    FileDescriptorOutput.standardError.write("streamcache: \(error.message) Waiting for it (--wait-for-cache).\n")
                }
                // A quarter of a second: the lock is free within that of the holder's end.
                try await Task.sleep(for: min(.milliseconds(250), left))
            }
        }
    }
}

/// How downloads use the origin: shared by the commands that download.
struct DownloadOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Origin connections one long download may use at once (1-16).", valueName: "N"))
    var connections: Int = 4

    @Option(name: .customLong("connections-per-host"),
            help: ArgumentHelp("Connections open to one origin host at most, across all downloads (1-64); more requests wait for a free one.",
                               discussion: "For a service that limits a user's connections. Default: 8.", valueName: "N"))
    var connectionsPerHost: Int = 8

    @Option(name: .customLong("revalidate-after"),
            help: ArgumentHelp("Ask the origin whether cached bytes are still its current version when its last word is older than this (90s, 15m, 2h, 1d).",
                               discussion: "One request for the first byte before cached bytes are served; a changed file is fetched anew. When the origin cannot be reached, the cached bytes are served. Default: never (a file cached whole makes no request).",
                               valueName: "time"),
            transform: ArgumentParsing.duration)
    var revalidateAfter: Duration?

    @Flag(name: .customLong("no-content-check"),
          help: ArgumentHelp("Do not check complete files against the digest their origin publishes.",
                             discussion: "By default a file whose every byte is cached is hashed once and compared with the service's file hash (or an HTTP Repr-Digest); bytes that differ are dropped and fetched again."))
    var noContentCheck = false

    /// The options given with other than their default values: a command whose work a server
    /// does says that they do not apply (``RunningServer/tellHandOver(of:_:notApplying:)``).
    var namesGiven: [String] {
        [connections != 4 ? "--connections" : nil, connectionsPerHost != 8 ? "--connections-per-host" : nil,
         revalidateAfter != nil ? "--revalidate-after" : nil, noContentCheck ? "--no-content-check" : nil].compactMap { $0 }
    }

    func validate() throws {
        guard (1...16).contains(connections) else { throw ValidationError("--connections must be between 1 and 16.") }
        guard (1...64).contains(connectionsPerHost) else { throw ValidationError("--connections-per-host must be between 1 and 64.") }
    }

    /// Sets the connections per download (no more than a host allows) and how long the origin's
    /// word on a version holds. A command that is the process's only reader (`get`, `prefetch`)
    /// passes `sharesOrigins: false`: no player's request competes with its parts, so they may use
    /// every connection the transport opens to a host.
    func apply(to configuration: inout StreamCache.Configuration, sharesOrigins: Bool) {
        configuration.parallelDownloads = min(connections, connectionsPerHost)
        configuration.revalidationInterval = revalidateAfter
        configuration.checksContentDigests = !noContentCheck
        if !sharesOrigins { configuration.connectionsKeptForReaders = nil }
    }
}

/// Turns errors into one line on stderr and an exit code; never a stack trace.
enum Failure {
    /// The exit `error` gives, after a line on stderr that says what it was (none when `quietly`:
    /// the command has said it already).
    static func exit(_ error: any Error, quietly: Bool = false) -> ExitCode {
        if error is ExitCode { return error as! ExitCode }
        let message: String
        let code: Int32
        if let failure = error as? OutputWriteFailure {
            // As `cat` ends in a pipeline whose reader left: quietly, with 128 + SIGPIPE.
            if failure.readerLeft { return ExitCode(128 + SIGPIPE) }
            FileDescriptorOutput.standardError.write("streamcache: error: \(failure.message)\n")
            return ExitCode(1)
        }
        if let error = error as? StreamCacheError {
            message = error.description
            switch error.code {
            case .authenticationFailed: code = 4
            case .notFound: code = 5
            case .diskFull, .cacheIOFailed: code = 6
            case .cacheInUse: code = 7
            case .contentMismatch: code = 8
            case .invalidArgument: code = 2
            default: code = 3
            }
        } else if error is CancellationError {
            message = "cancelled"
            code = 1
        } else {
            message = "\(error)"
            code = 1
        }
        if !quietly { FileDescriptorOutput.standardError.write("streamcache: error: \(message)\n") }
        return ExitCode(code)
    }
}
