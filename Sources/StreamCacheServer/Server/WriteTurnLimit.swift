import NIOCore

/// Bounds what one connection writes per turn of the server's event loop, so a connection that
/// streams a large cached file cannot hold up every other one, as nginx's `sendfile_max_chunk`
/// does.
///
/// One event loop serves every connection (see ``ProxyServer/start()``). On loopback the
/// receiver's window grows to megabytes, and NIO repeats a write while the socket takes bytes, so
/// a single `sendfile` turn moved a whole 7 MB file: 16 players opening a cached file at once got
/// their first bytes one whole file after another (median 14.3 ms against nginx's 7.2). With a
/// bounded send buffer a `sendfile` call moves at most about that much, and with no write spin
/// the loop takes the next connection's turn before this one's next call: the same 16 players'
/// median became 5.9 ms (docs/benchmark-log.md). A lone reader loses nothing: its socket is
/// writable again at the next turn.
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
