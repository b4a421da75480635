import StreamCache
import StreamCacheServer

/// A mounted folder's listing while its service is out of reach: what the cache holds below it,
/// by the references (aliases) its files were read by.
///
/// One file can be known below a folder by two spellings of its path: the path the mount and
/// `prefetch` name it by (`10 Last Song.mp3`), and the reference the service spells, a URL whose
/// segments are percent-encoded (`10%20Last%20Song.mp3`, a Yandex.Disk public link's or a WebDAV
/// server's). Listed by both, the file came twice, once by a name that names nothing: a player given
/// the folder played the track twice, and the second was percent-encoded again (`10%2520Last…`).
/// It is listed once, by the path, which the mount resolves offline.
enum CachedFolderListing {
    /// The entries right below `prefix` that `aliases` (each beginning with it) name: a file for
    /// each alias with no `/` past the prefix, with the size the cache knows for it, and a folder
    /// for the first segment of the others. Of two aliases of one resource whose paths below
    /// `prefix` differ only by percent-encoding, the encoded one is left out.
    static func entries(named aliases: [(alias: String, key: CacheKey, size: Int64?)], below prefix: String) -> [FolderListingEntry] {
        let below = aliases.filter { $0.alias.hasPrefix(prefix) }.map { (path: String($0.alias.dropFirst(prefix.count)), key: $0.key, size: $0.size) }
        var pathsByKey: [CacheKey: Set<String>] = [:]
        for file in below { pathsByKey[file.key, default: []].insert(file.path) }
        var folders: Set<String> = []
        var entries: [FolderListingEntry] = []
        for (path, key, size) in below {
            if let decoded = path.percentDecoded, decoded != path, pathsByKey[key]?.contains(decoded) == true { continue }
            if let slash = path.firstIndex(of: "/") {
                let folder = String(path[..<slash])
                if !folder.isEmpty, folders.insert(folder).inserted { entries.append(FolderListingEntry(name: folder, isFolder: true)) }
            } else if !path.isEmpty {
                entries.append(FolderListingEntry(name: path, isFolder: false, size: size))
            }
        }
        return entries
    }
}
