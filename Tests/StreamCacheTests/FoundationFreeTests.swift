#if os(Linux)
import Foundation
import StreamCacheTestSupport
import Testing

/// The modules the `streamcache` tool links use nothing of the full Foundation on Linux: loading
/// it (with FoundationInternationalization and ICU) costs a server 9 MiB of resident memory it has
/// no use for (docs/design.md, "No full Foundation in the tool"). Swift lets members of modules
/// imported elsewhere leak into a file, so a `String(format:)` or a `CharacterSet` compiles
/// without `import Foundation`; this reads the built object files instead.
@Suite struct FoundationFreeTests {
    static let toolModules = ["StreamCache", "StreamCacheHLS", "StreamCacheHTTPClient", "StreamCacheServer", "StreamCacheSources", "streamcache"]

    @Test func theToolsModulesReferenceNoSymbolOfTheFullFoundation() async throws {
        let buildDirectory = CommandLineTool.executable.deletingLastPathComponent()
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Sources").standardized
        // nm comes with binutils, which the toolchain's linker needs.
        let nm = try ExternalTool.require("nm", package: "binutils")
        let demangler = try ExternalTool.require("swift-demangle")  // part of the Swift toolchain
        var checked = 0
        for module in Self.toolModules {
            let sourceNames = Set((FileManager.default.enumerator(atPath: sources.appendingPathComponent(module).path)?.allObjects as? [String] ?? [])
                .map { URL(fileURLWithPath: $0).lastPathComponent })
            let objectDirectory = buildDirectory.appendingPathComponent("\(module).build")
            let objects = try FileManager.default.contentsOfDirectory(atPath: objectDirectory.path)
                .filter { $0.hasSuffix(".swift.o") && sourceNames.contains(String($0.dropLast(2))) }  // not objects of deleted files
            #expect(!objects.isEmpty, "no object files of \(module) in \(objectDirectory.path)")
            for object in objects {
                let listed = try await ExternalTool.run(nm, ["-u", objectDirectory.appendingPathComponent(object).path], timeout: 60)
                #expect(listed.status == 0)
                let candidates = listed.output.split(separator: "\n")
                    .compactMap { $0.split(separator: " ").last.map(String.init) }
                    .filter { $0.hasPrefix("$s") && $0.contains("Foundation") }
                checked += 1
                guard !candidates.isEmpty else { continue }
                // Mangled names abbreviate repeated words ("…010FoundationE00H0…" is
                // FoundationEssentials), so the test reads the demangled names: a module is a whole
                // word there, as in `Foundation.CharacterSet` or `(extension in Foundation):Swift.String.init(format:…)`.
                let demangled = try await ExternalTool.run(demangler, candidates, timeout: 60)
                #expect(demangled.status == 0)
                let uses = demangled.output.split(separator: "\n").map { $0.split(separator: " ---> ").last ?? $0 }.filter { line in
                    line.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") })
                        .contains { $0 == "Foundation" || $0 == "FoundationInternationalization" }
                }
                #expect(uses.isEmpty, "\(module)/\(object) uses the full Foundation: \(uses.prefix(3).joined(separator: "; "))")
            }
        }
        #expect(checked > 50)
    }
}
#endif
