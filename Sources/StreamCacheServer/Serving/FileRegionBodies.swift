#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore
#if canImport(Glibc)
import Glibc
#endif
import NIOHTTP1
import StreamCache

/// Zero-copy bodies: cached bytes go from the cache file to the socket with `sendfile`, never
/// through a user-space buffer.
///
/// Hummingbird's response writer accepts only `ByteBuffer`s, so a body that should be a file
/// region is written as a *marker*: 24 bytes that name a pending region of this connection. The
/// ``FileRegionBodyHandler``, which sits right before NIO's HTTP/1 encoder, swaps each marker for
/// the region it names. Markers start with 16 random bytes drawn per connection, so no body bytes
/// can pass for one; an unknown marker closes the connection rather than reach the client.
///
/// The pending regions of a connection own their file descriptors: the handler closes each one
/// when its write completes or fails, and closes the ones it never saw (the connection ended while
/// their marker was still queued) when it is removed from the pipeline.
final class FileRegionSlots: Sendable {
    /// What one server's zero-copy path did, for its tests and diagnostics.
    final class Statistics: Sendable {
        private let counts = Locked((bytesSent: Int64(0), openDescriptors: 0, corkedConnections: 0, largestRegion: Int64(0),
                                     headsWithTheirBody: 0))
        /// Bytes whose `sendfile` write completed.
        var bytesSent: Int64 { counts.withLock { $0.bytesSent } }
        /// The most bytes one region handed to `sendfile` (see ``RangeResponder/sendfileSize``).
        var largestRegion: Int64 { counts.withLock { $0.largestRegion } }
        /// Descriptors held by regions not written or closed yet.
        var openDescriptors: Int { counts.withLock { $0.openDescriptors } }
        /// Connections corked for regions still going out (see ``FileRegionBodyHandler``).
        var corkedConnections: Int { counts.withLock { $0.corkedConnections } }
        /// Response heads held back to go out with their body's first cached bytes (see
        /// ``FileRegionSlots/sendTheNextHeadWithItsBody()``).
        var headsWithTheirBody: Int { counts.withLock { $0.headsWithTheirBody } }

        func corked(_ isCorked: Bool) { counts.withLock { $0.corkedConnections += isCorked ? 1 : -1 } }
        func heldAHead() { counts.withLock { $0.headsWithTheirBody += 1 } }

        func opened(_ range: ByteRange) {
            counts.withLock {
                $0.openDescriptors += 1
                $0.largestRegion = max($0.largestRegion, range.count)
            }
        }
        func closed(sent: Int64) {
            counts.withLock {
                $0.openDescriptors -= 1
                $0.bytesSent += sent
            }
        }
    }

    private struct State {
        var nextID: UInt64 = 0
        var pending: [UInt64: (handle: NIOFileHandle, range: ByteRange)] = [:]
        var isClosed = false
        var nextHeadGoesWithItsBody = false
    }

    /// The marker's length: 16 bytes of ``magic`` and an 8-byte id.
    static let markerLength = 24

    private let magic = SecretToken.randomBytes(16)
    let statistics: Statistics
    // A handle is closed once, by whoever removes it from `pending`.
    private let state = Locked(State())

    init(statistics: Statistics) { self.statistics = statistics }

    /// A marker for `range` of the file behind `handle`, or `nil` when the connection is closed
    /// (the caller keeps the handle and must close it).
    func marker(for handle: NIOFileHandle, range: ByteRange) -> ByteBuffer? {
        let id: UInt64? = state.withLock { state in
            guard !state.isClosed else { return nil }
            state.nextID += 1
            state.pending[state.nextID] = (handle, range)
            return state.nextID
        }
        guard let id else { return nil }
        statistics.opened(range)
        var buffer = ByteBufferAllocator().buffer(capacity: Self.markerLength)
        buffer.writeBytes(magic)
        buffer.writeInteger(id)
        return buffer
    }

    enum Lookup {
        case notAMarker
        case region(NIOFileHandle, ByteRange)
        case unknownMarker
    }

    /// What `buffer` stands for; a region found is removed, and the caller owns its handle.
    func take(_ buffer: ByteBuffer) -> Lookup {
        guard buffer.readableBytes == Self.markerLength,
              buffer.getBytes(at: buffer.readerIndex, length: 16) == magic,
              let id = buffer.getInteger(at: buffer.readerIndex + 16, as: UInt64.self)
        else { return .notAMarker }
        guard let entry = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return .unknownMarker }
        return .region(entry.handle, entry.range)
    }

    /// Asks that the next response head go out in one TCP segment with the first bytes of its
    /// body, as nginx's `tcp_nopush` sends it: for a body whose first bytes are cached and follow
    /// the head at once.
    ///
    /// Sent alone, the head is a segment of its own, read alone; a client that then reads a
    /// block-sized piece of the body (the bench's 64 KiB) reads the rest into its buffer at an
    /// offset a whole number of pages from the cache file's. Where that buffer starts a few bytes
    /// past a page boundary, as glibc places a large `malloc` (16 bytes past), every byte is copied
    /// from a source 16 bytes behind it modulo 4 KiB, a distance at which the kernel's `rep movsb`
    /// copy runs at a fraction of its speed (AMD EPYC: 2.6 against 12 GB/s at 1–31 bytes,
    /// `Benchmarks/copy-distance.py`). With the head in front, its length moves that distance,
    /// as it did for nginx's answers (docs/benchmark-log.md, *A copy 16 bytes ahead of its source*).
    func sendTheNextHeadWithItsBody() {
        state.withLock { $0.nextHeadGoesWithItsBody = true }
    }

    /// Whether ``sendTheNextHeadWithItsBody()`` was asked since the last head; clears it.
    func takeHeadGoesWithItsBody() -> Bool {
        state.withLock { state in
            defer { state.nextHeadGoesWithItsBody = false }
            return state.nextHeadGoesWithItsBody
        }
    }

    /// Closes every pending region; later ``marker(for:range:)`` calls return `nil`.
    func closeAll() {
        let left = state.withLock { state -> [NIOFileHandle] in
            state.isClosed = true
            defer { state.pending = [:] }
            return state.pending.values.map(\.handle)
        }
        for handle in left {
            try? handle.close()
            statistics.closed(sent: 0)
        }
    }

    // MARK: Per connection

    /// Each connection's slots, owned by its ``FileRegionBodyHandler``.
    static let byChannel = ChannelRegistry<FileRegionSlots>()

    /// The slots of `channel`, when its pipeline has a ``FileRegionBodyHandler``.
    static func slots(for channel: any Channel) -> FileRegionSlots? { byChannel.value(for: channel) }
}

/// Swaps body markers for file regions, right before NIO's HTTP/1 encoder (see ``FileRegionSlots``).
final class FileRegionBodyHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let slots: FileRegionSlots
    /// Regions written and not completed yet, and a head held for its body; the socket is corked
    /// while there are any.
    private var regionsInFlight = 0
    /// Whether a response head was written corked and waits for the first part of its body
    /// (``FileRegionSlots/sendTheNextHeadWithItsBody()``), which takes the cork over.
    private var headHoldsTheCork = false

    init(statistics: FileRegionSlots.Statistics) { self.slots = FileRegionSlots(statistics: statistics) }

    /// Holds back partial TCP segments while regions go out, as nginx's `tcp_nopush` does.
    ///
    /// NIO's sockets have `TCP_NODELAY` set, so without a cork the kernel pushes out whatever a
    /// `sendfile` pass has queued; corked, it only sends full segments. Measured on loopback: the
    /// warm read of a 200 MB file went from 1.5–1.7 to 2.2 GB/s, on a par with nginx
    /// (docs/benchmark-log.md). The last region's completion takes the cork out, which sends the
    /// remainder at once.
    private func cork(_ context: ChannelHandlerContext) {
        regionsInFlight += 1
        if regionsInFlight == 1 { setCorked(true, context.channel) }
    }

    private func uncork(_ context: ChannelHandlerContext) {
        regionsInFlight -= 1
        if regionsInFlight == 0 { setCorked(false, context.channel) }
    }

    private func setCorked(_ isCorked: Bool, _ channel: any Channel) {
        #if os(Linux)
        // A connection that is closing may refuse the option; its regions fail and uncork anyway.
        let option = ChannelOptions.Types.SocketOption(level: .tcp, name: .init(rawValue: CInt(TCP_CORK)))
        try? channel.syncOptions?.setOption(option, value: isCorked ? 1 : 0)
        slots.statistics.corked(isCorked)
        #endif
    }

    /// Ends the hold of a head written corked (``headHoldsTheCork``), once what it waited for was
    /// written after it.
    private func releaseTheHeadsCork(_ context: ChannelHandlerContext) {
        guard headHoldsTheCork else { return }
        headHoldsTheCork = false
        uncork(context)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        FileRegionSlots.byChannel.register(slots, for: context.channel)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        FileRegionSlots.byChannel.unregister(context.channel)
        slots.closeAll()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        if case .head = part, slots.takeHeadGoesWithItsBody() {
            cork(context)
            headHoldsTheCork = true
            slots.statistics.heldAHead()
            context.write(data, promise: promise)
            return
        }
        guard case .body(.byteBuffer(let buffer)) = part else {
            context.write(data, promise: promise)
            if case .end = part { releaseTheHeadsCork(context) }
            return
        }
        switch slots.take(buffer) {
        case .notAMarker:
            // A multi-range answer's part header: it waits in the corked socket with the head.
            context.write(data, promise: promise)
        case .region(let handle, let range):
            let region = FileRegion(fileHandle: handle, readerIndex: Int(range.lowerBound), endIndex: Int(range.upperBound))
            let written = context.eventLoop.makePromise(of: Void.self)
            let statistics = slots.statistics
            cork(context)
            written.futureResult.assumeIsolated().whenComplete { result in
                try? handle.close()
                statistics.closed(sent: (try? result.get()).map { range.count } ?? 0)
                self.uncork(context)
                switch result {
                case .success: promise?.succeed()
                case .failure(let error): promise?.fail(error)
                }
            }
            context.write(wrapOutboundOut(.body(.fileRegion(region))), promise: written)
            // The region holds the cork now: the head goes out with its first full segment.
            releaseTheHeadsCork(context)
        case .unknownMarker:
            // Never send a marker's bytes as content.
            promise?.fail(ChannelError.ioOnClosedChannel)
            context.close(promise: nil)
        }
    }
}

/// Puts a ``FileRegionBodyHandler`` right before NIO's HTTP/1 encoder when the connection's
/// pipeline is built (Hummingbird adds its extra handlers after its own HTTP codec, where bodies
/// are `ByteBuffer`s only). Writes pass it untouched.
final class FileRegionInstaller: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = Any

    private let statistics: FileRegionSlots.Statistics

    init(statistics: FileRegionSlots.Statistics) { self.statistics = statistics }

    func handlerAdded(context: ChannelHandlerContext) {
        do {
            let pipeline = context.pipeline.syncOperations
            let encoder = try pipeline.handler(type: HTTPResponseEncoder.self)
            try pipeline.addHandler(FileRegionBodyHandler(statistics: statistics), position: .after(encoder))
        } catch {
            // Without the handler no marker is ever written (``FileRegionSlots/slots(for:)`` is nil).
            context.fireErrorCaught(error)
        }
    }
}
