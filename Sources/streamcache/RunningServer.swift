#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import struct HTTPTypes.HTTPField
import StreamCache
import StreamCacheServer

/// The `streamcache serve` that holds a cache directory, as the other commands find and ask it.
///
/// One process at a time uses a cache directory (``CacheWaitOptions``), and a server may run for
/// days: a `get`, `prefetch` or `cache pin` that waited for it would wait for nothing. They hand
/// their work to the server instead, through its control API, and it downloads into its cache as
/// it would for a player, with the same connections and the same record of what is cached.
///
/// The server says where it listens in `server.json` in the cache directory, written once it
/// serves and removed when it stops. The file holds the control token, so it is created with
/// mode 0600 like the token file. One a killed server left names a process that is gone, or a
/// port where nothing accepts that token: it is ignored, and the command waits as before.
struct RunningServer: Sendable {
    /// What `server.json` holds.
    struct Record: Codable, Sendable {
        /// The server's process.
        var pid: Int32
        /// Where a command on this machine reaches it: `http://127.0.0.1:PORT` for a server on
        /// every address or on loopback.
        var url: String
        /// The control API's bearer token.
        var token: String
    }

    static let fileName = "server.json"

    let record: Record
    let baseURL: URL
    let transport: any HTTPTransport

    // MARK: The server's side

    /// The record of a server listening at `baseURL` (its own address, possibly every address):
    /// the address a command on this machine uses to reach it.
    static func record(baseURL: URL, token: String) -> Record {
        var host = baseURL.host ?? "127.0.0.1"
        if host == "0.0.0.0" || host.isEmpty { host = "127.0.0.1" }
        if host == "::" || host == "[::]" { host = "[::1]" }
        if host.contains(":"), !host.hasPrefix("[") { host = "[\(host)]" }
        return Record(pid: getpid(), url: "http://\(host):\(baseURL.port ?? 80)", token: token)
    }

    /// Writes `record` into `directory` (see ``PrivateFile``: it holds the token).
    static func publish(_ record: Record, in directory: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let text = String(decoding: try encoder.encode(record), as: UTF8.self) + "\n"
        try PrivateFile.store(text, at: directory.appendingPathComponent(fileName).path, name: "the server record")
    }

    /// Removes the record of this process's server from `directory`, leaving one another server
    /// wrote since.
    static func withdraw(from directory: URL) {
        let path = directory.appendingPathComponent(fileName).path
        guard let record = read(path), record.pid == getpid() else { return }
        unlink(path)
    }

    // MARK: A command's side

    /// The server that holds `directory`, if one says so and answers with its token.
    static func find(in directory: URL, transport: any HTTPTransport) async -> RunningServer? {
        guard let record = read(directory.appendingPathComponent(fileName).path), record.pid != getpid(),
              kill(record.pid, 0) == 0 || errno == EPERM, let baseURL = URL(string: record.url)
        else { return nil }
        let server = RunningServer(record: record, baseURL: baseURL, transport: transport)
        // A process of that number may be another program by now, and a port may have changed
        // hands: only the server that wrote the token accepts it.
        guard let answer = try? await server.call("GET", "/api/stats", timeout: .seconds(5)), answer.status == 200 else { return nil }
        return server
    }

    /// Says on stderr that the server at work on `directory` does `what` (for example "it does
    /// this prefetch"), in place of this command; and that the command's `options` given (its
    /// download, eviction and proxy settings) do not apply there, the server's do, rather than
    /// dropping them without a word.
    func tellHandOver(of directory: URL, _ what: String, notApplying options: [String] = []) {
        FileDescriptorOutput.standardError.write(
            "streamcache: the cache at \(directory.path) is in use by the server at \(record.url) (process \(record.pid)); \(what).\n")
        if !options.isEmpty {
            FileDescriptorOutput.standardError.write("streamcache: the server's settings apply, not this command's \(options.joined(separator: ", ")).\n")
        }
    }

    private static func read(_ path: String) -> Record? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? JSONDecoder().decode(Record.self, from: data)
    }

    /// Registers `url`, fetched with `headers`, as the server's `POST /api/resources` does; the
    /// key is the one `get` and `prefetch` use for it. Without headers, a registration the server
    /// has for that key is used as it is: registering again would replace the headers it was
    /// given (a player's stream would lose its token to a `get` that had none to give).
    func register(_ url: URL, headers: HTTPHeaders) async throws -> ControlAPI.ResourceStatus {
        let key = CacheKey(url: url).rawValue
        if headers.fields.isEmpty {
            let answer = try await call("GET", "/api/resources")
            if answer.status == 200, let list = try? JSONDecoder().decode(ControlAPI.ResourceList.self, from: answer.body),
               let registered = list.resources.first(where: { $0.key == key }) {
                return registered
            }
        }
        var fields: [String: String] = [:]
        for field in headers { fields[field.name] = fields[field.name].map { "\($0), \(field.value)" } ?? field.value }
        let body = ControlAPI.RegisterRequest(url: url.absoluteString, headers: fields, key: key)
        return try decoded(try await call("POST", "/api/resources", body: try JSONEncoder().encode(body)))
    }

    /// Registers the file a source reference names; the server resolves it, with `access` and
    /// else its own credentials.
    func register(source reference: String, access: ControlAPI.SourceAccess, aliases: [String] = []) async throws -> ControlAPI.ResourceStatus {
        let body = ControlAPI.RegisterRequest(source: reference, access: access, aliases: aliases.isEmpty ? nil : aliases)
        return try decoded(try await call("POST", "/api/resources", body: try JSONEncoder().encode(body), timeout: .seconds(60)))
    }

    /// Starts the server's prefetch of the resource `id` (`POST /api/resources/{id}/prefetch`).
    func startPrefetch(of id: String, _ request: ControlAPI.PrefetchRequest) async throws -> ControlAPI.ResourceStatus {
        try decoded(try await call("POST", "/api/resources/\(id)/prefetch", body: try JSONEncoder().encode(request)))
    }

    /// Stops the server's prefetch of the resource `id` (`DELETE /api/resources/{id}/prefetch`);
    /// returns once it has stopped. `requestID`: the start this stop may overtake
    /// (``ControlAPI/PrefetchRequest/requestID``), which then does not start when it comes.
    func stopPrefetch(of id: String, requestID: UUID? = nil) async throws -> ControlAPI.ResourceStatus {
        // A UUID's text needs no escaping in a query.
        let query = requestID.map { "?requestID=\($0.uuidString)" } ?? ""
        return try decoded(try await call("DELETE", "/api/resources/\(id)/prefetch\(query)"))
    }

    /// The status of the resource `id`.
    func status(of id: String) async throws -> ControlAPI.ResourceStatus {
        try decoded(try await call("GET", "/api/resources/\(id)"))
    }

    /// Pins or unpins the cache's entry `key`; `false` when the cache does not know it.
    func setPinned(_ pinned: Bool, key: String) async throws -> Bool {
        let answer = try await call(pinned ? "PUT" : "DELETE", "/api/cache/\(Self.segment(key))/pin")
        if answer.status == 404 { return false }
        try check(answer)
        return true
    }

    /// Hashes the cached bytes of `key` again (``ControlAPI/ContentCheck``); `nil` when the cache
    /// does not know it.
    func checkContent(key: String) async throws -> ControlAPI.ContentCheck? {
        let answer = try await call("POST", "/api/cache/\(Self.segment(key))/verify")
        if answer.status == 404 { return nil }
        try check(answer)
        return try JSONDecoder().decode(ControlAPI.ContentCheck.self, from: answer.body)
    }

    /// Deletes the cache's entry `key` and its bytes; `false` when the cache does not know it.
    func remove(key: String) async throws -> Bool {
        let answer = try await call("DELETE", "/api/cache/\(Self.segment(key))")
        if answer.status == 404 { return false }
        try check(answer)
        return true
    }

    /// Deletes every entry nothing uses; says how many went and how many were kept.
    func removeAll() async throws -> ControlAPI.Removal {
        let answer = try await call("DELETE", "/api/cache")
        try check(answer)
        return try JSONDecoder().decode(ControlAPI.Removal.self, from: answer.body)
    }

    /// Runs one eviction pass by `request`'s rules in the server (`POST /api/cache/prune`).
    func prune(_ request: ControlAPI.PruneRequest) async throws -> ControlAPI.Pruning {
        try decoded(try await call("POST", "/api/cache/prune", body: try JSONEncoder().encode(request)), as: ControlAPI.Pruning.self)
    }

    /// `key` as one path segment: every byte but RFC 3986's unreserved ones percent-encoded.
    private static func segment(_ key: String) -> String {
        key.percentEncoded(allowing: URICharacters.isUnreserved)
    }

    /// Asks for `range` of a registered resource's stream as a player would; the answer's body
    /// streams. A failure before the first byte is thrown as the ``StreamCacheError`` the server
    /// names in its `StreamCache-Error` header.
    func stream(_ status: ControlAPI.ResourceStatus, range: ByteRange) async throws -> HTTPResponse {
        guard let url = URL(string: status.streamURL) else { throw StreamCacheError(.badResponse, "The server gave no usable stream URL.") }
        var headers = HTTPHeaders()
        if range.lowerBound > 0 || range.upperBound < Int64.max {
            headers.add(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound < Int64.max ? String(range.upperBound - 1) : "")")
        }
        let response = try await transport.send(HTTPRequest(url: url, headers: headers, timeout: .seconds(600)))
        guard response.status == 200 || response.status == 206 else {
            let text = String(decoding: (try? await response.body.collect(upTo: 4096)) ?? Data(), as: UTF8.self).trimmingWhitespace()
            let name = response.headers[HTTPField.Name.streamCacheError.rawName]
            throw StreamCacheError(Self.code(named: name, status: response.status), text.isEmpty ? "The server answered HTTP \(response.status)." : text)
        }
        return response
    }

    /// The error code named `name` (a ``StreamCacheError/Code``'s description), else one for
    /// the HTTP status.
    static func code(named name: String?, status: Int) -> StreamCacheError.Code {
        if let code = name.flatMap(code(named:)) { return code }
        switch status {
        case 400: return .invalidArgument
        case 404: return .notFound
        case 416: return .rangeNotSatisfiable
        default: return .originUnavailable
        }
    }

    /// The ``StreamCacheError/Code`` whose description is `name`, if any.
    static func code(named name: String) -> StreamCacheError.Code? {
        let codes: [StreamCacheError.Code] = [
            .originUnavailable, .resourceChanged, .rangeNotSatisfiable, .authenticationFailed, .notFound, .badResponse,
            .tooManyRedirects, .diskFull, .cacheIOFailed, .invalidArgument, .rangeNotSupported, .unsupportedMediaType,
            .invalidPlaylist, .cacheInUse, .contentMismatch,
        ]
        return codes.first { $0.description == name }
    }

    private func call(_ method: String, _ path: String, body: Data? = nil, timeout: Duration = .seconds(30)) async throws -> (status: Int, body: Data) {
        guard let url = URL(string: path, relativeTo: baseURL)?.absoluteURL else { throw StreamCacheError(.invalidArgument, "Bad control API path \(path).") }
        var headers: HTTPHeaders = ["Authorization": "Bearer \(record.token)"]
        if body != nil { headers.add(name: "Content-Type", value: "application/json") }
        let response = try await transport.send(HTTPRequest(method: method, url: url, headers: headers, body: body, timeout: timeout))
        return (response.status, try await response.body.collect(upTo: 1 << 20))
    }

    /// Throws the server's reason for an answer that is not a success.
    private func check(_ answer: (status: Int, body: Data)) throws {
        guard !(200..<300).contains(answer.status) else { return }
        let error = try? JSONDecoder().decode(ControlAPI.ErrorBody.self, from: answer.body)
        // A source's error names its kind (`notFound`, `authenticationFailed`), as a prefetch's does.
        throw StreamCacheError(error.flatMap { Self.code(named: $0.error) } ?? ([400, 409].contains(answer.status) ? .invalidArgument : .originUnavailable),
                               "The server at \(record.url) (process \(record.pid)) refused the request: \(error?.message ?? "HTTP \(answer.status)")")
    }

    private func decoded<Answer: Decodable>(_ answer: (status: Int, body: Data), as type: Answer.Type = ControlAPI.ResourceStatus.self) throws -> Answer {
        try check(answer)
        do {
            return try JSONDecoder().decode(Answer.self, from: answer.body)
        } catch {
            throw StreamCacheError(.badResponse, "The server at \(record.url) (process \(record.pid)) answered JSON this version cannot read.")
        }
    }
}
