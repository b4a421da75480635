import Testing
import StreamCache

/// A folder's files are listed, played and prefetched in the order a file manager shows them.
struct NaturalOrderTests {
    @Test func numberedTracksComeInTheirNumbersOrderAndCaseDoesNotCount() {
        let expected = ["01 Intro.mp3", "1 Intro.mp3", "2 Song.mp3", "02b.mp3", "9.mp3", "10 Outro.mp3", "100.mp3",
                        "Album", "album 2", "Album 10", "Cover.JPG", "cover.jpg", "none.mp3", "Track 4.mp3", "Track 04b.mp3",
                        "track 5.mp3", "Track 10.mp3", "Zebra", "Ärger"]
        // Reversed and rotated inputs all sort to the same order.
        for shift in 0..<expected.count {
            let input = Array((expected[shift...] + expected[..<shift]).reversed())
            #expect(input.sorted { $0.naturallyPrecedes($1) } == expected, "from \(input)")
        }
        #expect("Track 2".naturallyPrecedes("Track 10") && !"Track 10".naturallyPrecedes("Track 2"))
        #expect("none.mp3".naturallyPrecedes("Track 04.mp3"), "case does not count")
        #expect("a".naturallyPrecedes("a1") && "a1".naturallyPrecedes("a1b") && "a 1".naturallyPrecedes("a1"))
        #expect("99999999999999999999999".naturallyPrecedes("100000000000000000000000"), "numbers longer than an Int64")
    }

    /// Sorting relies on a strict weak order: names that differ only in case or leading zeros
    /// still have one order between them, so two runs (and two machines) list alike.
    @Test func theOrderIsStrictAndTotalOverNamesThatDifferInCaseDigitsAndPunctuation() {
        let pieces = ["a", "A", "b", "0", "00", "1", "01", "10", " ", "-", "é", "e\u{301}", "É"]
        var names: [String] = [""]
        for first in pieces {
            for second in pieces { names.append(first + second) }
        }
        for x in names {
            #expect(!x.naturallyPrecedes(x), "\(x) before itself")
            for y in names where x != y {
                // Total: one of two different names comes first, never both (canonically equal ones aside).
                let before = x.naturallyPrecedes(y), after = y.naturallyPrecedes(x)
                #expect(before != after || x == y, "\(x.debugDescription) and \(y.debugDescription): \(before), \(after)")
            }
        }
        let sorted = names.sorted { $0.naturallyPrecedes($1) }
        for (index, name) in sorted.enumerated() {
            // Transitive: everything after a name in the sorted list is not before it.
            for later in sorted[(index + 1)...] where later != name {
                #expect(name.naturallyPrecedes(later), "\(name.debugDescription) before \(later.debugDescription)")
            }
        }
    }
}
