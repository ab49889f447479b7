import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import TaskServer

/// `ReadAheadHandler` on an `EmbeddedChannel`: which reads it asks for by itself. (That requests
/// sent while an answer is pending still come back in order, over a socket, is in `HTTPLayerTests`.)
struct ReadAheadHandlerTests {
    /// Counts the reads that reach the channel's head.
    final class ReadCounter: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var reads = 0

        func read(context: ChannelHandlerContext) {
            self.reads += 1
            context.read()
        }
    }

    static let request = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/v1/jobs")
    static let answer = HTTPResponseHead(version: .http1_1, status: .created)

    @Test func readsAheadWhileOneRequestIsUnansweredAndHoldsWithTwo() throws {
        let counter = ReadCounter()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(counter)
        try channel.pipeline.syncOperations.addHandler(ReadAheadHandler())
        // Each `writeInbound` is one read cycle (a read, then its completion). One request being
        // worked on: the next read is asked for at the end of each cycle.
        try channel.writeInbound(HTTPServerRequestPart.head(Self.request))
        #expect(counter.reads == 1)
        try channel.writeInbound(HTTPServerRequestPart.end(nil))
        #expect(counter.reads == 2)
        // A second request while the first is unanswered: nothing more is read ahead.
        try channel.writeInbound(HTTPServerRequestPart.head(Self.request))
        try channel.writeInbound(HTTPServerRequestPart.end(nil))
        #expect(counter.reads == 2)
        // The first answer is written: one unanswered again, so the next cycle reads ahead.
        try channel.writeOutbound(HTTPServerResponsePart.head(Self.answer))
        #expect(counter.reads == 2)
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        channel.pipeline.fireChannelReadComplete()
        #expect(counter.reads == 3)
        // Reads the pipeline asks for go through.
        channel.read()
        #expect(counter.reads == 4)
        // Every part passed through unchanged.
        var inbound = 0
        while try channel.readInbound(as: HTTPServerRequestPart.self) != nil { inbound += 1 }
        #expect(inbound == 4)
        #expect(try channel.readOutbound(as: HTTPServerResponsePart.self) == .head(Self.answer))
        #expect(try channel.readOutbound(as: HTTPServerResponsePart.self) == .end(nil))
        _ = try channel.finish()
    }
}
