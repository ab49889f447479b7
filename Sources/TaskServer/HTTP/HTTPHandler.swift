import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore

/// Limits and timeouts of the HTTP layer.
public struct HTTPLimits: Sendable {
    /// Largest request body; larger ones get `413` before they are buffered (default 1 MiB).
    public var maxBodyBytes: Int = 1 << 20
    /// Longest request target (default 8 KiB); longer ones get `414`.
    public var maxURIBytes: Int = 8 << 10
    /// Most concurrent connections (default 4,096); further ones are closed at once.
    public var maxConnections: Int = 4096
    /// How long a connection may wait for a complete request head (default 10 s), which stops
    /// slow-header clients from pinning a connection.
    public var requestHeadTimeout: TimeAmount = .seconds(10)
    /// How long a request body may take to arrive (default 30 s).
    public var requestBodyTimeout: TimeAmount = .seconds(30)
    /// How long an idle keep-alive connection stays open (default 60 s).
    public var idleTimeout: TimeAmount = .seconds(60)

    public init() {}
}

/// One connection's HTTP/1.1 handler: reads a request (enforcing limits while reading), hands it
/// to the router, writes the response. `HTTPServerPipelineHandler` in front of it holds pipelined
/// requests back until the previous response has been written, so answers stay in order.
final class HTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let router: Router
    private let limits: HTTPLimits
    private let logger: Logger
    private let requestIDs: RequestIDGenerator
    /// Request spans (issue #46), when tracing is on.
    private let tracing: ServerTracing?
    private let activity: ServerActivity
    private let onResponse: @Sendable (Request?, Response, _ durationNanoseconds: UInt64) -> Void
    /// What the connection is doing and when it times out; this handler carries out its actions.
    private var machine: HTTPConnectionStateMachine
    private var watchdog: RepeatedTask?
    private var requestStart: UInt64 = 0
    /// Whether this connection's request counts in `activity.inFlight`.
    private var isInFlight = false
    /// Cancelled when the connection goes away (`Request.connectionClosed`): one per connection.
    private let closed = CancellationTokenSource()

    init(
        router: Router,
        limits: HTTPLimits,
        logger: Logger,
        requestIDs: RequestIDGenerator,
        activity: ServerActivity,
        tracing: ServerTracing? = nil,
        onResponse: @escaping @Sendable (Request?, Response, UInt64) -> Void
    ) {
        self.tracing = tracing
        self.activity = activity
        self.router = router
        self.limits = limits
        self.logger = logger
        self.requestIDs = requestIDs
        self.onResponse = onResponse
        self.machine = HTTPConnectionStateMachine(limits: limits)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.startWatchdog(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.startWatchdog(context: context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.closed.cancel()
        self.watchdog?.cancel()
        self.watchdog = nil
        self.endRequest()
    }

    /// Counts the request being answered as in flight until `endRequest` (server shutdown waits
    /// for the count to reach zero).
    private func beginRequest() {
        guard !self.isInFlight else { return }
        self.isInFlight = true
        self.activity.inFlight.add(1, ordering: .relaxed)
    }

    private func endRequest() {
        guard self.isInFlight else { return }
        self.isInFlight = false
        self.activity.inFlight.subtract(1, ordering: .relaxed)
    }

    private func startWatchdog(context: ChannelHandlerContext) {
        guard self.watchdog == nil else { return }
        // Deadlines are read off the event loop's clock (one repeating check per connection
        // enforces them, instead of a timer task scheduled and cancelled twice per request, which
        // cost ~4% of a request's CPU); an embedded loop's clock moves only when a test says so.
        self.machine.connectionStarted(now: context.eventLoop.now)
        let limits = self.limits
        // A timeout fires up to one interval late: a tenth of the shortest one, 10 ms to 1 s.
        let shortest = min(limits.requestHeadTimeout, limits.requestBodyTimeout, limits.idleTimeout)
        let interval = TimeAmount.nanoseconds(min(max(shortest.nanoseconds / 10, 10_000_000), 1_000_000_000))
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let channel = context.channel
        let eventLoop = context.eventLoop
        self.watchdog = eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { task in
            guard handler.value.machine.isExpired(at: eventLoop.now) else { return }
            task.cancel()
            channel.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let action: HTTPConnectionStateMachine.Action
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            if case .idle = self.machine.state { self.requestStart = monotonicNanoseconds() }
            action = self.machine.receivedHead(head, now: context.eventLoop.now)
        case .body(var chunk):
            action = self.machine.receivedBody(&chunk)
        case .end:
            action = self.machine.receivedEnd()
        }
        self.run(action, context: context)
    }

    private func run(_ action: HTTPConnectionStateMachine.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .answerAndClose(let problem, let head):
            self.answerAndClose(context: context, problem, head: head)
        case .sendContinue(let head):
            context.writeAndFlush(
                self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .continue))),
                promise: nil
            )
        case .route(let head, let body):
            self.beginRequest()
            self.dispatch(context: context, head: head, body: body)
        case .close:
            context.close(promise: nil)
        }
    }

    // MARK: - Dispatch

    private func dispatch(context: ChannelHandlerContext, head: HTTPRequestHead, body: ByteBuffer?) {
        let requestID =
            head.headers.first(name: "x-request-id").flatMap(RequestIDGenerator.accepting) ?? self.requestIDs.next()
        guard let (segments, query) = parseTarget(head.uri) else {
            self.respond(
                context: context,
                head: head,
                request: nil,
                HTTPProblem(
                    .badRequest,
                    code: "query.invalid",
                    detail: "the request target is not valid percent-encoded UTF-8"
                ).response,
                requestID: requestID
            )
            return
        }
        var request = Request(
            method: head.method,
            uri: head.uri,
            segments: segments,
            query: query.isEmpty ? [:] : query.compactMapValues(\.first),
            queryValues: query,
            headers: head.headers,
            body: body,
            requestID: requestID,
            connectionClosed: self.closed.token,
            executor: EventLoopExecutor(eventLoop: context.eventLoop)
        )
        let future: Future<Response>
        switch self.router.match(head.method, segments) {
        case .notFound:
            // Never echo a secret path (a lease id) back, even a mistyped one.
            let path = self.router.shownPath(request.path, segments: segments, template: nil)
            future = Future(value: HTTPProblem.notFound("route.notFound", "no route for \(path)").response)
        case .methodNotAllowed(let allowed, let template):
            request.route = template
            var headers = HTTPHeaders()
            headers.add(name: "allow", value: allowed.joined(separator: ", "))
            future = Future(
                value: HTTPProblem(
                    .methodNotAllowed,
                    code: "method.notAllowed",
                    detail: "\(head.method.rawValue) is not allowed here",
                    headers: headers
                ).response
            )
        case .handler(let handler, let parameters, let template):
            request.parameters = parameters
            request.route = template
            if let tracing = self.tracing {
                request.span = tracing.requestSpan(
                    method: head.method,
                    route: template,
                    headers: head.headers,
                    requestID: requestID
                )
            }
            do {
                future = try handler(request)
            } catch let error as any HTTPResponseError {
                future = Future(value: error.problem.response)
            } catch {
                self.logger.error("handler failed", metadata: ["http.request.id": "\(requestID)", "error": "\(error)"])
                future = Future(value: HTTPProblem.internalError.response)
            }
        }
        let finalRequest = request
        if self.logger.logLevel <= .debug {
            var logger = self.logger
            logger[metadataKey: "http.request.id"] = .string(requestID)
            if let trace = request.trace { logger[metadataKey: "trace.id"] = .string(trace.traceID.hex) }
            // A secret path (a lease id, SPEC §6) is logged as its route.
            let shown = Self.redactingQueryValues(
                self.router.shownPath(head.uri, segments: segments, template: request.route)
            )
            let target = shown.utf8.count <= 200 ? shown : String(shown.prefix(200))
            logger.debug(
                "request received",
                metadata: ["http.method": "\(head.method.rawValue)", "http.target": "\(target)"]
            )
        }
        if let outcome = future.outcome {
            self.respond(
                context: context,
                head: head,
                request: finalRequest,
                Self.response(outcome, requestID: requestID, logger: self.logger),
                requestID: requestID
            )
            return
        }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        let logger = self.logger
        future.whenComplete { outcome in
            let response = Self.response(outcome, requestID: requestID, logger: logger)
            eventLoop.execute {
                let (handler, context) = loopBound.value
                handler.respond(context: context, head: head, request: finalRequest, response, requestID: requestID)
            }
        }
    }

    private static func response(_ outcome: Outcome<Response>, requestID: String, logger: Logger) -> Response {
        switch outcome {
        case .success(let response): return response
        case .failure(let error as any HTTPResponseError): return error.problem.response
        case .failure(let error):
            logger.error("handler failed", metadata: ["http.request.id": "\(requestID)", "error": "\(error)"])
            return HTTPProblem.internalError.response
        case .cancelled:
            return HTTPProblem(
                .serviceUnavailable,
                code: "server.draining",
                detail: "the request was cancelled because the server is stopping"
            ).response
        }
    }

    // MARK: - Writing

    private func answerAndClose(context: ChannelHandlerContext, _ problem: HTTPProblem, head: HTTPRequestHead?) {
        self.endRequest()
        var response = problem.response
        response.headers.replaceOrAdd(name: "connection", value: "close")
        self.write(context: context, response, keepAlive: false, head: head, requestID: self.requestIDs.next())
        self.onResponse(nil, response, monotonicNanoseconds() &- self.requestStart)
    }

    private func respond(
        context: ChannelHandlerContext,
        head: HTTPRequestHead,
        request: Request?,
        _ response: Response,
        requestID: String
    ) {
        self.endRequest()
        guard context.channel.isActive,
            let keepAlive = self.machine.answerReady(
                keepAliveRequested: head.isKeepAlive && response.stream == nil,
                isDraining: self.activity.isDraining.load(ordering: .relaxed),
                now: context.eventLoop.now
            )
        else {
            response.onUndelivered?()
            if let span = request?.span { self.tracing?.endRequestSpan(span, status: Int(response.status.code)) }
            return
        }
        let duration = monotonicNanoseconds() &- self.requestStart
        self.write(context: context, response, keepAlive: keepAlive, head: head, requestID: requestID)
        if let span = request?.span { self.tracing?.endRequestSpan(span, status: Int(response.status.code)) }
        self.onResponse(request, response, duration)
        if self.logger.logLevel <= .debug {
            // Headers (Authorization among them) and bodies are never logged.
            var logger = self.logger
            logger[metadataKey: "http.request.id"] = .string(requestID)
            logger.debug(
                "request answered",
                metadata: [
                    "http.status": "\(response.status.code)", "http.duration_ms": "\(Double(duration / 1000) / 1000)",
                ]
            )
        }
    }

    private func write(
        context: ChannelHandlerContext,
        _ response: Response,
        keepAlive: Bool,
        head: HTTPRequestHead?,
        requestID: String
    ) {
        var headers = response.headers
        // Handlers never set these two (a response's length and id are the server's business).
        if response.stream == nil { headers.add(name: "content-length", value: String(response.body.count)) }
        headers.add(name: "x-request-id", value: requestID)
        if !keepAlive { headers.replaceOrAdd(name: "connection", value: "close") }
        let version = head?.version ?? .http1_1
        let responseHead = HTTPResponseHead(version: version, status: response.status, headers: headers)
        if let stream = response.stream {
            // No length: HTTP/1.1 frames the body in chunks; the producer writes them from now on.
            context.writeAndFlush(self.wrapOutboundOut(.head(responseHead)), promise: nil)
            let writer = StreamWriter(
                channel: context.channel,
                closed: self.closed.token,
                registry: self.activity.streams
            )
            if head?.method == .HEAD {
                writer.finish()
                return
            }
            self.activity.streams.add(writer)
            // Draining already: the stream ends at once (the client reconnects elsewhere or later).
            if self.activity.isDraining.load(ordering: .relaxed) {
                writer.finish()
                return
            }
            stream.start(writer)
            return
        }
        context.write(self.wrapOutboundOut(.head(responseHead)), promise: nil)
        if head?.method != .HEAD, !response.body.isEmpty {
            var buffer = context.channel.allocator.buffer(capacity: response.body.count)
            buffer.writeBytes(response.body)
            context.write(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        }
        if keepAlive {
            if let undelivered = response.onUndelivered {
                context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenFailure { _ in undelivered() }
            } else {
                context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
            }
        } else {
            // A lingering close: shut the sending side once the answer is out, read and drop what
            // the client still sends (the rest of a refused body) until it closes, for at most 2 s.
            // Closing outright with unread bytes makes the kernel send a reset, which can destroy
            // the answer (a 413) before the client reads it.
            let channel = context.channel
            let undelivered = response.onUndelivered
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { outcome in
                if case .failure = outcome { undelivered?() }
                channel.close(mode: .output).whenFailure { _ in channel.close(promise: nil) }
                channel.eventLoop.scheduleTask(in: .seconds(2)) { channel.close(promise: nil) }
            }
        }
    }

    // MARK: - Errors and idleness

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parserError = error as? HTTPParserError else {
            context.close(promise: nil)
            return
        }
        // Garbage, oversized headers, bad framing: answer with a problem once, then close.
        self.run(self.machine.parserFailed(parserError), context: context)
    }
}

/// Request ids: a per-process random prefix and a counter in base 36 (cheap, unique, and short:
/// `k3x9qa-1z4`).
final class RequestIDGenerator: Sendable {
    private static let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyz".utf8)
    /// The random prefix and its dash.
    private let prefix: [UInt8]
    private let counter = Atomic<UInt64>(0)

    init() {
        var generator = SystemRandomNumberGenerator()
        self.prefix = (0..<6).map { _ in Self.alphabet[Int(generator.next() % 36)] } + [UInt8(ascii: "-")]
    }

    /// A client's `X-Request-Id` when it is sane (1–64 visible ASCII characters, as openapi.yaml
    /// says), so that it can go into logs and back into a header unchanged; nil otherwise.
    static func accepting(_ candidate: String) -> String? {
        let bytes = candidate.utf8
        guard (1...64).contains(bytes.count), bytes.allSatisfy({ (0x21...0x7E).contains($0) }) else { return nil }
        return candidate
    }

    func next() -> String {
        var n = self.counter.add(1, ordering: .relaxed).newValue
        // 7 bytes of prefix and at most 13 base-36 digits.
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buffer in
            var start = 20
            repeat {
                start -= 1
                buffer[start] = Self.alphabet[Int(n % 36)]
                n /= 36
            } while n > 0
            start -= self.prefix.count
            for (offset, byte) in self.prefix.enumerated() { buffer[start + offset] = byte }
            return String(decoding: UnsafeBufferPointer(rebasing: buffer[start...]), as: UTF8.self)
        }
    }
}

/// Whether `text` is `lowercase` in any ASCII case (no `String` is made, unlike `lowercased()`).
extension HTTPHandler {
    /// `target` with every query value replaced by `…` and the names kept: a client may put a
    /// secret in a query (`?api_key=…`), and a log line must never hold one.
    static func redactingQueryValues(_ target: String) -> String {
        guard let question = target.firstIndex(of: "?") else { return target }
        let names = target[target.index(after: question)...].split(separator: "&", omittingEmptySubsequences: false)
            .map { pair in pair.contains("=") ? pair.prefix { $0 != "=" } + "=…" : pair }
        return target[..<question] + "?" + names.joined(separator: "&")
    }
}

func asciiCaseInsensitiveEquals(_ text: String, _ lowercase: StaticString) -> Bool {
    let expected = UnsafeBufferPointer(start: lowercase.utf8Start, count: lowercase.utf8CodeUnitCount)
    guard text.utf8.count == expected.count else { return false }
    return text.utf8.elementsEqual(expected) { byte, lower in
        (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte) == lower
    }
}
