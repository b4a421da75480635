import ArgumentParser
import StreamCache
import StreamCacheHTTPClient

/// `--cacert`: certificate authorities to trust besides the system's, for the commands that reach
/// origins. A WebDAV server at home or a company's gateway often has a certificate its owner's
/// own authority signed, which no system trusts until told to.
struct TransportOptions: ParsableArguments {
    @Option(name: .customLong("cacert"),
            help: ArgumentHelp("Also trust the certificate authorities in this PEM file, for an origin whose certificate a private authority signed. Repeatable.",
                               valueName: "file"))
    var authorityFiles: [String] = []

    func validate() throws {
        _ = try configuration(from: AsyncHTTPClientTransport.Configuration())
    }

    /// The transport a command reaches its origins with: `standard` when nothing differs from it,
    /// otherwise one of the command's own, with `configuration`, `connectionsPerHost` when given,
    /// and the authorities.
    func transport(_ standard: AsyncHTTPClientTransport, configuration: AsyncHTTPClientTransport.Configuration,
                   connectionsPerHost: Int? = nil) throws -> AsyncHTTPClientTransport {
        var configuration = try self.configuration(from: configuration)
        if let connectionsPerHost { configuration.maximumConnectionsPerHost = connectionsPerHost }
        guard !authorityFiles.isEmpty || configuration.maximumConnectionsPerHost != standard.maximumConnectionsPerHost else { return standard }
        return AsyncHTTPClientTransport(configuration: configuration)
    }

    private func configuration(from base: AsyncHTTPClientTransport.Configuration) throws -> AsyncHTTPClientTransport.Configuration {
        var configuration = base
        do {
            for path in authorityFiles { try configuration.trustCertificateAuthorities(inPEMFile: path) }
        } catch let error as StreamCacheError {
            throw ValidationError("--cacert: \(error.message)")
        }
        return configuration
    }
}
