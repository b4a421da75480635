#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StreamCache

/// A one-line progress bar on stderr, redrawn at most ten times a second; silent when disabled.
final class ProgressBar {
    private let enabled: Bool
    private var lastDraw = Date.distantPast
    private let started = Date()

    init(enabled: Bool) { self.enabled = enabled }

    func update(done: Int64, total: Int64?) {
        guard enabled, Date().timeIntervalSince(lastDraw) >= 0.1 else { return }
        lastDraw = Date()
        let rate = Double(done) / max(0.001, Date().timeIntervalSince(started))
        var line = "\r"
        if let total, total > 0 {
            let fraction = min(1, Double(done) / Double(total))
            let width = 30
            let filled = Int(fraction * Double(width))
            line += "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] "
            line += ((fraction * 100).fixed(1) + "% ").leftPadded(to: 7)
        }
        line += "\(ByteFormat.string(done)) \(ByteFormat.string(Int64(rate)))/s  "
        FileDescriptorOutput.standardError.write(line)
    }

    func finish() {
        guard enabled else { return }
        FileDescriptorOutput.standardError.write("\n")
    }
}
