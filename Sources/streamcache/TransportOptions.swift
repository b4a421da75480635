import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheHTTPClient

/// How the commands that reach origins reach them: `--cacert`, certificate authorities to trust
/// besides the system's (a WebDAV server at home or a company's gateway often has a certificate
/// its owner's own authority signed, which no system trusts until told to), and the proxy:
/// `--proxy`, else the `https_proxy`, `http_proxy`, `all_proxy` and `no_proxy` variables, as curl
/// reads them.
struct TransportOptions: ParsableArguments {
    @Option(name: .customLong("cacert"),
            help: ArgumentHelp("Also trust the certificate authorities in this PEM file, for an origin whose certificate a private authority signed. Repeatable.",
                               valueName: "file"))
    var authorityFiles: [String] = []

    @Option(name: .customLong("proxy"),
            help: ArgumentHelp("Reach every origin (and cloud API) through this proxy: http://[user@]host:port (the password: --proxy-password-env) or socks5://host:port; 'none' for no proxy. Default: the https_proxy, http_proxy and all_proxy variables (loopback origins direct).",
                               valueName: "url"))
    var proxy: String?

    @Option(name: .customLong("proxy-password-env"),
            help: ArgumentHelp("The environment variable that holds the password of --proxy's user (a password on the command line shows in every user's `ps`).",
                               valueName: "name"))
    var proxyPasswordEnvironment: String?

    @Option(name: .customLong("no-proxy"),
            help: ArgumentHelp("Origins reached directly, comma-separated, as no_proxy lists them (example.com covers its subdomains; 10.0.0.0/8; '*' all). Default: the no_proxy variable.",
                               valueName: "hosts"))
    var directHosts: String?

    func validate() throws {
        _ = try configuration(from: AsyncHTTPClientTransport.Configuration())
    }

    /// The options given (``DownloadOptions/namesGiven``).
    var namesGiven: [String] {
        [authorityFiles.isEmpty ? nil : "--cacert", proxy != nil ? "--proxy" : nil, proxyPasswordEnvironment != nil ? "--proxy-password-env" : nil,
         directHosts != nil ? "--no-proxy" : nil].compactMap { $0 }
    }

    /// The proxies to use: `--proxy` for every origin (loopback ones too, as `curl -x`), `none`
    /// for none, else the environment's; `--no-proxy` replaces the hosts reached directly.
    func proxyRoutes(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ProxyRoutes {
        var routes: ProxyRoutes
        switch proxy?.lowercased() {
        case "none"?, ""?:
            return ProxyRoutes()
        case .some:
            var outbound: OutboundProxy
            do {
                outbound = try OutboundProxy(url: proxy!)
            } catch let error as StreamCacheError {
                throw ValidationError("--proxy: \(error.message)")
            }
            guard outbound.password == nil else {
                throw ValidationError("--proxy: put the proxy's password in an environment variable (--proxy-password-env NAME), not on the command line.")
            }
            if let proxyPasswordEnvironment {
                guard outbound.username != nil, let password = environment[proxyPasswordEnvironment] else {
                    throw ValidationError("--proxy-password-env: \(outbound.username == nil ? "--proxy names no user (http://user@host:port)" : "the environment variable \(proxyPasswordEnvironment) is not set").")
                }
                outbound.password = password
            }
            routes = .everything(through: outbound)
        case nil:
            if proxyPasswordEnvironment != nil { throw ValidationError("--proxy-password-env needs --proxy.") }
            do {
                routes = try .environment(environment)
            } catch let error as StreamCacheError {
                throw ValidationError("\(error.message) (--proxy none ignores it)")
            }
        }
        if let directHosts { routes.directHosts = directHosts.split(separator: ",").map { $0.trimmingWhitespace() }.filter { !$0.isEmpty } }
        return routes
    }

    /// The transport a command reaches its origins with: `standard` when nothing differs from it,
    /// otherwise one of the command's own, with `configuration`, `connectionsPerHost` when given,
    /// and the authorities.
    func transport(_ standard: AsyncHTTPClientTransport, configuration: AsyncHTTPClientTransport.Configuration,
                   connectionsPerHost: Int? = nil) throws -> AsyncHTTPClientTransport {
        var configuration = try self.configuration(from: configuration)
        if let connectionsPerHost { configuration.maximumConnectionsPerHost = connectionsPerHost }
        guard !authorityFiles.isEmpty || !configuration.proxyRoutes.isEmpty || configuration.maximumConnectionsPerHost != standard.maximumConnectionsPerHost
        else { return standard }
        return AsyncHTTPClientTransport(configuration: configuration)
    }

    private func configuration(from base: AsyncHTTPClientTransport.Configuration) throws -> AsyncHTTPClientTransport.Configuration {
        var configuration = base
        configuration.proxyRoutes = try proxyRoutes()
        do {
            for path in authorityFiles { try configuration.trustCertificateAuthorities(inPEMFile: path) }
        } catch let error as StreamCacheError {
            throw ValidationError("--cacert: \(error.message)")
        }
        return configuration
    }
}
