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

    /// A `getcontentlength` that is no file's length (negative, past
    /// ``StreamCache/ByteRange/largestLength``, not a number) is an unknown length, not a listed one.
    @Test(arguments: [("0", Int64?.some(0)), ("7340032", 7_340_032), ("-5", nil), ("1000000000000000000", nil), ("99999999999999999999", nil), ("12 KB", nil)])
    func aLengthNoFileCanHaveIsUnknown(stated: String, expected: Int64?) throws {
        let xml = """
        <d:multistatus xmlns:d="DAV:"><d:response><d:href>/a.mp3</d:href><d:propstat><d:prop>\
        <d:getcontentlength>\(stated)</d:getcontentlength></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response></d:multistatus>
        """
        let answer = try PropfindResponse(xml: Data(xml.utf8))
        #expect(answer.resources.count == 1)
        #expect(answer.resources.first?.contentLength == expected)
    }

    @Test(arguments: ["", "<html>not dav</html>", "<d:multistatus xmlns:d=\"DAV:\"><d:response>", "<multistatus/>"])
    func rejectsWhatIsNotAMultistatusDocument(xml: String) {
        #expect(throws: StreamCacheError.self) { try PropfindResponse(xml: Data(xml.utf8)) }
    }

    /// Found by `Fuzz/run propfind` when FoundationXML's `XMLParser` read these answers: an element
    /// name that is not UTF-8, and a processing instruction without data, crashed it (a WebDAV
    /// server could crash the process). `XMLPullParser` refuses the first three as malformed and
    /// reads the last as the empty multi-status document it is.
    @Test(arguments: ["PM49AAAAAADf39/f39/fCg==", "PGQ6bXVsdGlzdGF0dXMgeG1sbnM6ZD0iREFWOiI+/w==", "DTw/Ojo/Pj4="])
    func bytesThatCrashedXMLParserAreABadResponse(base64: String) throws {
        let data = try #require(Data(base64Encoded: base64))
        #expect(throws: StreamCacheError.self) { try PropfindResponse(xml: data) }
    }

    @Test func aProcessingInstructionWithoutDataIsSkipped() throws {
        let data = try #require(Data(base64Encoded: "PD94bWwgdmVyc2lvbj0iMS4wIj8+PGQ6bXVsdGlzdGF0dXMgeG1sbnM6ZD0iREFWOiI+PD9hPz48L2Q6bXVsdGlzdGF0dXM+"))
        #expect(try PropfindResponse(xml: data).resources.isEmpty)
    }

    /// What servers other than Apache write: the default namespace, escaped quotes in an ETag, a
    /// CDATA href, comments, and non-`DAV:` elements with `DAV:` names.
    @Test func readsEscapedValuesCDATAAndTheDefaultNamespace() throws {
        let xml = """
        <?xml version="1.0"?>
        <!-- generated -->
        <multistatus xmlns="DAV:">
          <response><href><![CDATA[/a&b/]]></href>
            <propstat><prop><resourcetype><collection/></resourcetype></prop><status>HTTP/1.1 200 OK</status></propstat></response>
          <response xmlns:x="urn:x"><x:href>/not-dav</x:href><href>/music/Caf%C3%A9 &amp; Bar.mp3</href>
            <propstat><prop><getetag>&quot;5f&#x2D;a&quot;</getetag><getcontentlength>12</getcontentlength>
              <x:getcontentlength>99</x:getcontentlength></prop><status>HTTP/1.1 200 OK</status></propstat></response>
        </multistatus>
        """
        let answer = try PropfindResponse(xml: Data(xml.utf8))
        #expect(answer.resources.map(\.href) == ["/a&b/", "/music/Café & Bar.mp3"])
        #expect(answer.resources[0].isCollection)
        #expect(answer.resources[1].entityTag == "\"5f-a\"")
        #expect(answer.resources[1].contentLength == 12)
    }

    @Test func aDocumentTypeDeclarationIsRefusedSoNoEntityIsExpanded() {
        let xml = """
        <?xml version="1.0"?><!DOCTYPE m [<!ENTITY big "aaaaaaaaaa">]>
        <d:multistatus xmlns:d="DAV:"><d:response><d:href>&big;</d:href></d:response></d:multistatus>
        """
        #expect(throws: StreamCacheError.self) { try PropfindResponse(xml: Data(xml.utf8)) }
    }
}
