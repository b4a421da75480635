import Foundation
import StreamCache
import StreamCacheSources
import Testing

/// The `207 Multi-Status` parser: namespaces by URI, failed propstats ignored, bad XML refused.
@Suite struct PropfindResponseTests {
    @Test func parsesFilesAndCollectionsWhateverThePrefix() throws {
        let xml = """
        <?xml version="1.0" encoding="utf-8"?>
        <x:multistatus xmlns:x="DAV:" xmlns:o="urn:other">
          <x:response><x:href>/music/</x:href>
            <x:propstat><x:prop><x:resourcetype><x:collection/></x:resourcetype></x:prop><x:status>HTTP/1.1 200 OK</x:status></x:propstat>
          </x:response>
          <x:response><x:href>/music/My%20Song.mp3</x:href>
            <x:propstat><x:prop>
              <x:getcontentlength>7340032</x:getcontentlength><x:getcontenttype>audio/mpeg</x:getcontenttype>
              <x:getetag>W/"abc"</x:getetag><x:getlastmodified>Sun, 22 Nov 2026 08:00:00 GMT</x:getlastmodified><x:resourcetype/>
              <o:getetag>not-dav</o:getetag>
            </x:prop><x:status>HTTP/1.1 200 OK</x:status></x:propstat>
            <x:propstat><x:prop><x:getcontenttype/></x:prop><x:status>HTTP/1.1 404 Not Found</x:status></x:propstat>
          </x:response>
        </x:multistatus>
        """
        let answer = try PropfindResponse(xml: Data(xml.utf8))
        #expect(answer.resources.count == 2)
        #expect(answer.resources[0].isCollection)
        let song = answer.resources[1]
        #expect(song.href == "/music/My Song.mp3")
        #expect(song.contentLength == 7_340_032)
        #expect(song.contentType == "audio/mpeg")
        #expect(song.entityTag == "W/\"abc\"")
        #expect(song.lastModified == "Sun, 22 Nov 2026 08:00:00 GMT")
        #expect(!song.isCollection)
    }

    @Test(arguments: ["", "<html>not dav</html>", "<d:multistatus xmlns:d=\"DAV:\"><d:response>", "<multistatus/>"])
    func rejectsWhatIsNotAMultistatusDocument(xml: String) {
        #expect(throws: StreamCacheError.self) { try PropfindResponse(xml: Data(xml.utf8)) }
    }

    /// Found by `Fuzz/run propfind`: an element name that is not UTF-8, and a processing instruction
    /// without data, crashed swift-corelibs-foundation's XMLParser (a WebDAV server could crash the
    /// process). Both are now refused before parsing.
    @Test(arguments: ["PM49AAAAAADf39/f39/fCg==", "PGQ6bXVsdGlzdGF0dXMgeG1sbnM6ZD0iREFWOiI+/w==", "DTw/Ojo/Pj4=",
                      "PD94bWwgdmVyc2lvbj0iMS4wIj8+PGQ6bXVsdGlzdGF0dXMgeG1sbnM6ZD0iREFWOiI+PD9hPz48L2Q6bXVsdGlzdGF0dXM+"])
    func bytesThatCrashedXMLParserAreABadResponse(base64: String) throws {
        let data = try #require(Data(base64Encoded: base64))
        #expect(throws: StreamCacheError.self) { try PropfindResponse(xml: data) }
    }
}
