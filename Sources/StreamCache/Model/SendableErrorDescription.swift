import Foundation

/// A `Sendable` snapshot of a non-Sendable error: its domain, code and description.
public struct SendableErrorDescription: Error, Sendable, CustomStringConvertible {
    /// The error's domain.
    public let domain: String
    /// The error's code.
    public let code: Int
    /// The error's description, with URL queries removed.
    public let description: String

    /// A snapshot of `error`.
    package init(_ error: NSError) {
        domain = error.domain
        code = error.code
        description = error.localizedDescription.replacingOccurrences(of: #"\?[^\s"]*"#, with: "", options: .regularExpression)
    }
}
