import Foundation
import StreamCache
import Testing

/// Which 403 answers are rate limits to wait out (Google's documented `usageLimits` reasons)
/// and which are refusals.
@Suite struct RateLimitTests {
    @Test(arguments: [
        (403, #"{"error": {"errors": [{"domain": "usageLimits", "reason": "userRateLimitExceeded"}], "code": 403}}"#, true),
        (403, #"{"error": {"errors": [{"domain": "usageLimits", "reason": "rateLimitExceeded"}], "code": 403}}"#, true),
        (403, #"{"error": {"errors": [{"domain": "usageLimits", "reason": "downloadQuotaExceeded"}], "code": 403}}"#, false),
        (403, #"{"error": {"errors": [{"reason": "insufficientFilePermissions"}], "code": 403}}"#, false),
        (403, #"{"error": "rateLimitExceeded"}"#, false),
        (403, "<html><body>403 Forbidden: userRateLimitExceeded</body></html>", false),
        (403, "", false),
        (401, #"{"error": {"errors": [{"reason": "userRateLimitExceeded"}]}}"#, false),
    ])
    func aForbiddenAnswerIsARateLimitOnlyWhenItsBodySaysSo(status: Int, body: String, expected: Bool) {
        #expect(RetryPolicy.isRateLimit(status: status, body: Data(body.utf8)) == expected)
    }
}
