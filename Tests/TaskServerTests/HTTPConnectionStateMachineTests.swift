import NIOCore
import NIOHTTP1
import Testing

@testable import TaskServer

/// The connection's logic alone: events in, actions out, time passed by hand.
struct HTTPConnectionStateMachineTests {
    static let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)

    static func machine(_ configure: (inout HTTPLimits) -> Void = { _ in }) -> HTTPConnectionStateMachine {
        var limits = HTTPLimits()
        configure(&limits)
        var machine = HTTPConnectionStateMachine(limits: limits)
        machine.connectionStarted(now: t0)
        return machine
    }

    static func head(
        _ method: HTTPMethod = .POST,
        _ uri: String = "/v1/jobs",
        _ headers: [(String, String)] = []
    ) -> HTTPRequestHead {
        HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: HTTPHeaders(headers))
    }

    static func problemCode(_ action: HTTPConnectionStateMachine.Action) -> String? {
        if case .answerAndClose(let problem, _) = action { return problem.code }
        return nil
    }

    @Test func aRequestIsRoutedWithItsWholeBody() {
        var machine = Self.machine()
        guard case .none = machine.receivedHead(Self.head(), now: Self.t0) else {
            Issue.record("a plain head needs no action")
            return
        }
        for part in ["{\"a\":", "1}"] {
            var chunk = ByteBuffer(string: part)
            guard case .none = machine.receivedBody(&chunk) else {
                Issue.record("a body part within the limit needs no action")
                return
            }
        }
        guard case .route(let head, let body) = machine.receivedEnd() else {
            Issue.record("the end of a request routes it")
            return
        }
        #expect(head.uri == "/v1/jobs")
        #expect(body.map { String(buffer: $0) } == "{\"a\":1}")
        #expect(machine.deadline == nil, "no timeout runs while the request is answered")
    }

    @Test func theHeadTimeoutRunsFromTheConnectionsStart() {
        let machine = Self.machine { $0.requestHeadTimeout = .seconds(10) }
        #expect(!machine.isExpired(at: Self.t0 + .seconds(9)))
        #expect(machine.isExpired(at: Self.t0 + .seconds(10)))
    }

    @Test func aHeadMovesTheDeadlineToTheBodyTimeout() {
        var machine = Self.machine {
            $0.requestHeadTimeout = .seconds(10)
            $0.requestBodyTimeout = .seconds(30)
        }
        _ = machine.receivedHead(Self.head(), now: Self.t0 + .seconds(5))
        #expect(!machine.isExpired(at: Self.t0 + .seconds(34)))
        #expect(machine.isExpired(at: Self.t0 + .seconds(35)))
    }

    @Test func aKeptAliveConnectionGetsTheIdleTimeoutAfterItsAnswer() {
        var machine = Self.machine { $0.idleTimeout = .seconds(60) }
        _ = machine.receivedHead(Self.head(.GET, "/healthz"), now: Self.t0)
        _ = machine.receivedEnd()
        #expect(!machine.isExpired(at: Self.t0 + .seconds(3600)), "an answer may take as long as it takes")
        #expect(machine.answerReady(keepAliveRequested: true, isDraining: false, now: Self.t0 + .seconds(1)) == true)
        guard case .idle = machine.state else {
            Issue.record("the connection is idle once its answer is settled")
            return
        }
        #expect(!machine.isExpired(at: Self.t0 + .seconds(60)))
        #expect(machine.isExpired(at: Self.t0 + .seconds(61)))
    }

    @Test func aDrainingServerClosesAfterTheAnswerEvenWithKeepAlive() {
        var machine = Self.machine()
        _ = machine.receivedHead(Self.head(.GET, "/healthz"), now: Self.t0)
        _ = machine.receivedEnd()
        #expect(machine.answerReady(keepAliveRequested: true, isDraining: true, now: Self.t0) == false)
        #expect(
            machine.answerReady(keepAliveRequested: true, isDraining: false, now: Self.t0) == nil,
            "one answer per request"
        )
    }

    @Test func anAnswerWithNoRequestInFlightIsDropped() {
        var machine = Self.machine()
        #expect(machine.answerReady(keepAliveRequested: true, isDraining: false, now: Self.t0) == nil)
    }

    @Test func aTargetOverTheLimitIs414AndCloses() {
        var machine = Self.machine { $0.maxURIBytes = 16 }
        #expect(
            Self.problemCode(
                machine.receivedHead(Self.head(.GET, "/" + String(repeating: "a", count: 16)), now: Self.t0)
            ) == "uri.tooLong"
        )
        guard case .closing = machine.state else {
            Issue.record("the connection ends after a framing error")
            return
        }
        #expect(machine.deadline == nil)
        guard case .none = machine.receivedEnd() else {
            Issue.record("nothing is routed once the connection ends")
            return
        }
    }

    @Test(arguments: [
        ([("content-length", "5"), ("Content-Length", "5")], "http.malformed"),
        ([("content-length", "5"), ("transfer-encoding", "chunked")], "http.malformed"),
        ([("CONTENT-LENGTH", "-1")], "http.malformed"),
        ([("content-length", "abc")], "http.malformed"),
        ([("content-length", "2000000")], "body.tooLarge"),
        // RFC 9112 §6.1: a transfer coding the server does not implement is a 501, not a body.
        ([("transfer-encoding", "gzip, chunked")], "http.transferCodingNotImplemented"),
        ([("transfer-encoding", "br"), ("Transfer-Encoding", "chunked")], "http.transferCodingNotImplemented"),
    ])
    func badFramingIsAnsweredAndCloses(headers: [(String, String)], code: String) {
        var machine = Self.machine()
        #expect(Self.problemCode(machine.receivedHead(Self.head(.POST, "/v1/jobs", headers), now: Self.t0)) == code)
    }

    @Test func aBodyGrowingPastTheLimitIs413() {
        var machine = Self.machine { $0.maxBodyBytes = 10 }
        _ = machine.receivedHead(Self.head(.POST, "/v1/jobs", [("transfer-encoding", "chunked")]), now: Self.t0)
        var first = ByteBuffer(string: "123456")
        guard case .none = machine.receivedBody(&first) else {
            Issue.record("6 bytes fit in 10")
            return
        }
        var second = ByteBuffer(string: "78901")
        #expect(Self.problemCode(machine.receivedBody(&second)) == "body.tooLarge")
    }

    @Test func expect100ContinueAsksForTheBodyOnlyOverHTTP11() {
        var machine = Self.machine()
        guard
            case .sendContinue = machine.receivedHead(
                Self.head(.POST, "/v1/jobs", [("Expect", "100-Continue")]),
                now: Self.t0
            )
        else {
            Issue.record("HTTP/1.1 with Expect: 100-continue gets an interim answer")
            return
        }
        var old = Self.machine()
        let head = HTTPRequestHead(
            version: .http1_0,
            method: .POST,
            uri: "/v1/jobs",
            headers: ["expect": "100-continue"]
        )
        guard case .none = old.receivedHead(head, now: Self.t0) else {
            Issue.record("HTTP/1.0 has no interim answers")
            return
        }
    }

    @Test func parserErrorsAreAnsweredOnceThenClose() {
        var machine = Self.machine()
        #expect(Self.problemCode(machine.parserFailed(.headerOverflow)) == "headers.tooLarge")
        guard case .close = machine.parserFailed(.invalidVersion) else {
            Issue.record("a second error closes without answering again")
            return
        }
        var other = Self.machine()
        #expect(Self.problemCode(other.parserFailed(.invalidVersion)) == "http.malformed")
    }

    @Test func aParserErrorWhileAnsweringClosesWithoutASecondAnswer() {
        var machine = Self.machine()
        _ = machine.receivedHead(Self.head(.GET, "/healthz"), now: Self.t0)
        _ = machine.receivedEnd()
        guard case .close = machine.parserFailed(.invalidVersion) else {
            Issue.record("the routed request's answer is the only one")
            return
        }
    }

    @Test func aHeadWhileAnotherRequestIsAnsweredIsIgnored() {
        // The pipelining handler holds further requests back; should one slip through, it is not
        // mixed into the current one.
        var machine = Self.machine()
        _ = machine.receivedHead(Self.head(.GET, "/a"), now: Self.t0)
        _ = machine.receivedEnd()
        guard case .none = machine.receivedHead(Self.head(.GET, "/b"), now: Self.t0) else {
            Issue.record("ignored")
            return
        }
    }
}
