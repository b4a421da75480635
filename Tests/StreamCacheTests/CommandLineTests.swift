import Foundation
import GRDB
import StreamCache
import StreamCacheServer
import StreamCacheTestSupport
import Testing

/// Bad input to the CLI gives one clear line and a non-zero exit, and loses nothing.
@Suite struct CommandLineTests {
    /// The bytes `cache list` says the first resource of the cache in `directory` holds; 0 for none.
    static func cachedBytes(in directory: String) async throws -> Int64 {
        struct Row: Decodable { var cachedBytes: Int64 }
        let list = try await CommandLineTool.run(["cache", "list", "--json", "--cache-dir", directory])
        return (try? JSONDecoder().decode([Row].self, from: list.stdout))?.first?.cachedBytes ?? 0
    }

    @Test(arguments: [
        ["get", "not a url"],
        ["get", "ftp://example.com/a.mp3"],
        ["get", "http://127.0.0.1:1/a", "-H", "no colon"],
        ["get", "http://127.0.0.1:1/a", "-H", "Bad Name: x"],
        ["get", "http://127.0.0.1:1/a", "-H", "X-A: 1\r\nX-Injected: 2"],
        ["get", "http://127.0.0.1:1/a", "-H", "X-A: 1\u{1B}2"],
        ["get", "http://127.0.0.1:1/a", "--range", "10-5"],
        ["get", "http://127.0.0.1:1/a", "--range", "abc"],
        ["get", "http://127.0.0.1:1/a", "--revalidate-after", "soon"],
        ["get", "http://127.0.0.1:1/a", "--revalidate-after", "-5m"],
        ["get", "http://127.0.0.1:1/a", "--connections-per-host", "0"],
        ["get", "http://127.0.0.1:1/a", "--cacert", "/nonexistent/ca.pem"],
        ["get", "http://127.0.0.1:1/a", "--max-cache-size", "big"],
        ["prefetch", "http://127.0.0.1:1/a", "--max-age", "old"],
        ["prefetch", "http://127.0.0.1:1/a", "--min-free-space", "-1GB"],
        ["prefetch", "http://127.0.0.1:1/a", "--limit-rate", "0"],
        ["prefetch", "http://127.0.0.1:1/a", "--limit-rate", "fast"],
        ["serve", "http://127.0.0.1:1/a", "--limit-rate", "-1MB/s"],
        ["serve", "http://127.0.0.1:1/a", "--retry-offline-after", "soon"],
        ["serve", "http://127.0.0.1:1/a", "--pin"],
        // A read is never held back: `get` has no rate to keep to.
        ["get", "http://127.0.0.1:1/a", "--limit-rate", "1MB"],
    ])
    func malformedInputIsAUsageError(arguments: [String]) async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CommandLineTool.run(arguments + ["--cache-dir", directory.path])
            #expect(result.status == 64)
            #expect(result.stderr.hasPrefix("Error: "))
            #expect(!result.stderr.contains("Fatal error"))
        }
    }

    /// `prefetch --max-cache-size` keeps the cache to the size when it opens the cache itself: the
    /// third file of 1 MB under a limit of 2.5 MB evicts the least recently used one, and the
    /// command returns once the pass is done.
    @Test func prefetchKeepsTheCacheToTheSizeGiven() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let paths = ["/one.mp3", "/two.mp3", "/three.mp3"]
        for (index, path) in paths.enumerated() { server.setFile(path, data: TestData.random(count: 1_000_000, seed: 530 + UInt64(index))) }
        try await withTemporaryDirectory { directory in
            for path in paths {
                let prefetched = try await CommandLineTool.run(["prefetch", server.url(path).absoluteString, "--quiet", "--max-cache-size", "2.5MB",
                                                                "--cache-dir", directory.path])
                #expect(prefetched.status == 0, "\(prefetched.stderr)")
                // The index's access times are to the millisecond or finer; the next file is younger.
                try await Task.sleep(for: .milliseconds(20))
            }
            let keys = Set(try await CacheStore(inspecting: directory).entries().map(\.key))
            #expect(keys == Set(["/two.mp3", "/three.mp3"].map { CacheKey(url: server.url($0)) }), "\(keys)")
        }
    }

    /// `prefetch --limit-rate 1MB/s` of a 3 MB file takes the time the rate gives it (without the
    /// rate, a loopback origin gives it in milliseconds), and caches every byte.
    @Test func prefetchKeepsToTheRateGiven() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 3_000_000, seed: 533)
        server.setFile("/album.flac", data: data)
        try await withTemporaryDirectory { directory in
            let started = ContinuousClock.now
            let prefetched = try await CommandLineTool.run(["prefetch", server.url("/album.flac").absoluteString, "--quiet", "--limit-rate", "1MB/s",
                                                            "--cache-dir", directory.path])
            let took = ContinuousClock.now - started
            #expect(prefetched.status == 0, "\(prefetched.stderr)")
            #expect(took >= .milliseconds(1_400), "3 MB at 1 MB/s took \(took)")
            #expect(try await Self.cachedBytes(in: directory.path) == Int64(data.count))
            #expect(server.bodyBytesSent(for: "/album.flac") == Int64(data.count))
        }
    }

    /// `prefetch --pin` downloads a file for offline play that eviction never removes: under
    /// `--max-cache-size 2.5MB`, the pinned file, the oldest, stays as three more come, and the
    /// unpinned ones go, oldest first. Beside a server, the server pins it.
    @Test func prefetchPinKeepsTheFileThroughEviction() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let paths = ["/offline.flac", "/two.flac", "/three.flac", "/four.flac"]
        for (index, path) in paths.enumerated() { server.setFile(path, data: TestData.random(count: 1_000_000, seed: 540 + UInt64(index))) }
        try await withTemporaryDirectory { directory in
            let cache = ["--cache-dir", directory.path]
            let pinned = try await CommandLineTool.run(["prefetch", server.url(paths[0]).absoluteString, "--quiet", "--pin"] + cache)
            #expect(pinned.status == 0 && pinned.output.trimmingCharacters(in: .newlines).hasSuffix("cached for \(server.url(paths[0]).absoluteString), pinned"),
                    "\(pinned.stderr) \(pinned.output)")
            for path in paths.dropFirst() {
                try await Task.sleep(for: .milliseconds(20))
                let prefetched = try await CommandLineTool.run(["prefetch", server.url(path).absoluteString, "--quiet", "--max-cache-size", "2.5MB"] + cache)
                #expect(prefetched.status == 0, "\(prefetched.stderr)")
            }
            let keys = Set(try await CacheStore(inspecting: directory).entries().map(\.key))
            // Each pass goes down to 90 % of the limit: the pinned file and the newest one are left.
            #expect(keys == Set([paths[0], paths[3]].map { CacheKey(url: server.url($0)) }), "\(keys)")
            let info = try await CommandLineTool.run(["cache", "info", CacheKey(url: server.url(paths[0])).rawValue] + cache)
            #expect(info.output.contains("pinned:        true"), "\(info.output)")

            // Beside a server, the server prefetches and pins.
            server.setFile("/five.flac", data: TestData.random(count: 500_000, seed: 545))
            let (serving, cacheDirectory) = try await ServeCommandTests.serveWithoutURLs(in: directory.appendingPathComponent("served"))
            defer { serving.signal(SIGKILL) }
            let handed = try await CommandLineTool.run(["prefetch", server.url("/five.flac").absoluteString, "--quiet", "--pin", "--cache-dir", cacheDirectory.path])
            #expect(handed.status == 0 && handed.output.trimmingCharacters(in: .newlines).hasSuffix(", pinned"), "\(handed.stderr) \(handed.output)")
            let handedInfo = try await CommandLineTool.run(["cache", "info", CacheKey(url: server.url("/five.flac")).rawValue, "--cache-dir", cacheDirectory.path])
            #expect(handedInfo.output.contains("pinned:        true"), "\(handedInfo.output)")
            #expect(try await ServeCommandTests.terminate(serving) == 0)
        }
    }

    /// `get --max-age` of a file older than the maximum age writes it from the cache: the pass
    /// that runs as the cache opens leaves the file the command opened it to read, and the read
    /// counts it read now. Alone, the read began before the pass came to the file every time; in
    /// a full run of the suite the pass evicted it once first, and the `get` fetched it again
    /// (the command now names its file when it opens the cache: see
    /// `EvictionTests.aResourceTheCacheIsOpenedToReadOutlivesThePassAtOpen`).
    @Test func getOfAFileOlderThanTheMaximumAgeWritesItFromTheCache() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 2_000_000, seed: 533)
        server.setFile("/old.mp3", data: data)
        try await withTemporaryDirectory { directory in
            let cacheDirectory = directory.appendingPathComponent("cache")
            let first = try await CommandLineTool.run(["get", server.url("/old.mp3").absoluteString, "-o", directory.appendingPathComponent("first.mp3").path,
                                                       "--quiet", "--cache-dir", cacheDirectory.path])
            #expect(first.status == 0, "\(first.stderr)")
            try await DatabaseQueue(path: cacheDirectory.appendingPathComponent("index.sqlite").path).write { db in
                try db.execute(sql: #"UPDATE "resource" SET "lastAccessedAt" = ?"#, arguments: [Date().timeIntervalSince1970 - 2 * 86_400])
            }
            let requests = server.dataRequests(for: "/old.mp3").count
            let output = directory.appendingPathComponent("second.mp3")
            let second = try await CommandLineTool.run(["get", server.url("/old.mp3").absoluteString, "-o", output.path, "--quiet", "--max-age", "1d",
                                                        "--cache-dir", cacheDirectory.path])
            #expect(second.status == 0, "\(second.stderr)")
            #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data))
            #expect(server.dataRequests(for: "/old.mp3").count == requests, "written from the cache")
            let entry = try #require(try await CacheStore(inspecting: cacheDirectory).entries().first)
            #expect(entry.spans.coveredByteCount == Int64(data.count))
            #expect(Date().timeIntervalSince(entry.lastAccessedAt) < 3_600, "read now")
        }
    }

    /// `cache prune` evicts by the rules it is given, once: of three files of 1 MB, the one not
    /// read for two days goes by `--max-age 1d`, and the oldest of the other two by
    /// `--max-cache-size 1.5MB` (the pass goes down to 90 % of it); `--dry-run` tells the same
    /// and removes nothing. Without a rule it says what it needs.
    @Test func cachePruneEvictsByTheRulesGivenAndTellsWhat() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let paths = ["/one.mp3", "/two.mp3", "/three.mp3"]
        for (index, path) in paths.enumerated() { server.setFile(path, data: TestData.random(count: 1_000_000, seed: 536 + UInt64(index))) }
        try await withTemporaryDirectory { directory in
            let cache = ["--cache-dir", directory.path]
            for path in paths {
                let got = try await CommandLineTool.run(["prefetch", server.url(path).absoluteString, "--quiet"] + cache)
                #expect(got.status == 0, "\(got.stderr)")
                try await Task.sleep(for: .milliseconds(20))
            }
            // The newest is the one not read for two days.
            try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).write { db in
                try db.execute(sql: #"UPDATE "resource" SET "lastAccessedAt" = ? WHERE "key" = ?"#,
                               arguments: [Date().timeIntervalSince1970 - 2 * 86_400, server.url("/three.mp3").absoluteString])
            }
            let key = { (path: String) in server.url(path).absoluteString }
            let expected = [("/three.mp3", "age"), ("/one.mp3", "size")].map { ControlAPI.Pruning.Evicted(key: key($0.0), bytes: 1_000_000, reason: $0.1) }
            let rules = ["--max-age", "1d", "--max-cache-size", "1.5MB"]
            let dry = try await CommandLineTool.run(["cache", "prune", "--dry-run", "--json"] + rules + cache)
            #expect(dry.status == 0, "\(dry.stderr)")
            #expect(try JSONDecoder().decode(ControlAPI.Pruning.self, from: dry.stdout) == ControlAPI.Pruning(evicted: expected, dryRun: true), "\(dry.output)")
            #expect(Set(try await CacheStore(inspecting: directory).entries().map(\.key.rawValue)) == Set(paths.map(key)), "a dry run evicts nothing")

            let pruned = try await CommandLineTool.run(["cache", "prune"] + rules + cache)
            #expect(pruned.status == 0, "\(pruned.stderr)")
            #expect(pruned.output.contains("evicted 2 resource(s), 1.9 MiB"), "\(pruned.output)")
            #expect(pruned.output.contains("\(key("/three.mp3"))  (not read for longer than the maximum age)"), "\(pruned.output)")
            #expect(try await CacheStore(inspecting: directory).entries().map(\.key.rawValue) == [key("/two.mp3")])
            let again = try await CommandLineTool.run(["cache", "prune"] + rules + cache)
            #expect(again.status == 0 && again.output.contains("nothing to evict"), "\(again.output)")

            let ruleless = try await CommandLineTool.run(["cache", "prune"] + cache)
            #expect(ruleless.status != 0 && ruleless.stderr.contains("Name at least one rule"), "\(ruleless.stderr)")
            let bad = try await CommandLineTool.run(["cache", "prune", "--max-cache-size", "lots"] + cache)
            #expect(bad.status != 0, "\(bad.stderr)")
        }
    }

    /// `--revalidate-after`: a second `get` in another process finds the file replaced at the
    /// origin and writes the new bytes; without it, the cached file is written with no request.
    /// `--connections-per-host` holds the connections to the origin's host to what the service
    /// allows: a long `get` from an origin that caps each connection's speed takes parts side by
    /// side by default, and one connection at a time with `--connections-per-host 1`.
    @Test func getKeepsToTheConnectionsItsHostAllows() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        // Longer than two 8 MiB parts, so that the read is split.
        let data = TestData.random(count: 18_000_000, seed: 86)
        server.setFile("/long.bin", data: data)
        server.bytesPerSecond = TestTiming.rate(8_000_000)
        try await withTemporaryDirectory { directory in
            for (extra, mostAtOnce) in [([String](), 2...4), (["--connections-per-host", "1"], 1...1)] {
                server.resetRecords()
                let output = directory.appendingPathComponent("copy-\(extra.count).bin")
                let got = try await CommandLineTool.run(["get", server.url("/long.bin").absoluteString, "-o", output.path, "--quiet",
                                                         "--cache-dir", directory.appendingPathComponent("cache-\(extra.count)").path] + extra)
                #expect(got.status == 0, "\(got.stderr)")
                #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data))
                // The origin records a request once it has sent it all.
                try await waitWhile(tries: 100, every: .milliseconds(20)) { server.bodyBytesSent(for: "/long.bin") < Int64(data.count) }
                let atOnce = server.maximumConcurrency(for: "/long.bin")
                #expect(mostAtOnce.contains(atOnce), "\(extra): \(atOnce) connections at once")
            }
        }
    }

    /// `get -o FILE` replaces FILE only once every byte is in: a download that fails halfway, or
    /// a file the origin does not have, leaves what was there, and no partial file beside it. A
    /// symbolic link is followed, not replaced; the file keeps its permissions. A partial file that
    /// a killed run left (its process gone) is deleted by the next run; one a running `get` writes
    /// is left alone.
    @Test func getReplacesItsOutputFileOnlyWhenEveryByteIsIn() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 2_000_000, seed: 87)
        server.setFile("/song.mp3", data: data)
        try await withTemporaryDirectory { directory in
            let output = directory.appendingPathComponent("song.mp3")
            let earlier = Data("the copy from last week".utf8)
            try earlier.write(to: output)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: output.path)
            let cache = directory.appendingPathComponent("cache").path
            // The song's first request breaks off after 600 kB; every later one is refused.
            server.faults = { _, path, _, index in path != "/song.mp3" ? nil : index == 0 ? .dropAfter(bytes: 600_000) : .status(403) }
            let failed = try await CommandLineTool.run(["get", server.url("/song.mp3").absoluteString, "-o", output.path, "--quiet", "--cache-dir", cache])
            #expect(failed.status == 4, "\(failed.stderr)")
            let missing = try await CommandLineTool.run(["get", server.url("/gone.mp3").absoluteString, "-o", output.path, "--quiet", "--cache-dir", cache])
            #expect(missing.status == 5, "\(missing.stderr)")
            #expect(try Data(contentsOf: output) == earlier)
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["cache", "song.mp3"])

            // What a killed run left beside the file goes; what a running one writes stays.
            let exited = try ChildProcess.spawn(URL(fileURLWithPath: "/bin/true"), [])
            exited.waitUntilExit()
            let leftover = ".song.mp3.streamcache-\(exited.processIdentifier).part"
            let running = ".song.mp3.streamcache-\(getpid()).part"
            for name in [leftover, running] { try Data("half a song".utf8).write(to: directory.appendingPathComponent(name)) }

            // Through a symbolic link, the file it points to is replaced, and the link stays.
            server.faults = nil
            let link = directory.appendingPathComponent("latest.mp3")
            try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "song.mp3")
            let got = try await CommandLineTool.run(["get", server.url("/song.mp3").absoluteString, "-o", link.path, "--quiet", "--cache-dir", cache])
            #expect(got.status == 0, "\(got.stderr)")
            #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data))
            #expect(try FileManager.default.attributesOfItem(atPath: output.path)[.posixPermissions] as? Int == 0o600, "the file keeps its permissions")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link.path) == "song.mp3")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == [running, "cache", "latest.mp3", "song.mp3"])
        }
    }

    /// Ctrl-C stops `get` the way an error does, not halfway: exit 130, the output file as it was
    /// and no partial one beside it, and the bytes that came recorded in the cache, so that the
    /// next run fetches only the rest. `prefetch` stops the same way.
    @Test func anInterruptedGetKeepsWhatCameForTheNextRunAndLeavesItsOutputAlone() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 6_000_000, seed: 88)
        server.setFile("/song.mp3", data: data)
        // Every answer stops after 700 kB until the end: whatever the machine's load, neither
        // command can finish before it is interrupted.
        let released = Locked(false)
        server.faults = { _, _, _, _ in .pause(afterBytes: 700_000, until: { released.withLock { $0 } }) }
        try await withTemporaryDirectory { directory in
            let output = directory.appendingPathComponent("song.mp3")
            let earlier = Data("the copy from last week".utf8)
            try earlier.write(to: output)
            let cache = directory.appendingPathComponent("cache").path
            let url = server.url("/song.mp3").absoluteString
            let cached = { try await Self.cachedBytes(in: cache) }
            let partial = { () -> Int in
                let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
                return names.filter { $0.hasSuffix(".part") }.compactMap {
                    (try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent($0).path))?[.size] as? Int
                }.reduce(0, +)
            }
            for (command, output) in [(["get", url, "-o", output.path], output), (["prefetch", url], nil)] {
                let before = try await cached()
                let process = try CommandLineTool.start(command + ["--quiet", "--connections", "1", "--cache-dir", cache])
                defer { process.signal(SIGKILL) }
                // Until the get has written out the 700 kB, or the prefetch has recorded some.
                for _ in 0..<500 {
                    guard process.isRunning else { break }
                    if output != nil ? partial() >= 700_000 : try await cached() > before { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(process.isRunning)
                let written = partial()
                process.signal(SIGINT)
                try await waitWhile(tries: 1500, every: .milliseconds(20)) { process.isRunning }
                #expect(process.terminationReason == .exit && process.terminationStatus == 130, "\(command[0])")
                if output != nil {
                    #expect(written >= 700_000)
                    #expect(try await cached() >= Int64(written), "every byte written out is in the cache")
                    #expect(try Data(contentsOf: output!) == earlier)
                    #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["cache", "song.mp3"])
                }
            }

            let kept = try await cached()
            #expect(kept >= 1_400_000 && kept < Int64(data.count))
            released.withLock { $0 = true }
            server.faults = nil
            // The interrupted requests are recorded when their connections close, which may be
            // later: the next run's requests are those that arrive from now on.
            let resumed = ContinuousClock.now
            let fetched = { server.requests.filter { $0.interval.lowerBound >= resumed }.map(\.bodyBytesSent).reduce(0, +) }
            let got = try await CommandLineTool.run(["get", url, "-o", output.path, "--quiet", "--cache-dir", cache])
            #expect(got.status == 0, "\(got.stderr)")
            #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data))
            try await waitWhile(tries: 100, every: .milliseconds(20)) { fetched() < Int64(data.count) - kept }
            #expect(fetched() == Int64(data.count) - kept, "only the missing bytes are fetched")
        }
    }

    /// `get … | head -c 100`: the reader of the pipe leaves early, and `get` ends as `cat` would,
    /// quietly with 141, keeping what it downloaded; its cache did not fail.
    @Test func getIntoAPipeWhoseReaderLeavesEndsQuietlyAndKeepsItsBytes() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 3_000_000, seed: 89)
        server.setFile("/song.mp3", data: data)
        try await withTemporaryDirectory { directory in
            let cache = directory.appendingPathComponent("cache").path
            let pipeline = #""$0" get "$1" --cache-dir "$2" 2>"$3" | head -c 100 | wc -c; echo "${PIPESTATUS[0]}""#
            let errors = directory.appendingPathComponent("stderr")
            let run = try await ExternalTool.run("bash", ["-c", pipeline, CommandLineTool.executable.path, server.url("/song.mp3").absoluteString, cache, errors.path])
            #expect(run.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) } == ["100", "141"], "\(run.output)")
            #expect(try String(contentsOf: errors, encoding: .utf8).isEmpty)
            #expect(try await Self.cachedBytes(in: cache) > 0)
        }
    }

    @Test func getWithRevalidationWritesTheNewVersionOfAReplacedFile() async throws {
        let server = try TestOrigin()
        let old = TestData.random(count: 300_000, seed: 82)
        let new = TestData.random(count: 310_000, seed: 83)
        server.setFile("/r.mp3", data: old, entityTag: "\"v1\"")
        try await withTemporaryDirectory { directory in
            let url = server.url("/r.mp3").absoluteString
            let first = try await CommandLineTool.run(["get", url, "--cache-dir", directory.path, "--revalidate-after", "1h"])
            #expect(first.status == 0 && first.stdout == old)
            server.setFile("/r.mp3", data: new, entityTag: "\"v2\"")
            server.resetRecords()
            let trusted = try await CommandLineTool.run(["get", url, "--cache-dir", directory.path, "--revalidate-after", "1h"])
            #expect(trusted.status == 0 && trusted.stdout == old)
            #expect(server.requests.isEmpty, "the origin's word of the first process holds for an hour")
            let checked = try await CommandLineTool.run(["get", url, "--cache-dir", directory.path, "--revalidate-after", "0s"])
            #expect(checked.status == 0)
            #expect(TestData.sha256(checked.stdout) == TestData.sha256(new))
            #expect(server.requests.first?.range == "bytes=0-0")

            // `cache list` tells when the origin last vouched for the bytes.
            let list = try await CommandLineTool.run(["cache", "list", "--json", "--cache-dir", directory.path])
            struct Row: Decodable { var verified: Date? }
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            let verified = try #require(try decoder.decode([Row].self, from: list.stdout).first?.verified)
            #expect(abs(verified.timeIntervalSinceNow) < 120)
        }
    }

    /// `prefetch` of a file whose origin publishes a `Repr-Digest`: `cache info` shows the digest
    /// and that the cached bytes match it; an origin whose bytes fail it twice, differently, makes
    /// `prefetch` exit 3 with `contentMismatch`.
    @Test func prefetchChecksTheOriginsDigestAndInfoShowsIt() async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: 500_000, seed: 84)
        let digest = ContentHasher.digest(.sha256, of: data)
        let header = ["Repr-Digest": "sha-256=:\(Data(digest.bytes).base64EncodedString()):"]
        server.setFile("/d.flac", data: data, extraHeaders: header)
        server.setFile("/bad.flac", data: data, extraHeaders: header)
        let flips = Locked(0)
        server.faults = { _, path, _, _ in
            guard path == "/bad.flac" else { return nil }
            return .flipByte(at: Int64(flips.withLock { count in
                count += 1
                return count * 1000
            }))
        }
        try await withTemporaryDirectory { directory in
            let good = server.url("/d.flac").absoluteString
            let prefetched = try await CommandLineTool.run(["prefetch", good, "--quiet", "--cache-dir", directory.path])
            #expect(prefetched.status == 0)
            let info = try await CommandLineTool.run(["cache", "info", CacheKey(url: server.url("/d.flac")).rawValue, "--json", "--cache-dir", directory.path])
            struct Shown: Decodable { var contentDigest: String?; var contentMatched: Bool }
            let shown = try JSONDecoder().decode(Shown.self, from: info.stdout)
            #expect(shown.contentDigest == digest.description)
            #expect(shown.contentMatched)

            // `cache verify` hashes the file again: a byte changed on the disk drops it (exit 8).
            let verified = try await CommandLineTool.run(["cache", "verify", "--cache-dir", directory.path])
            #expect(verified.status == 0)
            #expect(verified.output.hasPrefix("matched"), "\(verified.output)")
            let key = CacheKey(url: server.url("/d.flac"))
            try ContentCheckTests.invertByte(at: 1234, inTheDataFileOf: key, cachedIn: directory)
            let rotted = try await CommandLineTool.run(["cache", "verify", key.rawValue, "--json", "--cache-dir", directory.path])
            #expect(rotted.status == 8)
            struct Row: Decodable { var key: String; var result: String; var expected: String? }
            let rows = try JSONDecoder().decode([Row].self, from: rotted.stdout)
            #expect(rows.map(\.result) == ["mismatched"])
            #expect(rows.first?.expected == digest.description)
            let after = try await CommandLineTool.run(["cache", "verify", key.rawValue, "--cache-dir", directory.path])
            #expect(after.status == 0)
            #expect(after.output.hasPrefix("incomplete"), "\(after.output)")

            let bad = try await CommandLineTool.run(["prefetch", server.url("/bad.flac").absoluteString, "--quiet", "--connections", "1",
                                                     "--cache-dir", directory.path])
            #expect(bad.status == 8)
            #expect(bad.stderr.contains("contentMismatch"), "\(bad.stderr)")
            let unchecked = try await CommandLineTool.run(["prefetch", server.url("/bad.flac").absoluteString, "--quiet", "--no-content-check",
                                                           "--cache-dir", directory.path])
            #expect(unchecked.status == 0, "\(unchecked.stderr)")
        }
    }

    @Test func rangeListAndClear() async throws {
        let server = try TestOrigin()
        let data = TestData.random(count: 400_000, seed: 81)
        server.setFile("/t.mp3", data: data, contentType: "audio/mpeg")
        try await withTemporaryDirectory { directory in
            let url = server.url("/t.mp3").absoluteString
            let part = try await CommandLineTool.run(["get", url, "--range", "1000-1999", "--cache-dir", directory.path])
            #expect(part.status == 0)
            #expect(part.stdout == data[1000..<2000])
            let list = try await CommandLineTool.run(["cache", "list", "--json", "--cache-dir", directory.path])
            #expect(list.status == 0)
            struct Row: Decodable { var key: String; var size: Int64?; var cachedBytes: Int64; var uti: String? }
            let rows = try JSONDecoder().decode([Row].self, from: list.stdout)
            #expect(rows.count == 1)
            #expect(rows.first?.size == 400_000)
            #expect(rows.first?.uti == "public.mp3")
            #expect((rows.first?.cachedBytes ?? 0) >= 1000)
            let text = try await CommandLineTool.run(["cache", "list", "--cache-dir", directory.path])
            #expect(String(decoding: text.stdout, as: UTF8.self).contains(url))
            let pin = try await CommandLineTool.run(["cache", "pin", "no-such-key", "--cache-dir", directory.path])
            #expect(pin.status == 2)
            let clear = try await CommandLineTool.run(["cache", "clear", "--cache-dir", directory.path])
            #expect(clear.status == 0)
            let after = try await CommandLineTool.run(["cache", "list", "--json", "--cache-dir", directory.path])
            #expect(try JSONDecoder().decode([Row].self, from: after.stdout).isEmpty)
        }
    }

    /// `cache list` and `cache info` draw the bar of a resource whose origin stated a length near
    /// the largest the cache takes (``ByteRange/largestLength``): the bar's arithmetic
    /// overflowed past 2.3 × 10^17 bytes and stopped the command. An index row whose length no
    /// file can have (an index edited by hand, or damaged) is a length not known yet: it lists so,
    /// and the file plays whole, its cached bytes kept.
    @Test func theCacheCommandsTakeAnyLengthTheIndexHolds() async throws {
        let server = try TestOrigin()
        defer { server.stop() }
        let data = TestData.random(count: 4_000_000, seed: 82)
        server.setFile("/t.mp3", data: data, contentType: "audio/mpeg")
        try await withTemporaryDirectory { directory in
            let url = server.url("/t.mp3").absoluteString
            let cache = ["--cache-dir", directory.path]
            let part = try await CommandLineTool.run(["get", url, "--range", "0-99999"] + cache)
            #expect(part.status == 0 && part.stdout == data[0..<100_000], "\(part.stderr)")
            let cached = try await Self.cachedBytes(in: directory.path)
            #expect(cached >= 100_000 && cached < 4_000_000, "\(cached)")
            let setLength = { (length: Int64) in
                try await DatabaseQueue(path: directory.appendingPathComponent("index.sqlite").path).write { db in
                    try db.execute(sql: #"UPDATE "resource" SET "totalLength" = ?"#, arguments: [length])
                }
            }
            struct Row: Decodable { var size: Int64?; var cachedBytes: Int64 }
            try await setLength(ByteRange.largestLength)
            let list = try await CommandLineTool.run(["cache", "list"] + cache)
            #expect(list.status == 0 && list.output.contains("[+......................................."), "\(list.output)")
            let info = try await CommandLineTool.run(["cache", "info", url] + cache)
            #expect(info.status == 0 && info.output.contains("size:          \(ByteRange.largestLength) bytes"), "\(info.output)")

            for length in [-5, Int64.max] {
                try await setLength(length)
                let json = try await CommandLineTool.run(["cache", "list", "--json"] + cache)
                #expect(json.status == 0, "\(json.stderr)")
                let rows = try JSONDecoder().decode([Row].self, from: json.stdout)
                #expect(rows.map(\.size) == [nil] && rows.map(\.cachedBytes) == [cached], "\(json.output)")
                let text = try await CommandLineTool.run(["cache", "list"] + cache)
                #expect(text.status == 0, "\(text.stderr)")
            }
            let requestsBefore = server.requests.count
            let whole = try await CommandLineTool.run(["get", url] + cache)
            #expect(whole.status == 0, "\(whole.stderr)")
            #expect(TestData.sha256(whole.stdout) == TestData.sha256(data))
            #expect(server.requests.dropFirst(requestsBefore).allSatisfy { $0.range != "bytes=0-" }, "the cached bytes were fetched again: \(server.requests.map(\.range))")
        }
    }
}
