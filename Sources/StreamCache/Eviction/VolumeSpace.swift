#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The free space of the volume a cache directory is on, as an unprivileged process may use it.
enum VolumeSpace {
    /// The bytes `statvfs` says an unprivileged process may still write on the volume that holds
    /// `directory` (its available blocks, not its free ones: ext4 keeps 5 % for root); `nil` when
    /// the volume cannot be asked.
    @Sendable static func available(at directory: URL) -> Int64? {
        var status = statvfs()
        guard statvfs(directory.path, &status) == 0 else { return nil }
        let (bytes, overflow) = Int64(clamping: UInt64(status.f_bavail)).multipliedReportingOverflow(by: Int64(clamping: UInt64(status.f_frsize)))
        return overflow ? .max : bytes
    }
}
