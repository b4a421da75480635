#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// JSON calls to a cloud service's REST API with its access token: one refresh and retry after a
/// 401; a refused or reset connection (not for a `POST`) and a 429 or 5xx answer tried again by
/// `retry` (every service documents 429 or 503 with `Retry-After` for rate limits, Google Drive
/// also 403 with a rate-limit reason: ``StreamCache/RetryPolicy/isRateLimit(status:body:)``); HTTP statuses
/// turned into ``StreamCache/StreamCacheError``s that name the service and never quote a token or
/// a signed URL.
struct CloudAPI: Sendable {
    let service: String
    let credentials: any CredentialProvider
    let transport: any HTTPTransport
    let timeout: Duration
    let retry: RetryPolicy

    init(service: String, credentials: any CredentialProvider, transport: any HTTPTransport, timeout: Duration = .seconds(30),
         retry: RetryPolicy = RetryPolicy()) {
        self.service = service
        self.credentials = credentials
        self.transport = transport
        self.timeout = timeout
        self.retry = retry
    }

    /// Sends a request with the token and decodes the JSON answer.
    func json<Result: Decodable>(_ type: Result.Type, method: String = "GET", url: URL, headers: HTTPHeaders = [:],
                                 body: Data? = nil) async throws -> Result {
        let data = try await send(method: method, url: url, headers: headers, body: body)
        do {
            return try JSONDecoder().decode(Result.self, from: data)
        } catch let error as DecodingError {
            throw StreamCacheError(.badResponse, "\(service) answered \(url.redactedDescription) with JSON this client does not understand (\(Self.reason(error))).")
        }
    }

    /// Where and why an answer did not decode, for the error: the field's path (`entries.[2].size`)
    /// and what was wrong with it, never a field's value (which may be a token or a signed link),
    /// except what ``StatedSize`` quotes.
    static func reason(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, then key: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (key.map { [$0] } ?? [])
            return keys.map { key in key.intValue.map { "[\($0)]" } ?? key.stringValue }.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context): return "no `\(path(context, then: key))`"
        case .valueNotFound(_, let context): return "`\(path(context))` is null"
        case .typeMismatch(let type, let context): return "`\(path(context))` is not a \(type)"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "not JSON" : "`\(path(context))`: \(context.debugDescription)"
        @unknown default: return "undecodable"
        }
    }

    /// Sends a request with the token and returns the body of a 2xx answer.
    func send(method: String = "GET", url: URL, headers: HTTPHeaders = [:], body: Data? = nil) async throws -> Data {
        var refreshed = false
        var attempt = 1
        while true {
            let authorization = try await credentials.authorizationHeaders()
            var requestHeaders = headers
            requestHeaders.merge(authorization)
            if requestHeaders["Accept"] == nil { requestHeaders["Accept"] = "application/json" }
            let response = try await transport.send(HTTPRequest(method: method, url: url, headers: requestHeaders, body: body, timeout: timeout),
                                                    retrying: retry)
            let data = try await response.body.collect(upTo: 8 << 20)
            switch RetryPolicy.isRateLimit(status: response.status, body: data) ? 429 : response.status {
            case 200..<300:
                return data
            case 401 where !refreshed:
                refreshed = true
                if try await credentials.refresh(rejected: authorization, status: 401) { continue }
                fallthrough
            case 401, 403:
                if response.status == 403, let reason = GoogleErrorBody.reasons(in: data).first {
                    throw StreamCacheError(.authenticationFailed, "\(service) refused the request (HTTP 403, \(reason)).", httpStatus: 403)
                }
                throw StreamCacheError(.authenticationFailed, "\(service) rejected the access token (HTTP \(response.status)); check or renew it.",
                                       httpStatus: response.status)
            case 404, 409, 410:
                // Dropbox reports a missing path as 409 `path/not_found`.
                throw StreamCacheError(.notFound, "\(service) has no such file or folder (\(url.redactedDescription)).", httpStatus: response.status)
            case 429, 500...599:
                guard attempt < retry.maxAttempts else {
                    let state = response.status >= 500 ? "is unavailable" : "is limiting this account's requests"
                    throw StreamCacheError(.originUnavailable, "\(service) \(state) (HTTP \(response.status)); try again later.",
                                           httpStatus: response.status)
                }
                attempt += 1
                try await Task.sleep(for: retry.wait(beforeAttempt: attempt, retryAfter: response.headers["Retry-After"]))
            default:
                throw StreamCacheError(.badResponse, "\(service) answered HTTP \(response.status) to \(url.redactedDescription).",
                                       httpStatus: response.status)
            }
        }
    }

    /// `base` with `path` appended and `query` items added, percent-encoded.
    static func url(_ base: URL, _ path: String, query: [(String, String)] = []) -> URL {
        var components = URLComponents(url: base.appendingPathComponent(path), resolvingAgainstBaseURL: false)!
        if !query.isEmpty {
            components.percentEncodedQuery = query.map { "\(FormEncoding.encode($0.0))=\(FormEncoding.encode($0.1))" }.joined(separator: "&")
        }
        return components.url!
    }
}

/// A download locator whose links come from a service's API and may expire: it resolves one
/// lazily, keeps it until a download reports it dead, then resolves a new one.
///
/// A link whose downloads do not tell the file's version (Yandex.Disk, OneDrive, a Google Drive
/// viewer's: they name it in their APIs only) vouches for the version it was resolved with for
/// `versionLifetime` only; the first download after that resolves it again, with fresh
/// metadata. Without that, a process that kept one link (a long-running `serve`) would join the
/// bytes of a file replaced by one of the same length to the cached bytes of the old one: the
/// length, the only thing such a download tells, would match. A link that names its version
/// (Box, Google Drive: ``StreamCache/DownloadTarget/pinsVersion``) vouches for its bytes for
/// as long as it works.
actor ResolvingLocator: DownloadLocator {
    nonisolated let logDescription: String
    private let resolve: @Sendable () async throws -> DownloadTarget
    private let versionLifetime: Duration
    private var current: DownloadTarget?
    /// When the resolution that gave ``current`` began: its metadata is at least that recent.
    private var resolvedAt: ContinuousClock.Instant
    private var resolving: Task<DownloadTarget, any Error>?

    init(logDescription: String, initial: DownloadTarget? = nil, versionLifetime: Duration,
         resolve: @escaping @Sendable () async throws -> DownloadTarget) {
        self.logDescription = logDescription
        self.current = initial
        self.resolvedAt = .now
        self.versionLifetime = versionLifetime
        self.resolve = resolve
    }

    func target() async throws -> DownloadTarget {
        if let current, current.vouchesForItsBytes || ContinuousClock.now - resolvedAt < versionLifetime { return current }
        let resolution: Task<DownloadTarget, any Error>
        if let resolving {
            resolution = resolving
        } else {
            resolution = Task { try await self.resolveAndKeep() }
            resolving = resolution
        }
        do {
            return try await resolution.value
        } catch let error where !(error is CancellationError) {
            // A link that only grew old still works: an API that is down or refuses for now
            // must not stop the downloads it would serve (each download waiting for this answer).
            guard let current else { throw error }
            return current
        }
    }

    /// One resolution, shared by every download that asks meanwhile.
    private func resolveAndKeep() async throws -> DownloadTarget {
        let began = ContinuousClock.now
        defer { resolving = nil }
        do {
            let target = try await resolve()
            current = target
            resolvedAt = began
            return target
        } catch {
            // The old link, if any, goes on serving; the version is asked again a lifetime later.
            if current != nil { resolvedAt = .now }
            throw error
        }
    }

    func targetFailed(_ target: DownloadTarget, status: Int) async -> Bool {
        // Several downloads may report the same dead link; one new resolution serves them all.
        if current == target { current = nil }
        return true
    }

    func prepareForVersionCheck() async {
        // A version in the response's own header (Dropbox's) is current with every download.
        if let current, !current.confirmsVersionInResponses { self.current = nil }
    }
}
