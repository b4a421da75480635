import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs real programs (curl, ffmpeg, ffprobe, the built CLI) as child processes, bounded in time.
public enum ExternalTool {
    /// What a finished run printed.
    public struct Result: Sendable {
        /// The exit status.
        public var status: Int32
        /// Standard output.
        public var stdout: Data
        /// Standard error, as text.
        public var stderr: String
        /// Standard output, as text.
        public var output: String { String(decoding: stdout, as: UTF8.self) }
    }

    /// The absolute path of `name` on `PATH`.
    ///
    /// - Throws: An error naming the Debian package to install, so a missing tool fails the
    ///   test with an explanation instead of skipping it.
    public static func require(_ name: String, package: String? = nil) throws -> URL {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw NSError(domain: "ExternalTool", code: 1, userInfo: [
            NSLocalizedDescriptionKey: "\(name) is not installed: apt-get install -y \(package ?? name) (.ci/run does)",
        ])
    }

    /// Runs `executable` to completion, killing it after `timeout` seconds.
    public static func run(_ executable: URL, _ arguments: [String], timeout: Double = 120, environment: [String: String] = [:]) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("streamcache-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outURL = directory.appendingPathComponent("out")
        let errURL = directory.appendingPathComponent("err")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let status: Int32
        do {
            let output = try FileHandle(forWritingTo: outURL)
            let errors = try FileHandle(forWritingTo: errURL)
            defer {
                try? output.close()
                try? errors.close()
            }
            let pid = try spawn(executable, arguments, environment: environment, output: output.fileDescriptor, errors: errors.fileDescriptor)
            status = try await waitForExit(pid, timeout: timeout)
        }
        return Result(status: status, stdout: try Data(contentsOf: outURL),
                      stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }

    /// Starts `executable` with standard input from `/dev/null`, standard output and error into
    /// `output` and `errors`, and no other descriptor of this process.
    ///
    /// Not Foundation's `Process`: on Linux it finds the descriptors a child must not inherit by
    /// copying each `/proc/self/fd` entry with a whole 256-byte name, which reads past the end of
    /// the directory's buffer once a process has more than about 1,360 descriptors open. The
    /// suite's parallel tests open over 1,500, and a run crashed there.
    private static func spawn(_ executable: URL, _ arguments: [String], environment: [String: String],
                              output: Int32, errors: Int32) throws -> pid_t {
        #if canImport(Darwin)
        var actions: posix_spawn_file_actions_t?
        var attributes: posix_spawnattr_t?
        #else
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, errors, 2)
        #if canImport(Darwin)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_CLOEXEC_DEFAULT))
        #else
        // glibc 2.34 and later; Swift does not import it, so it is looked up by name. Without it
        // the child inherits the descriptors not marked close-on-exec.
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3)
        }
        #endif
        let argv = ([executable.path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable.path, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw NSError(domain: NSPOSIXErrorDomain, code: Int(result),
                          userInfo: [NSLocalizedDescriptionKey: "could not start \(executable.path): \(String(cString: strerror(result)))"])
        }
        return pid
    }

    /// Waits for child `pid` (polling every 10 ms), killing it after `timeout` seconds or when
    /// the calling task is cancelled. Returns its exit status, or the signal that ended it.
    private static func waitForExit(_ pid: pid_t, timeout: Double) async throws -> Int32 {
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(timeout)
        do {
            while true {
                let reaped = waitpid(pid, &status, WNOHANG)
                if reaped == pid { break }
                if reaped == -1, errno != EINTR {
                    throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno),
                                  userInfo: [NSLocalizedDescriptionKey: "lost child \(pid): \(String(cString: strerror(errno)))"])
                }
                if Date() >= deadline {
                    kill(pid, SIGKILL)
                    waitpid(pid, &status, 0)
                    break
                }
                try await Task.sleep(for: .milliseconds(10))
            }
        } catch {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
            throw error
        }
        // The <sys/wait.h> macros, which Swift does not import: a normal exit keeps its code in
        // the second byte, a signal sits in the low seven bits.
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : signal
    }

    /// Runs the tool `name` found on `PATH`.
    public static func run(_ name: String, _ arguments: [String], package: String? = nil, timeout: Double = 120) async throws -> Result {
        try await run(require(name, package: package), arguments, timeout: timeout)
    }
}
