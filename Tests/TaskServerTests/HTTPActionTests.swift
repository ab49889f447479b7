import NIOHTTP1
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// The `http` action (SPEC §1.2) in jobs run by a live server, against real receivers on loopback.
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct HTTPActionTests {
    /// A job of one `http` task with `params` (JSON text) and optional extra task fields.
    static func job(_ params: String, input: String = "null", extra: String = "") -> JSONValue {
        jsonValue(
            #"{"input": \#(input), "graph": {"type": "task", "id": "call", "action": "http", "params": \#(params)\#(extra)}}"#
        )
    }

    @Test func aJSONResponseBecomesTheResultWithLowercasedHeaders() async throws {
        let receiver = try await TestReceiver.start { _, _ in
            var headers = HTTPHeaders()
            headers.add(name: "X-Trace", value: "a")
            headers.add(name: "X-Trace", value: "b")
            return Future(value: .json(["items": [1, 2], "ok": true], status: .ok, headers: headers))
        }
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let id = try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/list"}"#))
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded", "\(job)")
            let result = try #require(job["result"])
            #expect(result["status"] == 200)
            #expect(result["body"] == ["items": [1, 2], "ok": true])
            #expect(result["headers"]?["content-type"] == "application/json")
            #expect(result["headers"]?["x-trace"] == "a, b")
            #expect(receiver.requests.map(\.method) == ["GET"])
        }
    }

    @Test func aTextResponseIsAStringAndHEADHasAnEmptyBody() async throws {
        let receiver = try await TestReceiver.start { _, _ in Future(value: .text("plain words")) }
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let text = try await server.finished(try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/t"}"#)))
            #expect(text["result"]?["body"] == "plain words", "\(text)")
            let head = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/t", "method": "head"}"#))
            )
            #expect(head["result"]?["status"] == 200, "\(head)")
            #expect(head["result"]?["body"] == "")
            #expect(receiver.requests.map(\.method) == ["GET", "HEAD"])
        }
    }

    @Test func postSendsTemplatedJSONBodiesAndHeaders() async throws {
        let receiver = try await TestReceiver.answering(.created, json: ["saved": true])
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let input = #"{"base": "\#(receiver.url)", "id": 7, "token": "abc"}"#
            let params = #"""
                {"method": "POST", "url": "${input.base}/items/${input.id}",
                 "headers": {"Authorization": "Bearer ${input.token}", "X-Count": "${input.id}", "X-Flag": true},
                 "body": {"id": "${input.id}", "note": "n-${input.id}", "tags": ["${job.id}"]}}
                """#
            let id = try await server.submitID(Self.job(params, input: input))
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded", "\(job)")
            #expect(job["result"]?["status"] == 201)
            #expect(job["result"]?["body"] == ["saved": true])
            let request = try #require(receiver.requests.first)
            #expect(request.method == "POST")
            #expect(request.uri == "/items/7")
            #expect(request.header("authorization") == "Bearer abc")
            #expect(request.header("x-count") == "7")
            #expect(request.header("x-flag") == "true")
            #expect(request.header("content-type") == "application/json")
            #expect(request.json == ["id": 7, "note": "n-7", "tags": [.string(id)]])
        }
    }

    @Test func aStringBodyIsSentAsIsWithAGivenContentType() async throws {
        let receiver = try await TestReceiver.answering(.noContent)
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let plain = try await server.submitID(
                Self.job(#"{"method": "PUT", "url": "\#(receiver.url)/a", "body": "line ${input}"}"#, input: "1")
            )
            #expect(try await server.finished(plain)["state"] == "succeeded")
            let csv = try await server.submitID(
                Self.job(
                    #"{"method": "PATCH", "url": "\#(receiver.url)/b", "headers": {"content-type": "text/csv"}, "body": "a,b\n1,2"}"#
                )
            )
            #expect(try await server.finished(csv)["state"] == "succeeded")
            let requests = receiver.requests
            #expect(requests.map(\.method) == ["PUT", "PATCH"])
            #expect(requests[0].text == "line 1")
            #expect(requests[0].header("content-type") == "text/plain; charset=utf-8")
            #expect(requests[1].text == "a,b\n1,2")
            #expect(requests[1].header("content-type") == "text/csv")
        }
    }

    @Test func anUnexpectedStatusFailsWithStatusAndABoundedBodyExcerpt() async throws {
        let receiver = try await TestReceiver.start { _, _ in
            Future(value: Response(status: .internalServerError, body: Array(String(repeating: "é", count: 3000).utf8)))
        }
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let job = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/boom"}"#))
            )
            #expect(job["state"] == "failed")
            let error = try #require(job["error"])
            #expect(error["code"] == "http.status")
            #expect(error["message"] == .string("GET \(receiver.url)/boom answered 500"))
            #expect(error["details"]?["status"] == 500)
            let excerpt = try #require(error["details"]?["body"]?.stringValue)
            #expect(excerpt.utf8.count <= 1024)
            #expect(excerpt.utf8.count >= 1000)
            #expect(excerpt.allSatisfy { $0 == "é" })  // cut at a character boundary
        }
    }

    @Test func expectStatusAcceptsListedCodesAndClasses() async throws {
        let receiver = try await TestReceiver.answering(.notFound, json: ["missing": true])
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let accepted = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/x", "expectStatus": [404, "2xx"]}"#))
            )
            #expect(accepted["state"] == "succeeded", "\(accepted)")
            #expect(accepted["result"]?["status"] == 404)
            let byClass = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/x", "expectStatus": ["4XX"]}"#))
            )
            #expect(byClass["state"] == "succeeded", "\(byClass)")
            let refused = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/x", "expectStatus": ["5xx", 200]}"#))
            )
            #expect(refused["error"]?["code"] == "http.status")
            #expect(refused["error"]?["details"]?["body"] == #"{"missing":true}"#)
        }
    }

    @Test func failedAttemptsAreRetriedUntilOneSucceeds() async throws {
        let receiver = try await TestReceiver.start { _, index in
            Future(value: index < 2 ? Response(status: .serviceUnavailable) : .json(["attempt": .int(index + 1)]))
        }
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let id = try await server.submitID(
                Self.job(
                    #"{"url": "\#(receiver.url)/flaky"}"#,
                    extra: #", "retry": {"maxAttempts": 5, "delayMs": 10, "on": ["http.*"]}"#
                )
            )
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded", "\(job)")
            #expect(job["result"]?["body"] == ["attempt": 3])
            let task = try await server.get("/v1/jobs/\(id)/tasks/call").json
            #expect(task["attempts"] == 3)
            #expect(receiver.requests.count == 3)
            let events = try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue ?? []
            let retries = events.filter { $0["type"] == "task.retrying" }
            #expect(retries.count == 2)
            #expect(retries.first?["data"]?["error"]?["code"] == "http.status")
        }
    }

    @Test func aSlowReceiverFailsTheAttemptWithHTTPTimeout() async throws {
        let receiver = try await TestReceiver.start { _, _ in never() }
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let (job, ms) = try await elapsedMilliseconds {
                try await server.finished(
                    try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/slow", "timeoutMs": 300}"#))
                )
            }
            #expect(job["error"]?["code"] == "http.timeout", "\(job)")
            #expect(ms < TestTiming.ms(5000))
        }
    }

    @Test func aRefusedConnectionIsHTTPConnect() async throws {
        let port = try closedPort()
        try await withServer { server in
            let job = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "http://127.0.0.1:\#(port)/x"}"#))
            )
            #expect(job["error"]?["code"] == "http.connect", "\(job)")
            #expect(job["error"]?["details"] == nil)
        }
    }

    @Test func cancellingTheJobAbortsTheTransferAndTheReceiverSeesTheConnectionClose() async throws {
        let receiver = try await TestReceiver.start { _, _ in never() }
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let id = try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/hang", "timeoutMs": 60000}"#))
            _ = try await receiver.waitForRequests(1)
            #expect(receiver.server.connectionCount == 1)
            let cancel = try await server.post("/v1/jobs/\(id)/cancel")
            #expect(cancel.status == 202)
            let job = try await server.finished(id)
            #expect(job["state"] == "cancelled", "\(job)")
            let closed = try await receiver.waitForNoConnections()
            #expect(closed)
            // The slot the attempt held was given back.
            let executors = try await server.get("/v1/executors").json
            #expect(executors["items"]?.arrayValue?.first { $0["name"] == "default" }?["running"] == 0)
        }
    }

    @Test func metadataAddressesAreRefusedAndTheDenyFlagAppliesToLoopback() async throws {
        let receiver = try await TestReceiver.answering(.ok)
        defer { Task { await receiver.stop() } }
        try await withServer { server in
            let job = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "http://169.254.169.254/latest/meta-data/"}"#))
            )
            #expect(job["error"]?["code"] == "http.connect", "\(job)")
            #expect(job["error"]?["details"] == ["reason": "policy", "address": "169.254.169.254"])
        }
        try await withServer({ $0.outbound.deny = ["127.0.0.0/8"] }) { server in
            let job = try await server.finished(try await server.submitID(Self.job(#"{"url": "\#(receiver.url)/x"}"#)))
            #expect(job["error"]?["details"]?["reason"] == "policy", "\(job)")
            #expect(job["error"]?["message"]?.stringValue?.contains("--outbound-deny 127.0.0.0/8") == true)
        }
        #expect(receiver.requests.isEmpty)
    }

    @Test func invalidLiteralParamsAreRefusedAtSubmissionWithPointers() async throws {
        try await withServer { server in
            let response = try await server.post(
                "/v1/jobs",
                json: Self.job(
                    #"""
                    {"url": "ftp://x", "method": "BREW", "headers": {"Bad Name": "x", "X-A": "a\nb", "Content-Length": "3", "X-O": {}},
                     "timeoutMs": 0, "expectStatus": [99, "6xx", "2xx"], "extra": 1}
                    """#
                )
            )
            expectProblem(
                response,
                422,
                "graph.invalid",
                errors: [
                    [
                        "pointer": "/graph/params/extra",
                        "message":
                            "unknown parameter \"extra\"; expected one of: body, expectStatus, headers, method, timeoutMs, url",
                    ],
                    ["pointer": "/graph/params/url", "message": "must be an absolute http or https URL with a host"],
                    [
                        "pointer": "/graph/params/method",
                        "message": "must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
                    ],
                    [
                        "pointer": "/graph/params/headers/Bad Name",
                        "message": "invalid header name \"Bad Name\": use letters, digits and !#$%&'*+-.^_`|~",
                    ],
                    ["pointer": "/graph/params/headers/X-A", "message": "must not contain CR, LF or NUL"],
                    [
                        "pointer": "/graph/params/headers/Content-Length",
                        "message": "header \"Content-Length\" is computed from the body and cannot be set",
                    ],
                    ["pointer": "/graph/params/headers/X-O", "message": "must be a string, a number or a boolean"],
                    ["pointer": "/graph/params/timeoutMs", "message": "must be an integer from 1 to 3600000"],
                    [
                        "pointer": "/graph/params/expectStatus/0",
                        "message": "must be a status code from 100 to 599 or a class \"1xx\" to \"5xx\"",
                    ],
                    [
                        "pointer": "/graph/params/expectStatus/1",
                        "message": "must be a status code from 100 to 599 or a class \"1xx\" to \"5xx\"",
                    ],
                ]
            )
            let missing = try await server.post("/v1/jobs", json: Self.job(#"{"method": "GET"}"#))
            expectProblem(
                missing,
                422,
                "graph.invalid",
                errors: [["pointer": "/graph/params/url", "message": "required"]]
            )
            // Templates stand for values only known at run time.
            let templated = try await server.post(
                "/v1/graphs/validate",
                json: Self.job(
                    #"{"url": "${input.url}", "method": "${input.m}", "headers": "${input.h}", "expectStatus": ["${input.s}"]}"#
                )
            )
            #expect(templated.status == 200, "\(templated)")
        }
    }

    @Test func paramsThatRenderInvalidFailTheTask() async throws {
        try await withServer { server in
            let job = try await server.finished(
                try await server.submitID(Self.job(#"{"url": "${input}"}"#, input: #""not a url""#))
            )
            #expect(job["error"]?["code"] == "params.invalid", "\(job)")
        }
    }

    @Test func aHundredTransfersRunConcurrentlyBoundedByTheirExecutor() async throws {
        let receiver = try await TestReceiver.start { request, _ in
            delayed(.milliseconds(30), .json(["path": .string(request.uri)]))
        }
        defer { Task { await receiver.stop() } }
        try await withServer({ $0.executors = ["default": 8, "io": 10] }) { server in
            let job = jsonValue(
                #"""
                {"input": {"base": "\#(receiver.url)", "items": \#((0..<100).map(String.init).joined(separator: ",").wrappedInBrackets)},
                 "graph": {"type": "map", "id": "all", "items": "${input.items}",
                   "template": {"type": "task", "id": "get", "action": "http", "executor": "io",
                                "params": {"url": "${job.input.base}/item/${input}"}}}}
                """#
            )
            let id = try await server.submitID(job)
            let finished = try await server.finished(id)
            #expect(finished["state"] == "succeeded", "\(finished["error"] ?? "")")
            let results = finished["result"]?.arrayValue ?? []
            #expect(results.count == 100)
            #expect(results.enumerated().allSatisfy { $0.element["body"]?["path"] == .string("/item/\($0.offset)") })
            #expect(receiver.requests.count == 100)
            #expect(receiver.maxInFlight <= 10)
            #expect(receiver.maxInFlight >= 2)
        }
    }
}

extension String {
    /// `[self]`.
    var wrappedInBrackets: String { "[" + self + "]" }
}
