import StreamCacheSources
import Testing

/// The XML reader under the PROPFIND parser: well-formed XML gives namespace-resolved events,
/// anything else a syntax error with its offset; no entity beyond XML's own is expanded.
@Suite struct XMLPullParserTests {
    private typealias Name = XMLPullParser.Name

    private func events(_ xml: String) throws -> [XMLPullParser.Event] {
        var parser = try XMLPullParser(Array(xml.utf8))
        var events: [XMLPullParser.Event] = []
        while let event = try parser.next() { events.append(event) }
        return events
    }

    @Test func resolvesPrefixesAndTheDefaultNamespaceByScope() throws {
        let xml = """
        \u{FEFF}<?xml version="1.0" encoding="utf-8"?>
        <!-- before the root --><?stylesheet href="x"?>
        <a:root xmlns:a="DAV:" xmlns="urn:default"><plain/><a:x xmlns:a="urn:other" xmlns=""><a:y/><z/></a:x><a:y></a:y></a:root>
        <!-- after the root -->
        """
        #expect(try events(xml) == [
            .start(Name(namespace: "DAV:", local: "root")),
            .start(Name(namespace: "urn:default", local: "plain")), .end(Name(namespace: "urn:default", local: "plain")),
            .start(Name(namespace: "urn:other", local: "x")),
            .start(Name(namespace: "urn:other", local: "y")), .end(Name(namespace: "urn:other", local: "y")),
            .start(Name(namespace: nil, local: "z")), .end(Name(namespace: nil, local: "z")),
            .end(Name(namespace: "urn:other", local: "x")),
            .start(Name(namespace: "DAV:", local: "y")), .end(Name(namespace: "DAV:", local: "y")),
            .end(Name(namespace: "DAV:", local: "root")),
        ])
    }

    @Test func decodesReferencesAndCDATAAndSkipsCommentsInText() throws {
        let xml = #"<r a='&lt;1&gt;' b="&quot;">&quot;v&#49;&#x32;&apos;&amp;<![CDATA[<&raw>]]><!-- gone -->é</r>"#
        let texts = try events(xml).compactMap { event -> String? in
            if case .text(let text) = event { return text }
            return nil
        }
        #expect(texts == ["\"v12'&", "<&raw>", "é"])
    }

    @Test(arguments: [
        ("", "no root element"),
        ("   ", "no root element"),
        ("<a>", "ends inside an element"),
        ("<a></b>", "matches no open element"),
        ("<a></a><b/>", "a second root element"),
        ("<a/>text", "text outside the root element"),
        ("<p:a/>", "prefix p is not declared"),
        ("<a>&nbsp;</a>", "'&nbsp;' is not defined"),
        ("<a>&#0;</a>", "no XML character"),
        ("<a>&#xD800;</a>", "no XML character"),
        ("<a>& b</a>", "starts no reference"),
        ("<a b=c/>", "must be quoted"),
        ("<a b='1' b='2'/>", "a repeated attribute"),
        ("<a b='<'/>", "'<' in an attribute value"),
        ("<a b='1'c='2'/>", "separated by whitespace"),
        ("<a><!-- open </a>", "comment that does not end"),
        ("<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>", "document type declarations are not accepted"),
        ("<a xmlns:p=''/>", "cannot be bound"),
        ("<a:b:c xmlns:a='x'/>", "malformed qualified name"),
        ("<a>]]></a>", "']]>' in text"),
        ("<1a/>", "without a valid name"),
        ("<a>\u{01}</a>", "control character"),
    ])
    func refusesWhatIsNotWellFormed(xml: String, reason: String) {
        #expect {
            try events(xml)
        } throws: { error in
            (error as? XMLSyntaxError)?.reason.contains(reason) == true
        }
    }

    @Test func refusesBytesThatAreNotUTF8() {
        #expect(throws: XMLSyntaxError.self) { try XMLPullParser([0x3C, 0x61, 0xFF, 0x2F, 0x3E]) }
    }
}
