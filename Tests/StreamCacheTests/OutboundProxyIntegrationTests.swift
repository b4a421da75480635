import Foundation
import StreamCache
import StreamCacheTestSupport
import Testing

/// The tool reaches origins through a real HTTP proxy (tinyproxy, which `.ci/run` installs), as on
/// a company network that lets nothing out otherwise: an `https` origin through a `CONNECT`
/// tunnel (TLS end to end, the origin's certificate checked), an `http` one the same way, the
/// proxy's Basic authentication from the proxy URL, a clear error when it is missing, and the
/// environment's proxy left aside for loopback origins.
@Suite(.serialized) struct OutboundProxyIntegrationTests {
    static let account = (user: "proxyuser", password: "proxy-pass-7f3e")

    /// A tinyproxy on loopback that asks for `account`, logging each request.
    final class Tinyproxy: Sendable {
        let port: Int
        let log: URL
        private let process: ChildProcess

        init(in directory: URL) async throws {
            let executable = try ExternalTool.require("tinyproxy")
            log = directory.appendingPathComponent("tinyproxy.log")
            // A port that was free a moment ago; another test may take it first, so a few tries.
            for _ in 0..<5 {
                let port = try FreePort.find()
                let configuration = directory.appendingPathComponent("tinyproxy-\(port).conf")
                try """
                    Port \(port)
                    Listen 127.0.0.1
                    Timeout 60
                    LogFile "\(log.path)"
                    LogLevel Info
                    MaxClients 50
                    Allow 127.0.0.1
                    BasicAuth \(account.user) \(account.password)
                    DisableViaHeader Yes

                    """.write(to: configuration, atomically: true, encoding: .utf8)
                let process = try ChildProcess.spawn(executable, ["-d", "-c", configuration.path])
                try await waitWhile(tries: 100, every: .milliseconds(50)) { process.isRunning && !FreePort.isListening(port) }
                if process.isRunning, FreePort.isListening(port) {
                    self.port = port
                    self.process = process
                    return
                }
                process.signal(SIGKILL)
                process.waitUntilExit()
            }
            throw NSError(domain: "Tinyproxy", code: 1, userInfo: [NSLocalizedDescriptionKey: "tinyproxy did not start: \((try? String(contentsOf: log, encoding: .utf8)) ?? "")"])
        }

        /// The requests the proxy was asked to carry (`CONNECT host:port`, `GET url`), in order.
        var requests: [String] {
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { line in
                guard let range = line.range(of: "Request (file descriptor ") else { return nil }
                return line[range.upperBound...].split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) }
            }
        }

        func stop() {
            process.signal(SIGKILL)
            process.waitUntilExit()
        }
    }

    @Test func getReachesOriginsThroughAnAuthenticatingProxy() async throws {
        try await withTemporaryDirectory { root in
            let data = TestData.random(count: 1_500_000, seed: 351)
            try data.write(to: root.appendingPathComponent("song.mp3"))
            let authority = try await TestCertificateAuthority.make(in: root)
            let proxy = try await Tinyproxy(in: root)
            defer { proxy.stop() }
            let plain = try TestOrigin()
            defer { plain.stop() }
            plain.setFile("/plain.mp3", data: data)
            try await Nginx.serving(root: root, tls: authority) { nginx in
                let origin = nginx.url("/song.mp3").absoluteString
                let through = "http://\(Self.account.user):\(Self.account.password)@127.0.0.1:\(proxy.port)"
                // On the command line the password goes in a variable: `ps` shows arguments to every user.
                let explicit = ["--proxy", "http://\(Self.account.user)@127.0.0.1:\(proxy.port)", "--proxy-password-env", "PROXY_PASSWORD"]
                let password = ["PROXY_PASSWORD": Self.account.password]
                func get(_ url: String, _ options: [String], environment: [String: String] = [:], cache: String) async throws -> CommandLineTool.Result {
                    let output = root.appendingPathComponent("out-\(cache)")
                    let result = try await CommandLineTool.run(["get", url, "-o", output.path, "--quiet", "--cacert", authority.certificate.path,
                                                                "--cache-dir", root.appendingPathComponent(cache).path] + options, environment: environment)
                    if result.status == 0 { #expect(TestData.sha256(try Data(contentsOf: output)) == TestData.sha256(data), "\(url) through \(options)") }
                    return result
                }

                let inline = try await get(origin, ["--proxy", through], cache: "a")
                #expect(inline.status == 64 && inline.stderr.contains("--proxy-password-env") && !inline.stderr.contains(Self.account.password), "\(inline.stderr)")
                let tunnelled = try await get(origin, explicit, environment: password, cache: "a")
                #expect(tunnelled.status == 0, "\(tunnelled.stderr)")
                #expect(proxy.requests.contains("CONNECT 127.0.0.1:\(nginx.port) HTTP/1.1"), "\(proxy.requests)")
                let nginxRequests = nginx.accessLog().count
                #expect(nginxRequests >= 1)

                let plainThrough = try await get(plain.url("/plain.mp3").absoluteString, explicit, environment: password, cache: "b")
                #expect(plainThrough.status == 0, "\(plainThrough.stderr)")
                #expect(proxy.requests.contains { $0.contains("127.0.0.1:\(plain.port)") }, "\(proxy.requests)")

                // Without the proxy's credentials: its refusal, said as such, and no byte.
                let carried = proxy.requests.count
                let refused = try await get(origin, ["--proxy", "http://127.0.0.1:\(proxy.port)"], cache: "c")
                #expect(refused.status != 0 && refused.stderr.contains("asks for credentials (407)") && !refused.stderr.contains(Self.account.password),
                        "\(refused.status) \(refused.stderr)")
                #expect(nginx.accessLog().count == nginxRequests, "the origin saw nothing")

                // The environment's proxy is for origins elsewhere: a loopback origin is reached directly,
                // and `--no-proxy` keeps a host off an explicit one.
                let direct = try await get(origin, [], environment: ["https_proxy": through, "http_proxy": through], cache: "d")
                #expect(direct.status == 0, "\(direct.stderr)")
                let excepted = try await get(origin, explicit + ["--no-proxy", "127.0.0.1"], environment: password, cache: "e")
                #expect(excepted.status == 0, "\(excepted.stderr)")
                #expect(proxy.requests.count == carried + 1, "only the refused request went to the proxy: \(proxy.requests)")
                let malformed = try await get(origin, [], environment: ["https_proxy": "ftp://127.0.0.1:\(proxy.port)"], cache: "f")
                #expect(malformed.status == 64 && malformed.stderr.contains("https_proxy"), "\(malformed.stderr)")
            }
        }
    }
}
