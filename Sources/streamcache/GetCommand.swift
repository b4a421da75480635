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
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `streamcache get URL`: stream a resource through the cache to stdout or a file.
struct GetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        abstract: "Stream a URL or a cloud file through the cache to stdout or a file.",
        discussion: """
        Cached bytes come from disk; missing ones are fetched from the origin (with your headers), cached, and streamed on in order. \
        A progress bar is shown on stderr when it is a terminal. While a `streamcache serve` uses the cache directory, \
        the bytes come through that server (for an http or https URL).

        Examples:
          streamcache get https://example.com/a.mp3 -H 'Authorization: Bearer TOKEN' -o a.mp3
          streamcache get https://example.com/a.mp3 --range 0-1048575 | ffprobe -
          streamcache get yandex:/Music/a.mp3 --token-env YANDEX_TOKEN -o a.mp3
          streamcache get webdav://me@nas.local:8080/music/a.mp3 --password-env WEBDAV_PASSWORD -o a.mp3
        """
    )

    @Argument(help: "An http or https URL, or a source reference (webdav://…, yandex:/…, dropbox:/…, gdrive:…, onedrive:…, box:…).")
    var url: String

    @Option(name: .customShort("H"), help: ArgumentHelp("A request header, 'Name: value'. Repeatable.", valueName: "header"))
    var headers: [String] = []

    @Option(help: ArgumentHelp("Only bytes START-END (inclusive, like HTTP); END may be omitted.", valueName: "start-end"))
    var range: String?

    @Option(name: .shortAndLong, help: ArgumentHelp("Write to this file instead of stdout.", valueName: "file"))
    var output: String?

    @Flag(help: "Never show a progress bar.")
    var quiet = false

    @OptionGroup var cache: CacheOptions

    @OptionGroup var cacheWait: CacheWaitOptions

    @OptionGroup var downloads: DownloadOptions

    @OptionGroup var eviction: EvictionOptions

    @OptionGroup var sources: SourceOptions

    @OptionGroup var transportOptions: TransportOptions

    func validate() throws {
        if !SourceReference.isSourceReference(url) { _ = try parsedURL() }
        _ = try parsedHeaders()
        _ = try parsedRange()
    }

    func parsedURL() throws -> URL { try ArgumentParsing.httpURL(url) }

    func parsedHeaders() throws -> HTTPHeaders { try ArgumentParsing.headers(headers) }

    func parsedRange() throws -> ByteRange {
        guard let range else { return ByteRange(0, Int64.max) }
        let parts = range.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let start = Int64(parts[0]), start >= 0 else {
            throw ValidationError("Range '\(range)' is not START-END or START- (bytes, inclusive).")
        }
        if parts[1].isEmpty { return ByteRange(start, Int64.max) }
        guard let end = Int64(parts[1]), end >= start, end < Int64.max - 1 else {
            throw ValidationError("Range '\(range)' is not START-END with END >= START.")
        }
        return ByteRange(httpFirst: start, last: end)
    }

    func run() async throws {
        let range = try parsedRange()
        // AsyncHTTPClient holds back a connection whose bytes the disk has not taken yet, so a
        // cold `get` keeps its memory flat whatever the link and the disk; URLSession on Linux
        // cannot: with parallel parts a cold 1 GiB get peaked at 86-94 MiB over it, 60 over this.
        let transport = try transportOptions.transport(.shared, configuration: AsyncHTTPClientTransport.Configuration(), connectionsPerHost: downloads.connectionsPerHost)
        // A source's file, resolved by its service, or to be found in the cache by its reference
        // when the service is out of reach (the failure said if the cache knows none).
        var source: (any Source)?
        var file: ResolvedSource?
        var unreachable: StreamCacheError?
        if SourceReference.isSourceReference(url) {
            do {
                source = try sources.source(url, transport: transport)
                file = try await source?.resolve()
            } catch let failure as StreamCacheError where failure.code == .originUnavailable {
                unreachable = failure
            } catch {
                throw Failure.exit(error)
            }
        }
        let cache: StreamCache
        do {
            var configuration = StreamCache.Configuration(directory: self.cache.directory)
            downloads.apply(to: &configuration, sharesOrigins: false)
            try eviction.apply(to: &configuration)
            if unreachable == nil { configuration.keysToBeRead = [try file?.key ?? CacheKey(url: parsedURL())] }
            let open = { try StreamCache(configuration: configuration) }
            if SourceReference.isSourceReference(url) {
                // A server that holds the directory resolves the file again itself, with the
                // credentials this command was given (its origin, with its token and expiring
                // links, lives in this process and cannot be handed over).
                switch try await cacheWait.claim(open, orServerIn: self.cache.directory, transport: transport) {
                case .opened(let opened):
                    cache = opened
                case .server(let server):
                    let access = try sources.access()
                    return try await get(range: range, through: server) { [url] in try await server.register(source: url, access: access) }
                }
            } else {
                switch try await cacheWait.claim(open, orServerIn: self.cache.directory, transport: transport) {
                case .opened(let opened):
                    cache = opened
                case .server(let server):
                    let url = try parsedURL(), headers = try parsedHeaders()
                    return try await get(range: range, through: server) { try await server.register(url, headers: headers) }
                }
            }
        } catch let error as ExitCode {
            throw error
        } catch {
            throw Failure.exit(error)
        }
        let output: FileDescriptorOutput
        let resource: Resource
        do {
            if let source {
                // Its reference is remembered for a later run with the service out of reach, and
                // looked up in the cache when this one is.
                resource = try await cache.resource(for: try await cache.resolve(alias: source.reference) {
                    if let file { return file }
                    throw unreachable ?? StreamCacheError(.originUnavailable, "\(source.reference) could not be resolved.")
                })
            } else {
                let url = try parsedURL()
                resource = cache.resource(for: CacheKey(url: url), origin: HTTPOrigin(url: url, headers: try parsedHeaders(), transport: transport))
            }
            output = try self.output.map(FileDescriptorOutput.replacing(path:)) ?? .standardOutput
        } catch {
            await cache.shutdown()
            throw Failure.exit(error)
        }
        let showsProgress = !quiet && isatty(STDERR_FILENO) == 1
        do {
            // Ctrl-C stops the download: what came is recorded in the cache for the next run,
            // and a half-written output file is dropped.
            let interruption = try await TerminationSignals.cancelling {
                let progress = ProgressBar(enabled: showsProgress)
                defer { progress.finish() }
                var written: Int64 = 0
                for try await chunk in resource.read(range) {
                    try output.write(contentsOf: chunk.data)
                    written += Int64(chunk.data.count)
                    progress.update(done: written, total: await resource.info?.totalLength.map { min($0, range.upperBound) - range.lowerBound })
                }
            }
            if let interruption {
                if self.output != nil { output.discard() }
                await cache.shutdown()
                throw TerminationSignals.exit(stoppedBy: interruption)
            }
        } catch let error as ExitCode {
            throw error
        } catch {
            if self.output != nil { output.discard() }
            await cache.shutdown()
            throw Failure.exit(error)
        }
        await cache.shutdown()
        do {
            if self.output != nil { try output.finish() } else { try? output.synchronize() }
        } catch {
            throw Failure.exit(error)
        }
    }

    /// Streams the file through the server that holds the cache directory, as a player would:
    /// cached bytes come from its disk, missing ones from the origin into its cache. This
    /// command's download options do not apply (the server's do).
    private func get(range: ByteRange, through server: RunningServer,
                     register: @escaping @Sendable () async throws -> ControlAPI.ResourceStatus) async throws {
        server.tellHandOver(of: cache.directory, "the file comes through it",
                            notApplying: downloads.namesGiven + eviction.namesGiven + transportOptions.namesGiven)
        let output: FileDescriptorOutput
        do {
            output = try self.output.map(FileDescriptorOutput.replacing(path:)) ?? .standardOutput
        } catch {
            throw Failure.exit(error)
        }
        let showsProgress = !quiet && isatty(STDERR_FILENO) == 1
        do {
            let interruption = try await TerminationSignals.cancelling {
                let status = try await register()
                let response = try await server.stream(status, range: range)
                let expected = response.headers["Content-Length"].flatMap { Int64($0) }
                let progress = ProgressBar(enabled: showsProgress)
                defer { progress.finish() }
                var written: Int64 = 0
                // The server ends a stream early when the origin fails after the first byte: by
                // closing the connection, which the HTTP client reports as its own failure to
                // parse, or (another client) as a clean end. Either is told as what it is.
                let endedShort = { (written: Int64) -> StreamCacheError? in
                    guard let expected, written != expected else { return nil }
                    return StreamCacheError(.originUnavailable, "The server ended the stream after \(written) of \(expected) bytes; run the command again to fetch the rest.")
                }
                do {
                    for try await chunk in response.body {
                        try output.write(contentsOf: chunk)
                        written += Int64(chunk.count)
                        progress.update(done: written, total: expected)
                    }
                } catch let error as StreamCacheError where error.code == .originUnavailable {
                    throw endedShort(written) ?? error
                }
                if let error = endedShort(written) { throw error }
            }
            if let interruption {
                if self.output != nil { output.discard() }
                throw TerminationSignals.exit(stoppedBy: interruption)
            }
            if self.output != nil { try output.finish() } else { try? output.synchronize() }
        } catch let error as ExitCode {
            throw error
        } catch {
            if self.output != nil { output.discard() }
            throw Failure.exit(error)
        }
    }
}
