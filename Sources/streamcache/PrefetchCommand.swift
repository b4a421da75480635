import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheHLS
import StreamCacheHTTPClient
import StreamCacheServer
import StreamCacheSources
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `streamcache prefetch URL`: download a file, or an HLS stream, into the cache for offline play.
struct PrefetchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prefetch",
        abstract: "Download a URL into the cache for offline play; for an HLS playlist, its variants' segments.",
        discussion: """
        Bytes already cached are not fetched again. An HLS playlist (.m3u8, or served as one) is downloaded with the \
        files it names: for a master playlist, the variants chosen by --variants and the renditions they play with. \
        Afterwards `streamcache serve` plays it with the origin gone. While a `streamcache serve` uses the cache directory, \
        that server does the prefetch (this command waits for it and reports). A source reference (webdav://…, yandex:/…, \
        dropbox:/…, gdrive:…, onedrive:/…, box:…) names a file, or a folder whose files are downloaded one after another \
        (by name; --recursive takes its subfolders too); a file that fails is reported and the others go on.

        Examples:
          streamcache prefetch https://example.com/show/master.m3u8 -H 'Authorization: Bearer TOKEN' --variants all
          streamcache prefetch https://example.com/show/master.m3u8 --variants lowest --segments 30
          streamcache prefetch https://example.com/a.mp3 -H 'Authorization: Bearer TOKEN'
          streamcache prefetch yandex:/Music/Album --recursive --token-env YANDEX_TOKEN
        """
    )

    @Argument(help: "An http or https URL, or a source reference: a file or a folder.")
    var url: String

    @Flag(help: "Sources: the files of a folder's subfolders too.")
    var recursive = false

    @OptionGroup var sources: SourceOptions

    @Option(name: .customShort("H"), help: ArgumentHelp("A request header, 'Name: value'. Repeatable.", valueName: "header"))
    var headers: [String] = []

    @Option(help: ArgumentHelp("HLS: all, highest (the default), lowest, or a 0-based variant index.", valueName: "which"))
    var variants = "highest"

    @Option(help: ArgumentHelp("HLS: only the first N segments of each media playlist.", valueName: "N"))
    var segments: Int?

    @Flag(help: "No progress lines on stderr.")
    var quiet = false

    @Flag(help: ArgumentHelp("Pin what is downloaded, so that eviction never removes it (`cache unpin KEY` lets it go).",
                             discussion: "An HLS stream's playlists and segments are pinned too. A file that fails is not pinned."))
    var pin = false

    @OptionGroup var cache: CacheOptions

    @OptionGroup var cacheWait: CacheWaitOptions

    @OptionGroup var downloads: DownloadOptions

    @OptionGroup var rate: BackgroundRateOption

    @OptionGroup var eviction: EvictionOptions

    @OptionGroup var transportOptions: TransportOptions

    func validate() throws {
        if SourceReference.isSourceReference(url) {
            // A source brings its own credentials, and its files are not HLS playlists to walk.
            guard headers.isEmpty else { throw ValidationError("-H is for a URL; a source's credentials come from --token-env, --password-env or the credentials file.") }
            guard variants == "highest", segments == nil else { throw ValidationError("--variants and --segments are for an HLS URL.") }
        } else {
            _ = try ArgumentParsing.httpURL(url)
            guard !recursive else { throw ValidationError("--recursive is for a source folder (webdav://…, yandex:/…).") }
        }
        _ = try ArgumentParsing.headers(headers)
        guard HLSVariantSelection(variants) != nil else { throw ValidationError("--variants must be all, highest, lowest or a variant index.") }
        if let segments, segments < 1 { throw ValidationError("--segments must be at least 1.") }
    }

    func run() async throws {
        if SourceReference.isSourceReference(url) { return try await prefetchSource() }
        let url = try ArgumentParsing.httpURL(url)
        let headers = try ArgumentParsing.headers(headers)
        let transport = try transportOptions.transport(.shared, configuration: AsyncHTTPClientTransport.Configuration(), connectionsPerHost: downloads.connectionsPerHost)
        let cache: StreamCache
        do {
            var configuration = StreamCache.Configuration(directory: self.cache.directory)
            downloads.apply(to: &configuration, sharesOrigins: false)
            try rate.apply(to: &configuration)
            try eviction.apply(to: &configuration)
            configuration.keysToBeRead = [CacheKey(url: url)]
            switch try await cacheWait.claim({ try StreamCache(configuration: configuration) }, orServerIn: self.cache.directory, transport: transport) {
            case .opened(let opened):
                cache = opened
            case .server(let server):
                return try await prefetch(url, headers: headers, through: server)
            }
        } catch let error as ExitCode {
            throw error
        } catch {
            throw Failure.exit(error)
        }
        let origin = HTTPOrigin(url: url, headers: headers, transport: transport)
        let resource = cache.resource(for: CacheKey(url: url), origin: origin)
        let showsProgress = !quiet && isatty(STDERR_FILENO) == 1
        let variants = self.variants
        let segments = self.segments
        do {
            // Ctrl-C stops the prefetch; what came is recorded in the cache for the next run.
            let interruption = try await TerminationSignals.cancelling {
                var isPlaylist = HLSPlaylist.isPlaylist(fileName: url.lastPathComponent, mimeType: resource.knownInfo?.mimeType)
                if !isPlaylist { isPlaylist = HLSPlaylist.isPlaylist(fileName: nil, mimeType: try await resource.loadInfo().mimeType) }
                if isPlaylist {
                    let prefetcher = HLSPrefetcher(cache: cache, loader: HLSPlaylistLoader()) { location in
                        HTTPOrigin(url: location.url, headers: location.headers, transport: transport)
                    }
                    let done = try await prefetcher.prefetch(HLSLocation(url: url, headers: headers), variants: HLSVariantSelection(variants)!,
                                                             segmentLimit: segments, pinning: pin) { progress in
                        if showsProgress { Self.printToStandardError("\r\(progress.filesDone)/\(progress.files) files, \(ByteFormat.string(progress.bytes))") }
                    }
                    if showsProgress { Self.printToStandardError("\n") }
                    print("\(done.filesDone) files (\(done.segments) segments, \(ByteFormat.string(done.bytes))) cached for \(url.redactedDescription)\(pinnedSuffix)")
                } else {
                    try await resource.prefetch(pinning: pin)
                    let size = resource.knownInfo?.totalLength ?? 0
                    print("\(ByteFormat.string(size)) cached for \(url.redactedDescription)\(pinnedSuffix)")
                }
            }
            await cache.shutdown()
            if let interruption { throw TerminationSignals.exit(stoppedBy: interruption) }
        } catch let error as ExitCode {
            throw error
        } catch {
            await cache.shutdown()
            throw Failure.exit(error)
        }
    }

    /// The options given that a server doing the prefetch does not take (`--limit-rate` and
    /// `--pin` go with the request).
    private var optionsTheServerDoesNotTake: [String] { downloads.namesGiven + eviction.namesGiven + transportOptions.namesGiven }

    /// What a line that says a file is cached ends with: that it is pinned, with `--pin`.
    private var pinnedSuffix: String { pin ? ", pinned" : "" }

    /// Has the server that holds the cache directory do the prefetch, and waits for it: the
    /// bytes go into the cache the server plays from. This command's download options do not
    /// apply (the server's do), but for `--limit-rate`, which the request carries: the server's
    /// prefetch keeps to it besides its own rate. Ctrl-C stops the server's prefetch too, as it stops one this
    /// command runs itself; what came stays in the cache.
    private func prefetch(_ url: URL, headers: HTTPHeaders, through server: RunningServer) async throws {
        server.tellHandOver(of: cache.directory, "it does this prefetch", notApplying: optionsTheServerDoesNotTake)
        try await prefetch(url.redactedDescription, through: server) { try await server.register(url, headers: headers) }
    }

    /// Has the server prefetch what `register` registers with it (printed as `name`), and waits.
    ///
    /// - Returns: the bytes cached.
    /// - Throws: the prefetch's error; an `ExitCode` when a signal stopped it.
    @discardableResult
    private func prefetch(_ name: String, through server: RunningServer,
                          register: @escaping @Sendable () async throws -> ControlAPI.ResourceStatus) async throws -> Int64 {
        let showsProgress = !quiet && isatty(STDERR_FILENO) == 1
        // The server's defaults are this command's: only a choice the user made goes with the request.
        // The start is named so that the stop Ctrl-C sends wins even if it overtakes the start:
        // the command cannot tell whether the server has the start yet.
        let requestID = UUID()
        let request = ControlAPI.PrefetchRequest(variants: variants == "highest" ? nil : variants, segments: segments, pin: pin ? true : nil,
                                                 rate: try rate.limitRate.map(BackgroundRateOption.bytesPerSecond), requestID: requestID.uuidString)
        // Known before the prefetch is asked for, so Ctrl-C at any point after can stop it.
        let registered = Locked<String?>(nil)
        let cached = Locked<Int64>(0)
        let interruption = try await TerminationSignals.cancelling {
            var status = try await register()
            let id = status.id
            registered.withLock { $0 = id }
            status = try await server.startPrefetch(of: id, request)
            // Polled at a steady pace, for as long as the prefetch runs (it ends, or fails, on
            // the server's side; a server that stops ends the polling with an error).
            while status.prefetching {
                if showsProgress {
                    if let hls = status.hlsPrefetch {
                        Self.printToStandardError("\r\(hls.filesDone)/\(hls.files) files, \(ByteFormat.string(hls.bytes))")
                    } else {
                        Self.printToStandardError("\r\(ByteFormat.string(status.cachedBytes)) of \(status.size.map(ByteFormat.string) ?? "?")")
                    }
                }
                try await Task.sleep(for: .milliseconds(250))
                status = try await server.status(of: id)
            }
            if showsProgress { Self.printToStandardError("\n") }
            if let message = status.prefetchError {
                throw StreamCacheError(RunningServer.code(named: status.prefetchErrorCode, status: 502), "The server's prefetch failed: \(message)")
            }
            if let hls = status.hlsPrefetch {
                cached.withLock { $0 = hls.bytes }
                print("\(hls.filesDone) files (\(hls.segments) segments, \(ByteFormat.string(hls.bytes))) cached for \(name)\(pinnedSuffix)")
            } else {
                cached.withLock { $0 = status.size ?? status.cachedBytes }
                print("\(ByteFormat.string(status.size ?? status.cachedBytes)) cached for \(name)\(pinnedSuffix)")
            }
        }
        if let interruption {
            if let id = registered.withLock({ $0 }) {
                do {
                    _ = try await server.stopPrefetch(of: id, requestID: requestID)
                    Self.printToStandardError("streamcache: the server stopped the prefetch; what came is in the cache.\n")
                } catch {
                    Self.printToStandardError("streamcache: the server could not be told to stop the prefetch (\(error)); it goes on.\n")
                }
            }
            throw TerminationSignals.exit(stoppedBy: interruption)
        }
        return cached.withLock { $0 }
    }

    /// Downloads the file a source reference names, or every file of its folder, one after
    /// another: here, or by the server that holds the cache directory (which resolves each file,
    /// with the credentials this command was given). A folder's files are listed, not resolved,
    /// before the first download: each is resolved when its turn comes.
    private func prefetchSource() async throws {
        let transport = try transportOptions.transport(.shared, configuration: AsyncHTTPClientTransport.Configuration(), connectionsPerHost: downloads.connectionsPerHost)
        let found: SourceFiles
        let outcome: SourcePrefetchOutcome
        do {
            let parse = try sources.parser(for: url, transport: transport)
            found = try await SourceFiles.find(url, parse: parse, recursive: recursive, resolvingFiles: false)
            for (reference, error) in found.failures { Self.printToStandardError("streamcache: \(reference): \(Self.describe(error))\n") }
            var configuration = StreamCache.Configuration(directory: self.cache.directory)
            downloads.apply(to: &configuration, sharesOrigins: false)
            try rate.apply(to: &configuration)
            try eviction.apply(to: &configuration)
            // The files not resolved yet are known to the cache by their references, if at all.
            configuration.keysToBeRead = Set(found.files.compactMap(\.resolved?.key))
            configuration.aliasesToBeRead = Set(found.files.map(\.reference))
            switch try await cacheWait.claim({ try StreamCache(configuration: configuration) }, orServerIn: self.cache.directory, transport: transport) {
            case .opened(let cache):
                outcome = try await prefetch(found.files, into: cache, parse: parse, folder: found.isFolder ? found.name : nil)
            case .server(let server):
                server.tellHandOver(of: self.cache.directory, "it does this prefetch", notApplying: optionsTheServerDoesNotTake)
                outcome = try await prefetch(found.files, through: server, access: try sources.access(), folder: found.isFolder ? found.name : nil)
            }
        } catch let error as ExitCode {
            throw error
        } catch {
            throw Failure.exit(error)
        }
        let failed = found.failures.map(\.error) + outcome.failures
        if found.isFolder {
            var line = "\(outcome.files) file\(outcome.files == 1 ? "" : "s") (\(ByteFormat.string(outcome.bytes))) cached for \(found.name)"
            if !failed.isEmpty { line += "; \(failed.count) failed" }
            if !found.foldersLeftOut.isEmpty {
                line += "; \(found.foldersLeftOut.count) folder\(found.foldersLeftOut.count == 1 ? "" : "s") left out"
                line += recursive ? " (deeper than \(SourceFiles.maximumDepth))" : " (--recursive takes them)"
            }
            print(line)
        }
        // Every file that could be cached was; the exit tells the first failure's kind.
        if let first = failed.first { throw Failure.exit(first, quietly: true) }
    }

    /// What a prefetch of a source's files came to.
    private struct SourcePrefetchOutcome: Sendable {
        var files = 0
        var bytes: Int64 = 0
        var failures: [any Error] = []

        /// Records a file's failure, said on stderr; whether the next file would fail the same
        /// way (a full disk, a refused account), so that the prefetch stops.
        mutating func record(_ error: any Error, of file: SourceFiles.File) -> Bool {
            failures.append(error)
            PrefetchCommand.printToStandardError("streamcache: \(file.reference): \(PrefetchCommand.describe(error))\n")
            guard let error = error as? StreamCacheError else { return false }
            return [.diskFull, .cacheIOFailed, .authenticationFailed].contains(error.code)
        }
    }

    /// Downloads `files` into `cache`, one after another, each resolved (with a source `parse`
    /// makes) when its turn comes if it was not before.
    ///
    /// Files of a `folder` are also known by the folder's reference and their path below it,
    /// as `serve --folder` knows the files it plays: a service whose references name files by id
    /// (Drive, Box) then has a folder prefetched by id play offline below a mount of it.
    private func prefetch(_ files: [SourceFiles.File], into cache: StreamCache, parse: @escaping @Sendable (String) throws -> any Source,
                          folder: String?) async throws -> SourcePrefetchOutcome {
        let outcome = Locked(SourcePrefetchOutcome())
        let interruption = try await TerminationSignals.cancelling {
            for file in files {
                do {
                    // Its reference is remembered: a `serve` or `get` with the service out of reach finds it.
                    let resolved = try await cache.resolve(alias: file.reference) {
                        if let resolved = file.resolved { return resolved }
                        return try await parse(file.reference).resolve()
                    }
                    if let folder, !resolved.isOffline {
                        let byPath = Self.reference(of: file, below: folder)
                        // A hint, as every alias: an index that cannot write it costs the offline listing, not the file.
                        if byPath != file.reference { try? await cache.setAlias(byPath, for: resolved.key, fileName: resolved.fileName) }
                    }
                    let resource = try await cache.resource(for: resolved)
                    try await resource.prefetch(pinning: pin)
                    let size = resource.knownInfo?.totalLength ?? resolved.size ?? 0
                    outcome.withLock { $0.files += 1; $0.bytes += size }
                    print("\(ByteFormat.string(size)) cached for \(file.reference)\(pinnedSuffix)")
                } catch {
                    try Task.checkCancellation()
                    if outcome.withLock({ $0.record(error, of: file) }) { break }
                }
            }
        }
        await cache.shutdown()
        if let interruption { throw TerminationSignals.exit(stoppedBy: interruption) }
        return outcome.withLock { $0 }
    }

    /// Has `server` download `files`, one after another, each resolved there with `access`; a
    /// `folder`'s files also by the folder's reference and their paths, as here.
    private func prefetch(_ files: [SourceFiles.File], through server: RunningServer, access: ControlAPI.SourceAccess,
                          folder: String?) async throws -> SourcePrefetchOutcome {
        var outcome = SourcePrefetchOutcome()
        for file in files {
            do {
                let aliases = folder.map { [Self.reference(of: file, below: $0)] } ?? []
                outcome.bytes += try await prefetch(file.reference, through: server) {
                    try await server.register(source: file.reference, access: access, aliases: aliases)
                }
                outcome.files += 1
            } catch let stop as ExitCode {
                throw stop
            } catch {
                if outcome.record(error, of: file) { break }
            }
        }
        return outcome
    }

    /// `file` by the reference of the `folder` it was listed in and its path below it, as a
    /// mount of that folder asks for it.
    private static func reference(of file: SourceFiles.File, below folder: String) -> String {
        (folder.hasSuffix("/") ? folder : folder + "/") + file.path
    }

    fileprivate static func describe(_ error: any Error) -> String {
        (error as? StreamCacheError)?.description ?? "\(error)"
    }

    fileprivate static func printToStandardError(_ text: String) {
        FileDescriptorOutput.standardError.write(text)
    }
}
