#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Maps MIME types, file extensions and leading "magic" bytes to Uniform Type Identifiers.
///
/// AVFoundation wants a UTI (`public.mp3`), not a MIME type, in its content information, and
/// origins are often vague (`application/octet-stream`, no `Content-Type`, or a wrong one from
/// cloud metadata). ``uniformTypeIdentifier(mimeType:fileName:leadingBytes:)`` follows the recipe
/// in `shared/reference/mime-uti.md`: MIME type first, then the file extension, then the bytes.
public enum MediaType {
    /// The UTI used when nothing better is known.
    public static let genericUTI = "public.data"

    private static let byMIMEType: [String: String] = [
        "audio/mpeg": "public.mp3", "audio/mp3": "public.mp3", "audio/x-mp3": "public.mp3", "audio/mpeg3": "public.mp3",
        "audio/mp4": "com.apple.m4a-audio", "audio/x-m4a": "com.apple.m4a-audio", "audio/m4a": "com.apple.m4a-audio",
        "audio/aac": "public.aac-audio", "audio/x-aac": "public.aac-audio", "audio/aacp": "public.aac-audio",
        "video/mp4": "public.mpeg-4", "video/x-m4v": "com.apple.m4v-video", "video/quicktime": "com.apple.quicktime-movie",
        "audio/wav": "com.microsoft.waveform-audio", "audio/x-wav": "com.microsoft.waveform-audio",
        "audio/wave": "com.microsoft.waveform-audio", "audio/vnd.wave": "com.microsoft.waveform-audio",
        "audio/aiff": "public.aiff-audio", "audio/x-aiff": "public.aiff-audio", "audio/x-aifc": "public.aifc-audio",
        "audio/x-caf": "com.apple.coreaudio-format", "audio/ac3": "public.ac3-audio", "audio/eac3": "public.enhanced-ac3-audio",
        "audio/amr": "org.3gpp.adaptive-multi-rate-audio", "audio/basic": "public.au-audio",
        "video/3gpp": "public.3gpp", "audio/3gpp": "public.3gpp", "video/3gpp2": "public.3gpp2",
        "audio/flac": "org.xiph.flac", "audio/x-flac": "org.xiph.flac", "audio/ogg": "org.xiph.ogg-audio",
        "audio/opus": "org.xiph.opus", "video/webm": "org.webmproject.webm", "audio/webm": "org.webmproject.webm",
        "video/x-matroska": "org.matroska.mkv",
        "application/vnd.apple.mpegurl": "public.m3u-playlist", "application/x-mpegurl": "public.m3u-playlist",
        "audio/mpegurl": "public.m3u-playlist", "audio/x-mpegurl": "public.m3u-playlist",
    ]

    private static let byExtension: [String: String] = [
        "mp3": "public.mp3", "m4a": "com.apple.m4a-audio", "m4b": "com.apple.m4a-audio", "aac": "public.aac-audio",
        "adts": "public.aac-audio", "mp4": "public.mpeg-4", "m4v": "com.apple.m4v-video", "mov": "com.apple.quicktime-movie",
        "qt": "com.apple.quicktime-movie", "wav": "com.microsoft.waveform-audio", "aif": "public.aiff-audio",
        "aiff": "public.aiff-audio", "aifc": "public.aifc-audio", "caf": "com.apple.coreaudio-format", "ac3": "public.ac3-audio",
        "eac3": "public.enhanced-ac3-audio", "ec3": "public.enhanced-ac3-audio", "amr": "org.3gpp.adaptive-multi-rate-audio",
        "au": "public.au-audio", "snd": "public.au-audio", "3gp": "public.3gpp", "3gpp": "public.3gpp", "3g2": "public.3gpp2",
        "flac": "org.xiph.flac", "ogg": "org.xiph.ogg-audio", "oga": "org.xiph.ogg-audio", "opus": "org.xiph.opus",
        "webm": "org.webmproject.webm", "mkv": "org.matroska.mkv", "m3u8": "public.m3u-playlist", "m3u": "public.m3u-playlist",
    ]

    private static let mimeByExtension: [String: String] = [
        "mp3": "audio/mpeg", "m4a": "audio/mp4", "m4b": "audio/mp4", "aac": "audio/aac", "mp4": "video/mp4",
        "m4v": "video/x-m4v", "mov": "video/quicktime", "wav": "audio/wav", "aif": "audio/aiff", "aiff": "audio/aiff",
        "caf": "audio/x-caf", "flac": "audio/flac", "ogg": "audio/ogg", "oga": "audio/ogg", "opus": "audio/ogg",
        "webm": "video/webm", "mkv": "video/x-matroska", "m3u8": "application/vnd.apple.mpegurl", "ts": "video/mp2t",
        "m4s": "video/iso.segment", "vtt": "text/vtt", "webvtt": "text/vtt",
    ]

    /// MIME types that say nothing about the content, so the extension must decide.
    private static let genericMIMETypes: Set<String> = [
        "application/octet-stream", "binary/octet-stream", "application/binary", "application/x-www-form-urlencoded",
        "multipart", "application/unknown", "text/plain",
    ]

    /// The MIME type without parameters, lowercased: `Audio/MPEG; charset=x` → `audio/mpeg`.
    public static func essence(of mimeType: String) -> String {
        (mimeType.split(separator: ";", maxSplits: 1).first.map(String.init) ?? "").trimmingWhitespace().lowercased()
    }

    /// The lowercased extension of a file name or path, without the dot, or `nil`.
    public static func fileExtension(of fileName: String) -> String? {
        let last = fileName.split(separator: "/").last.map(String.init) ?? fileName
        guard let dot = last.lastIndex(of: "."), dot != last.startIndex else { return nil }
        let ext = last[last.index(after: dot)...].lowercased()
        return ext.isEmpty ? nil : ext
    }

    /// A MIME type guessed from a file name's extension, or `nil`.
    public static func mimeType(forFileName fileName: String) -> String? {
        fileExtension(of: fileName).flatMap { mimeByExtension[$0] }
    }

    /// The best UTI for a resource: from its MIME type unless that is missing or generic, then from
    /// its file name's extension, then from its first bytes, else ``genericUTI``.
    ///
    /// - Parameters:
    ///   - mimeType: The origin's `Content-Type` or metadata MIME type, parameters allowed.
    ///   - fileName: A file name or path whose extension may tell the type.
    ///   - leadingBytes: The first bytes of the resource, if already known.
    public static func uniformTypeIdentifier(mimeType: String?, fileName: String?, leadingBytes: Data? = nil) -> String {
        if let mimeType, case let essence = essence(of: mimeType), !genericMIMETypes.contains(essence),
           let uti = byMIMEType[essence] {
            return uti
        }
        if let fileName, let ext = fileExtension(of: fileName), let uti = byExtension[ext] { return uti }
        if let leadingBytes, let uti = sniff(leadingBytes) { return uti }
        return genericUTI
    }

    /// The UTI that a resource's first bytes identify, or `nil` (ID3/MPEG sync, `ftyp`, RIFF/WAVE,
    /// FORM/AIFF, `fLaC`, `OggS`, `caff`).
    public static func sniff(_ bytes: Data) -> String? {
        let b = [UInt8](bytes.prefix(12))
        func ascii(_ range: Range<Int>) -> String? {
            guard b.count >= range.upperBound else { return nil }
            return String(bytes: b[range], encoding: .ascii)
        }
        if ascii(0..<3) == "ID3" { return "public.mp3" }
        if ascii(4..<8) == "ftyp" {
            switch ascii(8..<12) {
            case "M4A ", "M4B ": return "com.apple.m4a-audio"
            case "qt  ": return "com.apple.quicktime-movie"
            default: return "public.mpeg-4"
            }
        }
        if ascii(0..<4) == "RIFF", ascii(8..<12) == "WAVE" { return "com.microsoft.waveform-audio" }
        if ascii(0..<4) == "FORM" {
            if ascii(8..<12) == "AIFF" { return "public.aiff-audio" }
            if ascii(8..<12) == "AIFC" { return "public.aifc-audio" }
        }
        if ascii(0..<4) == "fLaC" { return "org.xiph.flac" }
        if ascii(0..<4) == "OggS" { return "org.xiph.ogg-audio" }
        if ascii(0..<4) == "caff" { return "com.apple.coreaudio-format" }
        if b.count >= 2, b[0] == 0xFF, b[1] & 0xE0 == 0xE0, b[1] & 0x06 != 0 { return "public.mp3" }
        return nil
    }
}
