import NIOCore

/// Bounds what one connection has in its socket, so a connection that streams a large cached file
/// holds up the others less.
///
/// One event loop serves every connection (see ``ProxyServer/start()``). On loopback the
/// receiver's window grows to megabytes, and NIO repeats a write while the socket takes bytes, so
/// a single `sendfile` turn moved a whole 7 MB file: 16 players opening a cached file at once got
/// their first bytes one whole file after another (median 14.3 ms against nginx's 7.2). With a
/// bounded send buffer and no write spin, a client slower than the loop fills its buffer and the
/// loop takes the next connection's turn: the same 16 players' median became 5.9 ms
/// (docs/benchmark-log.md). A client that keeps up empties the buffer as fast as `sendfile`
/// fills it, so one call could still move a whole file (156 MB in 72 ms); the pieces of
/// ``RangeResponder/sendfileSize`` and ``EventLoopTurns`` bound that. A lone reader loses
/// nothing: its socket is writable again at the next turn.
///
/// Added to each connection's pipeline; it sets the socket's options and removes itself.
final class WriteTurnLimit: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Never

    /// The socket send buffer, in bytes (Linux reserves twice this for its bookkeeping).
    private let sendBufferSize: Int

    init(sendBufferSize: Int) { self.sendBufferSize = sendBufferSize }

    func handlerAdded(context: ChannelHandlerContext) {
        // A connection that is closing may refuse an option; it carries nothing more anyway.
        if let options = context.channel.syncOptions {
            try? options.setOption(ChannelOptions.socketOption(.so_sndbuf), value: sendBufferSize)
            try? options.setOption(ChannelOptions.writeSpin, value: 0)
        }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
