import ArgumentParser
import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StreamCache

/// SIGINT (Ctrl-C) and SIGTERM, taken over from their default of ending the process at once, so
/// that a command stops the way it chooses: `serve` records every written byte, `get` and
/// `prefetch` also drop a half-written output file.
final class TerminationSignals {
    private let sources: [any DispatchSourceSignal]
    private let received = Locked<Int32?>(nil)

    /// Calls `handler` on the first SIGINT or SIGTERM (on a global queue) until ``stop()``.
    init(_ handler: @escaping @Sendable () -> Void) {
        let received = self.received
        sources = [SIGINT, SIGTERM].map { signalNumber in
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                let first = received.withLock { value -> Bool in
                    guard value == nil else { return false }
                    value = signalNumber
                    return true
                }
                if first { handler() }
            }
            source.resume()
            return source
        }
    }

    /// The signal that arrived, if one did.
    var signalNumber: Int32? { received.withLock { $0 } }

    /// Stops watching; a signal that comes later is ignored.
    func stop() {
        for source in sources { source.cancel() }
    }

    /// Returns on SIGINT or SIGTERM.
    static func wait() async {
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        let signals = TerminationSignals { continuation.yield() }
        for await _ in stream { break }
        signals.stop()
    }

    /// The exit of a command that `signalNumber` stopped, after a line that says so: 128 plus
    /// the signal's number, as a shell reports it.
    static func exit(stoppedBy signalNumber: Int32) -> ExitCode {
        FileDescriptorOutput.standardError.write("streamcache: stopped; what was downloaded is in the cache for the next run\n")
        return ExitCode(128 + signalNumber)
    }

    /// Runs `body` in a task of its own that SIGINT or SIGTERM cancels. Returns `nil` when `body`
    /// completed (a signal that came too late to stop it changes nothing), and the signal's
    /// number when `body` ended by an error after one came; otherwise rethrows `body`'s error.
    static func cancelling(_ body: @escaping @Sendable () async throws -> Void) async throws -> Int32? {
        let task = Task { try await body() }
        let signals = TerminationSignals { task.cancel() }
        defer { signals.stop() }
        do {
            try await task.value
            return nil
        } catch {
            guard let signalNumber = signals.signalNumber else { throw error }
            return signalNumber
        }
    }
}
