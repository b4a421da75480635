extension StringProtocol {
    /// Whether this name comes before `other` in the order a person expects a folder's files in,
    /// as a file manager shows them: a run of digits counts as its number (`Track 2` before
    /// `Track 10`, so an album's numbered tracks play in turn) and case does not count (`none`
    /// before `Track`). Names that differ only in case or in leading zeros go by their characters
    /// (`Cover` before `cover`, `01` before `1`), so the order is total and the same on every run.
    ///
    /// Digits are the ASCII ones; other characters compare by their lowercase form, a number
    /// where the character `0` would be.
    package func naturallyPrecedes(_ other: some StringProtocol) -> Bool {
        let left = Array(self), right = Array(other)
        // By characters, not by `String`'s `<`, which in Swift 6.3 finds neither of
        // `"e\u{301}0"` and `"é00"` before the other.
        return Self.naturalComparison(left, right) ?? left.lexicographicallyPrecedes(right)
    }

    /// `true` or `false` where the names differ by their numbers or by their characters' lowercase
    /// forms; `nil` where they are the same by those.
    private static func naturalComparison(_ left: [Character], _ right: [Character]) -> Bool? {
        var i = 0
        var j = 0
        while i < left.count, j < right.count {
            let leftIsDigit = left[i].isASCIIDigit
            let rightIsDigit = right[j].isASCIIDigit
            if leftIsDigit, rightIsDigit {
                let leftEnd = left[i...].firstIndex { !$0.isASCIIDigit } ?? left.count
                let rightEnd = right[j...].firstIndex { !$0.isASCIIDigit } ?? right.count
                let leftNumber = left[i..<leftEnd].drop { $0 == "0" }
                let rightNumber = right[j..<rightEnd].drop { $0 == "0" }
                // Without leading zeros, the longer number is the greater; else the first digit that differs decides.
                if leftNumber.count != rightNumber.count { return leftNumber.count < rightNumber.count }
                if let (l, r) = zip(leftNumber, rightNumber).first(where: { $0 != $1 }) { return l < r }
                i = leftEnd
                j = rightEnd
                continue
            }
            let leftKey = Array(leftIsDigit ? "0" : left[i].lowercased())
            let rightKey = Array(rightIsDigit ? "0" : right[j].lowercased())
            if leftKey != rightKey { return leftKey.lexicographicallyPrecedes(rightKey) }
            i += 1
            j += 1
        }
        // One name runs out first: the shorter comes first (`Album` before `Album 2`).
        if i < left.count || j < right.count { return i == left.count }
        return nil
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { asciiValue.map { (0x30...0x39).contains($0) } ?? false }
}
