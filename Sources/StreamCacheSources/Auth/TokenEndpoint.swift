#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// One call to a service's OAuth token endpoint (RFC 6749 §3.2): a form POSTed, a JSON answer.
/// The refresh-token grant (``OAuthRefreshingToken``) and the authorization-code grant
/// (``OAuthSignIn``) both go through here.
enum TokenEndpoint {
    /// What a token endpoint grants (RFC 6749 §5.1).
    struct Grant: Decodable {
        var access_token: String
        var refresh_token: String?
    }

    /// The endpoint's answer: a grant, or the status and the RFC 6749 §5.2 error code it refused with.
    enum Answer {
        case granted(Grant)
        case refused(status: Int, error: String?)

        /// The grant, or an `authenticationFailed` error: "The token endpoint URL refused
        /// `what` (HTTP 400, invalid_grant); `advice`." The error code is quoted only when it
        /// looks like one (lower-case letters and underscores): the rest of an error body may echo
        /// what was sent, a refresh token or a code among it.
        func grant(refusing what: String, at url: URL, advice: String) throws -> Grant {
            switch self {
            case .granted(let grant):
                return grant
            case .refused(let status, let error):
                let code = error.flatMap { $0.count <= 40 && $0.utf8.allSatisfy { (97...122).contains($0) || $0 == 95 } ? ", \($0)" : nil } ?? ""
                throw StreamCacheError(.authenticationFailed, "The token endpoint \(url.redactedDescription) refused \(what) (HTTP \(status)\(code)); \(advice).",
                                       httpStatus: status)
            }
        }
    }

    private struct ErrorBody: Decodable {
        var error: String?
    }

    /// POSTs `form` to `url` as `application/x-www-form-urlencoded`.
    static func post(_ form: [(String, String)], to url: URL, transport: any HTTPTransport) async throws -> Answer {
        let body = Data(form.map { "\($0.0)=\(FormEncoding.encode($0.1))" }.joined(separator: "&").utf8)
        let response = try await transport.send(HTTPRequest(method: "POST", url: url,
                                                            headers: ["Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"],
                                                            body: body, timeout: .seconds(30)))
        let data = try await response.body.collect(upTo: 1 << 20)
        if response.status == 200, let grant = try? JSONDecoder().decode(Grant.self, from: data) { return .granted(grant) }
        return .refused(status: response.status, error: (try? JSONDecoder().decode(ErrorBody.self, from: data))?.error)
    }
}

/// `application/x-www-form-urlencoded` values.
enum FormEncoding {
    static func encode(_ value: String) -> String {
        value.percentEncoded(allowing: URICharacters.isUnreserved)
    }
}
