import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import TaskCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The HTTP/1.1 server: a SwiftNIO listener whose connections run `HTTPHandler`.
public final class HTTPServer: Sendable {
    public let host: String
    public let requestedPort: Int
    let router: Router
    let limits: HTTPLimits
    let logger: Logger
    let group: MultiThreadedEventLoopGroup
    let ownsGroup: Bool
    private let channel = Mutex<(any Channel)?>(nil)
    private let connections = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)
    private let requestIDs = RequestIDGenerator()
    private let activity: ServerActivity
    private let onResponse: @Sendable (Request?, Response, UInt64) -> Void
    /// Request spans (issue #46), when tracing is on.
    private let tracing: ServerTracing?

    /// - Parameters:
    ///   - group: the event loops to run on (default: one per core).
    ///   - activity: requests in flight and the draining flag; pass the application's own, so that
    ///     readiness and keep-alive read one flag (default: the server's own).
    ///   - onResponse: called after each response is written (metrics, access logs); must be quick.
    public init(
        host: String,
        port: Int,
        router: Router,
        limits: HTTPLimits = HTTPLimits(),
        logger: Logger,
        group: MultiThreadedEventLoopGroup? = nil,
        activity: ServerActivity = ServerActivity(),
        tracing: ServerTracing? = nil,
        onResponse: @escaping @Sendable (Request?, Response, UInt64) -> Void = { _, _, _ in }
    ) {
        self.tracing = tracing
        self.host = host
        self.requestedPort = port
        self.router = router
        self.limits = limits
        self.logger = logger
        self.group = group ?? MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
        self.ownsGroup = group == nil
        self.activity = activity
        self.onResponse = onResponse
    }

    /// The number of open connections.
    public var connectionCount: Int { self.connections.load(ordering: .relaxed) }
    /// Connections refused since start because `maxConnections` were open.
    public var refusedConnections: Int { self.refused.load(ordering: .relaxed) }

    /// Binds and starts accepting; returns the bound port (useful with port 0).
    public func start() async throws -> Int {
        let router = self.router
        let limits = self.limits
        let logger = self.logger
        let requestIDs = self.requestIDs
        let onResponse = self.onResponse
        let tracing = self.tracing
        let activity = self.activity
        let server = self
        let acceptErrors = AcceptErrors(logger: logger)
        let bootstrap = ServerBootstrap(group: self.group)
            // NIO's future-based bind installs no accept backoff: with the descriptor table full,
            // accept4 failed with EMFILE and the loop retried ~5,000 times a second at 100% of a
            // core, logging nothing, while new clients waited in the backlog without their 503.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(AcceptPauseHandler(errors: acceptErrors))
                }
            }
            .serverChannelOption(ChannelOptions.backlog, value: 512)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            // TCP_NODELAY is an IPPROTO_TCP option: `socketOption(.tcp_nodelay)` set SOL_SOCKET
            // option 1, which is SO_DEBUG; root may set that, any other user gets EACCES and every
            // connection was reset (found by running as the image's non-root user).
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(ChannelOptions.maxMessagesPerRead, value: 16)
            .childChannelInitializer { channel in
                // Over the cap: close at once, before any bytes are read.
                let open = server.connections.add(1, ordering: .relaxed).newValue
                channel.closeFuture.whenComplete { _ in server.connections.subtract(1, ordering: .relaxed) }
                if open > limits.maxConnections {
                    // Over the cap: a 503 with Retry-After rather than a reset, then the door.
                    server.refused.add(1, ordering: .relaxed)
                    do {
                        try channel.pipeline.syncOperations.addHandler(OverCapacityHandler())
                        return channel.eventLoop.makeSucceededVoidFuture()
                    } catch {
                        return channel.close()
                    }
                }
                do {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true,
                        withErrorHandling: false
                    )
                    let pipelining = try channel.pipeline.syncOperations.handler(type: HTTPServerPipelineHandler.self)
                    try channel.pipeline.syncOperations.addHandler(ReadAheadHandler(), position: .before(pipelining))
                    try channel.pipeline.syncOperations.addHandler(
                        HTTPHandler(
                            router: router,
                            limits: limits,
                            logger: logger,
                            requestIDs: requestIDs,
                            activity: activity,
                            tracing: tracing,
                            onResponse: onResponse
                        )
                    )
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let channel = try await bootstrap.bind(host: self.host, port: self.requestedPort).get()
        self.channel.withLock { $0 = channel }
        return channel.localAddress?.port ?? self.requestedPort
    }

    /// From now on every answer carries `Connection: close`, so keep-alive clients move on.
    public func beginDraining() {
        self.activity.isDraining.store(true, ordering: .relaxed)
    }

    /// Stops accepting new connections (open ones finish their requests).
    public func stopAccepting() async {
        let channel = self.channel.withLock { $0 }
        try? await channel?.close().get()
    }

    /// The number of requests received in full whose response has not been written yet.
    public var requestsInFlight: Int { self.activity.inFlight.load(ordering: .relaxed) }

    /// Stops accepting, lets the requests in flight finish for up to `gracePeriod`, then shuts the
    /// event loops down (when the server created them), which closes every connection left.
    ///
    /// While it waits, responses carry `Connection: close`, so keep-alive clients move on.
    /// - Returns: the number of requests still in flight when the grace period ended (0 when all
    ///   finished in time).
    @discardableResult
    public func shutdown(gracePeriod: Duration = .zero) async -> Int {
        self.beginDraining()
        await self.stopAccepting()
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: gracePeriod)
        // Shutdown is rare and short: a 10 ms poll costs nothing and needs no wake-up plumbing in
        // the per-request path.
        while self.requestsInFlight > 0, clock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let abandoned = self.requestsInFlight
        if abandoned > 0 {
            self.logger.warning(
                "shutdown grace period over; closing connections",
                metadata: ["http.requests.inFlight": "\(abandoned)"]
            )
        }
        if self.ownsGroup { try? await self.group.shutdownGracefully() }
        return abandoned
    }
}

/// What the connections of one server share: requests in flight, and whether it is stopping.
public final class ServerActivity: Sendable {
    let inFlight = Atomic<Int>(0)
    let isDraining = Atomic<Bool>(false)
    /// Streamed responses open now (server-sent events), ended together when the server drains.
    public let streams = StreamRegistry()

    public init() {}
}

/// Answers a connection over the cap with `503 Service Unavailable` and `Retry-After`, without
/// reading its request: the answer goes out at once, the sending side is shut, and whatever the
/// client sent is read and dropped until it closes (closing with unread bytes would make the
/// kernel send a reset that can destroy the answer before the client reads it), for at most 2 s.
final class OverCapacityHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    static let response: [UInt8] = {
        let body = HTTPProblem(
            .serviceUnavailable,
            code: "server.busy",
            detail: "the server has its maximum number of connections open; retry shortly"
        ).response.body
        let head =
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\n"
            + "connection: close\r\ncontent-length: \(body.count)\r\n\r\n"
        return Array(head.utf8) + body
    }()

    private var answered = false

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.answer(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.answer(context: context)
    }

    private func answer(context: ChannelHandlerContext) {
        guard !self.answered else { return }
        self.answered = true
        let buffer = context.channel.allocator.buffer(bytes: Self.response)
        let channel = context.channel
        context.writeAndFlush(self.wrapOutboundOut(buffer)).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
        }
        context.eventLoop.scheduleTask(in: .seconds(2)) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event { context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Pauses the listener when accepting fails. NIO's own `AcceptBackoffHandler` only delays the next
/// `read`: after a failed `accept4` the listening socket stays registered for reading and NIO
/// calls `accept4` again at once (measured: ~4,500 failing calls a second, a core at 100%). Turning
/// `autoRead` off unregisters it; turning it on again after the pause registers it again.
final class AcceptPauseHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Channel

    let errors: AcceptErrors

    init(errors: AcceptErrors) { self.errors = errors }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? IOError, let pause = self.errors.backoff(after: error) else {
            context.fireErrorCaught(error)
            return
        }
        let channel = context.channel
        channel.setOption(ChannelOptions.autoRead, value: false).whenSuccess {
            channel.eventLoop.scheduleTask(in: pause) {
                channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
            }
        }
    }
}

/// How the listener backs off when accepting fails, and what it logs: a full descriptor table
/// (EMFILE, ENFILE) or memory pressure (ENOBUFS, ENOMEM, ECONNABORTED) pauses accepting for
/// 100 ms, then twice as long each time up to a second. It is logged once per episode: an episode
/// ends 5 s after its last failure (a table that frees one descriptor now and then would otherwise
/// log at every accept).
final class AcceptErrors: Sendable {
    private struct State {
        var lastFailure: UInt64?
        var delayMs: Int64 = 100
    }

    private let state = Mutex(State())
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    func backoff(after error: IOError) -> TimeAmount? {
        let now = monotonicNanoseconds()
        let (first, delayMs): (Bool, Int64) = self.state.withLock { state in
            let first = state.lastFailure.map { now &- $0 > 5_000_000_000 } ?? true
            state.lastFailure = now
            state.delayMs = first ? 100 : min(1000, state.delayMs * 2)
            return (first, state.delayMs)
        }
        if first {
            let descriptors = error.errnoCode == EMFILE || error.errnoCode == ENFILE
            self.logger.error(
                descriptors
                    ? "cannot accept connections: the descriptor table is full; pausing accepts until one is free (raise ulimit -n, or lower --max-connections)"
                    : "cannot accept connections; pausing accepts",
                metadata: ["error": "\(error)", "retry.ms": "\(delayMs)"]
            )
        }
        return .milliseconds(delayMs)
    }
}
