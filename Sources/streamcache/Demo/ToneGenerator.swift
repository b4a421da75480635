#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Generated audio for the demo: WAV files (16-bit PCM, mono) of tones, so `demo` needs no
/// media and no network.
enum ToneGenerator {
    /// One demo track.
    struct Track {
        let fileName: String
        let data: Data
    }

    static let sampleRate = 22_050

    /// The demo's tracks, each `seconds` long: a 440 Hz tone, a major chord and a slow sweep,
    /// each with a soft 2 Hz tremolo so seeks are audible.
    static func tracks(seconds: Int) -> [Track] {
        [
            Track(fileName: "a440.wav", data: wav(seconds: seconds) { t in sin(2 * .pi * 440 * t) }),
            Track(fileName: "chord.wav", data: wav(seconds: seconds) { t in
                (sin(2 * .pi * 261.63 * t) + sin(2 * .pi * 329.63 * t) + sin(2 * .pi * 392.00 * t)) / 3
            }),
            Track(fileName: "sweep.wav", data: wav(seconds: seconds) { t in
                // 220 Hz → 880 Hz over the track: the phase is the integral of the frequency.
                let duration = Double(seconds)
                return sin(2 * .pi * (220 * t + (660 / (2 * duration)) * t * t))
            }),
        ]
    }

    /// A RIFF/WAVE file of `seconds` of `signal(t)` (values in -1…1).
    static func wav(seconds: Int, signal: (Double) -> Double) -> Data {
        let sampleCount = seconds * sampleRate
        var samples = [Int16](repeating: 0, count: sampleCount)
        let step = 1 / Double(sampleRate)
        for index in 0..<sampleCount {
            let t = Double(index) * step
            let tremolo = 0.85 + 0.15 * sin(2 * .pi * 2 * t)
            samples[index] = Int16((signal(t) * tremolo * 0.5 * 32767).rounded())
        }
        var data = Data(capacity: 44 + sampleCount * 2)
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) } }
        data.append(contentsOf: Array("RIFF".utf8))
        append(UInt32(36 + sampleCount * 2))
        data.append(contentsOf: Array("WAVEfmt ".utf8))
        append(UInt32(16))                      // fmt chunk size
        append(UInt16(1))                       // PCM
        append(UInt16(1))                       // mono
        append(UInt32(sampleRate))
        append(UInt32(sampleRate * 2))          // byte rate
        append(UInt16(2))                       // block align
        append(UInt16(16))                      // bits per sample
        data.append(contentsOf: Array("data".utf8))
        append(UInt32(sampleCount * 2))
        samples.withUnsafeBytes { raw in
            // WAV is little-endian, as are the platforms Swift runs on.
            data.append(contentsOf: raw)
        }
        return data
    }
}
