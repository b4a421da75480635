#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// How often and how patiently an origin request is retried after a transient failure
/// (a connection refused or reset: see ``HTTPTransport/send(_:retrying:logger:)``; 5xx, 429, a
/// 403 that says it is a rate limit; a body that broke off).
public struct RetryPolicy: Sendable, Hashable {
    /// The most attempts for one request, the first included. Resumes of a body that broke off
    /// count separately, up to this number per body without progress.
    public var maxAttempts: Int
    /// The wait before the second attempt.
    public var initialBackoff: Duration
    /// The longest wait between attempts, also the cap on a `Retry-After` the origin asks for.
    public var maxBackoff: Duration

    /// Creates a policy.
    public init(maxAttempts: Int = 5, initialBackoff: Duration = .milliseconds(100), maxBackoff: Duration = .seconds(5)) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
    }

    /// No retries at all.
    public static let none = RetryPolicy(maxAttempts: 1)

    /// How soon a request must fail without an answer to be sent again, when its transport does
    /// not say how the connection failed (``StreamCacheError/connectionFailure``). A refused or
    /// reset connection fails in milliseconds on a machine at rest; one that timed out took at
    /// least the transport's connect timeout (10 s by default), and is not sent again.
    public static let connectionFailureWindow: Duration = .seconds(5)

    /// Whether a request that failed with `error`, `elapsed` after it was sent, is worth sending
    /// again: a refused or lost connection always (on a machine busy starting a whole test suite
    /// a refusal once took 5.7 s to show), a timeout or a refused certificate never, and an
    /// unclassified failure when it came within ``connectionFailureWindow``.
    static func repeats(_ error: StreamCacheError, after elapsed: Duration) -> Bool {
        switch error.connectionFailure {
        case .refused, .lost: true
        case .timedOut, .certificateRejected, .proxyRefused: false
        case nil: elapsed < connectionFailureWindow
        }
    }

    /// The methods a request may be repeated with (RFC 9110, section 9.2.2), plus WebDAV's
    /// `PROPFIND`, which only reads.
    static let idempotentMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PROPFIND"]

    /// Whether a 403 answer is a rate limit rather than a refusal, and so is waited out like a
    /// 429: Google's APIs (Drive) answer a per-user or per-project quota exceeded with 403 and a
    /// `userRateLimitExceeded` or `rateLimitExceeded` reason in the JSON body
    /// (``GoogleErrorBody``), and document exponential back-off as the remedy. A daily download
    /// quota (`downloadQuotaExceeded`) or a missing permission stays a refusal.
    public static func isRateLimit(status: Int, body: Data) -> Bool {
        status == 403 && GoogleErrorBody.reasons(in: body).contains { rateLimitReasons.contains($0) }
    }

    /// The most of a 403's body read to tell a rate limit (``isRateLimit(status:body:)``).
    public static let refusalBodyLimit = 64 * 1024

    static let rateLimitReasons: Set<String> = ["userRateLimitExceeded", "rateLimitExceeded"]

    /// The wait before attempt number `attempt` after an answer that failed for now (429, 5xx):
    /// what its `Retry-After` asks for, within ``maxBackoff``, else the back-off. The header gives
    /// either seconds or a date (RFC 9110, section 10.2.3); a date is counted from `now` (seconds
    /// since 1970, the system's clock by default), and one already past means at once.
    public func wait(beforeAttempt attempt: Int, retryAfter header: String?, now: Double? = nil) -> Duration {
        guard let header else { return backoff(beforeAttempt: attempt) }
        if let seconds = Int64(header.trimmingWhitespace()), seconds >= 0 {
            return min(.seconds(seconds), maxBackoff)
        }
        let now = now ?? Date().timeIntervalSince1970
        guard let date = HTTPDate.secondsSince1970(parsing: header, now: Int64(now.rounded(.down))) else {
            return backoff(beforeAttempt: attempt)
        }
        return min(.seconds(max(0, Double(date) - now)), maxBackoff)
    }

    /// The wait before attempt number `attempt` (2 for the first retry): exponential, capped.
    public func backoff(beforeAttempt attempt: Int) -> Duration {
        let exponent = max(0, min(attempt - 2, 20))
        let wait = initialBackoff * (1 << exponent)
        return min(wait, maxBackoff)
    }
}
