import Foundation

/// Runs `curl`, a real HTTP client, and returns the status, headers and body it got.
public enum Curl {
    /// What curl received.
    public struct Result: Sendable {
        /// The status of the last response.
        public var status: Int
        /// The headers, names lowercased.
        public var headers: [String: String]
        /// The body.
        public var body: Data
        /// The body as UTF-8 text.
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// Fetches `url` with extra curl `arguments` (`-H`, `-r`, `-X`, …).
    ///
    /// - Throws: When curl is missing or exits with an error (it does not for HTTP error statuses).
    public static func fetch(_ url: URL, _ arguments: [String] = []) async throws -> Result {
        try await withTemporaryDirectory { directory in
            let headerFile = directory.appendingPathComponent("headers").path
            let bodyFile = directory.appendingPathComponent("body").path
            // 30 s, times the sanitizer's slowdown: a cold 16 MB read through the proxy once took
            // longer than 30 s under the thread sanitizer with the whole suite running.
            let limit = String(30 * TestTiming.slowdown)
            let result = try await ExternalTool.run("curl", ["-s", "-S", "--max-time", limit, "-D", headerFile, "-o", bodyFile] + arguments + [url.absoluteString])
            guard result.status == 0 else {
                throw NSError(domain: "Curl", code: Int(result.status), userInfo: [NSLocalizedDescriptionKey: "curl failed: \(result.stderr)"])
            }
            let head = (try? String(contentsOfFile: headerFile, encoding: .utf8)) ?? ""
            var status = 0
            var headers: [String: String] = [:]
            for line in head.components(separatedBy: "\r\n") {
                if line.hasPrefix("HTTP/") {
                    status = Int(line.split(separator: " ")[1]) ?? 0
                } else if let colon = line.firstIndex(of: ":") {
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
            }
            let body = (try? Data(contentsOf: URL(fileURLWithPath: bodyFile))) ?? Data()
            return Result(status: status, headers: headers, body: body)
        }
    }
}
