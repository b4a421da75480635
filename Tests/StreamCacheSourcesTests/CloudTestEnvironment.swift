import Foundation
import StreamCache
import StreamCacheHTTPClient
import StreamCacheSources
import StreamCacheTestSupport

/// A ``CloudTestServer`` and the source configuration that points every service at it; only
/// the base URLs differ from production.
struct CloudTestEnvironment {
    static let accessToken = "access-initial-9f2e7c"

    let server: CloudTestServer
    let configuration: SourceConfiguration

    static func with<T>(configure: (inout SourceConfiguration) -> Void = { _ in },
                        _ body: (CloudTestEnvironment) async throws -> T) async throws -> T {
        let server = try await CloudTestServer(initialToken: accessToken)
        var endpoints = SourceConfiguration.Endpoints()
        endpoints.yandex = server.url(.api, "/yandex/v1/disk")
        endpoints.dropboxAPI = server.url(.api, "/dropbox/2")
        endpoints.dropboxContent = server.url(.api, "/dropbox-content/2")
        endpoints.googleDrive = server.url(.api, "/drive/v3")
        endpoints.microsoftGraph = server.url(.api, "/graph/v1.0")
        endpoints.box = server.url(.api, "/box/2.0")
        for service in endpoints.tokens.keys { endpoints.tokens[service] = server.url(.api, "/oauth/token") }
        var configuration = SourceConfiguration(transport: AsyncHTTPClientTransport.shared, endpoints: endpoints)
        configure(&configuration)
        let environment = CloudTestEnvironment(server: server, configuration: configuration)
        return try await withAsyncCleanup { try await body(environment) } cleanup: { await server.stop() }
    }

    /// The environment that points the `streamcache` binary's every service, and each service's
    /// token endpoint, at the test server.
    var endpointVariables: [String: String] {
        let endpoints = configuration.endpoints
        var variables = ["STREAMCACHE_ENDPOINT_YANDEX": endpoints.yandex.absoluteString,
                         "STREAMCACHE_ENDPOINT_DROPBOX_API": endpoints.dropboxAPI.absoluteString,
                         "STREAMCACHE_ENDPOINT_DROPBOX_CONTENT": endpoints.dropboxContent.absoluteString,
                         "STREAMCACHE_ENDPOINT_GDRIVE": endpoints.googleDrive.absoluteString,
                         "STREAMCACHE_ENDPOINT_ONEDRIVE": endpoints.microsoftGraph.absoluteString,
                         "STREAMCACHE_ENDPOINT_BOX": endpoints.box.absoluteString]
        for service in endpoints.tokens.keys {
            variables["STREAMCACHE_ENDPOINT_TOKEN_\(service.uppercased())"] = server.url(.api, "/oauth/token").absoluteString
        }
        return variables
    }

    /// ``endpointVariables`` and the initial access token in `TOKEN`, for `--token-env TOKEN`.
    var variablesWithToken: [String: String] {
        endpointVariables.merging(["TOKEN": Self.accessToken]) { $1 }
    }

    /// Puts an album on the server, files of `sizes` bytes: `/Music/Album/01.mp3`, `02.mp3`, then
    /// `CD2/03.mp3` in a subfolder. Returns each path with its bytes.
    func putAlbum(sizes: [Int], seed: UInt64) -> [(path: String, data: Data)] {
        let paths = ["/Music/Album/01.mp3", "/Music/Album/02.mp3", "/Music/Album/CD2/03.mp3"]
        precondition(sizes.count <= paths.count)
        return zip(paths, sizes).enumerated().map { index, file in
            let data = TestData.random(count: file.1, seed: seed + UInt64(index))
            server.setFile(file.0, data: data, mimeType: "audio/mpeg")
            return (file.0, data)
        }
    }

    /// The reference of the file at `path` in `service`'s own syntax.
    func reference(_ service: String, path: String) -> String {
        let id = server.fileID(path) ?? "missing"
        switch service {
        case "gdrive": return "gdrive:\(id)"
        case "box": return "box:\(id)"
        default: return "\(service):\(path)"
        }
    }

    /// The reference of the folder at `path` in `service`'s own syntax (Drive and Box stand-ins
    /// name folders by their paths).
    static func folderReference(_ service: String, path: String = "/Music") -> String {
        switch service {
        case "gdrive": "gdrive:\(path)"
        case "box": "box:folder:\(path)"
        default: "\(service):\(path)"
        }
    }

    /// The source of the folder at `path`, with the initial access token.
    func folder(_ service: String, path: String = "/Music") throws -> any Source {
        try SourceReference.parse(Self.folderReference(service, path: path), credentials: SourceCredentials(token: Self.accessToken),
                                  configuration: configuration)
    }

    /// A token that the server's token endpoint can refresh.
    /// A provider that starts with ``accessToken`` and refreshes it at the test server's endpoint.
    /// `minimumTokenAge` zero lets a test expire a token seconds after the endpoint granted it.
    func refreshingToken(minimumTokenAge: Duration = .seconds(60)) -> OAuthRefreshingToken {
        OAuthRefreshingToken(endpoint: .init(url: server.url(.api, "/oauth/token")), clientID: server.clientID, refreshToken: server.refreshToken,
                             accessToken: Self.accessToken, transport: AsyncHTTPClientTransport.shared, minimumTokenAge: minimumTokenAge)
    }

    func source(_ service: String, path: String, token: (any TokenProvider)? = nil) throws -> any Source {
        try SourceReference.parse(reference(service, path: path), credentials: SourceCredentials(token: token ?? StaticToken(Self.accessToken)),
                                  configuration: configuration)
    }
}
