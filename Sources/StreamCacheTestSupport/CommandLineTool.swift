import Foundation

/// Runs the built `streamcache` executable, as a user would.
public enum CommandLineTool {
    /// The `streamcache` binary next to the test bundle (`swift build` puts both in one folder).
    public static var executable: URL {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        if directory.lastPathComponent.hasSuffix(".xctest") || directory.path.contains(".xctest/") {
            while directory.path.contains(".xctest") { directory.deleteLastPathComponent() }
        }
        return directory.appendingPathComponent("streamcache")
    }

    /// What a finished run printed.
    public struct Result: Sendable {
        /// The exit status.
        public var status: Int32
        /// Standard output.
        public var stdout: Data
        /// Standard error, as text.
        public var stderr: String
    }

    /// Starts `streamcache` with `arguments`; the caller waits or kills.
    public static func start(_ arguments: [String], stdout: FileHandle? = nil) throws -> Process {
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw NSError(domain: "CommandLineTool", code: 1, userInfo: [NSLocalizedDescriptionKey: "\(executable.path) is missing: run `swift build` first"])
        }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = stdout ?? FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Runs `streamcache` to completion (bounded by `timeout` seconds, then killed).
    public static func run(_ arguments: [String], timeout: Double = 120) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("streamcache-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outURL = directory.appendingPathComponent("out")
        let errURL = directory.appendingPathComponent("err")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = try FileHandle(forWritingTo: outURL)
        process.standardError = try FileHandle(forWritingTo: errURL)
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        return Result(status: process.terminationStatus, stdout: try Data(contentsOf: outURL),
                      stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }
}
