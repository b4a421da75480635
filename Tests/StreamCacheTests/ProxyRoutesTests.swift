import StreamCache
import StreamCacheHTTPClient
import Testing

/// Which origins go through which proxy, from `--proxy` or the environment as curl reads it.
struct ProxyRoutesTests {
    @Test func proxyURLsParseAsCurlTakesThem() throws {
        let plain = try OutboundProxy(url: "http://proxy.corp:3128")
        #expect(plain.kind == .http && plain.host == "proxy.corp" && plain.port == 3128 && plain.username == nil)
        let bare = try OutboundProxy(url: " proxy.corp ")
        #expect(bare.kind == .http && bare.host == "proxy.corp" && bare.port == 1080, "curl's default port")
        let authenticated = try OutboundProxy(url: "HTTP://me%40corp:p%3Ass@[::1]:8080/")
        #expect(authenticated.host == "::1" && authenticated.port == 8080 && authenticated.username == "me@corp" && authenticated.password == "p:ss")
        #expect(authenticated.description == "http://me@corp:***@[::1]:8080", "the password never shows")
        let socks = try OutboundProxy(url: "socks5h://127.0.0.1:9050")
        #expect(socks.kind == .socks5 && socks.port == 9050)
        for bad in ["ftp://proxy:21", "http://:8080", "http://proxy:0", "http://proxy:http", "socks5://me:secret@proxy:1080"] {
            #expect(throws: StreamCacheError.self, "\(bad)") { try OutboundProxy(url: bad) }
        }
        do {
            _ = try OutboundProxy(url: "socks5://me:secret@proxy:1080")
        } catch let error as StreamCacheError {
            #expect(error.code == .invalidArgument && !error.message.contains("secret"), "\(error.message)")
        }
    }

    @Test func theEnvironmentSetsAProxyPerSchemeAndTheHostsReachedDirectly() throws {
        let routes = try ProxyRoutes.environment([
            "https_proxy": "http://secure.corp:3128", "HTTP_PROXY": "http://plain.corp:3128", "ALL_PROXY": "socks5://fallback:1080",
            "no_proxy": " intranet.example, .corp.example ,10.0.0.0/8, 192.168.1.7, media.example:8443, [fd00::5]",
        ])
        func through(_ scheme: String, _ host: String, _ port: Int? = nil) -> String? { routes.proxy(scheme: scheme, host: host, port: port)?.host }
        #expect(through("https", "cloud-api.yandex.net") == "secure.corp")
        #expect(through("http", "example.com") == "plain.corp", "HTTP_PROXY when http_proxy is unset")
        #expect(through("https", "intranet.example") == nil && through("https", "nas.intranet.example") == nil, "a name covers its subdomains")
        #expect(through("https", "notintranet.example") == "secure.corp", "but not names that merely end with it")
        #expect(through("https", "files.corp.example") == nil && through("https", "corp.example") == nil)
        #expect(through("http", "10.20.30.40") == nil && through("http", "11.0.0.1") == "plain.corp", "an IPv4 block")
        #expect(through("http", "192.168.1.7") == nil && through("http", "192.168.1.70") == "plain.corp", "an address covers itself only")
        #expect(through("https", "media.example", 8443) == nil && through("https", "media.example") == "secure.corp", "name:port, that port only")
        #expect(through("https", "[fd00::5]") == nil && through("https", "[fd00::6]") == "secure.corp")
        for loopback in ["localhost", "127.0.0.1", "127.8.9.10", "[::1]", "player.localhost", "LOCALHOST."] {
            #expect(through("https", loopback) == nil, "\(loopback) is reached directly")
        }

        let fallback = try ProxyRoutes.environment(["all_proxy": "socks5://fallback:1080", "NO_PROXY": "*"])
        #expect(fallback.proxy(scheme: "https", host: "example.com", port: nil) == nil, "'*' reaches every origin directly")
        let onlyAll = try ProxyRoutes.environment(["ALL_PROXY": "socks5://fallback:1080", "https_proxy": ""])
        #expect(onlyAll.proxy(scheme: "https", host: "example.com", port: nil)?.kind == .socks5, "an empty variable counts as unset")
        #expect(try ProxyRoutes.environment([:]).isEmpty && ProxyRoutes().proxy(scheme: "https", host: "example.com", port: nil) == nil)
        do {
            _ = try ProxyRoutes.environment(["https_proxy": "ftp://x"])
            Issue.record("a malformed variable was taken")
        } catch let error as StreamCacheError {
            #expect(error.code == .invalidArgument && error.message.hasPrefix("https_proxy:"), "\(error.message)")
        }
    }

    @Test func oneProxyForEverythingTakesLoopbackOriginsToo() throws {
        let routes = ProxyRoutes.everything(through: try OutboundProxy(url: "http://127.0.0.1:3128"), except: ["nas.lan"])
        #expect(routes.proxy(scheme: "http", host: "127.0.0.1", port: 8080)?.port == 3128, "as curl -x, a loopback origin too")
        #expect(routes.proxy(scheme: "https", host: "nas.lan", port: nil) == nil)
    }
}
