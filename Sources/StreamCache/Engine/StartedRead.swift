/// A read of a resource with its first region already in hand.
///
/// A front end that describes bytes before it sends them (an HTTP response's head,
/// AVFoundation's content information) waits for the first byte: that byte's region names the
/// version it belongs to (``CachedRegion/info``), and whatever the origin says on the way to it
/// (a status, a new version) can still shape the answer instead of cutting it off.
public struct StartedRead: Sendable {
    /// The bytes asked for.
    public let range: ByteRange
    /// The first region, or `nil` when the read ended at once (it starts at or past the end).
    public let first: CachedRegion?
    /// The rest of the read, after ``first``.
    public var rest: RegionStream.Iterator

    /// How many version changes met before a response's first byte a front end answers with
    /// the new version; an origin whose version changes on every answer then gets an error.
    public static let versionChangesAnsweredAnew = 2

    /// Starts reading `range` of `resource` and waits for the first region.
    ///
    /// - Parameter restartsOnVersionChange: How many times a new version met before the first
    ///   region starts the read again, so the region is the new version's; the next change is
    ///   thrown. Cached bytes dropped after they failed the origin's digest count alike: the read
    ///   again fetches them anew.
    /// - Throws: What the origin said instead of the first byte, as ``StreamCacheError``.
    public init(resource: Resource, range: ByteRange, restartsOnVersionChange: Int = 0) async throws {
        var changesMet = 0
        while true {
            var iterator = resource.regions(range).makeAsyncIterator()
            do {
                first = try await iterator.next()
                rest = iterator
                self.range = range
                return
            } catch let error as StreamCacheError where error.endsAReadOfDroppedBytes && changesMet < restartsOnVersionChange {
                changesMet += 1
            }
        }
    }
}
