import Logging

extension HTTPTransport {
    /// Sends `request`, and sends it again by `policy` while its connection is refused or lost
    /// before an answer (``StreamCacheError/connectionFailure``): a server restarting or a network
    /// coming back. A request that timed out is not sent again, since it already waited as long as
    /// it may. A transport that does not tell failures apart gets the same by time: a failure
    /// within ``RetryPolicy/connectionFailureWindow`` is sent again. Nor is a request sent again
    /// whose method is not idempotent
    /// (RFC 9110, section 9.2.2: a `POST` that reached a server which then reset the connection may
    /// have taken effect, such as a refresh token that the server rotated).
    ///
    /// Transports fail a connection at once (see ``HTTPTransport``), so these retries are the only
    /// ones, the same whichever client library sends.
    ///
    /// - Parameters:
    ///   - request: The request; its ``HTTPRequest/timeout`` bounds each attempt.
    ///   - policy: How often, and how long apart, to try.
    ///   - logger: Where each retry is logged (at `info`), if anywhere.
    /// - Throws: The last attempt's error.
    public func send(_ request: HTTPRequest, retrying policy: RetryPolicy, logger: Logger? = nil) async throws -> HTTPResponse {
        let repeatable = RetryPolicy.idempotentMethods.contains(request.method.uppercased())
        var attempt = 1
        while true {
            let sentAt = ContinuousClock.now
            do {
                return try await send(request)
            } catch let error as StreamCacheError where error.code == .originUnavailable && repeatable && attempt < policy.maxAttempts
                && RetryPolicy.repeats(error, after: ContinuousClock.now - sentAt) {
                attempt += 1
                logger?.info("retrying after a failed connection", metadata: ["host": "\(request.url.host ?? "?")", "error": "\(error.message)"])
                try await Task.sleep(for: policy.backoff(beforeAttempt: attempt))
            }
        }
    }
}
