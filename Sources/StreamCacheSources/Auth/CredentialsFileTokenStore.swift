#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// Keeps a service's rotated refresh token in the credentials file it came from (see
/// ``RefreshTokenStore``): the entry's `refresh_token` and `token` are replaced, everything else
/// in the file is kept (``CredentialsFileEditor``).
struct CredentialsFileTokenStore: RefreshTokenStore {
    /// The credentials file.
    let url: URL
    /// The service's entry (`box`, `onedrive`, …).
    let service: String

    func storedRefreshToken() async throws -> String? {
        try CredentialsFile.load(from: url)?.refreshToken(for: service)
    }

    func keep(refreshToken: String, accessToken: String) async throws {
        try await CredentialsFileEditor.edit(url) { document in
            guard case .object(var entry)? = document[service] else {
                throw StreamCacheError(.invalidArgument, "\(url.path) no longer has a \"\(service)\" entry to keep the new refresh token in.")
            }
            entry["refresh_token"] = .string(refreshToken)
            entry["token"] = .string(accessToken)
            document[service] = .object(entry)
        }
    }
}
