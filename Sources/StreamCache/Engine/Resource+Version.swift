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
    ///   - totalLength: The length the source reports, if any.
    /// - Throws: ``StreamCacheError`` (`cacheIOFailed`) when the cache cannot be read or reset.
    public func expectVersion(_ version: Validator, totalLength: Int64? = nil) async throws {
        try await ensureLoaded(needsFile: false)
        guard let current = info else { return }
        var expected = current
        expected.validator = version
        if let totalLength { expected.totalLength = totalLength }
        if !current.isSameVersion(as: expected) {
            // The cached digest was the old version's; the new one's comes with its first answer.
            expected.contentDigest = nil
            try resetForNewVersion(expected)
        }
        markVerified()
    }
}
