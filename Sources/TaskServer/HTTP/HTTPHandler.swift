import Logging
import Synchronization
import NIOCore
import NIOHTTP1
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

    private enum State {
        case idle
        case receiving(HTTPRequestHead, ByteBuffer?)
        case responding
        case closing
    }

    private let router: Router
    private let limits: HTTPLimits
    private let logger: Logger
    private let requestIDs: RequestIDGenerator
    private let activity: ServerActivity
    private let onResponse: @Sendable (Request?, Response, _ durationNanoseconds: UInt64) -> Void
    private var state = State.idle
    /// When the connection is closed unless a request arrives or completes (nil while answering).
    private var deadline: NIODeadline?
    private var watchdog: RepeatedTask?
    private var requestStart: UInt64 = 0
    /// Whether this connection's request counts in `activity.inFlight`.
    private var isInFlight = false

    init(
        router: Router,
        limits: HTTPLimits,
        logger: Logger,
        requestIDs: RequestIDGenerator,
        activity: ServerActivity,
        onResponse: @escaping @Sendable (Request?, Response, UInt64) -> Void
    ) {
        self.activity = activity
        self.router = router
        self.limits = limits
        self.logger = logger
        self.requestIDs = requestIDs
        self.onResponse = onResponse
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.startWatchdog(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.startWatchdog(context: context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
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

    /// Closes the connection unless the deadline is moved or cleared in time.
    ///
    /// Setting a deadline is a clock read: one repeating check per connection (`startWatchdog`)
    /// enforces it, instead of scheduling and cancelling a timer task twice per request, which
    /// cost ~4% of a request's CPU.
    private func closeUnlessActive(within amount: TimeAmount) {
        self.deadline = .now() + amount
    }

    private func startWatchdog(context: ChannelHandlerContext) {
        guard self.watchdog == nil else { return }
        self.closeUnlessActive(within: self.limits.requestHeadTimeout)
        let limits = self.limits
        // A timeout fires up to one interval late: a tenth of the shortest one, 10 ms to 1 s.
        let shortest = min(limits.requestHeadTimeout, limits.requestBodyTimeout, limits.idleTimeout)
        let interval = TimeAmount.nanoseconds(min(max(shortest.nanoseconds / 10, 10_000_000), 1_000_000_000))
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let channel = context.channel
        self.watchdog = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { task in
            guard let deadline = handler.value.deadline, deadline <= .now() else { return }
            task.cancel()
            channel.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            guard case .idle = self.state else { return }
            self.requestStart = monotonicNanoseconds()
            if head.uri.utf8.count > self.limits.maxURIBytes {
                self.fail(context: context, HTTPProblem(.uriTooLong, code: "uri.tooLong", detail: "the request target is longer than \(self.limits.maxURIBytes) bytes"), head: head)
                return
            }
            // One pass over the headers for the framing ones.
            var length: String?
            var lengthCount = 0
            var hasTransferEncoding = false
            var expectsContinue = false
            for header in head.headers {
                if asciiCaseInsensitiveEquals(header.name, "content-length") {
                    length = header.value
                    lengthCount += 1
                } else if asciiCaseInsensitiveEquals(header.name, "transfer-encoding") {
                    hasTransferEncoding = true
                } else if asciiCaseInsensitiveEquals(header.name, "expect") {
                    expectsContinue = expectsContinue || asciiCaseInsensitiveEquals(header.value, "100-continue")
                }
            }
            if lengthCount > 1 || (lengthCount == 1 && hasTransferEncoding) {
                self.fail(context: context, HTTPProblem(.badRequest, code: "http.malformed", detail: "conflicting Content-Length / Transfer-Encoding headers"), head: head)
                return
            }
            if let length {
                guard let value = Int(length), value >= 0 else {
                    self.fail(context: context, HTTPProblem(.badRequest, code: "http.malformed", detail: "invalid Content-Length"), head: head)
                    return
                }
                if value > self.limits.maxBodyBytes {
                    self.fail(context: context, Self.tooLarge(self.limits.maxBodyBytes), head: head)
                    return
                }
            }
            self.state = .receiving(head, nil)
            self.closeUnlessActive(within: self.limits.requestBodyTimeout)
            // `Expect: 100-continue` (curl sends it with bodies over 1 KiB): the body is acceptable
            // so far, so ask for it now rather than let the client wait (RFC 9110 §10.1.1).
            if expectsContinue, head.version.major == 1, head.version.minor >= 1 {
                context.writeAndFlush(self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .continue))), promise: nil)
            }
        case .body(var chunk):
            guard case .receiving(let head, var body) = self.state else { return }
            let size = (body?.readableBytes ?? 0) + chunk.readableBytes
            if size > self.limits.maxBodyBytes {
                self.fail(context: context, Self.tooLarge(self.limits.maxBodyBytes), head: head)
                return
            }
            self.state = .idle  // drop the reference so `body` grows in place
            if body == nil {
                body = chunk
            } else {
                body!.writeBuffer(&chunk)
            }
            self.state = .receiving(head, body)
        case .end:
            guard case .receiving(let head, let body) = self.state else { return }
            self.deadline = nil
            self.state = .responding
            self.beginRequest()
            self.dispatch(context: context, head: head, body: body)
        }
    }

    private static func tooLarge(_ limit: Int) -> HTTPProblem {
        HTTPProblem(.payloadTooLarge, code: "body.tooLarge", detail: "the request body is larger than \(limit) bytes")
    }

    // MARK: - Dispatch

    private func dispatch(context: ChannelHandlerContext, head: HTTPRequestHead, body: ByteBuffer?) {
        let requestID = head.headers.first(name: "x-request-id").flatMap(RequestIDGenerator.accepting) ?? self.requestIDs.next()
        guard let (segments, query) = parseTarget(head.uri) else {
            self.respond(context: context, head: head, request: nil, HTTPProblem(.badRequest, code: "query.invalid", detail: "the request target is not valid percent-encoded UTF-8").response, requestID: requestID)
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
            requestID: requestID
        )
        let future: Future<Response>
        switch self.router.match(head.method, segments) {
        case .notFound:
            future = Future(value: HTTPProblem.notFound("route.notFound", "no route for \(request.path)").response)
        case .methodNotAllowed(let allowed, let template):
            request.route = template
            var headers = HTTPHeaders()
            headers.add(name: "allow", value: allowed.joined(separator: ", "))
            future = Future(
                value: HTTPProblem(.methodNotAllowed, code: "method.notAllowed", detail: "\(head.method.rawValue) is not allowed here", headers: headers).response
            )
        case .handler(let handler, let parameters, let template):
            request.parameters = parameters
            request.route = template
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
            let target = head.uri.utf8.count <= 200 ? head.uri : String(head.uri.prefix(200))
            logger.debug("request received", metadata: ["http.method": "\(head.method.rawValue)", "http.target": "\(target)"])
        }
        if let outcome = future.outcome {
            self.respond(context: context, head: head, request: finalRequest, Self.response(outcome, requestID: requestID, logger: self.logger), requestID: requestID)
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
            return HTTPProblem(.serviceUnavailable, code: "server.draining", detail: "the request was cancelled because the server is stopping").response
        }
    }

    // MARK: - Writing

    private func fail(context: ChannelHandlerContext, _ problem: HTTPProblem, head: HTTPRequestHead?) {
        // After a framing or size error the rest of the stream cannot be trusted: answer, then close.
        self.state = .closing
        self.deadline = nil
        self.endRequest()
        var response = problem.response
        response.headers.replaceOrAdd(name: "connection", value: "close")
        self.write(context: context, response, keepAlive: false, head: head, requestID: self.requestIDs.next())
        self.onResponse(nil, response, monotonicNanoseconds() &- self.requestStart)
    }

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead, request: Request?, _ response: Response, requestID: String) {
        self.endRequest()
        guard case .responding = self.state, context.channel.isActive else { return }
        // A stopping server closes each connection after its answer, so keep-alive clients move on.
        let keepAlive = head.isKeepAlive && !self.activity.isDraining.load(ordering: .relaxed)
        let duration = monotonicNanoseconds() &- self.requestStart
        // Settle the state before writing: writing the response's end makes the pipelining handler
        // deliver the next buffered request at once (re-entrantly, inside `write`), and that request
        // must find this handler idle, or it is dropped and the connection hangs.
        if keepAlive {
            self.state = .idle
            self.closeUnlessActive(within: self.limits.idleTimeout)
        } else {
            self.state = .closing
        }
        self.write(context: context, response, keepAlive: keepAlive, head: head, requestID: requestID)
        self.onResponse(request, response, duration)
        if self.logger.logLevel <= .debug {
            // Headers (Authorization among them) and bodies are never logged.
            var logger = self.logger
            logger[metadataKey: "http.request.id"] = .string(requestID)
            logger.debug(
                "request answered",
                metadata: ["http.status": "\(response.status.code)", "http.duration_ms": "\(Double(duration / 1000) / 1000)"]
            )
        }
    }

    private func write(context: ChannelHandlerContext, _ response: Response, keepAlive: Bool, head: HTTPRequestHead?, requestID: String) {
        var headers = response.headers
        // Handlers never set these two (a response's length and id are the server's business).
        headers.add(name: "content-length", value: String(response.body.count))
        headers.add(name: "x-request-id", value: requestID)
        if !keepAlive { headers.replaceOrAdd(name: "connection", value: "close") }
        let version = head?.version ?? .http1_1
        let responseHead = HTTPResponseHead(version: version, status: response.status, headers: headers)
        context.write(self.wrapOutboundOut(.head(responseHead)), promise: nil)
        if head?.method != .HEAD, !response.body.isEmpty {
            var buffer = context.channel.allocator.buffer(capacity: response.body.count)
            buffer.writeBytes(response.body)
            context.write(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        }
        if keepAlive {
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        } else {
            let channel = context.channel
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        }
    }

    // MARK: - Errors and idleness

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let parserError = error as? HTTPParserError {
            // Garbage, oversized headers, bad framing: answer with a problem once, then close.
            if case .closing = self.state {
                context.close(promise: nil)
                return
            }
            let problem: HTTPProblem
            switch parserError {
            case .headerOverflow:
                problem = HTTPProblem(.init(statusCode: 431), code: "headers.tooLarge", detail: "the request headers are too large")
            default:
                problem = HTTPProblem(.badRequest, code: "http.malformed", detail: "the request is not valid HTTP/1.1 (\(parserError))")
            }
            if case .responding = self.state {
                context.close(promise: nil)
                return
            }
            self.fail(context: context, problem, head: nil)
            return
        }
        context.close(promise: nil)
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
func asciiCaseInsensitiveEquals(_ text: String, _ lowercase: StaticString) -> Bool {
    let expected = UnsafeBufferPointer(start: lowercase.utf8Start, count: lowercase.utf8CodeUnitCount)
    guard text.utf8.count == expected.count else { return false }
    return text.utf8.elementsEqual(expected) { byte, lower in
        (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte) == lower
    }
}
