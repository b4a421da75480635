/// Number formatting without `String(format:)`, which on Linux lives in the full Foundation: the
/// tool's and the proxy's text.
extension Double {
    /// The value with `decimals` digits after the point, rounded half away from zero, as `%.Nf`
    /// prints it.
    package func fixed(_ decimals: Int) -> String {
        guard isFinite else { return "\(self)" }
        var scale: Int64 = 1
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (abs(self) * Double(scale)).rounded()
        guard scaled < 9e18 else { return "\(self)" }
        let units = Int64(scaled)
        var text = (self < 0 && units != 0 ? "-" : "") + String(units / scale)
        if decimals > 0 {
            let fraction = String(units % scale)
            text += "." + String(repeating: "0", count: decimals - fraction.count) + fraction
        }
        return text
    }
}
