import NIOCore
import NIOHTTP1

/// The logic of one HTTP/1.1 connection as a value: `HTTPHandler` feeds it what the channel reads
/// and what time it is, and carries out the action it returns (answer, route, close).
///
/// It does no I/O and reads no clock — every deadline is computed from a `now` the caller passes
/// (the event loop's), so it is tested without sockets or sleeps (`HTTPConnectionStateMachineTests`),
/// as async-http-client's `HTTP1ConnectionStateMachine` and Hummingbird's connection handler are.
struct HTTPConnectionStateMachine {
    enum State {
        /// Waiting for a request head: a new connection, or a kept-alive one after an answer.
        case idle
        /// A head arrived and its body is arriving.
        case receiving(HTTPRequestHead, ByteBuffer?)
        /// The request was routed; its answer is awaited.
        case responding
        /// The connection ends: nothing more is read or answered.
        case closing
    }

    enum Action {
        /// Nothing to do.
        case none
        /// Answer `problem` with `connection: close`, then close: after a framing or size error the
        /// rest of the stream cannot be trusted.
        case answerAndClose(HTTPProblem, head: HTTPRequestHead?)
        /// Send an interim `100 Continue`: the client waits for it before sending the body.
        case sendContinue(HTTPRequestHead)
        /// The request is complete: route it.
        case route(HTTPRequestHead, body: ByteBuffer?)
        /// Close without answering.
        case close
    }

    let limits: HTTPLimits
    private(set) var state = State.idle
    /// When the connection is closed unless a request arrives or completes; nil while answering.
    private(set) var deadline: NIODeadline?

    init(limits: HTTPLimits) {
        self.limits = limits
    }

    /// The connection is open: it must send a complete request head within `requestHeadTimeout`.
    mutating func connectionStarted(now: NIODeadline) {
        self.deadline = now + self.limits.requestHeadTimeout
    }

    /// Whether the connection has outstayed its deadline (checked by the handler's watchdog).
    func isExpired(at now: NIODeadline) -> Bool {
        guard let deadline = self.deadline else { return false }
        return deadline <= now
    }

    // MARK: - Reading

    mutating func receivedHead(_ head: HTTPRequestHead, now: NIODeadline) -> Action {
        guard case .idle = self.state else { return .none }
        if head.uri.utf8.count > self.limits.maxURIBytes {
            return self.answerAndClose(
                HTTPProblem(
                    .uriTooLong,
                    code: "uri.tooLong",
                    detail: "the request target is longer than \(self.limits.maxURIBytes) bytes"
                ),
                head: head
            )
        }
        // One pass over the headers for the framing ones (no `lowercased()` per header).
        var length: String?
        var lengthCount = 0
        var hasTransferEncoding = false
        /// The transfer codings, in order (all `Transfer-Encoding` headers together).
        var codings: [Substring] = []
        var expectsContinue = false
        for header in head.headers {
            if asciiCaseInsensitiveEquals(header.name, "content-length") {
                length = header.value
                lengthCount += 1
            } else if asciiCaseInsensitiveEquals(header.name, "transfer-encoding") {
                hasTransferEncoding = true
                for coding in header.value.split(separator: ",") where !coding.trimmingSpaces.isEmpty {
                    codings.append(coding.trimmingSpaces)
                }
            } else if asciiCaseInsensitiveEquals(header.name, "expect") {
                expectsContinue = expectsContinue || asciiCaseInsensitiveEquals(header.value, "100-continue")
            }
        }
        if lengthCount > 1 || (lengthCount == 1 && hasTransferEncoding) {
            return self.answerAndClose(
                HTTPProblem(
                    .badRequest,
                    code: "http.malformed",
                    detail: "conflicting Content-Length / Transfer-Encoding headers"
                ),
                head: head
            )
        }
        // RFC 9112 §6.3: a request whose final transfer coding is not `chunked` cannot be framed (400,
        // below); §6.1: one that is, over a coding the server does not implement, is a 501.
        if let other = codings.dropLast().first(where: { !asciiCaseInsensitiveEquals(String($0), "chunked") }),
            let last = codings.last, asciiCaseInsensitiveEquals(String(last), "chunked")
        {
            return self.answerAndClose(
                HTTPProblem(
                    .notImplemented,
                    code: "http.transferCodingNotImplemented",
                    detail:
                        "the transfer coding \"\(other.prefix(40))\" is not implemented; send the body as is or chunked"
                ),
                head: head
            )
        }
        if let length {
            guard let value = Int(length), value >= 0 else {
                return self.answerAndClose(
                    HTTPProblem(.badRequest, code: "http.malformed", detail: "invalid Content-Length"),
                    head: head
                )
            }
            if value > self.limits.maxBodyBytes { return self.answerAndClose(self.tooLarge, head: head) }
        }
        self.state = .receiving(head, nil)
        self.deadline = now + self.limits.requestBodyTimeout
        // `Expect: 100-continue` (curl sends it with bodies over 1 KiB): the body is acceptable so
        // far, so ask for it now rather than let the client wait (RFC 9110 §10.1.1).
        if expectsContinue, head.version.major == 1, head.version.minor >= 1 { return .sendContinue(head) }
        return .none
    }

    mutating func receivedBody(_ chunk: inout ByteBuffer) -> Action {
        guard case .receiving(let head, var body) = self.state else { return .none }
        let size = (body?.readableBytes ?? 0) + chunk.readableBytes
        if size > self.limits.maxBodyBytes { return self.answerAndClose(self.tooLarge, head: head) }
        self.state = .closing  // drop the state's reference, so that `body` grows in place
        if body == nil {
            body = chunk
        } else {
            body!.writeBuffer(&chunk)
        }
        self.state = .receiving(head, body)
        return .none
    }

    mutating func receivedEnd() -> Action {
        guard case .receiving(let head, let body) = self.state else { return .none }
        self.deadline = nil
        self.state = .responding
        return .route(head, body: body)
    }

    /// The HTTP decoder failed on garbage, oversized headers or bad framing.
    mutating func parserFailed(_ error: HTTPParserError) -> Action {
        switch self.state {
        case .closing, .responding:
            // Already ending, or an answer is on its way: the stream is beyond repair either way.
            return .close
        case .idle, .receiving:
            switch error {
            case .headerOverflow:
                return self.answerAndClose(
                    HTTPProblem(
                        .init(statusCode: 431),
                        code: "headers.tooLarge",
                        detail: "the request headers are too large"
                    ),
                    head: nil
                )
            default:
                return self.answerAndClose(
                    HTTPProblem(
                        .badRequest,
                        code: "http.malformed",
                        detail: "the request is not valid HTTP/1.1 (\(error))"
                    ),
                    head: nil
                )
            }
        }
    }

    // MARK: - Answering

    /// The routed request's answer is ready. Returns whether the connection stays open after it,
    /// or nil when there is nothing to answer (the connection is already ending).
    ///
    /// The state is settled before the handler writes: writing an answer's end makes the pipelining
    /// handler deliver the next buffered request at once (re-entrantly), and that request must find
    /// the connection idle.
    mutating func answerReady(keepAliveRequested: Bool, isDraining: Bool, now: NIODeadline) -> Bool? {
        guard case .responding = self.state else { return nil }
        // A stopping server closes each connection after its answer, so keep-alive clients move on.
        if keepAliveRequested, !isDraining {
            self.state = .idle
            self.deadline = now + self.limits.idleTimeout
            return true
        }
        self.state = .closing
        return false
    }

    // MARK: - Helpers

    private var tooLarge: HTTPProblem {
        HTTPProblem(
            .payloadTooLarge,
            code: "body.tooLarge",
            detail: "the request body is larger than \(self.limits.maxBodyBytes) bytes"
        )
    }

    private mutating func answerAndClose(_ problem: HTTPProblem, head: HTTPRequestHead?) -> Action {
        self.state = .closing
        self.deadline = nil
        return .answerAndClose(problem, head: head)
    }
}
