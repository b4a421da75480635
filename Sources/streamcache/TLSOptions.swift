import ArgumentParser
import StreamCache
import StreamCacheHTTPClient

/// `--cacert`: certificate authorities to trust besides the system's, for the commands that reach
/// origins. A WebDAV server at home or a company's gateway often has a certificate its owner's
/// own authority signed, which no system trusts until told to.
struct TLSOptions: ParsableArguments {
    @Option(name: .customLong("cacert"),
            help: ArgumentHelp("Also trust the certificate authorities in this PEM file, for an origin whose certificate a private authority signed. Repeatable.",
                               valueName: "file"))
    var authorityFiles: [String] = []

    func validate() throws {
        _ = try configuration(from: AsyncHTTPClientTransport.Configuration())
    }

    /// `standard` when no authority is added; otherwise a transport of the command's own, with
    /// `configuration` plus the authorities.
    func transport(_ standard: AsyncHTTPClientTransport, configuration: AsyncHTTPClientTransport.Configuration) throws -> AsyncHTTPClientTransport {
        guard !authorityFiles.isEmpty else { return standard }
        return AsyncHTTPClientTransport(configuration: try self.configuration(from: configuration))
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
