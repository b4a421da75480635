import Foundation
import StreamCache
import StreamCacheAVFoundation
import Testing

/// The asset URLs: a valid custom scheme, the file's name kept, no secret carried.
@Suite struct CustomSchemeURLTests {
    @Test func httpURLsGetAValidCustomSchemeAndLoseTheirSecrets() throws {
        let url = try #require(URL(string: "https://me:pw@Cloud.Example:8443/music/My%20Song.mp3?sig=abc&exp=1#t=3"))
        let custom = CustomSchemeURL.make(for: url)
        #expect(custom.scheme == "streamcache-https")
        #expect(CustomSchemeURL.isValidScheme(try #require(custom.scheme)))
        #expect(custom.host?.lowercased() == "cloud.example")
        #expect(custom.port == 8443)
        #expect(custom.lastPathComponent == "My Song.mp3")
        #expect(custom.pathExtension == "mp3")
        #expect(custom.query == nil && custom.fragment == nil && custom.user == nil && custom.password == nil)
        #expect(!custom.absoluteString.contains("sig") && !custom.absoluteString.contains("pw"))
    }

    @Test func resourcesWithoutAURLAreNamedByTheirKeysDigest() throws {
        let key = CacheKey("yandex:me/disk:/Music/a.mp3")
        let custom = CustomSchemeURL.make(for: key, fileName: "a.mp3")
        #expect(custom.scheme == "streamcache")
        #expect(custom.pathExtension == "mp3")
        #expect(custom.pathComponents.contains(key.fileStem))
        #expect(!custom.absoluteString.contains("yandex"))
        #expect(CustomSchemeURL.make(for: key, fileName: nil).lastPathComponent == "media")
        #expect(CustomSchemeURL.make(for: try #require(URL(string: "file:///tmp/a.mp3"))).scheme == "streamcache")
    }

    @Test(arguments: [("streamcache-https", true), ("loader-https", true), ("a+b.c", true), ("__loader__https", false),
                      ("1abc", false), ("", false), ("sché", false), ("has space", false)])
    func schemeSyntaxFollowsRFC3986(scheme: String, valid: Bool) {
        #expect(CustomSchemeURL.isValidScheme(scheme) == valid)
    }

    @Test func streamCacheErrorsBridgeToNSErrorWithTheirDomainAndCode() {
        let error = StreamCacheError(.authenticationFailed, "The origin refused the credentials.", httpStatus: 401)
        let bridged = NSError(domain: StreamCacheError.errorDomain, code: error.errorCode, userInfo: error.errorUserInfo)
        #expect(bridged.domain == "StreamCacheErrorDomain")
        #expect(bridged.code == StreamCacheError.Code.authenticationFailed.number)
        #expect(bridged.localizedDescription == "The origin refused the credentials.")
        #expect(bridged.userInfo["HTTPStatus"] as? Int == 401)
    }
}
