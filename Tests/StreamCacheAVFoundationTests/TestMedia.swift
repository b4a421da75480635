import Foundation
import StreamCacheTestSupport
import Testing

/// Real media files made by ffmpeg (installed by `.ci/run`).
enum TestMedia {
    /// A 180-second 320 kb/s MP3, about 7 MB, with an ID3 tag.
    static func mp3() async throws -> Data {
        try await make("song.mp3", codec: ["-c:a", "libmp3lame", "-b:a", "320k"])
    }

    /// A 60-second AAC M4A whose `moov` box is after its `mdat` (ffmpeg's default without
    /// `+faststart`), so a player must read the tail before it can play.
    static func m4aWithMoovAtEnd() async throws -> Data {
        let data = try await make("tail.m4a", codec: ["-c:a", "aac", "-b:a", "128k"], seconds: 60)
        let moov = try #require(data.range(of: Data("moov".utf8)))
        let mdat = try #require(data.range(of: Data("mdat".utf8)))
        #expect(moov.lowerBound > mdat.lowerBound, "ffmpeg put the moov box first")
        return data
    }

    private static func make(_ name: String, codec: [String], seconds: Int = 180) async throws -> Data {
        try await withTemporaryDirectory { directory in
            let output = directory.appendingPathComponent(name)
            let result = try await ExternalTool.run("ffmpeg", ["-nostdin", "-v", "error", "-y", "-f", "lavfi",
                                                               "-i", "sine=frequency=440:duration=\(seconds)", "-ac", "2", "-ar", "44100"]
                                                    + codec + [output.path])
            try #require(result.status == 0, "ffmpeg could not make \(name): \(result.stderr)")
            return try Data(contentsOf: output)
        }
    }
}
