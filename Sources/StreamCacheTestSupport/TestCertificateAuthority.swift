import Foundation

/// A private certificate authority made for one test with the `openssl` tool, and a server
/// certificate it signed for `127.0.0.1`: what a WebDAV server at home or a company's gateway
/// presents, which no system trusts until told to.
public struct TestCertificateAuthority: Sendable {
    /// The authority's certificate (PEM): what a client is told to trust.
    public var certificate: URL
    /// The server's certificate (PEM), signed by the authority.
    public var serverCertificate: URL
    /// The server certificate's private key (PEM).
    public var serverKey: URL

    /// Makes the authority and the server certificate in `directory`, both valid for two days.
    /// The certificate names `serverName` (an OpenSSL `subjectAltName`): by default the address
    /// the tests' servers listen on; another name makes the certificate of a different host.
    public static func make(in directory: URL, serverName: String = "IP:127.0.0.1") async throws -> TestCertificateAuthority {
        let openssl = try ExternalTool.require("openssl")
        let files = TestCertificateAuthority(certificate: directory.appendingPathComponent("ca.pem"),
                                             serverCertificate: directory.appendingPathComponent("server.pem"),
                                             serverKey: directory.appendingPathComponent("server-key.pem"))
        let caKey = directory.appendingPathComponent("ca-key.pem")
        let request = directory.appendingPathComponent("server.csr")
        let extensions = directory.appendingPathComponent("server.ext")
        try "subjectAltName=\(serverName)\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
            .write(to: extensions, atomically: true, encoding: .utf8)
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        let steps: [[String]] = [
            ["req", "-x509"] + key + ["-keyout", caKey.path, "-out", files.certificate.path, "-days", "2", "-subj", "/CN=StreamCache Test CA",
                                      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["req"] + key + ["-keyout", files.serverKey.path, "-out", request.path, "-subj", "/CN=127.0.0.1"],
            ["x509", "-req", "-in", request.path, "-CA", files.certificate.path, "-CAkey", caKey.path, "-CAcreateserial",
             "-out", files.serverCertificate.path, "-days", "2", "-extfile", extensions.path],
        ]
        try await run(openssl, steps)
        return files
    }

    /// A server certificate for `127.0.0.1` that signs itself, as `openssl req -x509` makes one
    /// for a NAS: its own authority (``certificate`` and ``serverCertificate`` are one file).
    public static func makeSelfSigned(in directory: URL) async throws -> TestCertificateAuthority {
        let openssl = try ExternalTool.require("openssl")
        let files = TestCertificateAuthority(certificate: directory.appendingPathComponent("self-signed.pem"),
                                             serverCertificate: directory.appendingPathComponent("self-signed.pem"),
                                             serverKey: directory.appendingPathComponent("self-signed-key.pem"))
        try await run(openssl, [["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", files.serverKey.path,
                                 "-out", files.certificate.path, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]])
        return files
    }

    private static func run(_ openssl: URL, _ steps: [[String]]) async throws {
        for arguments in steps {
            let result = try await ExternalTool.run(openssl, arguments, timeout: 30)
            guard result.status == 0 else {
                throw NSError(domain: "TestCertificateAuthority", code: Int(result.status),
                              userInfo: [NSLocalizedDescriptionKey: "openssl \(arguments[0]) failed: \(result.stderr)"])
            }
        }
    }
}
