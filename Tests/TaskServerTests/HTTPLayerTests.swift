import InMemoryLogging
import Logging
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The HTTP/1.1 layer: routing errors, limits, framing, keep-alive and pipelining, and abuse. After
/// every abuse the server still answers `/healthz`.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct HTTPLayerTests {
    /// Sends `bytes` on a raw connection and returns the first response (nil when the server
    /// closed without answering) and whether the server then closed the connection.
    static func exchange(
        _ server: TestServer,
        _ bytes: [UInt8],
        isHead: Bool = false
    ) async throws -> (HTTPResponse?, closed: Bool) {
        try await server.raw(receiveTimeout: 10) { connection in
            try? connection.send(bytes)
            let response = try connection.readResponse(isHead: isHead)
            return (response, connection.waitForClose())
        }
    }

    static func exchange(_ server: TestServer, _ text: String) async throws -> (HTTPResponse?, closed: Bool) {
        try await self.exchange(server, Array(text.utf8))
    }

    // MARK: - Routing

    @Test func anUnknownPathIs404RouteNotFound() async throws {
        try await withServer { server in
            expectProblem(try await server.get("/nope"), 404, "route.notFound", detail: "no route for /nope")
            expectProblem(try await server.get("/v1"), 404, "route.notFound", detail: "no route for /v1")
            expectProblem(
                try await server.get("/v1/jobs/a/b/c/d/e"),
                404,
                "route.notFound",
                detail: "no route for /v1/jobs/a/b/c/d/e"
            )
            expectProblem(
                try await server.post("/v2/jobs", json: Jobs.value(1)),
                404,
                "route.notFound",
                detail: "no route for /v2/jobs"
            )
            expectProblem(try await server.get("/"), 404, "route.notFound", detail: "no route for /")
        }
    }

    @Test(arguments: [
        ("PUT", "/v1/jobs", "GET, HEAD, POST"),
        ("PATCH", "/v1/jobs/j1", "DELETE, GET, HEAD"),
        ("POST", "/v1/jobs/j1", "DELETE, GET, HEAD"),
        ("DELETE", "/v1/jobs", "GET, HEAD, POST"),
        ("GET", "/v1/jobs/j1/cancel", "POST"),
        ("PUT", "/v1/jobs/j1/tasks/t1", "GET, HEAD"),
        ("GET", "/v1/jobs/j1/tasks/t1/complete", "POST"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/openapi.yaml", "GET, HEAD"),
        ("TRACE", "/v1/jobs", "GET, HEAD, POST"),
        ("OPTIONS", "/v1/jobs", "GET, HEAD, POST"),
        ("TRACE", "/healthz", "GET, HEAD"),
    ])
    func anUndeclaredMethodIs405WithAllow(_ method: String, _ path: String, _ allow: String) async throws {
        try await withServer { server in
            let response = try await server.request(method, path)
            expectProblem(response, 405, "method.notAllowed", detail: "\(method) is not allowed here")
            #expect(response.header("allow") == allow)
            #expect(try await server.isHealthy())
        }
    }

    @Test func headIsAnsweredAsGetWithoutABodyOnTheSameConnection() async throws {
        try await withServer { server in
            let (response, next) = try await server.raw { connection in
                try connection.send("HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                let head = try connection.readResponse(isHead: true)
                let next = try connection.readResponse()
                return (head, next)
            }
            #expect(response?.status == 200)
            #expect(response?.body.isEmpty == true)
            #expect(response?.header("content-length") == next?.header("content-length"))
            #expect(next?.status == 200 && next?.json == ["status": "ok"], "the connection goes on after it")
        }
    }

    @Test func everyResponseCarriesARequestID() async throws {
        try await withServer { server in
            let mine = try await server.get("/healthz", headers: [("X-Request-Id", "trace-42")])
            #expect(mine.header("x-request-id") == "trace-42")
            let generated = try await server.get("/healthz")
            let id = try #require(generated.header("x-request-id"))
            #expect(!id.isEmpty)
            #expect(try await server.get("/healthz").header("x-request-id") != id)
            let tooLong = try await server.get(
                "/healthz",
                headers: [("X-Request-Id", String(repeating: "r", count: 65))]
            )
            #expect(tooLong.header("x-request-id") != String(repeating: "r", count: 65))
            #expect(tooLong.header("x-request-id")?.isEmpty == false)
            // Spaces or control characters could forge log lines: such ids are replaced too.
            let spaced = try await server.get("/healthz", headers: [("X-Request-Id", "a b")])
            #expect(spaced.header("x-request-id") != "a b")
            #expect(spaced.header("x-request-id")?.isEmpty == false)
        }
    }

    @Test func aTargetWithABadPercentEscapeIs400() async throws {
        try await withServer { server in
            expectProblem(
                try await server.get("/v1/jobs/%zz"),
                400,
                "query.invalid",
                detail: "the request target is not valid percent-encoded UTF-8"
            )
            expectProblem(
                try await server.get("/v1/jobs/%C3%28"),
                400,
                "query.invalid",
                detail: "the request target is not valid percent-encoded UTF-8"
            )
            #expect(try await server.isHealthy())
        }
    }

    @Test func anAbsoluteFormTargetIsRoutedByItsPath() async throws {
        try await withServer { server in
            let (response, _) = try await Self.exchange(
                server,
                "GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
            let answer = try #require(response)
            #expect(answer.status == 200)
            #expect(answer.json == ["status": "ok"])
        }
    }

    // MARK: - Limits

    @Test func aTargetOverTheLimitIs414() async throws {
        try await withServer { server in
            let target = "/v1/jobs?x=" + String(repeating: "a", count: 9000)
            let (response, closed) = try await Self.exchange(server, "GET \(target) HTTP/1.1\r\nHost: x\r\n\r\n")
            let answer = try #require(response)
            expectProblem(answer, 414, "uri.tooLong", detail: "the request target is longer than 8192 bytes")
            #expect(answer.header("connection") == "close")
            #expect(closed)
            #expect(try await server.isHealthy())
            // Just under the limit is fine.
            let fits = "/v1/jobs?x=" + String(repeating: "a", count: 8000)
            #expect(try await server.get(fits).status == 200)
        }
    }

    @Test func aDeclaredBodyOverTheLimitIs413BeforeTheBodyIsSent() async throws {
        try await withServer({ $0.maxBodyBytes = 4096 }) { server in
            // Only the head is sent: the answer comes without waiting for 10 MB that never arrive.
            let head =
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
            let (response, closed) = try await Self.exchange(server, head)
            let answer = try #require(response)
            expectProblem(answer, 413, "body.tooLarge", detail: "the request body is larger than 4096 bytes")
            #expect(answer.header("connection") == "close")
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    @Test func aWholeBodyOverTheLimitStillGetsIts413NotAReset() async throws {
        try await withServer({ $0.maxBodyBytes = 4096 }) { server in
            // The client sends all 200 KB before reading: the server answers after 4 KB and must
            // drain the rest, or closing with unread bytes resets the connection under the answer.
            let body = String(repeating: "x", count: 200_000)
            let text =
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
                + body
            let response = try await server.raw { connection -> HTTPResponse? in
                try connection.send(text)
                return try connection.readResponse()
            }
            expectProblem(try #require(response), 413, "body.tooLarge")
            #expect(try await server.isHealthy())
        }
    }

    @Test func aChunkedBodyOverTheLimitIs413WhileItStreams() async throws {
        try await withServer({ $0.maxBodyBytes = 4096 }) { server in
            let chunk = String(repeating: "x", count: 3000)
            let text =
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + "bb8\r\n\(chunk)\r\nbb8\r\n\(chunk)\r\n"  // 6,000 bytes and no last chunk
            let (response, closed) = try await Self.exchange(server, text)
            let answer = try #require(response)
            expectProblem(answer, 413, "body.tooLarge", detail: "the request body is larger than 4096 bytes")
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    @Test func aChunkedBodyWithinTheLimitIsAccepted() async throws {
        try await withServer { server in
            let body = Jobs.value(7).jsonString
            let half = body.utf8.count / 2
            let first = String(body.prefix(half))
            let second = String(body.dropFirst(half))
            let text =
                "POST /v1/jobs?waitMs=10000 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + String(first.utf8.count, radix: 16) + "\r\n" + first + "\r\n"
                + String(second.utf8.count, radix: 16) + "\r\n" + second + "\r\n0\r\n\r\n"
            let response = try await server.raw { connection in
                try connection.send(text)
                return try connection.readResponse()
            }
            #expect(response?.status == 201)
            #expect(response?.json["result"] == 7)
        }
    }

    /// curl sends `Expect: 100-continue` with bodies over 1 KiB and waits a second for the interim
    /// answer before sending the body anyway (RFC 9110 §10.1.1).
    @Test func expect100ContinueIsAnsweredBeforeTheBodyIsSent() async throws {
        try await withServer { server in
            let body = Jobs.value(.string(String(repeating: "x", count: 2000))).jsonBytes
            let head =
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nExpect: 100-continue\r\n\r\n"
            let (interim, final) = try await server.raw(receiveTimeout: 2) { connection in
                try connection.send(head)
                let interim = try? connection.readResponse()
                try connection.send(body)
                let final = interim?.status == 100 || interim == nil ? try connection.readResponse() : interim
                return (interim?.status, final?.status)
            }
            #expect(interim == 100)
            #expect(final == 201)
        }
    }

    @Test(arguments: ["99999999999999999999999999", "-5", "abc", "1e3", "12, 12"])
    func anUnusableContentLengthIs400(_ length: String) async throws {
        try await withServer { server in
            let text =
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(length)\r\n\r\n{}"
            let (response, closed) = try await Self.exchange(server, text)
            let answer = try #require(response)
            #expect(answer.status == 400 || answer.status == 413, "\(answer)")
            #expect(answer.contentType == "application/problem+json")
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    @Test func anAbsurdButWellFormedContentLengthIs413() async throws {
        try await withServer { server in
            let text =
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9000000000000\r\n\r\n{}"
            let (response, closed) = try await Self.exchange(server, text)
            expectProblem(
                try #require(response),
                413,
                "body.tooLarge",
                detail: "the request body is larger than 1048576 bytes"
            )
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    @Test(arguments: [
        "Content-Length: 5\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 5",
        "Content-Length: 5\r\nContent-Length: 6",
        "Transfer-Encoding: gzip",
    ])
    func conflictingFramingIs400AndTheConnectionCloses(_ framing: String) async throws {
        try await withServer { server in
            let text =
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\(framing)\r\n\r\n0\r\n\r\n"
            let (response, closed) = try await Self.exchange(server, text)
            let answer = try #require(response)
            #expect(answer.status == 400, "\(answer)")
            #expect(answer.contentType == "application/problem+json")
            #expect(answer.json["code"] == "http.malformed")
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    @Test func hugeHeadersAreRefusedAndTheConnectionCloses() async throws {
        try await withServer { server in
            let text =
                "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "b", count: 200_000) + "\r\n\r\n"
            let (response, closed) = try await Self.exchange(server, text)
            expectProblem(try #require(response), 431, "headers.tooLarge", detail: "the request headers are too large")
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    @Test func manyHeadersAreRefusedAndTheConnectionCloses() async throws {
        try await withServer { server in
            // 20,000 short fields: over the 80 KiB the decoder allows for all of a request's headers.
            var text = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
            for n in 0..<20_000 { text += "X-H\(n): v\r\n" }
            text += "\r\n"
            let (response, closed) = try await Self.exchange(server, text)
            expectProblem(try #require(response), 431, "headers.tooLarge", detail: "the request headers are too large")
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    // MARK: - Garbage

    @Test(arguments: [
        "\u{0}\u{1}\u{2}\u{3} garbage\r\n\r\n",
        "GET\r\n\r\n",
        "HELLO /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost x\r\n\r\n",
        "GET /he lthz HTTP/1.1\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\u{7F}\r\n\r\n",
    ])
    func garbageIsAnswered400OrClosedAndTheServerCarriesOn(_ garbage: String) async throws {
        try await withServer { server in
            let (response, closed) = try await Self.exchange(server, garbage)
            if let answer = response {
                #expect(answer.status == 400, "\(answer)")
                #expect(answer.contentType == "application/problem+json")
                #expect(answer.json["code"] == "http.malformed")
            }
            #expect(closed)
            #expect(try await server.isHealthy())
        }
    }

    @Test func randomBinaryNoiseNeverCrashesTheServer() async throws {
        try await withServer { server in
            var generator = SplitMix64(seed: 0x5EED)
            for _ in 0..<50 {
                let noise = (0..<Int(generator.next() % 4096 + 1)).map { _ in
                    UInt8(truncatingIfNeeded: generator.next())
                }
                let (response, _) = try await Self.exchange(server, noise)
                if let answer = response {
                    #expect(
                        answer.status == 400 || answer.status == 404 || answer.status == 405 || answer.status == 431,
                        "\(answer)"
                    )
                }
            }
            #expect(try await server.isHealthy())
        }
    }

    // MARK: - Connections

    @Test func keepAliveServesManyRequestsOnOneConnection() async throws {
        try await withServer { server in
            let statuses = try await server.raw { connection in
                var statuses: [Int] = []
                for target in ["/healthz", "/readyz", "/v1/jobs", "/nope", "/v1/executors"] {
                    try connection.send(HTTPRequestBytes.make("GET", target))
                    guard let response = try connection.readResponse() else { throw SocketError.closed }
                    statuses.append(response.status)
                    if response.header("connection") == "close" { throw SocketError.closed }
                }
                // A problem (400 query.invalid) does not end the connection either.
                try connection.send(HTTPRequestBytes.make("GET", "/v1/jobs?limit=0"))
                statuses.append(try connection.readResponse()?.status ?? 0)
                try connection.send(
                    HTTPRequestBytes.make(
                        "POST",
                        "/v1/jobs",
                        headers: [("Content-Type", "application/json")],
                        body: Array("{".utf8)
                    )
                )
                statuses.append(try connection.readResponse()?.status ?? 0)
                try connection.send(HTTPRequestBytes.make("GET", "/healthz"))
                statuses.append(try connection.readResponse()?.status ?? 0)
                return statuses
            }
            #expect(statuses == [200, 200, 200, 404, 200, 400, 400, 200])
        }
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        try await withServer { server in
            // The first request is a long poll that ends when a 200 ms delay ends; the ones behind it
            // are instant, yet their answers must come after it.
            let job = Jobs.delay(200).jsonBytes
            let bytes =
                HTTPRequestBytes.make(
                    "POST",
                    "/v1/jobs?waitMs=10000",
                    headers: [("Content-Type", "application/json")],
                    body: job
                )
                + HTTPRequestBytes.make("GET", "/healthz")
                + HTTPRequestBytes.make("GET", "/v1/jobs/nope")
                + HTTPRequestBytes.make(
                    "POST",
                    "/v1/graphs/validate",
                    headers: [("Content-Type", "application/json")],
                    body: Jobs.value(1).jsonBytes
                )
                + HTTPRequestBytes.make("GET", "/readyz")
            let responses = try await server.raw { connection in
                try connection.send(bytes)
                return try (0..<5).map { _ in try connection.readResponse() }
            }
            #expect(responses.map { $0?.status } == [201, 200, 404, 200, 200])
            #expect(responses[0]?.json["state"] == "succeeded")
            #expect(responses[1]?.json == ["status": "ok"])
            #expect(responses[2]?.json["code"] == "job.notFound")
            #expect(responses[3]?.json == jsonValue(#"{"valid": true, "nodes": 1, "depth": 1}"#))
            #expect(responses[4]?.json == ["status": "ready"])
        }
    }

    @Test func aRequestSentWhileAnAnswerIsPendingIsAnsweredAfterIt() async throws {
        try await withServer { server in
            // The server reads on while the first answer is pending (ReadAheadHandler), so the
            // second request is read before the first is answered; it must still wait its turn.
            let first = HTTPRequestBytes.make(
                "POST",
                "/v1/jobs?waitMs=10000",
                headers: [("Content-Type", "application/json")],
                body: Jobs.delay(300).jsonBytes
            )
            let app = server.app
            let responses = try await server.raw { connection in
                // The others are sent once the server holds the first unanswered.
                try connection.send(first)
                #expect(waitUntil { app.requestsInFlight == 1 })
                try connection.send(HTTPRequestBytes.make("GET", "/healthz"))
                try connection.send(HTTPRequestBytes.make("GET", "/v1/jobs/nope"))
                return try (0..<3).map { _ in try connection.readResponse() }
            }
            #expect(responses.map { $0?.status } == [201, 200, 404])
            #expect(responses[0]?.json["state"] == "succeeded")
            #expect(responses[1]?.json == ["status": "ok"])
        }
    }

    @Test func connectionCloseAndHTTP10EndTheConnectionAfterTheResponse() async throws {
        try await withServer { server in
            let (closeResponse, closed) = try await Self.exchange(
                server,
                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            #expect(closeResponse?.status == 200)
            #expect(closeResponse?.header("connection") == "close")
            #expect(closed)
            let (old, oldClosed) = try await Self.exchange(server, "GET /healthz HTTP/1.0\r\n\r\n")
            #expect(old?.status == 200)
            #expect(old?.version == "HTTP/1.0")
            #expect(old?.json == ["status": "ok"])
            #expect(oldClosed)
        }
    }

    @Test func halfOpenConnectionsAreHandled() async throws {
        try await withServer { server in
            // A partial head, then the client stops sending: the server closes without an answer.
            let partial = try await server.raw(receiveTimeout: 10) { connection in
                try connection.send("GET /heal")
                connection.shutdownWrite()
                return (try connection.readResponse(), connection.waitForClose())
            }
            #expect(partial.0 == nil)
            #expect(partial.1)
            // A whole request, then a half-close: the answer still arrives.
            let whole = try await server.raw(receiveTimeout: 10) { connection in
                try connection.send(HTTPRequestBytes.make("GET", "/healthz"))
                connection.shutdownWrite()
                return try connection.readResponse()
            }
            #expect(whole?.status == 200)
            // A client that vanishes in the middle of a long poll.
            let id = try await server.submitID(Jobs.delay(60_000))
            try await server.raw { connection in
                try connection.send(HTTPRequestBytes.make("GET", "/v1/jobs/\(id)?waitMs=60000"))
            }
            #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "running")
            _ = try await server.post("/v1/jobs/\(id)/cancel")
            #expect(try await server.finished(id)["state"] == "cancelled")
            #expect(try await server.isHealthy())
        }
    }

    @Test func aConnectionOverTheCapIsAnswered503WithRetryAfterAndClosed() async throws {
        try await withServer({ $0.maxConnections = 4 }) { server in
            let port = server.port
            let result = try await Blocking.run {
                let held = try (0..<4).map { _ in try SocketConnection(port: port, receiveTimeoutSeconds: 10) }
                // The held connections are served.
                for connection in held {
                    try connection.send(HTTPRequestBytes.make("GET", "/healthz"))
                    guard try connection.readResponse()?.status == 200 else { throw SocketError.closed }
                }
                let extra = try SocketConnection(port: port, receiveTimeoutSeconds: 10)
                try? extra.send(HTTPRequestBytes.make("GET", "/healthz"))
                // Not a reset: a 503 the client can act on, then the connection ends.
                let refused = try extra.readResponse()
                let closed = extra.waitForClose()
                extra.close()
                for connection in held { connection.close() }
                return (refused, closed)
            }
            let refused = try #require(result.0)
            expectProblem(refused, 503, "server.busy")
            #expect(refused.header("retry-after") == "1")
            #expect(result.1, "the refused connection is closed")
            #expect(server.app.connectionStatistics.refused == 1)
            // Once they are gone, new connections are served again (the server notices the closes
            // asynchronously, so allow a few attempts).
            var healthy = false
            for _ in 0..<500 where !healthy {
                healthy = (try? await server.isHealthy()) ?? false
            }
            #expect(healthy)
        }
    }

    @Test func slowHeadersAndIdleConnectionsAreClosedAfterTheirTimeouts() async throws {
        let app = try Application(
            configuration: ServerConfiguration(),
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        )
        // Short, but not so short that a slow run (TSan) times out the head of a request the
        // client sent at once: then the "idle" connection would never be answered at all.
        let timeout = TimeAmount.milliseconds(Int64(200 * TestTiming.slowdown))
        var limits = HTTPLimits()
        limits.requestHeadTimeout = timeout
        limits.idleTimeout = timeout
        limits.requestBodyTimeout = timeout
        let server = HTTPServer(host: "127.0.0.1", port: 0, router: app.router, limits: limits, logger: app.logger)
        let port = try await server.start()
        defer { app.engine.shutdown() }
        let (slow, idle, slowBody) = try await Blocking.run {
            let slow = try SocketConnection(port: port, receiveTimeoutSeconds: 10)
            try slow.send("GET /healthz HTTP/1.1\r\nHo")
            let slowStart = ContinuousClock.now
            let slowClosed =
                (try? slow.readResponse()) == nil && ContinuousClock.now - slowStart < TestTiming.scaled(.seconds(5))
            let idle = try SocketConnection(port: port, receiveTimeoutSeconds: 10)
            try idle.send(HTTPRequestBytes.make("GET", "/healthz"))
            let answered = try idle.readResponse()?.status == 200
            let idleClosed = answered && idle.waitForClose()
            let body = try SocketConnection(port: port, receiveTimeoutSeconds: 10)
            try body.send(
                "POST /v1/graphs/validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            let bodyClosed = (try? body.readResponse()) == nil
            // Empty lines before a request line are skipped, so they too wait for a head that never comes.
            let blank = try SocketConnection(port: port, receiveTimeoutSeconds: 10)
            try blank.send("\r\n\r\n\r\n\r\n")
            let blankClosed = (try? blank.readResponse()) == nil
            return (slowClosed, idleClosed, bodyClosed && blankClosed)
        }
        await server.shutdown()
        #expect(slow)
        #expect(idle)
        #expect(slowBody)
    }

    // MARK: - Issue #27: HEAD, transfer codings, query values in the log

    @Test func headIsAnsweredLikeGetWithoutABody() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1), waitMs: 5000)
            let (get, head) = try await server.raw { connection in
                try connection.send(HTTPRequestBytes.make("GET", "/v1/jobs/\(id)"))
                let get = try connection.readResponse()
                try connection.send(HTTPRequestBytes.make("HEAD", "/v1/jobs/\(id)"))
                let head = try connection.readResponse(isHead: true)
                return (get, head)
            }
            #expect(head?.status == 200)
            #expect(head?.header("content-length") == get?.header("content-length"))
            #expect(head?.header("content-type") == get?.header("content-type"))
            #expect(head?.body.isEmpty == true)
            // A template without GET answers HEAD 405, and GET's templates list HEAD in Allow.
            let notAllowed = try await server.request("HEAD", "/v1/graphs/validate")
            #expect(notAllowed.status == 405)
            let allow = try await server.request("PATCH", "/v1/jobs/\(id)").header("allow") ?? ""
            #expect(allow.contains("HEAD") && allow.contains("GET"), "\(allow)")
        }
    }

    @Test func aTransferCodingTheServerDoesNotImplementIs501() async throws {
        try await withServer { server in
            let response = try await server.raw { connection in
                try connection.send(
                    "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
                )
                return try connection.readResponse()
            }
            #expect(response?.status == 501)
            #expect(response?.json["code"] == "http.transferCodingNotImplemented")
        }
    }

    @Test func queryValuesAreRedactedInTheLogNamesKept() async throws {
        let handler = InMemoryLogHandler()
        let server = try await TestServer.start(logger: handler.logger(level: .debug))
        defer { Task { await server.stop() } }
        _ = try await server.get("/v1/jobs?api_key=s3cr3t-value&limit=5")
        let lines = handler.entries.map { "\($0.message) \($0.metadata)" }
        #expect(lines.contains { $0.contains("/v1/jobs?api_key=…&limit=…") }, "\(lines)")
        #expect(!lines.contains { $0.contains("s3cr3t") })
        #expect(HTTPHandler.redactingQueryValues("/a?x=1&flag&y=") == "/a?x=…&flag&y=…")
        #expect(HTTPHandler.redactingQueryValues("/a") == "/a")
    }
}
