/// The tool's column formatting (numbers: `Double.fixed(_:)` and `ByteFormat`, in `StreamCache`).
extension String {
    /// The text right-aligned in `width` columns (never cut).
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }

    /// The text left-aligned in `width` columns, cut when longer.
    func rightPadded(to width: Int) -> String {
        count >= width ? String(prefix(width)) : self + String(repeating: " ", count: width - count)
    }
}
