import Foundation
import StreamCache

/// `StreamCacheError` bridges to `NSError` with its own domain and a stable code, so Objective-C
/// code and AVFoundation (which reports loading failures as `NSError`) see what went wrong.
///
/// ```swift
/// let error = StreamCacheError(.notFound, "The origin has no such file.") as NSError
/// error.domain            // "StreamCacheErrorDomain"
/// error.code              // StreamCacheError.Code.notFound.number (5)
/// error.localizedDescription  // "The origin has no such file."
/// ```
///
/// The conformance lives here, with the front end that hands errors to Objective-C, rather than
/// in the engine: on Linux `CustomNSError` is part of the full Foundation, which the engine does
/// not import (docs/design.md, "No full Foundation in the tool").
extension StreamCacheError: CustomNSError {
    /// The `NSError` domain of every ``StreamCacheError``.
    public static var errorDomain: String { "StreamCacheErrorDomain" }

    /// The code's stable number (``Code/number``).
    public var errorCode: Int { code.number }

    /// The message as the localized description, the HTTP status under `"HTTPStatus"`, and the
    /// underlying error under `NSUnderlyingErrorKey`.
    public var errorUserInfo: [String: Any] {
        var info: [String: Any] = [NSLocalizedDescriptionKey: message]
        if let httpStatus { info["HTTPStatus"] = httpStatus }
        if let underlying { info[NSUnderlyingErrorKey] = underlying as NSError }
        return info
    }
}
