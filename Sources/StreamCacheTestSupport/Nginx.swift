import Foundation
import StreamCache

/// A real nginx serving a directory on 127.0.0.1 for integration tests, started and stopped by
/// the test itself. Optionally requires an exact `Authorization` header (401 otherwise). Its access
/// log records each request's `Range` header, status and body bytes, so tests can count what the
/// origin sent.
public final class Nginx: Sendable {
    /// One access-log line.
    public struct LogEntry: Sendable {
        /// The request path.
        public var path: String
        /// The `Range` header, or `-`.
        public var range: String
        /// The status.
        public var status: Int
        /// Body bytes sent.
        public var bodyBytes: Int64
        /// nginx's serial number of the connection the request came on (equal numbers: a reused
        /// keep-alive connection).
        public var connection: Int
        /// When nginx logged the request (its last byte sent), in seconds since 1970, to the
        /// millisecond (`$msec`).
        public var endedAt: Double
        /// How long nginx took over the request, from its first byte read to its last byte
        /// sent, to the millisecond (`$request_time`).
        public var duration: Double
        /// When nginx read the request's first byte, in seconds since 1970.
        public var startedAt: Double { endedAt - duration }
    }

    /// The port nginx listens on.
    public let port: Int
    /// `https` when it serves TLS with a test authority's certificate, `http` otherwise.
    public let scheme: String
    /// The directory it serves.
    public let root: URL
    private let prefix: URL
    private let process: ChildProcess
    /// A socket bound to ``port`` with `SO_REUSEPORT`, never listening, for the server's whole
    /// life: nginx listens beside it, and once nginx has stopped it keeps the port from every
    /// other server (see ``start(root:authorization:webDAV:tls:redirects:limits:)``).
    private let portHolder: Int32

    /// The nginx binary, or `nil` when not installed.
    public static var executable: String? {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/opt/homebrew/bin/nginx", "/usr/local/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// A WebDAV account: nginx's DAV module and the dav-ext module (`PROPFIND`), behind Basic auth.
    public struct WebDAVAccount: Sendable {
        /// The user name.
        public var user: String
        /// The password.
        public var password: String

        /// Creates an account.
        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }
    }

    /// What nginx allows one client, as a service that limits a user's downloads does: the
    /// requests it serves at once (`limit_conn`; one more is refused with `refusalStatus`) and the
    /// bytes per second of each answer (`limit_rate`).
    public struct ClientLimits: Sendable {
        /// The requests served at once.
        public var connections: Int
        /// The status of a refused request: 429 or 503 (nginx's default).
        public var refusalStatus: Int
        /// Bytes per second of each answer, `nil` for no cap.
        public var bytesPerSecond: Int?

        /// Creates limits.
        public init(connections: Int, refusalStatus: Int = 503, bytesPerSecond: Int? = nil) {
            self.connections = connections
            self.refusalStatus = refusalStatus
            self.bytesPerSecond = bytesPerSecond
        }
    }

    /// The dav-ext module (Debian: `libnginx-mod-http-dav-ext`), or `nil` when not installed.
    public static var webDAVModule: String? {
        ["/usr/lib/nginx/modules/ngx_http_dav_ext_module.so", "/usr/local/lib/nginx/modules/ngx_http_dav_ext_module.so"]
            .first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Starts nginx serving `root`.
    ///
    /// The port is this process's from the start to the server's release: a socket bound with
    /// `SO_REUSEPORT` and never listening holds it, and nginx listens beside it with `reuseport`.
    /// No other test can take the port between its choice and nginx's bind, nor between nginx's
    /// exit and the end of the test. (Until 2026-12-03 the port was let go for nginx to bind and
    /// held again only after its exit; one full run in about twenty then found a stopped nginx's
    /// port accepting connections.) The server counts as started once nginx has written its pid
    /// file, which it does after binding, and accepts connections.
    ///
    /// The waits sleep the task, not the thread: a full test run has only the cooperative pool's
    /// threads (two here) for all its tests, and a thread held by a poll delays every timer of
    /// every other test.
    ///
    /// - Parameters:
    ///   - root: The directory to serve at `/`.
    ///   - authorization: The exact `Authorization` value required, or `nil` for none.
    ///   - webDAV: Serve WebDAV (`PROPFIND`, `PUT`, …) with Basic auth for this account.
    ///   - tls: Serve HTTPS only, with this authority's server certificate for `127.0.0.1`.
    ///   - redirects: Paths answered with `302 Found` to the URL given for each, instead of a file.
    ///   - limits: What one client may have served at once, and how fast (`nil`: no limits).
    ///   - headers: Headers added to the answers for a path, by path (`add_header`, on 200 and 206
    ///     alike): a `Repr-Digest`, or ownCloud's `OC-Checksum` on a WebDAV file.
    public static func start(root: URL, authorization: String? = nil, webDAV: WebDAVAccount? = nil,
                             tls: TestCertificateAuthority? = nil, redirects: [String: URL] = [:], limits: ClientLimits? = nil,
                             headers: [String: [String: String]] = [:]) async throws -> Nginx {
        guard let executable = Nginx.executable else {
            throw NSError(domain: "Nginx", code: 1, userInfo: [NSLocalizedDescriptionKey: "nginx is not installed (apt-get install -y nginx)"])
        }
        let prefix = FileManager.default.temporaryDirectory.appendingPathComponent("streamcache-nginx-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: prefix.appendingPathComponent("logs"), withIntermediateDirectories: true)
        let server = try Self.locationBlock(authorization: authorization, webDAV: webDAV, prefix: prefix)
        let (port, portHolder) = try FreePort.held()
        do {
            let process = try Self.launch(executable, prefix: prefix, port: port, root: root, loadModule: server.loadModule, auth: server.auth,
                                          tls: tls, redirects: redirects, limits: limits, headers: headers)
            guard await Self.waitUntilServing(process, port: port, pidFile: prefix.appendingPathComponent("nginx.pid")) else {
                let log = (try? String(contentsOf: prefix.appendingPathComponent("logs/error.log"), encoding: .utf8)) ?? ""
                process.signal(SIGKILL)
                try? await process.exit(within: 5)
                throw NSError(domain: "Nginx", code: 2, userInfo: [NSLocalizedDescriptionKey: "nginx did not start: \(log.suffix(500))"])
            }
            return Nginx(port: port, portHolder: portHolder, scheme: tls == nil ? "http" : "https", root: root, prefix: prefix, process: process)
        } catch {
            close(portHolder)
            throw error
        }
    }

    /// Runs `body` with nginx serving `root` (see ``start(root:authorization:webDAV:tls:redirects:limits:)``),
    /// and stops it afterwards, whether `body` returned or threw.
    public static func serving<T>(root: URL, authorization: String? = nil, webDAV: WebDAVAccount? = nil, tls: TestCertificateAuthority? = nil,
                                  redirects: [String: URL] = [:], limits: ClientLimits? = nil, headers: [String: [String: String]] = [:],
                                  _ body: (Nginx) async throws -> T) async throws -> T {
        let nginx = try await start(root: root, authorization: authorization, webDAV: webDAV, tls: tls, redirects: redirects, limits: limits,
                                    headers: headers)
        return try await withAsyncCleanup { try await body(nginx) } cleanup: { await nginx.stop() }
    }

    private init(port: Int, portHolder: Int32, scheme: String, root: URL, prefix: URL, process: ChildProcess) {
        self.port = port
        self.portHolder = portHolder
        self.scheme = scheme
        self.root = root
        self.prefix = prefix
        self.process = process
    }

    /// The `load_module` line and the location's directives for the requested access control.
    private static func locationBlock(authorization: String?, webDAV: WebDAVAccount?, prefix: URL) throws -> (loadModule: String, auth: String) {
        guard let webDAV else {
            return ("", authorization.map { "if ($http_authorization != \"\($0)\") { return 401; }" } ?? "")
        }
        guard let module = Nginx.webDAVModule else {
            throw NSError(domain: "Nginx", code: 1, userInfo: [NSLocalizedDescriptionKey: "nginx's WebDAV module is not installed (apt-get install -y libnginx-mod-http-dav-ext)"])
        }
        let passwords = prefix.appendingPathComponent("htpasswd")
        try "\(webDAV.user):{PLAIN}\(webDAV.password)\n".write(to: passwords, atomically: true, encoding: .utf8)
        return ("load_module \(module);",
                "dav_methods PUT DELETE MKCOL COPY MOVE; dav_ext_methods PROPFIND OPTIONS; auth_basic \"streamcache test\"; auth_basic_user_file \(passwords.path);")
    }

    /// Writes the configuration for `port` and starts nginx in the foreground.
    private static func launch(_ executable: String, prefix: URL, port: Int, root: URL, loadModule: String, auth: String,
                               tls: TestCertificateAuthority?, redirects: [String: URL], limits: ClientLimits?,
                               headers: [String: [String: String]]) throws -> ChildProcess {
        let user = getuid() == 0 ? "user root;" : ""
        // Under limits, a small send buffer: nginx counts a request until it has handed its last
        // bytes to the socket, and a loopback socket's buffer grows to megabytes, so a capped
        // answer of 2 MiB ended for nginx long before the client had it.
        let socketOptions = limits == nil ? "reuseport" : "reuseport sndbuf=64k"
        let listen = tls.map { "listen 127.0.0.1:\(port) ssl \(socketOptions); ssl_certificate \($0.serverCertificate.path); ssl_certificate_key \($0.serverKey.path);" }
            ?? "listen 127.0.0.1:\(port) \(socketOptions);"
        let limitZone = limits == nil ? "" : "limit_conn_zone $binary_remote_addr zone=client:1m;"
        let limitDirectives = limits.map { limits in
            "limit_conn client \(limits.connections); limit_conn_status \(limits.refusalStatus);"
                + (limits.bytesPerSecond.map { " limit_rate \($0);" } ?? "")
        } ?? ""
        // A path with its own headers gets its own location, with the same access rules.
        let headerLocations = headers.sorted { $0.key < $1.key }.map { path, fields in
            let added = fields.sorted { $0.key < $1.key }.map { "add_header \($0.key) \"\($0.value)\" always;" }.joined(separator: " ")
            return "location = \(path) { \(auth) \(limitDirectives) \(added) }"
        }.joined(separator: "\n")
        let redirectLocations = redirects.sorted { $0.key < $1.key }
            .map { "location = \($0.key) { return 302 \"\($0.value.absoluteString)\"; }" }.joined(separator: "\n")
        let config = """
        \(user)
        \(loadModule)
        daemon off;
        master_process off;
        error_log \(prefix.path)/logs/error.log warn;
        pid \(prefix.path)/nginx.pid;
        events { worker_connections 1024; }
        http {
            log_format streamcache '$uri\\t$http_range\\t$status\\t$body_bytes_sent\\t$connection\\t$msec\\t$request_time';
            access_log \(prefix.path)/logs/access.log streamcache;
            client_body_temp_path \(prefix.path)/body;
            proxy_temp_path \(prefix.path)/proxy;
            fastcgi_temp_path \(prefix.path)/fastcgi;
            uwsgi_temp_path \(prefix.path)/uwsgi;
            scgi_temp_path \(prefix.path)/scgi;
            sendfile on;
            keepalive_requests 100000;
            types { audio/mpeg mp3; audio/mp4 m4a; application/vnd.apple.mpegurl m3u8; video/mp2t ts; video/iso.segment m4s; video/mp4 mp4; }
            default_type application/octet-stream;
            \(limitZone)
            server {
                \(listen)
                root \(root.path);
                location / { \(auth) \(limitDirectives) }
                \(headerLocations)
                \(redirectLocations)
            }
        }
        """
        let configFile = prefix.appendingPathComponent("nginx.conf")
        try config.write(to: configFile, atomically: true, encoding: .utf8)
        return try ChildProcess.spawn(URL(fileURLWithPath: executable),
                                      ["-c", configFile.path, "-p", prefix.path, "-e", "\(prefix.path)/logs/error.log"])
    }

    /// Waits (at most 60 s, times the test slowdown) until `process` has bound `port` (its pid
    /// file exists) and accepts connections there: `false` when it exited or the time ran out.
    ///
    /// It looks once more after every sleep, also one that overran the deadline: in a full run a
    /// task may not be resumed for 20 s while other suites hold the cooperative pool's threads,
    /// and a wait that gave up on waking without a look failed a WebDAV test with "nginx did not
    /// start" and an empty error log, twice (a fresh-clone CI run and a ThreadSanitizer run, 2026-12-01).
    private static func waitUntilServing(_ process: ChildProcess, port: Int, pidFile: URL) async -> Bool {
        let deadline = ContinuousClock.now + TestTiming.time(.seconds(60))
        while true {
            guard process.isRunning else { return false }
            if FileManager.default.fileExists(atPath: pidFile.path), FreePort.isListening(port) {
                return process.isRunning
            }
            guard ContinuousClock.now < deadline else { return false }
            do { try await Task.sleep(for: .milliseconds(20)) } catch { return false }
        }
    }

    deinit {
        // A server never stopped is killed by its process handle's release.
        close(portHolder)
        // Its configuration, logs and temporary directories; every test run made a few.
        try? FileManager.default.removeItem(at: prefix)
    }

    /// The URL of `path` (relative to the root, starting with `/`).
    public func url(_ path: String) -> URL { URL(string: "\(scheme)://127.0.0.1:\(port)\(path)")! }

    /// Stops nginx (idempotent). Its port stays bound and refusing connections until the server
    /// is released (see ``start(root:authorization:webDAV:tls:redirects:limits:)``), so that a test of
    /// offline play meets a server that is down, not another test's server that took the port.
    public func stop() async {
        guard process.isRunning else { return }
        process.terminate()
        // A fast shutdown takes milliseconds; never let a stuck nginx hang the suite (`exit`
        // kills it after 5 s, times the test slowdown). Cancellation kills it at once, which
        // stops it all the same.
        try? await process.exit(within: 5 * Double(TestTiming.slowdown))
    }

    /// The access log so far.
    public func accessLog() -> [LogEntry] {
        let text = (try? String(contentsOf: prefix.appendingPathComponent("logs/access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count == 7, let status = Int(fields[2]), let bytes = Int64(fields[3]), let connection = Int(fields[4]),
                  let endedAt = Double(fields[5]), let duration = Double(fields[6]) else { return nil }
            return LogEntry(path: String(fields[0]), range: String(fields[1]), status: status, bodyBytes: bytes, connection: connection,
                            endedAt: endedAt, duration: duration)
        }
    }

    /// Waits (briefly, bounded) for nginx to log requests that just finished.
    public func settledAccessLog() async -> [LogEntry] {
        var last = accessLog()
        for _ in 0..<20 {
            try? await Task.sleep(for: .milliseconds(100))
            let now = accessLog()
            if now.count == last.count { return now }
            last = now
        }
        return last
    }
}

/// Finding and waiting for loopback ports.
public enum FreePort {
    /// A port on 127.0.0.1 that was free a moment ago.
    public static func find() throws -> Int {
        let (port, fd) = try bound()
        close(fd)
        return port
    }

    /// A port on 127.0.0.1 and a socket that holds it: bound with `SO_REUSEPORT`, not listening.
    /// A server of this user that listens with `SO_REUSEPORT` (nginx: `listen … reuseport`) can
    /// bind the port beside it; no bind for port 0 gets it while the socket is open.
    public static func held() throws -> (port: Int, socket: Int32) {
        try bound(reusingPort: true)
    }

    /// Runs `body` with a port that refuses connections for its whole duration: it is bound but
    /// not listening, so no other test can take it meanwhile.
    public static func withRefusingPort<T>(_ body: (Int) async throws -> T) async throws -> T {
        let (port, fd) = try bound()
        defer { close(fd) }
        return try await body(port)
    }

    private static func bound(reusingPort: Bool = false) throws -> (Int, Int32) {
        guard let fd = boundSocket(port: 0, reusingAddress: false, reusingPort: reusingPort) else { throw POSIXError(.EADDRNOTAVAIL) }
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        guard named else {
            close(fd)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        return (Int(UInt16(bigEndian: address.sin_port)), fd)
    }

    /// A TCP socket bound to 127.0.0.1:`port` (0: a port the kernel picks), not listening, or
    /// `nil` when the bind fails. `reusingAddress` sets `SO_REUSEADDR`, `reusingPort` `SO_REUSEPORT`.
    public static func boundSocket(port: Int, reusingAddress: Bool, reusingPort: Bool = false) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var yes: Int32 = 1
        if reusingAddress { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size)) }
        if reusingPort { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, socklen_t(MemoryLayout<Int32>.size)) }
        var address = loopback(port: port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Whether something accepts connections on 127.0.0.1:`port` (one connect attempt, which
    /// loopback answers at once).
    public static func isListening(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// The address 127.0.0.1:`port`.
    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}
