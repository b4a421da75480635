import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache
import StreamCacheHTTPClient
import StreamCacheSources

/// `streamcache ls SOURCE`: list a WebDAV collection or a cloud folder.
struct LsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ls",
        abstract: "List a WebDAV collection or a cloud folder.",
        discussion: """
        Prints one line per entry, by name in the order a file manager shows them (Track 2 before Track 10, case aside): the name \
        (folders end with /), a tab, the size in bytes (empty for folders), a tab, and a reference that get and serve accept.

        Examples:
          WEBDAV_PASSWORD=… streamcache ls webdav://me@nas.local:8080/music/ --password-env WEBDAV_PASSWORD
          streamcache ls yandex:/Music --token-env YANDEX_TOKEN
        """
    )

    @Argument(help: "webdav://user@host/path, webdavs://…, yandex:/path, dropbox:/path, gdrive:<folder id>, onedrive:/path, box:folder:<id>, or a Yandex.Disk public link (https://disk.yandex.ru/d/KEY).")
    var source: String

    @Flag(help: "Print JSON lines.")
    var json = false

    @OptionGroup var sources: SourceOptions

    @OptionGroup var transportOptions: TransportOptions

    func validate() throws {
        guard SourceReference.isSourceReference(source) else { throw ValidationError("'\(source.prefix(200))' is not a source reference.") }
    }

    func run() async throws {
        do {
            let entries = try await sources.source(source, transport: try transportOptions.transport(.shared, configuration: AsyncHTTPClientTransport.Configuration())).list()
            // Services list in orders of their own (Drive's is unspecified): the same folder lists alike on every run.
            for entry in entries.sorted(by: { $0.name.naturallyPrecedes($1.name) }) {
                if json {
                    let encoder = JSONEncoder()
                    encoder.outputFormatting = [.sortedKeys]
                    print(String(decoding: try encoder.encode(JSONLine(entry)), as: UTF8.self))
                } else {
                    print("\(entry.name)\(entry.isFolder ? "/" : "")\t\(entry.size.map(String.init) ?? "")\t\(entry.reference)")
                }
            }
        } catch {
            throw Failure.exit(error)
        }
    }
}

/// One line of `ls --json`: `{"folder":false,"name":…,"reference":…,"size":…}`, with `null` for an
/// unknown size.
private struct JSONLine: Encodable {
    enum CodingKeys: String, CodingKey { case name, folder, size, reference }

    let entry: SourceEntry

    init(_ entry: SourceEntry) { self.entry = entry }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(entry.name, forKey: .name)
        try container.encode(entry.isFolder, forKey: .folder)
        try container.encode(entry.size, forKey: .size)
        try container.encode(entry.reference, forKey: .reference)
    }
}
