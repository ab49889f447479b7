import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Synchronization
import TaskCore
import Testing

@testable import TaskServer

/// `HTTPHandler` on an `EmbeddedChannel`: request parts in, response parts out, no sockets, and
/// time moved by hand on the embedded event loop.
struct HTTPHandlerTests {
    /// A channel with one handler over a router that answers `GET /hello` with "hi".
    static func channel(
        activity: ServerActivity = ServerActivity(),
        _ configure: (inout HTTPLimits) -> Void = { _ in }
    ) throws -> EmbeddedChannel {
        var limits = HTTPLimits()
        configure(&limits)
        var router = Router()
        router.add(.GET, "/hello") { _ in Future(value: .text("hi")) }
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            HTTPHandler(
                router: router,
                limits: limits,
                logger: Logger(label: "test"),
                requestIDs: RequestIDGenerator(),
                activity: activity,
                onResponse: { _, _, _ in }
            )
        )
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8080)).wait()
        return channel
    }

    static func send(_ channel: EmbeddedChannel, _ head: HTTPRequestHead, body: String? = nil) throws {
        try channel.writeInbound(HTTPServerRequestPart.head(head))
        if let body { try channel.writeInbound(HTTPServerRequestPart.body(ByteBuffer(string: body))) }
        try channel.writeInbound(HTTPServerRequestPart.end(nil))
        channel.embeddedEventLoop.run()
    }

    /// The response written so far: its head and body (nil when none was written).
    static func response(_ channel: EmbeddedChannel) throws -> (head: HTTPResponseHead, body: String)? {
        guard case .head(let head)? = try channel.readOutbound(as: HTTPServerResponsePart.self) else { return nil }
        var body = ""
        while let part = try channel.readOutbound(as: HTTPServerResponsePart.self) {
            switch part {
            case .body(.byteBuffer(let buffer)): body += String(buffer: buffer)
            case .end: return (head, body)
            default: break
            }
        }
        return (head, body)
    }

    static let get = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/hello")

    @Test func aRequestIsRoutedAndTheConnectionKeptAlive() throws {
        let channel = try Self.channel()
        try Self.send(channel, Self.get)
        let response = try #require(try Self.response(channel))
        #expect(response.head.status == .ok)
        #expect(response.body == "hi")
        #expect(response.head.headers["content-length"] == ["2"])
        #expect(response.head.headers["x-request-id"].count == 1)
        #expect(channel.isActive)
        // And a second request on the same connection.
        try Self.send(channel, Self.get)
        #expect(try Self.response(channel)?.body == "hi")
        _ = try? channel.finish()
    }

    @Test func anIdleConnectionClosesAtTheIdleTimeoutOfTheLoopsClock() throws {
        let channel = try Self.channel { $0.idleTimeout = .seconds(60) }
        try Self.send(channel, Self.get)
        _ = try Self.response(channel)
        channel.embeddedEventLoop.advanceTime(by: .seconds(59))
        #expect(channel.isActive, "59 s idle is within the timeout")
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive, "closed once idle past 60 s")
    }

    @Test func aConnectionThatSendsNoHeadClosesAtTheHeadTimeout() throws {
        let channel = try Self.channel { $0.requestHeadTimeout = .seconds(10) }
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
    }

    @Test func aSlowBodyClosesAtTheBodyTimeout() throws {
        let channel = try Self.channel { $0.requestBodyTimeout = .seconds(30) }
        let head = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/hello", headers: ["content-length": "10"])
        try channel.writeInbound(HTTPServerRequestPart.head(head))
        channel.embeddedEventLoop.advanceTime(by: .seconds(29))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
    }

    @Test func aDeclaredBodyOverTheLimitIs413AndTheConnectionCloses() throws {
        let channel = try Self.channel { $0.maxBodyBytes = 100 }
        let head = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/hello", headers: ["content-length": "101"])
        try channel.writeInbound(HTTPServerRequestPart.head(head))
        channel.embeddedEventLoop.run()
        let response = try #require(try Self.response(channel))
        #expect(response.head.status == .payloadTooLarge)
        #expect(response.head.headers["connection"] == ["close"])
        #expect(response.body.contains("\"code\":\"body.tooLarge\""))
        #expect(!channel.isActive)
    }

    @Test func expect100ContinueIsAnsweredBeforeTheBody() throws {
        let channel = try Self.channel()
        let head = HTTPRequestHead(
            version: .http1_1,
            method: .POST,
            uri: "/hello",
            headers: ["content-length": "2", "expect": "100-continue"]
        )
        try channel.writeInbound(HTTPServerRequestPart.head(head))
        guard case .head(let interim)? = try channel.readOutbound(as: HTTPServerResponsePart.self) else {
            Issue.record("no interim answer")
            return
        }
        #expect(interim.status == .continue)
        _ = try? channel.finish()
    }

    @Test func aParserErrorIsAnsweredWith400AndCloses() throws {
        let channel = try Self.channel()
        channel.pipeline.fireErrorCaught(HTTPParserError.invalidVersion)
        channel.embeddedEventLoop.run()
        let response = try #require(try Self.response(channel))
        #expect(response.head.status == .badRequest)
        #expect(response.body.contains("\"code\":\"http.malformed\""))
        #expect(!channel.isActive)
    }

    @Test func aDrainingServerClosesTheConnectionAfterItsAnswer() throws {
        let activity = ServerActivity()
        let channel = try Self.channel(activity: activity)
        activity.isDraining.store(true, ordering: .relaxed)
        try Self.send(channel, Self.get)
        let response = try #require(try Self.response(channel))
        #expect(response.head.status == .ok)
        #expect(response.head.headers["connection"] == ["close"])
        #expect(!channel.isActive)
        #expect(activity.inFlight.load(ordering: .relaxed) == 0, "the request no longer counts as in flight")
    }

    /// A response whose connection closed before it was ready is never written, and says so: what
    /// it handed out (a claim's leases) is given back (issue #27, 4).
    @Test func aResponseThatCannotBeDeliveredSaysSo() throws {
        let answer = Promise<Response>()
        var router = Router()
        router.add(.GET, "/late") { _ in answer.future }
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            HTTPHandler(
                router: router,
                limits: HTTPLimits(),
                logger: Logger(label: "test"),
                requestIDs: RequestIDGenerator(),
                activity: ServerActivity(),
                onResponse: { _, _, _ in }
            )
        )
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8080)).wait()
        try Self.send(channel, HTTPRequestHead(version: .http1_1, method: .GET, uri: "/late"))
        try channel.close().wait()
        let undelivered = Mutex(0)
        var response = Response.text("leases")
        response.onUndelivered = { undelivered.withLock { $0 += 1 } }
        answer.succeed(response)
        channel.embeddedEventLoop.run()
        #expect(undelivered.withLock { $0 } == 1)
        #expect(try Self.response(channel) == nil, "nothing was written")
    }
}
