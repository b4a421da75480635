#if os(Linux)
import Foundation
import StreamCacheTestSupport
import Testing

/// The suite starts nginx, curl, ffmpeg and the CLI through ``ChildProcess``; what it reports
/// (exit codes, signals, output) is what many tests assert on, and a child must not inherit the
/// suite's descriptors.
@Suite struct ChildProcessTests {
    static let shell = URL(fileURLWithPath: "/bin/sh")

    @Test func aRunReportsItsExitCodeAndBothOutputs() async throws {
        let result = try await ExternalTool.run(Self.shell, ["-c", "echo out; echo err >&2; exit 3"])
        #expect(result.status == 3)
        #expect(result.output == "out\n")
        #expect(result.stderr == "err\n")
    }

    @Test func aRunPastItsTimeoutIsKilled() async throws {
        let started = ContinuousClock.now
        let result = try await ExternalTool.run(Self.shell, ["-c", "exec sleep 600"], timeout: 0.3)
        #expect(result.status == SIGKILL)
        // Far below the child's own time: a full run on one core once took 21 s for this.
        #expect(ContinuousClock.now - started < .seconds(300))
    }

    @Test func aSignalledChildSaysSoAndIsNotSignalledAgain() async throws {
        let child = try ChildProcess.spawn(Self.shell, ["-c", "exec sleep 30"])
        #expect(child.isRunning)
        #expect(child.signal(SIGTERM))
        try await child.exit(within: 10)
        #expect(!child.isRunning)
        #expect(child.terminationReason == .uncaughtSignal)
        #expect(child.terminationStatus == SIGTERM)
        // Reaped: its process identifier may belong to another process by now.
        #expect(!child.signal(SIGKILL))
    }

    /// With more descriptors open than Foundation's `Process` could list without crashing (about
    /// 1,360 on Linux), a child still starts and holds only its standard input, output and error.
    @Test func aChildInheritsNoDescriptorWhenManyAreOpen() async throws {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let extra = 1_500
        try #require(limit.rlim_cur > 2_000 + rlim_t(extra) || limit.rlim_max > 2_000 + rlim_t(extra),
                     "the descriptor limit (\(limit.rlim_cur), hard \(limit.rlim_max)) is too low for this test")
        if limit.rlim_cur <= 2_000 + rlim_t(extra) {
            limit.rlim_cur = min(limit.rlim_max, 8_192)
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        // Not close-on-exec, like a descriptor a library opened without the flag.
        let descriptors = (0..<extra).map { _ in open("/dev/null", O_RDONLY) }
        defer { descriptors.filter { $0 >= 0 }.forEach { close($0) } }
        try #require(descriptors.allSatisfy { $0 >= 0 })
        // `ls` lists its own descriptor of the directory too.
        let result = try await ExternalTool.run(Self.shell, ["-c", "exec ls /proc/self/fd"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.split(separator: "\n").count == 4, "the child held: \(result.output)")
    }
}
#endif
