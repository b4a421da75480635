extension HLSPlaylist {
    /// The MIME types of HLS playlists (RFC 8216 §4 and the older names players still send).
    public static let mimeTypes: Set<String> = [
        "application/vnd.apple.mpegurl", "application/x-mpegurl", "audio/mpegurl", "audio/x-mpegurl",
    ]

    /// The MIME type the proxy serves playlists with.
    public static let mimeType = "application/vnd.apple.mpegurl"

    /// Whether a file is an HLS playlist, by its `.m3u8` name or its MIME type.
    ///
    /// - Parameters:
    ///   - fileName: The file name, if known.
    ///   - mimeType: The MIME type without parameters, if known.
    public static func isPlaylist(fileName: String?, mimeType: String?) -> Bool {
        if let fileName, fileName.lowercased().hasSuffix(".m3u8") { return true }
        guard let mimeType else { return false }
        return mimeTypes.contains(mimeType.lowercased())
    }
}
