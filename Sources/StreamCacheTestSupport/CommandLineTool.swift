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
    public typealias Result = ExternalTool.Result

    /// Starts `streamcache` with `arguments` (and `environment` added to this process's); the
    /// caller waits or kills.
    public static func start(_ arguments: [String], stdin: FileHandle? = nil, stdout: FileHandle? = nil, stderr: FileHandle? = nil,
                             environment: [String: String] = [:]) throws -> ChildProcess {
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw NSError(domain: "CommandLineTool", code: 1, userInfo: [NSLocalizedDescriptionKey: "\(executable.path) is missing: run `swift build` first"])
        }
        return try ChildProcess.spawn(executable, arguments, environment: environment,
                                      input: stdin?.fileDescriptor, output: stdout?.fileDescriptor, errors: stderr?.fileDescriptor)
    }

    /// Runs `streamcache` to completion (bounded by `timeout` seconds, then killed).
    public static func run(_ arguments: [String], timeout: Double = 120, environment: [String: String] = [:]) async throws -> Result {
        try await ExternalTool.run(executable, arguments, timeout: timeout, environment: environment)
    }
}
