/// Human-readable byte counts (binary units).
package enum ByteFormat {
    /// `bytes` in the largest binary unit under which it stays at least 1, one decimal: `1.4 MiB`.
    package static func string(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : value.fixed(1) + " " + units[unit]
    }
}
