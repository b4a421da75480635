import Foundation
import Logging
import StreamCache

extension URLSessionTransport {
    /// One long-lived session per process, for every origin that does not bring its own transport.
    public static let shared = URLSessionTransport()
}

extension HTTPOrigin {
    /// Creates an origin that downloads with the shared ``URLSessionTransport``.
    ///
    /// ```swift
    /// let origin = HTTPOrigin(url: songURL, headers: ["Authorization": "OAuth \(token)"])
    /// ```
    ///
    /// - Parameters:
    ///   - url: An `http` or `https` URL.
    ///   - headers: Headers for every request, credentials included.
    ///   - credentials: A provider of authorization headers that can refresh them after a 401.
    ///   - configuration: Redirect, retry and timeout settings.
    ///   - logger: Where to log; URLs are logged without their query and no header value is logged.
    public init(
        url: URL, headers: HTTPHeaders = [:], credentials: (any CredentialProvider)? = nil, configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "streamcache.origin", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.init(url: url, headers: headers, credentials: credentials, transport: URLSessionTransport.shared, configuration: configuration, logger: logger)
    }
}
