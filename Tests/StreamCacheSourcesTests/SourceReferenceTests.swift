import Foundation
import StreamCache
import StreamCacheSources
import StreamCacheURLSession
import Testing

/// Reference syntax, credentials checks and the Dropbox header argument.
@Suite struct SourceReferenceTests {
    static let configuration = SourceConfiguration(transport: URLSessionTransport.shared)

    @Test(arguments: [
        ("webdav://me@nas.local:8080/music/a.mp3", "webdav"), ("webdavs://me@cloud.example/a.mp3", "webdav"), ("yandex:/Music/a.mp3", "yandex"),
        ("dropbox:/Music/a.mp3", "dropbox"), ("gdrive:1AbC", "gdrive"), ("onedrive:/Music/a.mp3", "onedrive"), ("box:12345", "box"),
    ])
    func referencesNameTheirService(reference: String, service: String) throws {
        #expect(SourceReference.isSourceReference(reference))
        let source = try SourceReference.parse(reference, credentials: SourceCredentials(token: "t"), configuration: Self.configuration)
        #expect(source.service == service)
        #expect(source.reference == reference)
    }

    @Test func webDAVReferencesMapToHTTPOrHTTPS() throws {
        let plain = try #require(try SourceReference.parse("webdav://me@127.0.0.1:8080/a b.mp3", credentials: SourceCredentials(), configuration: Self.configuration) as? WebDAVSource)
        #expect(plain.url.absoluteString == "http://127.0.0.1:8080/a%20b.mp3")
        #expect(plain.user == "me")
        let secure = try #require(try SourceReference.parse("webdavs://cloud.example/a.mp3", credentials: SourceCredentials(user: "you"), configuration: Self.configuration) as? WebDAVSource)
        #expect(secure.url.scheme == "https")
        #expect(secure.user == "you")
    }

    @Test(arguments: ["https://example.com/a.mp3", "ftp://x/y", "yandex:", "gdrive:", "webdav:///nohost", "webdav://me:pw@host/a.mp3"])
    func badReferencesAreClearErrors(reference: String) {
        #expect(throws: StreamCacheError.self) { try SourceReference.parse(reference, credentials: SourceCredentials(token: "t"), configuration: Self.configuration) }
    }

    @Test func cloudReferencesNeedAToken() {
        #expect(throws: StreamCacheError.self) { try SourceReference.parse("yandex:/a.mp3", credentials: SourceCredentials(), configuration: Self.configuration) }
    }

    @Test func dropboxArgumentsAreHeaderSafe() {
        let argument = DropboxSource.argument(path: "/Müsic/\"q\"\\x\u{7F}😀.mp3")
        #expect(argument.unicodeScalars.allSatisfy { $0.isASCII && $0.value >= 0x20 && $0.value != 0x7F })
        let decoded = try? JSONSerialization.jsonObject(with: Data(argument.utf8)) as? [String: String]
        #expect(decoded?["path"] == "/Müsic/\"q\"\\x\u{7F}😀.mp3")
    }
}
