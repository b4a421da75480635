#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The JSON body Google's APIs (Drive) send with an error status, whose reasons say why:
/// `{"error": {"errors": [{"domain": "usageLimits", "reason": "userRateLimitExceeded"}], "code": 403}}`.
///
/// A 403 from Drive may be a rate limit to wait out (``RetryPolicy/isRateLimit(status:body:)``)
/// or a refusal that a new token cannot fix (`downloadQuotaExceeded`, `insufficientFilePermissions`);
/// the reason goes into the error's message, so "check the token" is not said of a quota.
public enum GoogleErrorBody {
    /// The reasons `body` gives, in order; empty when it is not such a body. Each is letters and
    /// digits only (at most 64), so it is safe in a message.
    public static func reasons(in body: Data) -> [String] {
        guard !body.isEmpty, let answer = try? JSONDecoder().decode(Answer.self, from: body) else { return [] }
        return (answer.error?.errors ?? []).compactMap(\.reason).filter { reason in
            !reason.isEmpty && reason.utf8.count <= 64 && reason.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0)) }
        }
    }

    private struct Answer: Decodable {
        struct Failure: Decodable {
            struct Item: Decodable { var reason: String? }
            var errors: [Item]?
        }
        var error: Failure?
    }
}
