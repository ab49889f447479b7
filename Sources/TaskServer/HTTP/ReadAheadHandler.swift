import NIOCore
import NIOHTTP1

/// Keeps a connection registered for reading while its one request is answered later.
///
/// `HTTPServerPipelineHandler` holds reads back while a response is pending, so that pipelined
/// requests cannot pile up. A request answered from another thread — every durable POST waits
/// for the store's commit — therefore left no read outstanding when its read cycle ended: NIO took
/// the socket out of the epoll set and put it back once the answer was out, two `epoll_ctl` calls
/// per request (`perf stat`: 1.99 per durable job; none in memory, where the answer is written
/// before the cycle ends).
///
/// This handler sits between the request decoder and the pipelining handler and counts requests
/// in and answers out. When a read cycle ends and at most one request is unanswered (the one being
/// worked on; none waiting in the pipelining handler's buffer), it asks for the next read itself,
/// so a client that waits for its answer, as HTTP/1.1 clients do, stays in the epoll set. With two
/// or more unanswered it asks for nothing and the pipelining handler's own rule applies. So what a
/// pipelining client can make the server buffer stays what one read cycle brings.
final class ReadAheadHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Requests whose head has arrived and whose answer has not been written to its end.
    private var unanswered = 0

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = self.unwrapInboundIn(data) { self.unanswered += 1 }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        // A read already outstanding is not asked for twice: NIO's `read0` only sets a flag then.
        if self.unanswered <= 1 { context.read() }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = self.unwrapOutboundIn(data) { self.unanswered -= 1 }
        context.write(data, promise: promise)
    }
}
