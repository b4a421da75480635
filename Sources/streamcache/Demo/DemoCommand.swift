import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheHTTPClient
import StreamCacheServer

/// `streamcache demo`: the whole idea in one command, with no account and no network.
///
/// It starts an origin that demands a bearer token (as a cloud drive does) and serves generated
/// WAV tracks, puts the proxy in front of it with that token, plays a scripted session (open,
/// seek, seek back, replay) through the proxy the way a player would, and reports what came from
/// the origin and what from the cache.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Stream generated audio from a built-in origin that requires a token, through the proxy and the cache.",
        discussion: """
        Prints the stream URLs and a command to play them, then a scripted session (open, seek to the middle, seek back, replay) \
        with the time to first byte of each step and the bytes that came from the origin and from the cache. \
        With --keep-running it then keeps serving until Ctrl-C, for mpv, ffplay, VLC or a browser.
        """
    )

    @Flag(name: .customLong("keep-running"), help: "Keep serving after the scripted session, until Ctrl-C.")
    var keepRunning = false

    @Option(help: ArgumentHelp("The proxy's port (0 picks a free one).", valueName: "n"))
    var port = 0

    @Option(help: ArgumentHelp("Length of each generated track.", valueName: "seconds"))
    var seconds = 180

    @Option(name: .customLong("cache-dir"), help: ArgumentHelp("The cache directory (default: a fresh temporary one, removed at exit).", valueName: "dir"))
    var cacheDirectory: String?

    func validate() throws {
        guard (10...3600).contains(seconds) else { throw ValidationError("--seconds must be 10…3600.") }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0…65535.") }
    }

    func run() async throws {
        let temporary = cacheDirectory == nil
        let directory = cacheDirectory.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("streamcache-demo-\(UUID().uuidString)", isDirectory: true)
        defer { if temporary { try? FileManager.default.removeItem(at: directory) } }

        let tracks = ToneGenerator.tracks(seconds: seconds)
        let origin = DemoOrigin(files: tracks)
        let cache: StreamCache
        let server: ProxyServer
        let folder: URL
        do {
            folder = try await origin.start()
            cache = try StreamCache(configuration: .proxy(directory: directory))
            var configuration = ProxyServer.Configuration()
            configuration.port = port
            // No spare origin connection: the demo's origin is a Hummingbird server in this
            // process, which must not be sent new connections while it shuts down.
            server = try ProxyServer(cache: cache, configuration: configuration, transport: AsyncHTTPClientTransport.shared)
            try await server.start()
        } catch {
            await origin.stop()
            throw Failure.exit(error)
        }
        let header: HTTPHeaders = ["Authorization": "Bearer \(origin.token)"]
        let registrations = tracks.map { server.register(url: folder.appendingPathComponent($0.fileName), headers: header) }

        print("StreamCache demo")
        print("  origin  \(folder.absoluteString)  (requires 'Authorization: Bearer …'; players cannot send it)")
        print("  cache   \(directory.path)\(temporary ? "  (temporary)" : "")")
        print("  proxy   \(server.baseURL?.absoluteString ?? "")  (adds the header, caches every byte)")
        print("")
        print("Stream URLs (any player can open them):")
        for registration in registrations { print("  \(server.url(for: registration).absoluteString)") }
        let first = server.url(for: registrations[0]).absoluteString
        print("Play one:  ffplay -nodisp -autoexit '\(first)'    or    mpv '\(first)'")
        print("")

        do {
            try await playScriptedSession(url: server.url(for: registrations[0]), total: Int64(tracks[0].data.count),
                                          origin: origin, resource: server.resource(for: registrations[0]))
        } catch {
            print("the scripted session failed: \(error)")
        }

        if keepRunning {
            print("")
            print("Serving until Ctrl-C …")
            await TerminationSignals.wait()
        }
        await server.stop()
        await cache.shutdown()
        await origin.stop()
    }

    /// Plays the session a listener would: open, listen a little, jump to the middle, jump back,
    /// replay the start; one request per step, as a player sends them.
    private func playScriptedSession(url: URL, total: Int64, origin: DemoOrigin, resource: Resource?) async throws {
        let bytesPerSecond = Int64(ToneGenerator.sampleRate * 2)
        let listen = 5 * bytesPerSecond
        let steps: [(String, ByteRange)] = [
            ("probe (bytes=0-1)", ByteRange(0, 2)),
            ("play 0:00–0:05", ByteRange(0, listen)),
            ("seek to the middle", ByteRange(total / 2, min(total, total / 2 + listen))),
            ("seek back to 0:20", ByteRange(20 * bytesPerSecond, 25 * bytesPerSecond)),
            ("replay 0:00–0:05", ByteRange(0, listen)),
            ("middle again", ByteRange(total / 2, min(total, total / 2 + listen))),
        ]
        let transport = AsyncHTTPClientTransport()
        defer { Task { try? await transport.shutdown() } }
        print("Scripted session on \(url.lastPathComponent) (\(ByteFormat.string(total))):")
        print("  step                     bytes  first byte   origin sent   origin requests")
        for (name, range) in steps {
            let before = origin.snapshot
            let started = ContinuousClock.now
            let response = try await transport.send(HTTPRequest(url: url, headers: ["Range": "bytes=\(range.lowerBound)-\(range.httpLast)"]))
            guard response.status == 206 else { throw StreamCacheError(.badResponse, "The proxy answered \(response.status).", httpStatus: response.status) }
            var firstByte: Duration?
            var received: Int64 = 0
            for try await chunk in response.body {
                if firstByte == nil { firstByte = ContinuousClock.now - started }
                received += Int64(chunk.count)
            }
            let after = origin.snapshot
            let milliseconds = (firstByte ?? .zero).milliseconds
            let label: String = name.rightPadded(to: 21)
            let size: String = ByteFormat.string(received).leftPadded(to: 10)
            let latency: String = (milliseconds.fixed(1) + " ms").leftPadded(to: 13)
            let fromOrigin: String = ByteFormat.string(after.bodyBytes - before.bodyBytes).leftPadded(to: 14)
            let requests: String = "\(after.requests - before.requests)".leftPadded(to: 18)
            print("  " + label + size + latency + fromOrigin + requests)
        }
        let counters = origin.snapshot
        if let resource {
            await resource.flush()
            let statistics = await resource.statistics
            let ranges = (try? await resource.cachedRanges) ?? RangeSet()
            print("")
            print("Served \(ByteFormat.string(statistics.bytesServedFromCache)) from the cache and \(ByteFormat.string(statistics.bytesServedFromOrigin)) as it arrived from the origin;")
            print("the origin sent \(ByteFormat.string(counters.bodyBytes)) in \(counters.requests) requests (it rejected \(counters.rejected) without the token).")
            print("Cached: [\(CacheCommand.bar(ranges, total: total, width: 50))] \(ByteFormat.string(ranges.coveredByteCount)) of \(ByteFormat.string(total))")
        }
    }
}

extension Duration {
    fileprivate var milliseconds: Double {
        let parts = components
        return Double(parts.seconds) * 1000 + Double(parts.attoseconds) / 1e15
    }
}
