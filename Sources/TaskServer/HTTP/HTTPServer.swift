import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import TaskCore

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
    private let requestIDs = RequestIDGenerator()
    private let activity: ServerActivity
    private let onResponse: @Sendable (Request?, Response, UInt64) -> Void

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
        onResponse: @escaping @Sendable (Request?, Response, UInt64) -> Void = { _, _, _ in }
    ) {
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

    /// Binds and starts accepting; returns the bound port (useful with port 0).
    public func start() async throws -> Int {
        let router = self.router
        let limits = self.limits
        let logger = self.logger
        let requestIDs = self.requestIDs
        let onResponse = self.onResponse
        let activity = self.activity
        let server = self
        let bootstrap = ServerBootstrap(group: self.group)
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
                    return channel.close()
                }
                do {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true,
                        withErrorHandling: false
                    )
                    try channel.pipeline.syncOperations.addHandler(
                        HTTPHandler(
                            router: router,
                            limits: limits,
                            logger: logger,
                            requestIDs: requestIDs,
                            activity: activity,
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

    public init() {}
}
