#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A `Sendable` snapshot of a non-Sendable error: its domain, code and description.
public struct SendableErrorDescription: Error, Sendable, CustomStringConvertible {
    /// The error's domain: an `NSError`'s domain, or the name of the error's type.
    public let domain: String
    /// The error's code, or 0 when its type has none.
    public let code: Int
    /// The error's description, with URL queries removed.
    public let description: String

    /// A snapshot of the given parts; `description` loses its URL queries.
    package init(domain: String, code: Int, description: String) {
        self.domain = domain
        self.code = code
        self.description = Self.removingQueries(from: description)
    }

    /// A snapshot of `error`: its type's name, its code when it has one (`CocoaError`,
    /// `POSIXError`, ``SQLiteError``) and its description.
    package init(_ error: any Error) {
        let code: Int
        switch error {
        case let error as SQLiteError: code = Int(error.code)
        case let error as CocoaError: code = error.code.rawValue
        case let error as POSIXError: code = Int(error.code.rawValue)
        default: code = 0
        }
        self.init(domain: String(describing: type(of: error)), code: code, description: String(describing: error))
    }

    /// `text` without the query of any URL in it (`?` up to the next space or quote): queries
    /// often carry signatures and tokens.
    package static func removingQueries(from text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        var inQuery = false
        for character in text {
            if inQuery {
                if character.isWhitespace || character == "\"" { inQuery = false } else { continue }
            } else if character == "?" {
                inQuery = true
                continue
            }
            result.append(character)
        }
        return result
    }
}
