import Foundation
import StreamCache
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A program the tests start (nginx, curl, ffmpeg, the built CLI), with `posix_spawn`.
///
/// Not Foundation's `Process`: on Linux it finds the descriptors a child must not inherit by
/// copying each `/proc/self/fd` entry with a whole 256-byte name, which reads past the end of the
/// directory's buffer once a process has more than about 1,360 descriptors open. The suite's
/// parallel tests open over 1,500, and a run crashed there (`docs/reliability.md`). A child here
/// gets `/dev/null` as input, the given output and error descriptors, and none of the others.
///
/// The child is reaped by whichever of ``isRunning``, ``waitUntilExit()`` or ``exit(within:)``
/// first sees it gone; after that no signal is sent to its process identifier, which the system
/// may have given to another process. Releasing a running child kills it.
public final class ChildProcess: Sendable {
    /// How a finished child ended.
    public enum TerminationReason: Sendable, Equatable {
        /// It exited; ``terminationStatus`` is its exit code.
        case exit
        /// A signal killed it; ``terminationStatus`` is the signal.
        case uncaughtSignal
    }

    /// The child's process identifier.
    public let processIdentifier: pid_t
    /// The raw status `waitpid` returned, once the child is reaped.
    private let reapedStatus = Locked<Int32?>(nil)

    private init(processIdentifier: pid_t) {
        self.processIdentifier = processIdentifier
    }

    /// A child nobody holds any more is killed and reaped: a failed test leaves no server
    /// running and no zombie behind.
    deinit {
        if signal(SIGKILL) { waitUntilExit() }
    }

    /// Starts `executable` with `arguments` and this process's environment plus `environment`;
    /// standard input comes from `input`, standard output and error go to `output` and `errors`
    /// (`/dev/null` when `nil`), which the caller still owns and may close once this returns.
    public static func spawn(_ executable: URL, _ arguments: [String], environment: [String: String] = [:],
                             input: Int32? = nil, output: Int32? = nil, errors: Int32? = nil) throws -> ChildProcess {
        #if canImport(Darwin)
        var actions: posix_spawn_file_actions_t?
        var attributes: posix_spawnattr_t?
        #else
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if let input {
            posix_spawn_file_actions_adddup2(&actions, input, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let output {
            posix_spawn_file_actions_adddup2(&actions, output, 1)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        if let errors {
            posix_spawn_file_actions_adddup2(&actions, errors, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        // A child inherits the spawning thread's blocked signals and this process's ignored ones;
        // a test thread's mask would make the child deaf to `SIGTERM`.
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        #if canImport(Darwin)
        flags |= Int32(POSIX_SPAWN_CLOEXEC_DEFAULT)
        #endif
        posix_spawnattr_setflags(&attributes, Int16(flags))
        #if !canImport(Darwin)
        // glibc 2.34 and later; Swift does not import it, so it is looked up by name. Without it
        // the child inherits the descriptors not marked close-on-exec.
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3)
        }
        #endif
        let argv = ([executable.path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable.path, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw NSError(domain: NSPOSIXErrorDomain, code: Int(result),
                          userInfo: [NSLocalizedDescriptionKey: "could not start \(executable.path): \(String(cString: strerror(result)))"])
        }
        return ChildProcess(processIdentifier: pid)
    }

    /// Reaps the child if it has ended; returns its raw wait status once reaped.
    ///
    /// - Throws: When `waitpid` no longer knows the child (something else reaped it).
    private func poll() throws -> Int32? {
        try reapedStatus.withLock { try Self.reap(processIdentifier, into: &$0) }
    }

    /// `waitpid` without waiting, under the caller's lock: records the status in `reaped` once
    /// the child has ended.
    private static func reap(_ pid: pid_t, into reaped: inout Int32?) throws -> Int32? {
        if let reaped { return reaped }
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                reaped = status
                return status
            }
            if result == 0 { return nil }
            if errno != EINTR {
                throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno),
                              userInfo: [NSLocalizedDescriptionKey: "lost child \(pid): \(String(cString: strerror(errno)))"])
            }
        }
    }

    /// Whether the child has not ended yet. A child that `waitpid` lost counts as ended.
    public var isRunning: Bool {
        do { return try poll() == nil } catch { return false }
    }

    /// Sends `signal` to the child if it is still running; returns whether it was.
    @discardableResult
    public func signal(_ signal: Int32) -> Bool {
        reapedStatus.withLock { reaped in
            // Reaped, or lost to `waitpid`: its identifier may name another process by now.
            do {
                guard try Self.reap(processIdentifier, into: &reaped) == nil else { return false }
            } catch {
                return false
            }
            return kill(processIdentifier, signal) == 0
        }
    }

    /// Asks the child to stop (`SIGTERM`).
    public func terminate() { signal(SIGTERM) }

    /// Blocks the calling thread until the child has ended (polling every 5 ms).
    public func waitUntilExit() {
        while isRunning { usleep(5_000) }
    }

    /// Waits until the child has ended, polling every 10 ms; kills it (`SIGKILL`) after `timeout`
    /// seconds or when the calling task is cancelled, and then waits for it.
    ///
    /// - Throws: `CancellationError` when cancelled; an error when `waitpid` lost the child.
    public func exit(within timeout: Double) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        do {
            while try poll() == nil {
                if ContinuousClock.now >= deadline {
                    signal(SIGKILL)
                    waitUntilExit()
                    return
                }
                try await Task.sleep(for: .milliseconds(10))
            }
        } catch {
            signal(SIGKILL)
            waitUntilExit()
            throw error
        }
    }

    /// The exit code, or the signal that killed the child (see ``terminationReason``); 0 while it
    /// runs.
    public var terminationStatus: Int32 {
        // The <sys/wait.h> macros, which Swift does not import: a normal exit keeps its code in
        // the second byte, a signal sits in the low seven bits.
        guard let status = try? poll() else { return 0 }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : signal
    }

    /// How the child ended; `.exit` while it runs.
    public var terminationReason: TerminationReason {
        guard let status = try? poll() else { return .exit }
        return status & 0x7f == 0 ? .exit : .uncaughtSignal
    }
}
