#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Which origins' requests go through which ``OutboundProxy``, and which go directly: one proxy for
/// every origin (`curl -x`), or the `https_proxy`, `http_proxy`, `all_proxy` and `no_proxy`
/// environment variables as curl and Go read them.
///
/// Loopback origins (`localhost`, `*.localhost`, `127.0.0.0/8`, `::1`) go directly unless
/// ``includesLoopback``, as Go's `ProxyFromEnvironment` has them: a proxy elsewhere cannot reach
/// this machine's own servers.
public struct ProxyRoutes: Sendable, Hashable {
    /// The proxy for `http` origins.
    public var http: OutboundProxy?
    /// The proxy for `https` origins.
    public var https: OutboundProxy?
    /// Origins reached directly, as `no_proxy` lists them: a name covers its subdomains
    /// (`example.com` and `.example.com` both cover `cdn.example.com`), an address itself, an
    /// IPv4 block its addresses (`10.0.0.0/8`), `name:port` that port only, and `*` every origin.
    public var directHosts: [String]
    /// Whether loopback origins go through the proxy too.
    public var includesLoopback: Bool

    /// Routes with `http` and `https` proxies; every origin goes directly by default.
    public init(http: OutboundProxy? = nil, https: OutboundProxy? = nil, directHosts: [String] = [], includesLoopback: Bool = false) {
        self.http = http
        self.https = https
        self.directHosts = directHosts
        self.includesLoopback = includesLoopback
    }

    /// Every origin, loopback ones included, through `proxy`, except `directHosts`.
    public static func everything(through proxy: OutboundProxy, except directHosts: [String] = []) -> ProxyRoutes {
        ProxyRoutes(http: proxy, https: proxy, directHosts: directHosts, includesLoopback: true)
    }

    /// The routes the environment sets: `https_proxy` (or `HTTPS_PROXY`) for `https` origins,
    /// `http_proxy` (or `HTTP_PROXY`) for `http` ones, `all_proxy` (or `ALL_PROXY`) for those the
    /// others leave out, and `no_proxy` (or `NO_PROXY`, comma-separated) for origins reached
    /// directly. Empty variables count as unset.
    ///
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) naming the variable whose proxy URL is
    ///   malformed.
    public static func environment(_ variables: [String: String] = ProcessInfo.processInfo.environment) throws -> ProxyRoutes {
        func value(_ name: String) -> (name: String, value: String)? {
            for candidate in [name, name.uppercased()] {
                if let value = variables[candidate], !value.trimmingWhitespace().isEmpty { return (candidate, value) }
            }
            return nil
        }
        func proxy(_ names: String...) throws -> OutboundProxy? {
            guard let (name, text) = names.lazy.compactMap(value).first else { return nil }
            do {
                return try OutboundProxy(url: text)
            } catch let error as StreamCacheError {
                throw StreamCacheError(.invalidArgument, "\(name): \(error.message)")
            }
        }
        let direct = value("no_proxy")?.value.split(separator: ",").map { $0.trimmingWhitespace() }.filter { !$0.isEmpty } ?? []
        return ProxyRoutes(http: try proxy("http_proxy", "all_proxy"), https: try proxy("https_proxy", "all_proxy"), directHosts: direct)
    }

    /// Whether no origin goes through a proxy.
    public var isEmpty: Bool { http == nil && https == nil }

    /// The proxy a request to `scheme://host:port` goes through, or `nil` for a direct one.
    public func proxy(scheme: String, host: String, port: Int?) -> OutboundProxy? {
        guard let proxy = scheme.lowercased() == "https" ? https : http else { return nil }
        let name = Self.bare(host.lowercased())
        if !includesLoopback, Self.isLoopback(name) { return nil }
        let effectivePort = port ?? (scheme.lowercased() == "https" ? 443 : 80)
        return directHosts.contains { Self.entry($0, covers: name, port: effectivePort) } ? nil : proxy
    }

    /// `host` without the brackets of an IPv6 literal or a final dot.
    static func bare(_ host: String) -> String {
        var name = Substring(host)
        if name.hasPrefix("["), name.hasSuffix("]") { name = name.dropFirst().dropLast() }
        if name.hasSuffix(".") { name = name.dropLast() }
        return String(name)
    }

    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        return ipv4(host).map { $0 >> 24 == 127 } ?? false
    }

    /// Whether the `no_proxy` entry `entry` covers `host` (lowercased, bare) at `port`.
    static func entry(_ entry: String, covers host: String, port: Int) -> Bool {
        var rule = Substring(entry.lowercased())
        if rule == "*" { return true }
        if let slash = rule.firstIndex(of: "/") {
            // An IPv4 block.
            guard let base = ipv4(String(rule[..<slash])), let bits = Int(rule[rule.index(after: slash)...]), (0...32).contains(bits),
                  let address = ipv4(host) else { return false }
            let mask: UInt32 = bits == 0 ? 0 : ~UInt32(0) << (32 - bits)
            return address & mask == base & mask
        }
        if rule.hasPrefix("["), let close = rule.firstIndex(of: "]") {
            // `[v6]` or `[v6]:port`.
            let after = rule[rule.index(after: close)...]
            if after.hasPrefix(":") {
                guard Int(after.dropFirst()) == port else { return false }
            }
            return host == String(rule[rule.index(after: rule.startIndex)..<close])
        }
        if rule.filter({ $0 == ":" }).count == 1, let colon = rule.firstIndex(of: ":") {
            guard Int(rule[rule.index(after: colon)...]) == port else { return false }
            rule = rule[..<colon]
        }
        if rule.hasPrefix("*.") { rule = rule.dropFirst(2) } else if rule.hasPrefix(".") { rule = rule.dropFirst() }
        if rule.hasSuffix(".") { rule = rule.dropLast() }
        guard !rule.isEmpty else { return false }
        // An address covers itself only; a name its subdomains too.
        if ipv4(String(rule)) != nil || rule.contains(":") { return host == rule }
        return host == rule || host.hasSuffix("." + rule)
    }

    /// The IPv4 address `text` spells in four decimal octets.
    static func ipv4(_ text: String) -> UInt32? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var address: UInt32 = 0
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy({ $0.isASCII && $0.isNumber }), let octet = UInt32(part), octet <= 255 else { return nil }
            address = address << 8 | octet
        }
        return address
    }
}
