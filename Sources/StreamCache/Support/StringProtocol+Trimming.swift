/// Trimming without `CharacterSet`, which on Linux lives in the full Foundation (and with it
/// ICU), a library the engine does not load.
extension StringProtocol {
    /// The text without leading and trailing whitespace (spaces, tabs, line breaks).
    package func trimmingWhitespace() -> String { trimming(where: \.isWhitespace) }

    /// The text without the leading and trailing characters that `shouldTrim` accepts.
    package func trimming(where shouldTrim: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !shouldTrim($0) }), let last = lastIndex(where: { !shouldTrim($0) }) else { return "" }
        return String(self[first...last])
    }
}
