/// One entry of a folder below a mounted folder, as its lister tells it
/// (``ProxyServer/mountFolder(named:token:resolvingFiles:listingFolders:)``): what a `GET` of the
/// folder's path (ending with `/`) lists.
public struct FolderListingEntry: Sendable, Hashable {
    /// The entry's name: one path segment.
    public var name: String
    /// Whether it is a folder.
    public var isFolder: Bool
    /// Its size in bytes, for a file whose size the service tells.
    public var size: Int64?

    /// Creates an entry.
    public init(name: String, isFolder: Bool, size: Int64? = nil) {
        self.name = name
        self.isFolder = isFolder
        self.size = size
    }
}
