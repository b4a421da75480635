import Foundation
import StreamCache
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A real HTTP/1.1 server on 127.0.0.1 for tests: serves in-memory files with byte ranges,
/// ETags and keep-alive, records every request and the body bytes it sent, and injects faults
/// scripted per request.
///
/// It uses plain sockets and threads, so tests exercise the real client stack and can do what a
/// framework server would not: drop a connection after N bytes, lie about ranges, stall.
///
/// ```swift
/// let origin = try TestOrigin()
/// origin.setFile("/a.mp3", data: bytes)
/// origin.requiredHeaders = ["Authorization": "Bearer t"]
/// origin.faults = { request, index in index == 0 ? .dropAfter(bytes: 100_000) : nil }
/// ```
public final class TestOrigin: @unchecked Sendable {
    // @unchecked: mutable state lives in `state`, guarded by its lock; sockets are owned by their threads.

    /// A fault to inject into one response.
    public enum Fault: Sendable {
        /// Send the head and this many body bytes, then drop the connection.
        case dropAfter(bytes: Int)
        /// Answer 200 with the whole file, ignoring `Range`.
        case ignoreRange
        /// Answer with this status and an empty body.
        case status(Int, headers: [String: String] = [:])
        /// Answer with this status and this JSON body (a cloud service's error, as Google's
        /// `{"error": {"errors": [{"reason": …}]}}`).
        case refusal(Int, json: String)
        /// Wait this long before answering, with the file as it was when the request arrived (an
        /// answer still on its way while the file changes).
        case stall(seconds: Double)
        /// Wait until `release` returns true (asked every 10 ms, for 60 s at most) before
        /// answering, with the file as it was when the request arrived: an answer that reaches the
        /// client after something the test makes happen first, whatever the machine's load.
        case hold(until: @Sendable () -> Bool)
        /// Answer 206 with a `Content-Range` that starts elsewhere than asked.
        case wrongContentRange
        /// Answer 206 from this many bytes before the asked start, `Content-Range` and body alike:
        /// an answer true to itself, for other bytes than those asked for.
        case earlierStart(by: Int)
        /// Answer 206 but send this many fewer bytes than `Content-Length` says, then close.
        case shortBody(missing: Int)
        /// Redirect (302) to this location (the request's own path makes a loop).
        case redirect(String)
        /// Send this response's body at this many bytes per second.
        case drip(bytesPerSecond: Int)
        /// Send this many body bytes, then the rest once `resume` returns true (asked every 10 ms,
        /// for 60 s at most): an answer held at a point a test chooses, whatever the machine's load.
        case pause(afterBytes: Int, until: @Sendable () -> Bool)
        /// As ``pause(afterBytes:until:)``, then the rest as fast as the socket takes it, whatever
        /// ``bytesPerSecond`` says: a burst that finds the client's download busy.
        case rushAfterPause(afterBytes: Int, until: @Sendable () -> Bool)
        /// Answer 206 without a `Content-Range` header.
        case missingContentRange
        /// Answer 206 with `Content-Range: bytes FIRST-LAST/*`: the length not told.
        case unknownTotal
        /// Answer as usual, with this `Content-Encoding`: an origin that says it compressed the
        /// body although the client asked for `identity` (the bytes sent are the file's).
        case contentEncoding(String)
        /// Read the request, then reset the connection without an answer: a server that went
        /// down while the request was on its way, or after it took effect.
        case reset
        /// Answer a range with at most this many of its bytes, `Content-Range` and body alike: a
        /// server that sends a long or open-ended range a chunk at a time.
        case fewerBytes(atMost: Int)
        /// Answer as usual without `ETag` and `Content-Type`: the bare 206 some servers and CDNs
        /// send for a range (RFC 9110 §15.3.7 wants the `ETag` a 200 would carry; not all do).
        case bareHead
        /// Answer as usual, with the file's byte at this offset inverted: bytes corrupted on the
        /// way, under the file's true headers.
        case flipByte(at: Int64)
    }

    /// One request as the server saw it.
    public struct RecordedRequest: Sendable {
        /// The method.
        public var method: String
        /// The path, query included.
        public var path: String
        /// The request headers.
        public var headers: HTTPHeaders
        /// The status answered; 0 for a connection reset without an answer.
        public var status: Int
        /// The body bytes written to the socket.
        public var bodyBytesSent: Int64
        /// The bytes of the file those body bytes carried, in the order sent (a multipart body's
        /// parts, without their headers; a cut body's first bytes only).
        public var servedRanges: [ByteRange] = []
        /// When the request arrived, and when the socket took the last chunk of its body
        /// (at a rate per connection, ``bytesPerSecond``: when that chunk's time at the rate was up;
        /// an answer without a body: when it was written). Not when the server got to
        /// record it: on a loaded machine its thread may be held up after the last bytes went out,
        /// while the client, which got them, already sends its next request.
        public var interval: ClosedRange<ContinuousClock.Instant>
        /// Which connection carried it: 0 for the first one the server accepted, 1 for the next…
        public var connection: Int
        /// The request's body (`Content-Length` bytes; empty without one).
        public var body: Data = Data()
        /// The `Range` header, if any.
        public var range: String? { headers["Range"] }

    }

    /// A file the server serves.
    public struct File: Sendable {
        /// The content.
        public var data: Data
        /// The `ETag` sent, quotes included; `nil` sends none.
        public var entityTag: String?
        /// The `Content-Type` sent; `nil` sends none.
        public var contentType: String?
        /// Whether `Accept-Ranges: bytes` and 206 answers are given at all.
        public var supportsRanges: Bool
        /// Headers sent with every answer besides the usual ones (a `Repr-Digest`).
        public var extraHeaders: [String: String] = [:]
    }

    private struct State {
        var files: [String: File] = [:]
        var requests: [RecordedRequest] = []
        var requiredHeaders: [String: String] = [:]
        var bytesPerSecond: Int?
        var linkBytesPerSecond: Int?
        /// When the shared link is free again: every chunk of every response waits its turn.
        var linkFreeAt = ContinuousClock.now
        var servesMultipleRanges = false
        var faults: (@Sendable (_ method: String, _ path: String, _ headers: HTTPHeaders, _ index: Int) -> Fault?)?
        var connections: Set<Int32> = []
        var acceptTimes: [ContinuousClock.Instant] = []
        var requestCount = 0
        /// How many times ``resetRecords()`` ran: each request notes it on arrival, so that one
        /// that arrived before a reset is not recorded after it.
        var resets = 0
        /// Requests whose answer is being written (recorded in ``requests`` once it ends).
        var answering = 0
        /// Answers counted against ``mostAnswersAtOnce``: until their last byte is written, as
        /// nginx's `limit_conn` counts, not until the link has carried it.
        var writing = 0
        var mostAnswersAtOnce: Int?
        var stopped = false
        var listening = false
    }

    private let state = Locked(State())
    private let listener: Int32
    /// The port the server listens on.
    public let port: Int

    /// Starts a server on 127.0.0.1 at a free port. With `listening` false the port is taken but
    /// refuses connections (a server that is down) until ``startListening()``.
    public init(listening: Bool = true) throws {
        (listener, port) = try Self.bindPortItKeeps()
        if listening { try startListening() }
    }

    /// A socket bound to a port that was free, by number and without `SO_REUSEADDR`: Linux keeps
    /// such a port bound when ``stop()`` shuts its listener down, where it releases a port the
    /// kernel picked (a bind to port 0). A stopped origin then stays a refusing port until it is
    /// released, and no other test's server can take the port meanwhile and answer for it (a
    /// test of offline play would read that server's 404 instead of a refused connection).
    private static func bindPortItKeeps() throws -> (descriptor: Int32, port: Int) {
        for _ in 0..<20 {
            let candidate = try FreePort.find()
            // Taken since it was found free: try another.
            if let fd = FreePort.boundSocket(port: candidate, reusingAddress: false) { return (fd, candidate) }
        }
        throw POSIXError(.EADDRINUSE)
    }

    /// Starts accepting connections after `delay`: a server made with `listening: false` that is
    /// down for that long. Cancel the returned start to keep it down.
    ///
    /// The delay is timed on a thread of its own, not on a task: a test that lets an origin come
    /// up between a client's retries must not see it come up late because the suite keeps Swift
    /// concurrency's few threads busy (a task's sleep there woke up to 1.7 s late).
    @discardableResult
    public func startListening(after delay: Duration) -> DelayedStart {
        let start = DelayedStart()
        let deadline = ContinuousClock.now + delay
        let thread = Thread { [self] in
            while ContinuousClock.now < deadline, !start.isCancelled { Thread.sleep(forTimeInterval: 0.005) }
            if !start.isCancelled { try? startListening() }
        }
        thread.stackSize = 1 << 20
        thread.start()
        return start
    }

    /// A ``startListening(after:)`` still to come, which ``cancel()`` calls off.
    public final class DelayedStart: Sendable {
        private let cancelled = Locked(false)

        /// Whether ``cancel()`` was called.
        public var isCancelled: Bool { cancelled.withLock { $0 } }

        /// Keeps the server down, if it has not come up yet.
        public func cancel() { cancelled.withLock { $0 = true } }
    }

    /// Starts accepting connections on ``port``: a server made with `listening: false` comes up.
    public func startListening() throws {
        // Under the lock: once `stop()` marked the server stopped, it stays down.
        let started = state.withLock { state -> Bool? in
            guard !state.stopped, !state.listening else { return nil }
            state.listening = listen(listener, 128) == 0
            return state.listening
        }
        guard let started else { return }
        guard started else { throw POSIXError(.EADDRINUSE) }
        let thread = Thread { [self] in acceptLoop() }
        thread.stackSize = 1 << 20
        thread.start()
    }

    deinit {
        stop()
        close(listener)
    }

    /// The URL of `path` on this server.
    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// Serves `data` at `path`.
    public func setFile(_ path: String, data: Data, entityTag: String? = "\"v1\"", contentType: String? = "application/octet-stream",
                        supportsRanges: Bool = true, extraHeaders: [String: String] = [:]) {
        state.withLock {
            $0.files[path] = File(data: data, entityTag: entityTag, contentType: contentType, supportsRanges: supportsRanges, extraHeaders: extraHeaders)
        }
    }

    /// Headers every request must carry (else 401).
    public var requiredHeaders: [String: String] {
        get { state.withLock { $0.requiredHeaders } }
        set { state.withLock { $0.requiredHeaders = newValue } }
    }

    /// Caps the body rate of each response, or `nil` for no cap.
    public var bytesPerSecond: Int? {
        get { state.withLock { $0.bytesPerSecond } }
        set { state.withLock { $0.bytesPerSecond = newValue } }
    }

    /// Refuses a request with 429 when this many answers are already being written, as a service that
    /// limits a user's downloads at once does (nginx's `limit_conn`); `nil` for no limit. Can be
    /// changed while requests come: a service busy for a moment, then not.
    ///
    /// An answer stops counting once its last byte is written, before the time its rate gives
    /// that last chunk has passed, as a server's count ends before its client can have the bytes.
    /// Counted to the end of that time (160 ms for a chunk under the sanitizer's slowdown), a
    /// client that took in the last bytes and sent its next request at once was refused.
    public var mostAnswersAtOnce: Int? {
        get { state.withLock { $0.mostAnswersAtOnce } }
        set { state.withLock { $0.mostAnswersAtOnce = newValue } }
    }

    /// Caps the body rate of all responses together, or `nil` for no cap: one link that every
    /// connection shares (a home line), where a second connection halves the speed of the first.
    public var linkBytesPerSecond: Int? {
        get { state.withLock { $0.linkBytesPerSecond } }
        set { state.withLock { $0.linkBytesPerSecond = newValue } }
    }

    /// Waits until the shared link (``linkBytesPerSecond``) has carried the next bytes of a
    /// response, after the bytes other responses queued before them, and returns how many of the
    /// `count` it asks to send those are (all of them without a link).
    ///
    /// The link carries what 20 ms allow at a time (4–64 KiB), so that a response arrives as
    /// evenly as over a real line: in 64 KiB turns, 0.65 s apart at 100 kB/s, a client measuring
    /// its speed saw each turn come at once and miscounted a turn's worth either way. Like a real
    /// shaper's bucket, the link keeps 20 ms of credit: a connection's thread that wakes up late
    /// on a loaded machine sends at once, instead of losing that time, which would make one
    /// connection alone look slower than several that take turns.
    private func waitForLink(upTo count: Int) -> Int {
        let reserved: (count: Int, done: ContinuousClock.Instant)? = state.withLock { state in
            guard let rate = state.linkBytesPerSecond, rate > 0 else { return nil }
            let turn = min(count, max(4 << 10, min(64 << 10, rate / 50)))
            let now = ContinuousClock.now
            let start = max(now - Self.linkCredit, state.linkFreeAt)
            state.linkFreeAt = start + .nanoseconds(Int64(Double(turn) / Double(rate) * 1e9))
            return (turn, state.linkFreeAt)
        }
        guard let reserved else { return count }
        let wait = reserved.done - .now
        if wait > .zero { Thread.sleep(forTimeInterval: wait.timeInterval) }
        return reserved.count
    }

    /// How much link time a late connection may make up for (see ``waitForLink(upTo:)``).
    private static let linkCredit: Duration = .milliseconds(20)

    /// Decides a fault for each request (`index` counts from 0 over the server's life).
    public var faults: (@Sendable (_ method: String, _ path: String, _ headers: HTTPHeaders, _ index: Int) -> Fault?)? {
        get { state.withLock { $0.faults } }
        set { state.withLock { $0.faults = newValue } }
    }

    /// Every completed request so far.
    public var requests: [RecordedRequest] { state.withLock { $0.requests } }
    /// When each connection was accepted, in order (see ``RecordedRequest/connection``).
    public var connectionAcceptTimes: [ContinuousClock.Instant] { state.withLock { $0.acceptTimes } }

    /// How many requests are being answered: a request appears in ``requests`` only once its
    /// answer ends (or the client left it).
    public var requestsBeingAnswered: Int { state.withLock { $0.answering } }

    /// How many requests have arrived over the server's life, answered or not: unlike the count
    /// of ``requests``, it does not grow when an earlier request's answer ends.
    public var requestsArrived: Int { state.withLock { $0.requestCount } }

    /// Waits until no request is being answered, for `bound` at most (stretched by
    /// ``TestTiming/slowdown``), and tells whether none is.
    ///
    /// A test that checks ``requests`` after a read waits for this first: the client may hold an
    /// answer's last byte before this server has recorded the answer, and a connection the client
    /// cut is answered until this server notices. A loaded machine widens both windows, so the
    /// bound is generous; the wait ends as soon as the answers do.
    public func waitUntilAnswersEnd(within bound: Duration = .seconds(30)) async throws -> Bool {
        let deadline = ContinuousClock.now + TestTiming.time(bound)
        while requestsBeingAnswered > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        return requestsBeingAnswered == 0
    }

    /// The requests that arrived at `instant` or later, once every answer has ended and the
    /// server has then been left `quiet` for a while (each wait bounded as in
    /// ``waitUntilAnswersEnd(within:)``): what a test that stopped a download expects to be empty.
    public func requests(arrivedSince instant: ContinuousClock.Instant,
                         quiet: Duration = .milliseconds(300)) async throws -> [RecordedRequest] {
        _ = try await waitUntilAnswersEnd()
        try await Task.sleep(for: quiet)
        // A request that came during the quiet time is recorded once its answer ends.
        _ = try await waitUntilAnswersEnd()
        return requests.filter { $0.interval.lowerBound >= instant }
    }

    /// The body bytes sent for `path` (all paths when `nil`).
    public func bodyBytesSent(for path: String? = nil) -> Int64 {
        requests.filter { path == nil || $0.path == path }.reduce(0) { $0 + $1.bodyBytesSent }
    }

    /// The GET requests answered for `path` with 200 or 206.
    public func dataRequests(for path: String) -> [RecordedRequest] {
        requests.filter { $0.path == path && $0.method == "GET" && ($0.status == 200 || $0.status == 206) }
    }

    /// The most requests for `path` (for any path when `nil`) that were being answered at the same
    /// moment; only those that arrived before `startedBefore` when it is given (a test that cancels
    /// its downloads: a cut connection is answered here until this server notices it is gone).
    public func maximumConcurrency(for path: String? = nil, startedBefore end: ContinuousClock.Instant? = nil) -> Int {
        let intervals = requests.filter { request in
            (path == nil || request.path == path) && (end.map { request.interval.lowerBound < $0 } ?? true)
        }.map(\.interval)
        return intervals.map { interval in intervals.filter { $0.contains(interval.lowerBound) }.count }.max() ?? 0
    }

    /// Makes ``faults`` send `bytes` of each answer (those `applies` picks, by request number),
    /// then hold the rest until the server has once answered `count` requests at once; from then
    /// on nothing is held. Requests kept in flight until others go beside them, whatever the
    /// machine's load: an engine that never sends them leaves the answers held for 60 s. The
    /// faults hold the server: set ``faults`` to `nil` afterwards.
    public func holdAnswers(afterBytes bytes: Int, untilAnswering count: Int,
                            where applies: @escaping @Sendable (_ index: Int) -> Bool = { _ in true }) {
        let seen = Locked(false)
        let released: @Sendable () -> Bool = { [self] in
            seen.withLock { seen in
                if requestsBeingAnswered >= count { seen = true }
                return seen
            }
        }
        faults = { _, _, _, index in applies(index) ? .pause(afterBytes: bytes, until: released) : nil }
    }

    /// The requests for `path` (all, for `nil`) as a failed expectation should tell them: for
    /// each, its connection, range, body bytes sent, and when it arrived and ended, in seconds
    /// after the first one arrived.
    public func timeline(for path: String? = nil) -> String {
        let chosen = requests.filter { path == nil || $0.path == path }
        guard let origin = chosen.map(\.interval.lowerBound).min() else { return "no requests" }
        func seconds(_ instant: ContinuousClock.Instant) -> String {
            let elapsed = (instant - origin).components
            return String(format: "%.3f", Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18)
        }
        let accepted = state.withLock { $0.acceptTimes }.enumerated().map { "#\($0.offset) \(seconds($0.element)) s" }
        return chosen.map { request in
            "#\(request.connection) \(request.range ?? "whole") \(request.bodyBytesSent) B \(seconds(request.interval.lowerBound))–\(seconds(request.interval.upperBound)) s"
        }.joined(separator: "; ") + "; connections accepted: " + accepted.joined(separator: ", ")
    }

    /// The seconds from the first recorded request's arrival to `instant`, as ``timeline(for:)``
    /// counts them: to place a test's own moments among the requests.
    public func secondsSinceFirstRequest(_ instant: ContinuousClock.Instant) -> String {
        guard let first = requests.map(\.interval.lowerBound).min() else { return "(no requests)" }
        let elapsed = (instant - first).components
        return String(format: "%.3f", Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18)
    }

    /// Whether a request for several ranges gets them all in a `multipart/byteranges` answer, as
    /// nginx and Apache give; otherwise (the default) it gets the first range only, as many
    /// cloud storage hosts do.
    public var servesMultipleRanges: Bool {
        get { state.withLock { $0.servesMultipleRanges } }
        set { state.withLock { $0.servesMultipleRanges = newValue } }
    }

    /// The boundary of this server's `multipart/byteranges` answers.
    public static let multipartBoundary = "3d6b6a416f9b5"

    /// Forgets the recorded requests, and those still being answered: a request that arrived
    /// before the reset is not recorded when its answer ends after it. ``requestsBeingAnswered``
    /// counts it until then, and ``requestsArrived`` keeps counting from the server's start.
    ///
    /// A request is recorded once its answer ends, which on a loaded machine may be after the
    /// client has its last byte and the test has moved on. Without this, an answer of the test's
    /// earlier step that ended late would count as a request of its next one.
    public func resetRecords() {
        state.withLock { state in
            state.requests = []
            state.resets += 1
        }
    }

    /// Stops listening and closes every connection. The port stays taken and refuses connections
    /// until the server is released, so a stopped origin looks like one that is down.
    public func stop() {
        // Close once, and shut connections down under the lock (their threads remove them from
        // the set before closing): touching a descriptor after its close would hit whatever
        // reused the number, in this process often a SwiftNIO socket, which then traps with EBADF.
        let first = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.stopped = true
            for connection in state.connections { shutdown(connection, Int32(SHUT_RDWR)) }
            return true
        }
        guard first else { return }
        // Shut down, not closed: the accept loop ends, and the port stays bound (see
        // `bindPortItKeeps`); `deinit` closes the descriptor once no thread can use it.
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                return
            }
            let number = state.withLock { state -> Int? in
                guard !state.stopped else { return nil }
                state.connections.insert(connection)
                state.acceptTimes.append(.now)
                return state.acceptTimes.count - 1
            }
            guard let number else {
                close(connection)
                return
            }
            var yes: Int32 = 1
            setsockopt(connection, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            let thread = Thread { [self] in
                serve(connection, number: number)
                state.withLock { _ = $0.connections.remove(connection) }
                close(connection)
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    private func serve(_ connection: Int32, number: Int) {
        var pending = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            // Read one request head.
            var headEnd: Int?
            while headEnd == nil {
                if let index = Self.find([13, 10, 13, 10], in: pending) { headEnd = index; break }
                if pending.count > 64 * 1024 { return }
                let count = recv(connection, &buffer, buffer.count, 0)
                if count <= 0 { return }
                pending.append(contentsOf: buffer[0..<count])
            }
            let head = String(decoding: pending[0..<headEnd!], as: UTF8.self)
            pending.removeFirst(headEnd! + 4)
            let lines = head.components(separatedBy: "\r\n")
            let requestLine = lines[0].split(separator: " ")
            guard requestLine.count >= 2 else { return }
            let method = String(requestLine[0])
            let path = String(requestLine[1])
            var headers = HTTPHeaders()
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers.add(name: String(line[..<colon]), value: line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
            // A body is read whole before the answer, so its bytes are never taken for the next request.
            let bodyLength = headers["Content-Length"].flatMap { Int($0) } ?? 0
            guard bodyLength >= 0, bodyLength <= 1 << 20 else { return }
            while pending.count < bodyLength {
                let count = recv(connection, &buffer, buffer.count, 0)
                if count <= 0 { return }
                pending.append(contentsOf: buffer[0..<count])
            }
            let body = Data(pending[0..<bodyLength])
            pending.removeFirst(bodyLength)
            let keepAlive = respond(to: connection, number: number, method: method, path: path, headers: headers, body: body)
            if !keepAlive || headers["Connection"]?.lowercased() == "close" { return }
        }
    }

    /// Writes one response. Returns whether the connection may be reused.
    private func respond(to connection: Int32, number: Int, method: String, path: String, headers: HTTPHeaders, body requestBody: Data) -> Bool {
        let (faultProvider, index, overLimit, resetsAtArrival) = state.withLock { state in
            state.requestCount += 1
            state.answering += 1
            state.writing += 1
            return (state.faults, state.requestCount - 1, state.mostAnswersAtOnce.map { state.writing > $0 } ?? false, state.resets)
        }
        var written = false
        func lastByteWritten() {
            guard !written else { return }
            written = true
            state.withLock { $0.writing -= 1 }
        }
        defer {
            lastByteWritten()
            state.withLock { $0.answering -= 1 }
        }
        // The fault script runs first, so it may change the file this very request sees.
        let arrival = ContinuousClock.now
        var fault = faultProvider?(method, path, headers, index)
        let (file, required, serverRate, multipart) = state.withLock { state in
            (state.files[path.split(separator: "?").first.map(String.init) ?? path], state.requiredHeaders, state.bytesPerSecond,
             state.servesMultipleRanges)
        }
        if case .stall(let seconds) = fault {
            Thread.sleep(forTimeInterval: seconds)
            fault = nil
        }
        if case .hold(let release) = fault {
            Self.waitUntilReleased(release)
            fault = nil
        }
        // Where each range of the file starts in the body: one range, or a multipart body's parts.
        var bodyLayout: [(bodyOffset: Int64, range: ByteRange)] = []
        var lastHandedOver: ContinuousClock.Instant?
        func record(_ status: Int, _ sent: Int64) {
            let served = bodyLayout.compactMap { part -> ByteRange? in
                let count = min(part.range.count, sent - part.bodyOffset)
                return count > 0 ? ByteRange(offset: part.range.lowerBound, length: count) : nil
            }
            let request = RecordedRequest(method: method, path: path, headers: headers, status: status, bodyBytesSent: sent, servedRanges: served,
                                          interval: arrival...(lastHandedOver ?? ContinuousClock.now), connection: number, body: requestBody)
            state.withLock { state in
                guard state.resets == resetsAtArrival else { return }
                state.requests.append(request)
            }
        }
        func simple(_ status: Int, _ extra: [String: String] = [:], body: String = "") -> Bool {
            var head = "HTTP/1.1 \(status) \(Self.reason(status))\r\nContent-Length: \(body.utf8.count)\r\n"
            for (name, value) in extra { head += "\(name): \(value)\r\n" }
            head += "\r\n"
            record(status, Int64(body.utf8.count))
            return send(Array((head + body).utf8), on: connection)
        }
        if case .reset = fault {
            // A zero linger makes the close that follows send RST instead of FIN.
            var reset = linger(l_onoff: 1, l_linger: 0)
            setsockopt(connection, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
            record(0, 0)
            return false
        }
        if overLimit { return simple(429) }
        if case .status(let code, let extra) = fault { return simple(code, extra) }
        if case .refusal(let code, let json) = fault { return simple(code, ["Content-Type": "application/json"], body: json) }
        if case .redirect(let location) = fault { return simple(302, ["Location": location]) }
        for (name, value) in required where headers[name] != value { return simple(401, ["WWW-Authenticate": "Bearer"]) }
        guard var file else { return simple(404) }
        let total = Int64(file.data.count)
        if case .flipByte(let offset) = fault, offset < total { file.data[Int(offset)] ^= 0xFF }

        var status = 200
        var range = ByteRange(0, total)
        if let rangeHeader = headers["Range"], file.supportsRanges, fault.map({ if case .ignoreRange = $0 { false } else { true } }) ?? true {
            let ifRangeMatches = headers["If-Range"].map { $0 == file.entityTag } ?? true
            if ifRangeMatches, let parsed = Self.parseRange(rangeHeader, total: total) {
                if parsed.lowerBound >= total || parsed.isEmpty {
                    return simple(416, ["Content-Range": "bytes */\(total)"])
                }
                status = 206
                range = parsed
            }
        }
        if case .earlierStart(let bytes) = fault, status == 206 {
            range = ByteRange(max(0, range.lowerBound - Int64(bytes)), range.upperBound)
        }
        if case .fewerBytes(let most) = fault, status == 206, range.count > Int64(most) {
            range = ByteRange(range.lowerBound, range.lowerBound + Int64(most))
        }
        var contentRangeStart = range.lowerBound
        if case .wrongContentRange = fault, status == 206 { contentRangeStart = range.lowerBound == 0 ? 1 : range.lowerBound - 1 }
        // Several ranges, all satisfiable, from a server that serves them: one multipart body.
        var multipartBody: Data?
        if status == 206, multipart, let ranges = headers["Range"].flatMap({ Self.parseRanges($0, total: total) }), ranges.count > 1,
           ranges.allSatisfy({ !$0.isEmpty && $0.lowerBound < total }) {
            var body = Data()
            for (index, part) in ranges.enumerated() {
                // A wrong Content-Range lies about the second part.
                let shown = index == 1 && contentRangeStart != range.lowerBound ? ByteRange(offset: part.lowerBound + 1, length: part.count) : part
                body.append(Data("\r\n--\(Self.multipartBoundary)\r\nContent-Type: \(file.contentType ?? "application/octet-stream")\r\n".utf8))
                body.append(Data("Content-Range: bytes \(shown.lowerBound)-\(shown.upperBound - 1)/\(total)\r\n\r\n".utf8))
                bodyLayout.append((Int64(body.count), part))
                body.append(file.data[Int(part.lowerBound)..<Int(part.upperBound)])
            }
            body.append(Data("\r\n--\(Self.multipartBoundary)--\r\n".utf8))
            multipartBody = body
        }
        if multipartBody == nil { bodyLayout = [(0, range)] }
        var head = "HTTP/1.1 \(status) \(Self.reason(status))\r\nContent-Length: \(multipartBody?.count ?? Int(range.count))\r\n"
        let omitsContentRange: Bool = if case .missingContentRange = fault { true } else { false }
        if status == 206, !omitsContentRange, multipartBody == nil {
            let shownTotal: String = if case .unknownTotal = fault { "*" } else { "\(total)" }
            head += "Content-Range: bytes \(contentRangeStart)-\(contentRangeStart + range.count - 1)/\(shownTotal)\r\n"
        }
        if file.supportsRanges { head += "Accept-Ranges: bytes\r\n" }
        if case .contentEncoding(let coding) = fault { head += "Content-Encoding: \(coding)\r\n" }
        let bare: Bool = if case .bareHead = fault { true } else { false }
        if let tag = file.entityTag, !bare { head += "ETag: \(tag)\r\n" }
        for (name, value) in file.extraHeaders.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
        if multipartBody != nil {
            head += "Content-Type: multipart/byteranges; boundary=\(Self.multipartBoundary)\r\n"
        } else if let type = file.contentType, !bare {
            head += "Content-Type: \(type)\r\n"
        }
        head += "\r\n"
        guard send(Array(head.utf8), on: connection) else { record(status, 0); return false }
        guard method != "HEAD" else { record(status, 0); return true }

        var limit = Int64(multipartBody?.count ?? Int(range.count))
        var closeAfter = false
        if case .dropAfter(let bytes) = fault { limit = min(limit, Int64(bytes)); closeAfter = true }
        if case .shortBody(let missing) = fault { limit = max(0, limit - Int64(missing)); closeAfter = true }
        var sent: Int64 = 0
        var rate = serverRate
        if case .drip(let bytesPerSecond) = fault { rate = bytesPerSecond }
        var started = Date()
        let chunk = 64 * 1024
        var pause: (bytes: Int64, resume: @Sendable () -> Bool)?
        if case .pause(let bytes, let resume) = fault { pause = (Int64(bytes), resume) }
        var rushes = false
        if case .rushAfterPause(let bytes, let resume) = fault { pause = (Int64(bytes), resume); rushes = true }
        while sent < limit {
            if let held = pause, sent >= held.bytes {
                Self.waitUntilReleased(held.resume)
                pause = nil
                if rushes { rate = nil }
                // The rate goes on from here: the held time is not owed to it.
                if let rate, rate > 0 { started = Date().addingTimeInterval(-Double(sent) / Double(rate)) }
            }
            // A chunk arrives once the link has carried it.
            let count = waitForLink(upTo: Int(min(Int64(chunk), limit - sent, pause.map { max(1, $0.bytes - sent) } ?? Int64.max)))
            let start = multipartBody == nil ? Int(range.lowerBound + sent) : Int(sent)
            let ok = (multipartBody ?? file.data).withUnsafeBytes { raw in
                Self.sendAll(connection, raw.baseAddress! + start, count)
            }
            lastHandedOver = .now
            guard ok else { record(status, sent); return false }
            sent += Int64(count)
            if sent >= limit { lastByteWritten() }
            if let rate, rate > 0 {
                let due = Double(sent) / Double(rate)
                let elapsed = Date().timeIntervalSince(started)
                if due > elapsed { Thread.sleep(forTimeInterval: due - elapsed) }
                // At a connection's own rate, a chunk is on its way until its time is up.
                lastHandedOver = .now
            }
        }
        record(status, sent)
        if closeAfter {
            shutdown(connection, Int32(SHUT_RDWR))
            return false
        }
        return true
    }

    private func send(_ bytes: [UInt8], on connection: Int32) -> Bool {
        bytes.withUnsafeBytes { Self.sendAll(connection, $0.baseAddress!, $0.count) }
    }

    /// Blocks this connection's thread until `release` returns true, asking every 10 ms for 60 s
    /// at most (a test that never releases fails on its own bounds, not by hanging the server).
    private static func waitUntilReleased(_ release: @Sendable () -> Bool) {
        let deadline = Date().addingTimeInterval(60)
        while !release(), Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
    }

    private static func sendAll(_ connection: Int32, _ base: UnsafeRawPointer, _ count: Int) -> Bool {
        var done = 0
        while done < count {
            #if canImport(Glibc)
            let flags = Int32(MSG_NOSIGNAL)
            #else
            let flags: Int32 = 0
            #endif
            let written = Glibc_send(connection, base + done, count - done, flags)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            done += written
        }
        return true
    }

    /// Parses the first `bytes=` range per RFC 9110, clamped to `total`; `nil` when it does not parse.
    static func parseRange(_ header: String, total: Int64) -> ByteRange? {
        guard header.hasPrefix("bytes=") else { return nil }
        return parseSpec(header.dropFirst(6).split(separator: ",").first.map { $0.trimmingCharacters(in: .whitespaces) } ?? "", total: total)
    }

    /// Parses every range of a `bytes=` header; `nil` when one does not parse.
    static func parseRanges(_ header: String, total: Int64) -> [ByteRange]? {
        guard header.hasPrefix("bytes=") else { return nil }
        var ranges: [ByteRange] = []
        for spec in header.dropFirst(6).split(separator: ",") {
            guard let range = parseSpec(spec.trimmingCharacters(in: .whitespaces), total: total) else { return nil }
            ranges.append(range)
        }
        return ranges
    }

    private static func parseSpec(_ spec: String, total: Int64) -> ByteRange? {
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        if parts[0].isEmpty {
            guard let suffix = Int64(parts[1]), suffix > 0 else { return nil }
            return ByteRange(max(0, total - suffix), total)
        }
        guard let first = Int64(parts[0]) else { return nil }
        let last = parts[1].isEmpty ? total - 1 : min(Int64(parts[1]) ?? -1, total - 1)
        guard first <= last || first >= total else { return nil }
        return first >= total ? ByteRange(first, first) : ByteRange(first, last + 1)
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for index in 0...(haystack.count - needle.count) where haystack[index] == needle[0] {
            if Array(haystack[index..<(index + needle.count)]) == needle { return index }
        }
        return nil
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 206: "Partial Content"
        case 302: "Found"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 416: "Range Not Satisfiable"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

private func Glibc_send(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ flags: Int32) -> Int {
    send(fd, buffer, count, flags)
}
