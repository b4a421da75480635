#if os(Linux)
import Glibc
import NIOCore
import NIOPosix
@testable import StreamCacheServer
import Testing

/// ``EventLoopTurns``: a chain of steps that waits for the loop's turns between them lets the
/// loop read its other sockets meanwhile; one that only takes a trip through the loop (what the
/// response pacer did before) keeps the loop from them until the chain ends.
///
/// The chain stands for a response body written to a client that keeps up; the other socket, a
/// pipe whose bytes are there before the chain starts, for a new connection's request.
@Suite struct EventLoopTurnsTests {
    enum Wait: Sendable, CustomStringConvertible {
        case forTheNextTurn, forATripThroughTheLoop
        var description: String { self == .forTheNextTurn ? "the next turn" : "a trip through the loop" }
    }

    static let chainLength = 100

    @Test(arguments: [Wait.forTheNextTurn, .forATripThroughTheLoop])
    func anotherSocketIsReadWhileAChainOfStepsRunsOnlyWhenTheStepsWaitForTurns(wait: Wait) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let turns = try await EventLoopTurns.start(on: loop)
        let steps = NIOLoopBoundBox.makeBoxSendingValue(0, eventLoop: loop)
        let readAtStep = NIOLoopBoundBox.makeBoxSendingValue(Int?.none, eventLoop: loop)
        var descriptors: [CInt] = [0, 0]
        try #require(pipe(&descriptors) == 0)
        let writeEnd = descriptors[1]
        let other = try await NIOPipeBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ReadRecorder(steps: steps, readAtStep: readAtStep))
                }
            }
            .takingOwnershipOfDescriptor(input: descriptors[0])
            .get()

        let next: @Sendable () -> EventLoopFuture<Void>
        switch wait {
        case .forTheNextTurn: next = { turns.next() }
        case .forATripThroughTheLoop: next = { loop.submit {} }
        }
        // The byte and the chain's start in one task: the loop cannot poll in between.
        let readWhenTheChainEnded = try await loop.flatSubmit {
            Self.writeAByteThenRunTheChain(writeEnd: writeEnd, on: loop, steps: steps, readAtStep: readAtStep, next: next)
        }.get()

        switch wait {
        case .forTheNextTurn:
            let step = try #require(readWhenTheChainEnded, "the other socket was read before the chain's end")
            #expect(step <= 2, "read at the first turn of the loop (step \(step) of \(Self.chainLength))")
        case .forATripThroughTheLoop:
            #expect(readWhenTheChainEnded == nil, "a chain of trips through the loop keeps it from its sockets")
        }
        try await other.close()
        close(writeEnd)
        await turns.close()
        try await group.shutdownGracefully()
    }

    /// After ``EventLoopTurns/close()``, ``EventLoopTurns/next()`` resolves at once: a response
    /// still writing while the server stops is not left waiting.
    @Test func turnsResolveAtOnceOnceClosed() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let turns = try await EventLoopTurns.start(on: group.next())
        try await turns.next().get()  // a turn comes while the pipe is open
        await turns.close()
        let loop = group.next()
        let resolved = try await loop.submit { () -> Bool in
            let resolved = NIOLoopBoundBox.makeBoxSendingValue(false, eventLoop: loop)
            turns.next().whenSuccess { resolved.value = true }
            return resolved.value
        }.get()
        #expect(resolved)
        try await group.shutdownGracefully()
    }

    /// On `loop`: gives the other socket a byte to read, then runs the chain; resolves when it
    /// ends, with the step at which that byte was read (`nil`: not by then).
    static func writeAByteThenRunTheChain(writeEnd: CInt, on loop: any EventLoop, steps: NIOLoopBoundBox<Int>,
                                          readAtStep: NIOLoopBoundBox<Int?>,
                                          next: @escaping @Sendable () -> EventLoopFuture<Void>) -> EventLoopFuture<Int?> {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
        let done = loop.makePromise(of: Void.self)
        step(steps, until: chainLength, next: next, done: done)
        return done.futureResult.map { readAtStep.value }
    }

    /// Counts a step and waits with `next` for the one after it, until `count` steps ran.
    static func step(_ steps: NIOLoopBoundBox<Int>, until count: Int, next: @escaping @Sendable () -> EventLoopFuture<Void>,
                     done: EventLoopPromise<Void>) {
        steps.value += 1
        guard steps.value < count else {
            done.succeed()
            return
        }
        next().whenSuccess { step(steps, until: count, next: next, done: done) }
    }

    /// Notes the step of the chain at which the other socket's first bytes were read.
    private final class ReadRecorder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let steps: NIOLoopBoundBox<Int>
        let readAtStep: NIOLoopBoundBox<Int?>

        init(steps: NIOLoopBoundBox<Int>, readAtStep: NIOLoopBoundBox<Int?>) {
            self.steps = steps
            self.readAtStep = readAtStep
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if readAtStep.value == nil { readAtStep.value = steps.value }
        }
    }
}
#endif
