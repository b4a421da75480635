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

    /// The reasons a Google error body gives, in order; only plain words, so a message can quote them.
    @Test func theReasonsOfAGoogleErrorBodyAreReadAndOnlyPlainWordsKept() {
        let body = #"{"error": {"errors": [{"reason": "downloadQuotaExceeded"}, {"reason": "a \"quoted\" reason"}, {"reason": "forbidden2"}], "code": 403}}"#
        #expect(GoogleErrorBody.reasons(in: Data(body.utf8)) == ["downloadQuotaExceeded", "forbidden2"])
        #expect(GoogleErrorBody.reasons(in: Data("<html>403</html>".utf8)).isEmpty)
        #expect(GoogleErrorBody.reasons(in: Data(#"{"error": {"errors": [{"reason": "\#(String(repeating: "x", count: 65))"}]}}"#.utf8)).isEmpty)
    }
}
