import HTTPTypes

extension HTTPField.Name {
    /// `StreamCache-Error`: on a stream's error answer, the kind of the failure (the name of its
    /// ``StreamCache/StreamCacheError/Code``, such as `authenticationFailed` or `notFound`),
    /// which the status alone does not tell: every origin failure a player cannot fix is a 502.
    public static let streamCacheError = HTTPField.Name("StreamCache-Error")!
}
