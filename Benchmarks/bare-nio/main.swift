// The baseline of the HTTP benchmarks: a bare SwiftNIO HTTP/1.1 server on the same event-loop
// setup as TaskServer. GET answers 2 bytes; POST decodes the ~300-byte job body with Codable
// (JSONDecoder) and answers a small JSON object. Run: bare-nio PORT
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

struct JobBody: Codable {
    struct Graph: Codable {
        var type: String
        var action: String?
        var params: [String: Int]?
        var id: String?
    }
    var name: String?
    var input: [String: Int]?
    var graph: Graph
    var labels: [String: String]?
    var timeoutMs: Int?
}

final class BareHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private var head: HTTPRequestHead?
    private var body: ByteBuffer?
    private let decoder = JSONDecoder()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            self.body = nil
        case .body(var chunk):
            if self.body == nil { self.body = chunk } else { self.body!.writeBuffer(&chunk) }
        case .end:
            guard let head = self.head else { return }
            var status = HTTPResponseStatus.ok
            var payload = "ok"
            if head.method == .POST {
                if let body = self.body,
                    let decoded = try? self.decoder.decode(JobBody.self, from: Data(body.readableBytesView))
                {
                    status = .created
                    payload = #"{"id":"bare","state":"pending","type":"\#(decoded.graph.type)"}"#
                } else {
                    status = .badRequest
                    payload = #"{"code":"json.malformed"}"#
                }
            }
            var headers = HTTPHeaders()
            headers.add(name: "content-length", value: String(payload.utf8.count))
            headers.add(name: "content-type", value: head.method == .POST ? "application/json" : "text/plain")
            context.write(
                self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
                promise: nil
            )
            var buffer = context.channel.allocator.buffer(capacity: payload.utf8.count)
            buffer.writeString(payload)
            context.write(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 8090 : 8090
let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
let channel = try ServerBootstrap(group: group)
    .serverChannelOption(ChannelOptions.backlog, value: 512)
    .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
    .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.configureHTTPServerPipeline(withPipeliningAssistance: true)
            try channel.pipeline.syncOperations.addHandler(BareHandler())
        }
    }
    .bind(host: "127.0.0.1", port: port).wait()
print("bare-nio listening on \(port)")
try channel.closeFuture.wait()
