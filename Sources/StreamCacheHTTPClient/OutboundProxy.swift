#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A proxy server that requests to origins go through: an HTTP proxy, which carries each
/// connection in a `CONNECT` tunnel (TLS to an `https` origin runs end to end inside it), or a
/// SOCKS5 proxy. A company network that lets nothing out otherwise, or a user who reaches a
/// service through one, needs it.
public struct OutboundProxy: Sendable, Hashable, CustomStringConvertible {
    /// How the proxy is spoken to.
    public enum Kind: Sendable, Hashable {
        /// An HTTP proxy (`http://host:port`), with `CONNECT`.
        case http
        /// A SOCKS5 proxy (`socks5://host:port`; `socks5h://`, which has the proxy look up names,
        /// is taken the same way: names always go to the proxy unresolved).
        case socks5
    }

    /// How the proxy is spoken to.
    public var kind: Kind
    /// The proxy's host name or address.
    public var host: String
    /// The proxy's port.
    public var port: Int
    /// The user name for the proxy's Basic authentication (HTTP proxies only).
    public var username: String?
    /// The password for the proxy's Basic authentication.
    public var password: String?

    /// A proxy from its URL as `curl -x` and the `https_proxy` variable take it:
    /// `http://[user:password@]host[:port]` (port 1080 when left out, as curl's), a bare
    /// `host:port` (HTTP), or `socks5://host[:port]`. User and password are percent-decoded.
    ///
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) for another scheme, a URL without a
    ///   host, a port out of range, or credentials for a SOCKS proxy (which this client cannot send).
    public init(url text: String) throws {
        var rest = Substring(text.trimmingWhitespace())
        var scheme = "http"
        if let separator = rest.firstRange(of: "://") {
            scheme = rest[..<separator.lowerBound].lowercased()
            rest = rest[separator.upperBound...]
        }
        switch scheme {
        case "http": kind = .http
        case "socks5", "socks5h": kind = .socks5
        default:
            throw StreamCacheError(.invalidArgument, "The proxy \(Self.redacted(text)) is neither http:// nor socks5://.")
        }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            let colon = credentials.firstIndex(of: ":")
            let user = credentials[..<(colon ?? credentials.endIndex)]
            username = user.percentDecoded ?? String(user)
            password = colon.map { credentials[credentials.index(after: $0)...] }.map { $0.percentDecoded ?? String($0) }
            rest = rest[rest.index(after: at)...]
            guard kind == .http else {
                throw StreamCacheError(.invalidArgument, "The SOCKS proxy \(Self.redacted(text)) has credentials, which only an HTTP proxy takes here.")
            }
        }
        var hostPart = rest
        var portPart: Substring?
        if rest.hasPrefix("[") {
            // An IPv6 address, with its port after the bracket.
            guard let close = rest.firstIndex(of: "]") else { throw StreamCacheError(.invalidArgument, "The proxy \(Self.redacted(text)) has no host.") }
            hostPart = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portPart = after.dropFirst() }
        } else if let colon = rest.lastIndex(of: ":") {
            hostPart = rest[..<colon]
            portPart = rest[rest.index(after: colon)...]
        }
        guard !hostPart.isEmpty else { throw StreamCacheError(.invalidArgument, "The proxy \(Self.redacted(text)) has no host.") }
        host = String(hostPart)
        if let portPart {
            guard let number = Int(portPart), (1...65535).contains(number) else {
                throw StreamCacheError(.invalidArgument, "The proxy \(Self.redacted(text)) has no valid port.")
            }
            port = number
        } else {
            port = 1080
        }
    }

    /// The proxy's URL without its password.
    public var description: String {
        let scheme = kind == .http ? "http" : "socks5"
        let user = username.map { "\($0)\(password == nil ? "" : ":***")@" } ?? ""
        let name = host.contains(":") ? "[\(host)]" : host
        return "\(scheme)://\(user)\(name):\(port)"
    }

    /// `text` with what follows `:` in its user information hidden, for messages.
    static func redacted(_ text: String) -> String {
        guard let at = text.lastIndex(of: "@") else { return text }
        let start = text.firstRange(of: "://")?.upperBound ?? text.startIndex
        guard let colon = text[start..<at].firstIndex(of: ":") else { return text }
        return String(text[..<colon]) + ":***" + String(text[at...])
    }
}
