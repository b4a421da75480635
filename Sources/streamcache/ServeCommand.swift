import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging
import StreamCache
import StreamCacheServer
import StreamCacheSources
import StreamCacheHTTPClient
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `streamcache serve`: a local streaming proxy in front of the cache.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve URLs (or a whole remote folder) to any player through the cache, on 127.0.0.1.",
        discussion: """
        Prints one line per resource: the stream URL, a tab, the source URL (JSON lines with --json). Players (mpv, ffmpeg, VLC, \
        browsers, AVPlayer) open the stream URL; the proxy adds your headers, answers byte ranges from the cache where it can and \
        fetches only the missing bytes. Stop it with Ctrl-C or SIGTERM: every written byte is recorded before it exits.

        Examples:
          streamcache serve https://example.com/music/a.mp3 -H 'Authorization: Bearer TOKEN'
          streamcache serve --folder https://example.com/music/ -H 'Authorization: Bearer TOKEN' --url-token mymusic --port 8090
          mpv "$(streamcache serve … | head -1 | cut -f1)"
          streamcache serve webdav://me@127.0.0.1:8080/music/a.mp3 --password-env WEBDAV_PASSWORD
          streamcache serve yandex:/Music/a.mp3 --token-env YANDEX_TOKEN
          streamcache serve yandex:/Music/Album --recursive --prefetch --token-env YANDEX_TOKEN
          streamcache serve --folder yandex:/Music --url-token music --token-env YANDEX_TOKEN   # http://127.0.0.1:PORT/music/Album/01.mp3
        """
    )

    @Argument(help: "http or https URLs, or source references (webdav://…, yandex:/…, dropbox:/…, gdrive:…, onedrive:…, box:…), to serve; a source folder's files are each served.")
    var urls: [String] = []

    @Flag(help: "Source folders: the files of their subfolders too.")
    var recursive = false

    @Option(name: .customShort("H"), help: ArgumentHelp("A header sent to the origin, 'Name: value'. Repeatable; applies to every URL and the folder.", valueName: "header"))
    var headers: [String] = []

    @Option(help: ArgumentHelp("Serve every file below this URL, or this cloud or WebDAV folder (yandex:/Music, webdav://me@nas/music/), at http://HOST:PORT/<token>/<relative path>.", valueName: "base-url"))
    var folder: String?

    @Option(name: .customLong("url-token"), help: ArgumentHelp("The folder's token in its URLs (default: a fresh random token each start).", valueName: "value"))
    var urlToken: String?

    @Option(name: .customLong("retry-offline-after"),
            help: ArgumentHelp("How long a cloud or WebDAV service found out of reach is left alone before a request asks it again (90s, 5m).",
                               discussion: "Meanwhile its cached files play and the rest fail as the service did; the request that asks again waits half a second at most for the answer. Default: 30s.",
                               valueName: "time"),
            transform: ArgumentParsing.duration)
    var retryOfflineAfter: Duration = .seconds(30)

    @Option(help: ArgumentHelp("The address to bind. Anything but loopback also needs --allow-non-loopback.", valueName: "host"))
    var host = "127.0.0.1"

    @Flag(name: .customLong("allow-non-loopback"), help: "Allow --host to be a non-loopback address (every stream URL then reaches the network).")
    var allowNonLoopback = false

    @Option(help: ArgumentHelp("The port (0 picks a free one).", valueName: "n"))
    var port = 0

    @Option(name: .customLong("allow-host"), help: ArgumentHelp("A host name requests may give besides 127.0.0.1 and localhost ('*': any); repeatable.", discussion: "Requests that name another host are refused (403): a web page that points a name of its own at 127.0.0.1 (DNS rebinding) cannot read the streams. Not checked with a non-loopback --host.", valueName: "name"))
    var allowedHosts: [String] = []
    @Option(name: .customLong("allow-origin"), help: ArgumentHelp("A web origin whose pages' scripts may read the streams (CORS), such as https://player.example or http://localhost:3000 ('*': any); repeatable.", discussion: "A media element plays a stream without it; a web player that fetches the bytes itself (hls.js, Web Audio, fetch) needs it. '*' suits stream URLs only: a folder's --url-token may be one a page can guess.", valueName: "origin"))
    var allowedOrigins: [String] = []

    @Option(name: .customLong("control-token-file"), help: ArgumentHelp("Where to write the control API's bearer token (mode 0600).", discussion: "Default: $XDG_STATE_HOME/streamcache/control-token, else ~/.local/state/streamcache/control-token.", valueName: "file"))
    var controlTokenFile: String?

    @Flag(help: "Print JSON lines instead of tab-separated ones.")
    var json = false

    @Flag(help: "Prefetch every URL given on the command line in the background, for offline playback (an HLS playlist with its highest variant's segments).")
    var prefetch = false

    @Flag(help: "With --prefetch: pin what it downloads, so that eviction never removes it.")
    var pin = false

    @Flag(name: .shortAndLong, help: "Log requests and downloads to stderr; twice (-vv) also each origin request the engine plans.")
    var verbose: Int

    @OptionGroup var cache: CacheOptions

    @OptionGroup var cacheWait: CacheWaitOptions

    @OptionGroup var downloads: DownloadOptions

    @OptionGroup var rate: BackgroundRateOption

    @OptionGroup var eviction: EvictionOptions

    @OptionGroup var sources: SourceOptions

    @OptionGroup var transportOptions: TransportOptions

    func validate() throws {
        for url in urls where !SourceReference.isSourceReference(url) { _ = try ArgumentParsing.httpURL(url) }
        if let folder, !SourceReference.isSourceReference(folder) { _ = try ArgumentParsing.httpURL(folder) }
        _ = try ArgumentParsing.headers(headers)
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0…65535.") }
        if urlToken != nil, folder == nil { throw ValidationError("--url-token needs --folder.") }
        if pin, !prefetch { throw ValidationError("--pin pins what --prefetch downloads; give both.") }
        for origin in allowedOrigins where !Self.isWebOrigin(origin) {
            throw ValidationError("--allow-origin \(origin) is not a web origin: give the scheme, host and port a page's address begins with (https://player.example, http://localhost:3000), 'null' or '*'.")
        }
        if !allowNonLoopback, !ProxyServer.Configuration.isLoopbackHost(host) {
            throw ValidationError("--host \(host) is not a loopback address; add --allow-non-loopback to expose the cache to the network.")
        }
    }

    /// Whether `text` is what a browser sends as `Origin` (`scheme://host[:port]`, an app's
    /// `capacitor://localhost` too, or `null`), a trailing `/` aside, or `*`.
    static func isWebOrigin(_ text: String) -> Bool {
        if text == "*" || text == "null" { return true }
        let trimmed = text.hasSuffix("/") ? text.dropLast() : text[...]
        guard let separator = trimmed.firstRange(of: "://") else { return false }
        let scheme = trimmed[..<separator.lowerBound], authority = trimmed[separator.upperBound...]
        guard let first = scheme.first, first.isASCII, first.isLetter,
              scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+.-".contains($0)) }) else { return false }
        return !authority.isEmpty && !authority.contains(where: { "/?#@ ".contains($0) })
    }

    func run() async throws {
        let logger = Self.makeLogger(verbose: verbose)
        let headers = try ArgumentParsing.headers(headers)
        var cacheConfiguration = StreamCache.Configuration.proxy(directory: cache.directory)
        try eviction.apply(to: &cacheConfiguration)
        cacheConfiguration.logger = logger
        downloads.apply(to: &cacheConfiguration, sharesOrigins: true)
        try rate.apply(to: &cacheConfiguration)
        let metrics = PrometheusMetrics()
        cacheConfiguration.metricsFactory = metrics.factory
        var serverConfiguration = ProxyServer.Configuration()
        serverConfiguration.metricsExposition = metrics.exposition
        serverConfiguration.host = host
        serverConfiguration.port = port
        serverConfiguration.allowsNonLoopbackHost = allowNonLoopback
        serverConfiguration.allowedHostNames = allowedHosts.contains("*") ? nil : Set(allowedHosts)
        serverConfiguration.allowedWebOrigins = allowedOrigins.contains("*") ? nil : Set(allowedOrigins)
        serverConfiguration.logger = logger
        if !ProxyServer.Configuration.isLoopbackHost(host) {
            Self.printError("warning: serving on \(host): anyone who can reach this address and knows a stream URL can read it.")
        }

        // One transport for every origin the server reads, the cloud sources' included: their
        // content hosts get the spare connection a seek's request goes out on, and their bodies
        // the loop the downloads run on.
        let transport = try transportOptions.transport(.forDownloads, configuration: .forDownloads, connectionsPerHost: downloads.connectionsPerHost)
        let cache: StreamCache
        let server: ProxyServer
        do {
            cache = try await cacheWait.claim { try StreamCache(configuration: cacheConfiguration) }
            serverConfiguration.sourceResolver = ServedSourceResolver(options: sources, transport: transport, cache: cache, retryOfflineAfter: retryOfflineAfter)
            server = try ProxyServer(cache: cache, configuration: serverConfiguration, transport: transport)
        } catch {
            throw Failure.exit(error)
        }
        var registrations: [(StreamRegistration, String)] = []
        for text in urls {
            if SourceReference.isSourceReference(text) {
                do {
                    // A folder's files are each served; one that cannot be looked up is said and left out.
                    let found = try await SourceFiles.find(text, parse: try sources.parser(for: text, transport: transport), recursive: recursive,
                                                           resolvingFirst: true) { [retryOfflineAfter] in try await cache.resolve($0, retryingAfter: retryOfflineAfter) }
                    for (reference, error) in found.failures { Self.printError("warning: \(reference) is not served: \(error)") }
                    if !found.foldersLeftOut.isEmpty, !recursive {
                        Self.printError("warning: \(text): \(found.foldersLeftOut.count) subfolder(s) not served (--recursive serves them)")
                    }
                    // Found resolving each file: none is left without its resolution.
                    for file in found.files {
                        guard let resolved = file.resolved else { continue }
                        if resolved.isOffline {
                            Self.printError("warning: \(file.reference): its service could not be reached; serving what the cache holds of it.")
                        }
                        _ = try await cache.resource(for: resolved)
                        registrations.append((server.register(origin: resolved.origin, key: resolved.key, fileName: resolved.fileName), file.reference))
                    }
                } catch {
                    throw Failure.exit(error)
                }
                continue
            }
            let url = try ArgumentParsing.httpURL(text)
            registrations.append((server.register(url: url, headers: headers), url.redactedDescription))
        }
        var mount: FolderMount?
        var originProblem: String?
        do {
            if let folder, SourceReference.isSourceReference(folder) {
                mount = try mountSourceFolder(folder, on: server, cache: cache, transport: transport)
            } else if let folder {
                mount = try server.mountFolder(try ArgumentParsing.httpURL(folder), headers: headers, token: urlToken)
            }
            if let mount {
                // Checked before the port opens, so the first player finds the origin's keep-alive
                // connection ready (about 1.5 ms of its first byte); a slow origin delays the start by 2 s at most.
                originProblem = await server.checkOrigin(of: mount, timeout: .seconds(2))
            }
            try await server.start()
            try writeControlToken(server.controlToken)
        } catch {
            await server.stop()
            throw Failure.exit(error)
        }

        // Where `get`, `prefetch` and the `cache` commands in other processes find this server,
        // to hand it their work; without it they wait for the directory, as before.
        if let base = server.baseURL {
            do {
                try RunningServer.publish(RunningServer.record(baseURL: base, token: server.controlToken), in: self.cache.directory)
            } catch {
                Self.printError("warning: \(error); other streamcache commands will wait for this server instead of using it.")
            }
        }
        for (registration, source) in registrations {
            printLine(url: server.url(for: registration).absoluteString, source: source)
        }
        if let mount, let base = server.baseURL {
            printLine(url: base.absoluteString + "/\(mount.token)/", source: mount.name)
            if let originProblem { Self.printError("warning: \(originProblem)") }
        }
        Self.printError("streamcache: serving on \(server.baseURL?.absoluteString ?? host); control API at /api/ with 'Authorization: Bearer \(server.controlToken)' (also in \(tokenFile.path)); Ctrl-C stops")

        if prefetch {
            // As the control API's prefetch: a playlist with its segments, and its progress in the status.
            for (registration, _) in registrations { await server.prefetch(registration, pinning: pin) }
        }

        await TerminationSignals.wait()
        Self.printError("streamcache: stopping")
        RunningServer.withdraw(from: self.cache.directory)
        await server.stop()
        Self.printError("streamcache: \(Self.summary(of: cache.statistics))")
        await cache.shutdown()
    }

    /// Serves the files below a cloud or WebDAV folder, each looked up by its path at its first
    /// request. The folder is listed once in the background as the server starts, to say at once
    /// when the token or the folder is wrong.
    private func mountSourceFolder(_ folder: String, on server: ProxyServer, cache: StreamCache, transport: any HTTPTransport) throws -> FolderMount {
        let parse = try sources.parser(for: folder, transport: transport)
        let paths = SourceFolderPaths(folder: folder, outOfReachInterval: retryOfflineAfter, parse: parse)
        let name = try parse(folder).reference
        // A file below is known by the folder's name and its path (the reference they spell for a
        // service that names files by path), for when the service is out of reach.
        let base = name.hasSuffix("/") ? name : name + "/"
        let mount = try server.mountFolder(named: name, token: urlToken, resolvingFiles: { path in
            try await cache.stream(for: try await cache.resolve(alias: base + path.description, retryingAfter: retryOfflineAfter) { try await paths.file(at: path) })
        }, listingFolders: { path in
            do {
                return try await paths.entries(at: path).map { FolderListingEntry(name: $0.name, isFolder: $0.isFolder, size: $0.size) }
            } catch let failure as StreamCacheError where failure.code == .originUnavailable {
                // Out of reach: what the cache holds below the folder, by the references its files were read by.
                let prefix = base + (path.map { "\($0)/" } ?? "")
                guard let cached = try? await cache.aliases(under: prefix), !cached.isEmpty else { throw failure }
                let sizes = Dictionary((try? await cache.entries())?.compactMap { entry in entry.info?.totalLength.map { (entry.key, $0) } } ?? [],
                                       uniquingKeysWith: { first, _ in first })
                return CachedFolderListing.entries(named: cached.map { ($0.alias, $0.key, sizes[$0.key]) }, below: prefix)
            }
        })
        Task {
            do {
                _ = try await paths.listing()
            } catch {
                Self.printError("warning: \(mount.name) could not be listed: \(error); its files may not play.")
            }
        }
        return mount
    }

    /// One line on what the cache did while serving: bytes served and how many came from disk,
    /// bytes fetched and in how many requests.
    static func summary(of totals: CacheStatistics) -> String {
        let megabytes = { (bytes: Int64) in (Double(bytes) / 1e6).fixed(1) }
        let share = totals.cacheHitRatio.map { " (\(($0 * 100).fixed(1)) % from the cache)" } ?? ""
        return "served \(megabytes(totals.bytesServed)) MB in \(totals.reads) reads\(share); "
            + "fetched \(megabytes(totals.bytesDownloaded)) MB from origins in \(totals.originRequests) requests"
    }

    private func printLine(url: String, source: String) {
        if json {
            let object = ["streamURL": url, "source": source]
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let data = (try? encoder.encode(object)) ?? Data()
            Self.printOut(String(decoding: data, as: UTF8.self))
        } else {
            Self.printOut("\(url)\t\(source)")
        }
    }

    var tokenFile: URL {
        if let controlTokenFile { return URL(fileURLWithPath: controlTokenFile) }
        let environment = ProcessInfo.processInfo.environment
        let state = environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0, isDirectory: true) }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/state", isDirectory: true)
        return state.appendingPathComponent("streamcache/control-token")
    }

    /// Writes the token to a file only the user can read (see ``PrivateFile``).
    private func writeControlToken(_ token: String) throws {
        let url = tokenFile
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try PrivateFile.store(token + "\n", at: url.path, name: "the control token file")
    }

    /// Writes a line to stdout unbuffered, so a script reading the first line sees it at once.
    static func printOut(_ text: String) {
        FileDescriptorOutput.standardOutput.write((text + "\n"))
    }

    static func printError(_ text: String) {
        FileDescriptorOutput.standardError.write((text + "\n"))
    }

    static func makeLogger(verbose: Int) -> Logger {
        guard verbose > 0 else { return Logger(label: "streamcache", factory: { _ in SwiftLogNoOpLogHandler() }) }
        var logger = Logger(label: "streamcache", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = verbose > 1 ? .debug : .info
        return logger
    }
}
