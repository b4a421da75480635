#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension Resource {
    /// Tells the resource which version its source holds now, as a cloud service's metadata
    /// reports it (revision, content hash): cached bytes of any other version are dropped at
    /// once, before a read can serve them.
    ///
    /// Without it a changed file is still caught, but only when a download meets the new version,
    /// and a read that began on old cached bytes then ends with `resourceChanged`.
    ///
    /// - Parameters:
    ///   - version: The version tag, as the source's origin reports it in ``ResourceInfo/validator``.
    ///   - totalLength: The length the source reports, if any. It tells versions apart only when
    ///     the tags cannot be compared (bytes cached without a tag). A new version's length is the
    ///     one its first download states, so a service's size that disagrees with its downloads
    ///     (a service's slip) neither drops cached bytes nor fails a read.
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) for a length no resource can have
    ///   (``ByteRange/isPossibleLength(_:)``); `cacheIOFailed` when the cache cannot be read or reset.
    public func expectVersion(_ version: Validator, totalLength: Int64? = nil) async throws {
        if let totalLength, !ByteRange.isPossibleLength(totalLength) {
            throw StreamCacheError(.invalidArgument, "\(totalLength) bytes is not a length a resource can have.")
        }
        try await ensureLoaded(needsFile: false)
        guard let current = info else { return }
        var expected = current
        expected.validator = version
        if let totalLength { expected.totalLength = totalLength }
        // A length kept with the new tag would be checked against the first download's: one that
        // differs would drop the version just learned and fail the read waiting for it.
        if !(current.validator.matches(version) ?? current.isSameVersion(as: expected)) {
            // The cached digest and length were the old version's; the new one's come with its first answer.
            expected.contentDigest = nil
            expected.totalLength = nil
            try resetForNewVersion(expected)
        }
        markVerified()
    }
}
