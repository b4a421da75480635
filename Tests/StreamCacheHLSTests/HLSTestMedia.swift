import Foundation
import StreamCacheTestSupport
import Testing

/// Real HLS streams made by ffmpeg (`-f hls`): 24 s of video and audio, 2-second segments, a
/// master playlist with two variants. Small frames and low bit rates keep them quick to make.
enum HLSTestMedia {
    /// The kinds of stream the tests play.
    enum Kind: String, CaseIterable, Sendable, CustomStringConvertible {
        /// MPEG-TS segments, AES-128 encrypted (`#EXT-X-KEY`).
        case transportStream = "ts"
        /// fMP4 segments with `#EXT-X-MAP` initialization sections and a separate audio
        /// rendition (`#EXT-X-MEDIA`).
        case fragmentedMP4 = "fmp4"
        /// One file per variant, segments addressed by `#EXT-X-BYTERANGE`.
        case byteRange = "byterange"

        var description: String { rawValue }
    }

    static let duration = 24

    /// Makes `kind` in `root/<kind>/`, with `master.m3u8` at its top.
    static func make(_ kind: Kind, in root: URL) async throws {
        let directory = root.appendingPathComponent(kind.rawValue)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let input = ["-f", "lavfi", "-i", "testsrc=size=160x120:rate=15", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=22050",
                     "-t", String(duration)]
        // One encoder thread: the encodes run while other suites time real transfers on 2 cores.
        let common = ["-threads", "1", "-c:a", "aac", "-b:a", "48k", "-b:v:0", "300k", "-b:v:1", "100k", "-s:v:1", "96x72", "-g", "30",
                      "-f", "hls", "-hls_time", "2", "-hls_playlist_type", "vod", "-master_pl_name", "master.m3u8"]
        var arguments = ["-nostdin", "-v", "error", "-y"] + input
        switch kind {
        case .transportStream:
            let key = TestData.random(count: 16, seed: 808)
            try key.write(to: directory.appendingPathComponent("key.bin"))
            let keyInfo = directory.appendingPathComponent("key.info")
            try "key.bin\n\(directory.appendingPathComponent("key.bin").path)\n".write(to: keyInfo, atomically: true, encoding: .utf8)
            arguments += ["-map", "0:v", "-map", "1:a", "-map", "0:v", "-map", "1:a", "-c:v", "mpeg2video"] + common
            arguments += ["-hls_key_info_file", keyInfo.path, "-var_stream_map", "v:0,a:0 v:1,a:1",
                          "-hls_segment_filename", directory.appendingPathComponent("v%v_%03d.ts").path, directory.appendingPathComponent("v%v.m3u8").path]
        case .fragmentedMP4:
            arguments += ["-map", "0:v", "-map", "0:v", "-map", "1:a", "-c:v", "mpeg4"] + common
            arguments += ["-hls_segment_type", "fmp4", "-hls_fmp4_init_filename", "init.mp4",
                          "-var_stream_map", "v:0,agroup:aud v:1,agroup:aud a:0,agroup:aud",
                          "-hls_segment_filename", directory.appendingPathComponent("s%v_%03d.m4s").path, directory.appendingPathComponent("s%v.m3u8").path]
        case .byteRange:
            arguments += ["-map", "0:v", "-map", "1:a", "-map", "0:v", "-map", "1:a", "-c:v", "mpeg2video"] + common
            arguments += ["-hls_flags", "single_file", "-var_stream_map", "v:0,a:0 v:1,a:1", directory.appendingPathComponent("v%v.m3u8").path]
        }
        let result = try await ExternalTool.run("ffmpeg", arguments)
        try #require(result.status == 0, "ffmpeg could not make the \(kind) stream: \(result.stderr)")
        try? FileManager.default.removeItem(at: directory.appendingPathComponent("key.info"))
    }

    /// Every file of a made stream, by its path below `root` (`/ts/v0_000.ts`), with its size.
    static func files(of kind: Kind, in root: URL) throws -> [String: Int64] {
        let directory = root.appendingPathComponent(kind.rawValue)
        var sizes: [String: Int64] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            let attributes = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)
            sizes["/\(kind.rawValue)/\(name)"] = (attributes[.size] as? NSNumber)?.int64Value ?? 0
        }
        return sizes
    }
}
