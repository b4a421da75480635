import Foundation

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
            let child = try ChildProcess.spawn(executable, arguments, environment: environment,
                                               output: output.fileDescriptor, errors: errors.fileDescriptor)
            try await child.exit(within: timeout)
            status = child.terminationStatus
        }
        return Result(status: status, stdout: try Data(contentsOf: outURL),
                      stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }

    /// Runs the tool `name` found on `PATH`.
    public static func run(_ name: String, _ arguments: [String], package: String? = nil, timeout: Double = 120) async throws -> Result {
        try await run(require(name, package: package), arguments, timeout: timeout)
    }
}
