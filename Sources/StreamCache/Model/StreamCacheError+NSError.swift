import Foundation

/// `StreamCacheError` bridges to `NSError` with its own domain and a stable code, so Objective-C
/// code and AVFoundation (which reports loading failures as `NSError`) see what went wrong.
///
/// ```swift
/// let error = StreamCacheError(.notFound, "The origin has no such file.") as NSError
/// error.domain            // "StreamCacheErrorDomain"
/// error.code              // StreamCacheError.Code.notFound.number (5)
/// error.localizedDescription  // "The origin has no such file."
/// ```
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
