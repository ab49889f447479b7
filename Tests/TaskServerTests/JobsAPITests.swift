import Foundation
import Synchronization
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// `POST/GET/DELETE /v1/jobs…`, cancel, graph drawings and validation (SPEC §3.1, §3.2, §3.5, §3.7).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct JobsAPITests {
    static func progress(
        total: Int = 1,
        running: Int = 0,
        succeeded: Int = 0,
        failed: Int = 0,
        cancelled: Int = 0,
        skipped: Int = 0
    ) -> String {
        let pending = total - running - succeeded - failed - cancelled - skipped
        return
            #"{"total": \#(total), "pending": \#(pending), "running": \#(running), "succeeded": \#(succeeded), "failed": \#(failed), "cancelled": \#(cancelled), "skipped": \#(skipped)}"#
    }

    static let progressOneSucceeded = jsonValue(progress(succeeded: 1))

    static func isJobID(_ id: String) -> Bool {
        id.utf8.count == 26 && id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x7A).contains($0) }
    }

    // MARK: - Submit

    @Test func submitAnswers201WithLocationAndTheJobRepresentation() async throws {
        try await withServer { server in
            let response = try await server.post("/v1/jobs", json: Jobs.delay(60_000))
            #expect(response.status == 201)
            #expect(response.contentType == "application/json")
            let id = try #require(response.json["id"]?.stringValue)
            #expect(Self.isJobID(id))
            #expect(response.header("location") == "/v1/jobs/\(id)")
            expectJSON(
                response.json,
                jsonValue(
                    #"""
                    {"id": "\#(id)", "state": "running", "input": null, "labels": {},
                     "createdAt": "<time>", "startedAt": "<time>", "progress": \#(Self.progress(running: 1))}
                    """#
                )
            )
            _ = try await server.post("/v1/jobs/\(id)/cancel")
        }
    }

    @Test func submitWithWaitMsAnswersWithTheSucceededJob() async throws {
        try await withServer { server in
            let job = Jobs.with(
                Jobs.value(jsonValue(#"{"answer": 42}"#)),
                ["name": "answer", "input": jsonValue(#"{"q": 1}"#), "labels": jsonValue(#"{"team": "data"}"#)]
            )
            let response = try await server.post("/v1/jobs?waitMs=10000", json: job)
            #expect(response.status == 201)
            let id = try #require(response.json["id"]?.stringValue)
            #expect(response.header("location") == "/v1/jobs/\(id)")
            expectJSON(
                response.json,
                jsonValue(
                    #"""
                    {"id": "\#(id)", "name": "answer", "state": "succeeded", "input": {"q": 1}, "result": {"answer": 42},
                     "labels": {"team": "data"}, "createdAt": "<time>", "startedAt": "<time>", "finishedAt": "<time>",
                     "progress": \#(Self.progress(succeeded: 1))}
                    """#
                )
            )
            // GET answers with the same representation.
            let again = try await server.get("/v1/jobs/\(id)")
            #expect(again.status == 200)
            #expect(again.header("location") == nil)
            #expect(again.json == response.json)
        }
    }

    @Test func submitWithWaitMsAnswersWithTheFailedJobAndItsError() async throws {
        try await withServer { server in
            let body = try await server.submit(Jobs.fail(code: "x.broken", message: "it broke"), waitMs: 10_000)
            expectJSON(
                body,
                jsonValue(
                    #"""
                    {"id": \#(body["id"]?.jsonString ?? "null"), "state": "failed", "input": null, "labels": {},
                     "error": {"code": "x.broken", "message": "it broke", "taskId": "boom"},
                     "createdAt": "<time>", "startedAt": "<time>", "finishedAt": "<time>", "progress": \#(Self.progress(failed: 1))}
                    """#
                )
            )
        }
    }

    @Test func submitWithWaitMsThatTimesOutAnswersWithTheRunningJob() async throws {
        try await withServer { server in
            let (response, elapsed) = try await elapsedMilliseconds {
                try await server.post("/v1/jobs?waitMs=300", json: Jobs.delay(60_000))
            }
            #expect(response.status == 201)
            #expect(response.json["state"] == "running")
            #expect(elapsed >= 250)
            _ = try await server.post("/v1/jobs/\(response.json["id"]!.stringValue!)/cancel")
        }
    }

    @Test func aJobOverItsTimeoutFailsWithJobTimeout() async throws {
        try await withServer { server in
            let job = Jobs.with(Jobs.delay(60_000), ["timeoutMs": 100])
            let body = try await server.submit(job, waitMs: 10_000)
            expectJSON(
                body,
                jsonValue(
                    #"""
                    {"id": \#(body["id"]?.jsonString ?? "null"), "state": "failed", "input": null, "labels": {},
                     "error": {"code": "job.timeout", "message": "the job did not finish within 100 ms"},
                     "createdAt": "<time>", "startedAt": "<time>", "finishedAt": "<time>", "progress": \#(Self.progress(cancelled: 1))}
                    """#
                )
            )
        }
    }

    @Test func aRepeatWithTheSameIdempotencyKeyAndBodyAnswers200WithTheSameJob() async throws {
        try await withServer { server in
            let first = try await server.post(
                "/v1/jobs",
                json: Jobs.delay(60_000),
                headers: [("Idempotency-Key", "order-17")]
            )
            #expect(first.status == 201)
            let id = try #require(first.json["id"]?.stringValue)
            // The same JSON value with other whitespace is the same body.
            let spaced =
                "{ \"graph\" : {\"type\": \"task\", \"id\": \"wait\", \"action\": \"delay\", \"params\": {\"ms\": 60000}} }\n"
            let second = try await server.post("/v1/jobs", text: spaced, headers: [("Idempotency-Key", "order-17")])
            #expect(second.status == 200)
            #expect(second.json["id"] == .string(id))
            #expect(second.header("location") == "/v1/jobs/\(id)")
            let list = try await server.get("/v1/jobs").json["items"]?.arrayValue ?? []
            #expect(list.count == 1)
            // Another key makes another job.
            let third = try await server.post(
                "/v1/jobs",
                json: Jobs.delay(60_000),
                headers: [("Idempotency-Key", "order-18")]
            )
            #expect(third.status == 201)
            #expect(third.json["id"] != .string(id))
            _ = try await server.post("/v1/jobs/\(id)/cancel")
            _ = try await server.post("/v1/jobs/\(third.json["id"]!.stringValue!)/cancel")
        }
    }

    @Test func theSameIdempotencyKeyWithAnotherBodyIs422Mismatch() async throws {
        try await withServer { server in
            let first = try await server.post("/v1/jobs", json: Jobs.value(1), headers: [("Idempotency-Key", "k1")])
            #expect(first.status == 201)
            let second = try await server.post("/v1/jobs", json: Jobs.value(2), headers: [("Idempotency-Key", "k1")])
            expectProblem(
                second,
                422,
                "idempotency.mismatch",
                detail: "Idempotency-Key \"k1\" was used before with a different body"
            )
        }
    }

    @Test(arguments: [String(repeating: "k", count: 256), "two words", "caf\u{E9}"])
    func anIdempotencyKeyThatIsNot1To255VisibleASCIICharactersIs400(_ key: String) async throws {
        try await withServer { server in
            let response = try await server.post("/v1/jobs", json: Jobs.value(1), headers: [("Idempotency-Key", key)])
            expectProblem(
                response,
                400,
                "query.invalid",
                detail: "Idempotency-Key must be 1 to 255 visible ASCII characters"
            )
            #expect(try await server.get("/v1/jobs").json["items"] == [])
            let longest = try await server.post(
                "/v1/jobs",
                json: Jobs.value(1),
                headers: [("Idempotency-Key", String(repeating: "k", count: 255))]
            )
            #expect(longest.status == 201)
        }
    }

    @Test func aBodyThatIsNotDeclaredJSONIs415() async throws {
        try await withServer { server in
            let body = Jobs.value(1).jsonString
            let missing = try await server.post("/v1/jobs", text: body, contentType: nil)
            expectProblem(missing, 415, "contentType.unsupported", detail: "send the body as application/json")
            let plain = try await server.post("/v1/jobs", text: body, contentType: "text/plain")
            expectProblem(
                plain,
                415,
                "contentType.unsupported",
                detail: "the body must be application/json, not text/plain"
            )
            let form = try await server.post(
                "/v1/graphs/validate",
                text: body,
                contentType: "application/x-www-form-urlencoded"
            )
            expectProblem(
                form,
                415,
                "contentType.unsupported",
                detail: "the body must be application/json, not application/x-www-form-urlencoded"
            )
            // Parameters and +json types are fine.
            let charset = try await server.post("/v1/jobs", text: body, contentType: "Application/JSON; charset=utf-8")
            #expect(charset.status == 201)
            let problemJSON = try await server.post(
                "/v1/graphs/validate",
                text: body,
                contentType: "application/vnd.taskserver+json"
            )
            #expect(problemJSON.status == 200)
        }
    }

    @Test func malformedJSONIs400WithLineAndColumn() async throws {
        try await withServer { server in
            let response = try await server.post("/v1/jobs", text: "{\n  \"graph\": {\"type\": \"task\",,}\n}")
            expectProblem(response, 400, "json.malformed")
            #expect(
                response.json["detail"] == "the body is not valid JSON: line 2, column 28: unexpected character ','"
            )
            let empty = try await server.post("/v1/jobs", text: "")
            expectProblem(empty, 400, "json.malformed", detail: "the body is empty; send a JSON document")
            let truncated = try await server.post("/v1/graphs/validate", text: "[1, 2")
            expectProblem(truncated, 400, "json.malformed")
            #expect(
                truncated.json["detail"]?.stringValue?.hasPrefix("the body is not valid JSON: line 1, column ") == true
            )
        }
    }

    @Test func aBodyOverMaxBodyBytesIs413() async throws {
        try await withServer({ $0.maxBodyBytes = 2048 }) { server in
            let big = Jobs.value(.string(String(repeating: "x", count: 4000)))
            let response = try await server.post("/v1/jobs", json: big)
            expectProblem(response, 413, "body.tooLarge", detail: "the request body is larger than 2048 bytes")
            #expect(response.header("connection") == "close")
            let small = try await server.post(
                "/v1/jobs",
                json: Jobs.value(.string(String(repeating: "x", count: 1000)))
            )
            #expect(small.status == 201)
            #expect(try await server.isHealthy())
        }
    }

    @Test func anInvalidGraphIs422WithEveryProblemAndItsPointer() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "series", "steps": [
                    {"type": "task", "action": "value", "executor": "gpu"},
                    {"type": "task", "action": "delay", "params": {"ms": -5}},
                    {"type": "paralel"}]},
                 "colour": "blue"}
                """#
            )
            let response = try await server.post("/v1/jobs", json: job)
            expectProblem(response, 422, "graph.invalid")
            // Every problem, each with its pointer (compared sorted: openapi.yaml leaves their order open).
            var body = response.json.objectValue ?? JSONObject()
            body["errors"] = .array(Self.sortedByPointer(body["errors"]?.arrayValue ?? []))
            expectJSON(
                .object(body),
                jsonValue(
                    #"""
                    {"type": "about:blank", "title": "Unprocessable Entity", "status": 422, "code": "graph.invalid",
                     "detail": "the job is invalid (4 problems)", "errors": \#(Self.invalidJobErrors)}
                    """#
                )
            )
            // Nothing was created.
            #expect(try await server.get("/v1/jobs").json == jsonValue(#"{"items": [], "nextCursor": null}"#))
            // A single problem is named in the detail.
            let missing = try await server.post("/v1/jobs", text: #"{"name": "x"}"#)
            expectProblem(
                missing,
                422,
                "graph.invalid",
                detail: "the job is invalid: /graph: required",
                errors: [jsonValue(#"{"pointer": "/graph", "message": "required"}"#)]
            )
            let notObject = try await server.post("/v1/jobs", text: "[1, 2]")
            expectProblem(
                notObject,
                422,
                "graph.invalid",
                detail: "the job is invalid: /: must be an object",
                errors: [jsonValue(#"{"pointer": "", "message": "must be an object"}"#)]
            )
        }
    }

    static let invalidJobErrors = #"""
        [{"pointer": "/colour", "message": "unknown field \"colour\""},
         {"pointer": "/graph/steps/0/executor", "message": "unknown executor \"gpu\"; configured: default, immediate"},
         {"pointer": "/graph/steps/1/params/ms", "message": "must be an integer from 0 to 86400000"},
         {"pointer": "/graph/steps/2/type", "message": "unknown type \"paralel\"; expected one of task, series, parallel, continuation, map, dynamic, job"}]
        """#

    static func sortedByPointer(_ errors: [JSONValue]) -> [JSONValue] {
        errors.sorted { ($0["pointer"]?.stringValue ?? "") < ($1["pointer"]?.stringValue ?? "") }
    }

    /// openapi.yaml, `Problem.errors`: every problem found, not only the first.
    @Test func validationReportsEveryProblem() async throws {
        try await withServer { server in
            let job = #"{"graph": {"type": "task", "action": "value", "executor": "gpu"}, "colour": "blue"}"#
            let response = try await server.post("/v1/graphs/validate", text: job)
            let pointers = response.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue }
            #expect(Set(pointers ?? []) == ["/graph/executor", "/colour"])
        }
    }

    @Test func aDrainingServerRefusesNewJobsWith503() async throws {
        try await withServer { server in
            let before = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            server.app.beginDraining()
            let response = try await server.post("/v1/jobs", json: Jobs.value(1))
            expectProblem(
                response,
                503,
                "server.draining",
                detail: "the server is shutting down and accepts no new jobs"
            )
            // Reads still work.
            #expect(try await server.get("/v1/jobs/\(before)").status == 200)
            #expect(try await server.isHealthy())
        }
    }

    // MARK: - Get

    @Test func gettingAnUnknownJobIs404() async throws {
        try await withServer { server in
            expectProblem(try await server.get("/v1/jobs/nope"), 404, "job.notFound", detail: "no job nope")
            expectProblem(try await server.get("/v1/jobs/nope?waitMs=1000"), 404, "job.notFound", detail: "no job nope")
        }
    }

    @Test func aLongPollAnswersAsSoonAsTheJobEnds() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.delay(300))
            let (response, elapsed) = try await elapsedMilliseconds {
                try await server.get("/v1/jobs/\(id)?waitMs=5000")
            }
            #expect(response.status == 200)
            #expect(response.json["state"] == "succeeded")
            #expect(response.json["progress"] == Self.progressOneSucceeded)
            #expect(elapsed < TestTiming.ms(2000), "the long poll took \(elapsed) ms")
        }
    }

    @Test func aLongPollThatTimesOutAnswers200WithTheCurrentState() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.delay(60_000))
            let (response, elapsed) = try await elapsedMilliseconds {
                try await server.get("/v1/jobs/\(id)?waitMs=250")
            }
            #expect(response.status == 200)
            #expect(response.json["state"] == "running")
            #expect(elapsed >= 200)
            #expect(elapsed < TestTiming.ms(5000))
            _ = try await server.post("/v1/jobs/\(id)/cancel")
        }
    }

    @Test(arguments: ["abc", "-1", "60001", "1.5", ""])
    func aWaitMsThatIsNotAnIntegerFrom0To60000Is400(_ value: String) async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1))
            let detail = "waitMs must be an integer from 0 to 60000, got \"\(value)\""
            expectProblem(try await server.get("/v1/jobs/\(id)?waitMs=\(value)"), 400, "query.invalid", detail: detail)
            expectProblem(
                try await server.post("/v1/jobs?waitMs=\(value)", json: Jobs.value(1)),
                400,
                "query.invalid",
                detail: detail
            )
            expectProblem(
                try await server.get("/v1/jobs/\(id)/events?waitMs=\(value)"),
                400,
                "query.invalid",
                detail: detail
            )
        }
    }

    // MARK: - List

    @Test func theListIsNewestFirstAndOmitsInputAndResult() async throws {
        try await withServer { server in
            var ids: [String] = []
            for n in 0..<3 {
                let job = Jobs.with(
                    Jobs.value(.int(n)),
                    ["input": jsonValue(#"{"n": \#(n)}"#), "name": .string("job-\(n)")]
                )
                ids.append(try await server.submitID(job, waitMs: 10_000))
            }
            let response = try await server.get("/v1/jobs")
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            #expect(response.json.sortedKeys == ["items", "nextCursor"])
            #expect(response.json["nextCursor"] == .null)
            let items = response.json["items"]?.arrayValue ?? []
            #expect(items.compactMap { $0["id"]?.stringValue } == ids.reversed())
            for (offset, item) in items.enumerated() {
                expectJSON(
                    item,
                    jsonValue(
                        #"""
                        {"id": "\#(ids[2 - offset])", "name": "job-\#(2 - offset)", "state": "succeeded", "labels": {},
                         "createdAt": "<time>", "startedAt": "<time>", "finishedAt": "<time>", "progress": \#(Self.progress(succeeded: 1))}
                        """#
                    )
                )
            }
        }
    }

    @Test func theListFiltersByState() async throws {
        try await withServer { server in
            let succeeded = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            let failed = try await server.submitID(Jobs.fail(code: "x", message: "y"), waitMs: 10_000)
            let running = try await server.submitID(Jobs.delay(60_000))
            func ids(_ state: String) async throws -> [String] {
                try await server.get("/v1/jobs?state=\(state)").json["items"]?.arrayValue?.compactMap {
                    $0["id"]?.stringValue
                } ?? []
            }
            #expect(try await ids("succeeded") == [succeeded])
            #expect(try await ids("failed") == [failed])
            #expect(try await ids("running") == [running])
            #expect(try await ids("pending") == [])
            #expect(try await ids("cancelled") == [])
            expectProblem(
                try await server.get("/v1/jobs?state=done"),
                400,
                "query.invalid",
                detail: "state must be one of pending, running, succeeded, failed, cancelled"
            )
            _ = try await server.post("/v1/jobs/\(running)/cancel")
            _ = try await server.finished(running)
            #expect(try await ids("cancelled") == [running])
        }
    }

    @Test func theListFiltersByLabel() async throws {
        try await withServer { server in
            func submit(_ labels: String) async throws -> String {
                try await server.submitID(Jobs.with(Jobs.value(1), ["labels": jsonValue(labels)]))
            }
            let data = try await submit(#"{"team": "data", "env": "prod"}"#)
            let web = try await submit(#"{"team": "web"}"#)
            let url = try await submit(#"{"link": "http://x:8080/a"}"#)
            _ = try await submit("{}")
            func ids(_ query: String) async throws -> [String] {
                let response = try await server.get("/v1/jobs?\(query)")
                #expect(response.status == 200, "\(response)")
                return response.json["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            }
            #expect(try await ids("label=team:data") == [data])
            #expect(try await ids("label=team%3Aweb") == [web])
            #expect(try await ids("label=team:ops") == [])
            // Split at the first colon: the value may contain colons.
            #expect(try await ids("label=link:http://x:8080/a") == [url])
            let items = try await server.get("/v1/jobs?label=team:data").json["items"]?.arrayValue ?? []
            #expect(items.first?["labels"] == ["env": "prod", "team": "data"])
            expectProblem(
                try await server.get("/v1/jobs?label=team"),
                400,
                "query.invalid",
                detail: "label must be key:value"
            )
            expectProblem(
                try await server.get("/v1/jobs?label=:data"),
                400,
                "query.invalid",
                detail: "label must be key:value"
            )
        }
    }

    /// openapi.yaml: "Repeat the parameter to require several labels" (filters combine with AND).
    @Test func repeatedLabelFiltersAllApply() async throws {
        try await withServer { server in
            let prod = try await server.submitID(
                Jobs.with(Jobs.value(1), ["labels": jsonValue(#"{"team": "data", "env": "prod"}"#)])
            )
            _ = try await server.submitID(
                Jobs.with(Jobs.value(1), ["labels": jsonValue(#"{"team": "data", "env": "dev"}"#)])
            )
            let items = try await server.get("/v1/jobs?label=team:data&label=env:prod").json["items"]?.arrayValue ?? []
            #expect(items.compactMap { $0["id"]?.stringValue } == [prod])
        }
    }

    @Test func cursorsPageThroughEveryJobOnceNewestFirst() async throws {
        try await withServer { server in
            var ids: [String] = []
            for n in 0..<25 { ids.append(try await server.submitID(Jobs.value(.int(n)))) }
            var pages: [[String]] = []
            var cursor: String?
            repeat {
                let target = "/v1/jobs?limit=10" + (cursor.map { "&cursor=\($0)" } ?? "")
                let response = try await server.get(target)
                #expect(response.status == 200)
                pages.append(response.json["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? [])
                cursor = response.json["nextCursor"]?.stringValue
                if cursor == nil { #expect(response.json["nextCursor"] == .null) }
            } while cursor != nil && pages.count < 10
            #expect(pages.map(\.count) == [10, 10, 5])
            let all = pages.flatMap { $0 }
            #expect(Set(all).count == 25)
            #expect(all == ids.reversed())
            // An exact multiple of the page size ends without an empty page.
            let twentyFive = try await server.get("/v1/jobs?limit=25").json
            #expect(twentyFive["items"]?.arrayValue?.count == 25)
            #expect(twentyFive["nextCursor"] == JSONValue.null)
        }
    }

    @Test func aCursorSurvivesNewJobsAndDeletions() async throws {
        try await withServer { server in
            var ids: [String] = []
            for n in 0..<5 { ids.append(try await server.submitID(Jobs.value(.int(n)), waitMs: 10_000)) }
            let first = try await server.get("/v1/jobs?limit=2").json
            #expect(first["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [ids[4], ids[3]])
            let cursor = try #require(first["nextCursor"]?.stringValue)
            _ = try await server.submitID(Jobs.value(9))
            #expect(try await server.delete("/v1/jobs/\(ids[2])").status == 204)
            let second = try await server.get("/v1/jobs?limit=2&cursor=\(cursor)").json
            #expect(second["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [ids[1], ids[0]])
        }
    }

    @Test(arguments: ["abc", "p0", "p", "pzzzzzzzzzzzzzzz", "%ZZ", "p-1"])
    func aForgedCursorIs400(_ cursor: String) async throws {
        try await withServer { server in
            let response = try await server.get("/v1/jobs?cursor=\(cursor)")
            expectProblem(response, 400, "query.invalid")
        }
    }

    @Test(arguments: ["0", "-1", "abc", "1001", "", "99999999999999999999"])
    func aLimitThatIsNotFrom1To1000Is400(_ limit: String) async throws {
        try await withServer { server in
            expectProblem(
                try await server.get("/v1/jobs?limit=\(limit)"),
                400,
                "query.invalid",
                detail: "limit must be an integer from 1 to 1000, got \"\(limit)\""
            )
        }
    }

    // MARK: - Delete

    @Test func deletingATerminalJobAnswers204AndTheJobIsGone() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            let response = try await server.delete("/v1/jobs/\(id)")
            #expect(response.status == 204)
            #expect(response.body.isEmpty)
            expectProblem(try await server.get("/v1/jobs/\(id)"), 404, "job.notFound", detail: "no job \(id)")
            expectProblem(try await server.delete("/v1/jobs/\(id)"), 404, "job.notFound", detail: "no job \(id)")
            #expect(try await server.get("/v1/jobs").json["items"] == [])
        }
    }

    @Test func deletingARunningJobIs409NotTerminal() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.delay(60_000))
            expectProblem(
                try await server.delete("/v1/jobs/\(id)"),
                409,
                "job.notTerminal",
                detail: "the job is still running; cancel it first"
            )
            _ = try await server.post("/v1/jobs/\(id)/cancel")
            _ = try await server.finished(id)
            #expect(try await server.delete("/v1/jobs/\(id)").status == 204)
        }
    }

    @Test func deletingAnUnknownJobIs404() async throws {
        try await withServer { server in
            expectProblem(try await server.delete("/v1/jobs/nope"), 404, "job.notFound", detail: "no job nope")
        }
    }

    // MARK: - Cancel

    @Test func cancellingARunningJobAnswers202ThenTheJobEndsCancelledAndARepeatAnswers200() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.delay(60_000))
            let (first, elapsed) = try await elapsedMilliseconds { try await server.post("/v1/jobs/\(id)/cancel") }
            #expect(first.status == 202)
            #expect(first.contentType == "application/json")
            #expect(first.json["id"] == .string(id))
            #expect(elapsed < TestTiming.ms(5000))
            let finished = try await server.finished(id)
            expectJSON(
                finished,
                jsonValue(
                    #"""
                    {"id": "\#(id)", "state": "cancelled", "input": null, "labels": {},
                     "createdAt": "<time>", "startedAt": "<time>", "finishedAt": "<time>", "progress": \#(Self.progress(cancelled: 1))}
                    """#
                )
            )
            let repeated = try await server.post("/v1/jobs/\(id)/cancel")
            #expect(repeated.status == 200)
            #expect(repeated.json == finished)
        }
    }

    @Test func cancellingAFinishedJobIs409Terminal() async throws {
        try await withServer { server in
            let succeeded = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            expectProblem(
                try await server.post("/v1/jobs/\(succeeded)/cancel"),
                409,
                "job.terminal",
                detail: "the job already succeeded"
            )
            let failed = try await server.submitID(Jobs.fail(code: "x", message: "y"), waitMs: 10_000)
            expectProblem(
                try await server.post("/v1/jobs/\(failed)/cancel"),
                409,
                "job.terminal",
                detail: "the job already failed"
            )
            #expect(try await server.get("/v1/jobs/\(succeeded)").json["state"] == "succeeded")
        }
    }

    @Test func cancellingAnUnknownJobIs404() async throws {
        try await withServer { server in
            expectProblem(try await server.post("/v1/jobs/nope/cancel"), 404, "job.notFound", detail: "no job nope")
        }
    }

    @Test func cancellationRunsCleanupContinuations() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "continuation", "id": "guard", "on": "always",
                    "antecedent": {"type": "task", "id": "work", "action": "delay", "params": {"ms": 60000}},
                    "then": {"type": "task", "id": "cleanup", "action": "value", "params": {"value": "cleaned"}}}}
                """#
            )
            let id = try await server.submitID(job)
            try await server.waitUntilStarted(id, task: "work")
            #expect(try await server.post("/v1/jobs/\(id)/cancel").status == 202)
            let finished = try await server.finished(id)
            #expect(finished["state"] == "cancelled")
            let cleanup = try await server.get("/v1/jobs/\(id)/tasks/cleanup").json
            #expect(cleanup["state"] == "succeeded")
            #expect(cleanup["result"] == "cleaned")
        }
    }

    // MARK: - Graph drawings

    static let seriesJob = jsonValue(
        #"""
        {"graph": {"type": "series", "id": "main", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": 1}},
            {"type": "task", "id": "b", "action": "fail", "params": {"code": "b.failed", "message": "no"}},
            {"type": "task", "id": "c", "action": "value"}]}}
        """#
    )

    @Test func theMermaidDrawingHasEveryNodeColouredByState() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.seriesJob, waitMs: 10_000)
            let response = try await server.get("/v1/jobs/\(id)/graph")
            #expect(response.status == 200)
            #expect(response.contentType == "text/plain; charset=utf-8")
            let expected = """
                flowchart TD
                    n0["main<br/>series<br/>failed"]:::failed
                    n1["a<br/>task: value<br/>succeeded"]:::succeeded
                    n2["b<br/>task: fail<br/>failed"]:::failed
                    n3["c<br/>task: value<br/>skipped"]:::skipped
                    n0 --> n1
                    n0 --> n2
                    n0 --> n3
                    classDef pending fill:#eeeeee,stroke:#999999
                    classDef running fill:#cfe2ff,stroke:#0d6efd
                    classDef succeeded fill:#d1e7dd,stroke:#198754
                    classDef failed fill:#f8d7da,stroke:#dc3545
                    classDef cancelled fill:#fff3cd,stroke:#fd7e14
                    classDef skipped fill:#f8f9fa,stroke:#adb5bd

                """
            #expect(response.text == expected)
            #expect(try await server.get("/v1/jobs/\(id)/graph?format=mermaid").text == expected)
        }
    }

    @Test func theDotDrawingHasEveryNodeColouredByState() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.seriesJob, waitMs: 10_000)
            let response = try await server.get("/v1/jobs/\(id)/graph?format=dot")
            #expect(response.status == 200)
            #expect(response.contentType == "text/plain; charset=utf-8")
            let text = response.text
            #expect(text.hasPrefix("digraph \"\(id)\" {\n"))
            #expect(text.hasSuffix("}\n"))
            for line in [
                "    \"main\" [label=\"main\nseries\nfailed\", fillcolor=\"#f8d7da\", color=\"#dc3545\"];",
                "    \"a\" [label=\"a\ntask: value\nsucceeded\", fillcolor=\"#d1e7dd\", color=\"#198754\"];",
                "    \"b\" [label=\"b\ntask: fail\nfailed\", fillcolor=\"#f8d7da\", color=\"#dc3545\"];",
                "    \"c\" [label=\"c\ntask: value\nskipped\", fillcolor=\"#f8f9fa\", color=\"#adb5bd\"];",
                "    \"main\" -> \"a\";", "    \"main\" -> \"b\";", "    \"main\" -> \"c\";",
            ] {
                #expect(text.contains(line), "missing \(line)")
            }
        }
    }

    @Test func aRunningNodeIsDrawnRunning() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.delay(60_000))
            let text = try await server.get("/v1/jobs/\(id)/graph").text
            #expect(text.contains("n0[\"wait<br/>task: delay<br/>running\"]:::running"))
            _ = try await server.post("/v1/jobs/\(id)/cancel")
            _ = try await server.finished(id)
            let dot = try await server.get("/v1/jobs/\(id)/graph?format=dot").text
            #expect(dot.contains("fillcolor=\"#fff3cd\", color=\"#fd7e14\""))
        }
    }

    @Test func theSVGDrawingNestsSeriesAndParallelAndCollapsesBigMaps() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "series", "id": "main", "steps": [
                  {"type": "task", "id": "a", "action": "value"},
                  {"type": "parallel", "id": "fan", "branches": [
                    {"type": "task", "id": "x", "action": "value"}, {"type": "task", "id": "y", "action": "delay", "params": {"ms": 1}}]},
                  {"type": "map", "id": "many", "items": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22],
                   "template": {"type": "task", "id": "m", "action": "value"}}]}}
                """#
            )
            let id = try await server.submitID(job, waitMs: 5000)
            let response = try await server.get("/v1/jobs/\(id)/graph?format=svg")
            #expect(response.status == 200)
            #expect(response.contentType == "image/svg+xml; charset=utf-8")
            #expect(response.header("content-security-policy") == "default-src 'none'; style-src 'unsafe-inline'")
            let svg = response.text
            #expect(svg.hasPrefix("<svg xmlns=\"http://www.w3.org/2000/svg\""))
            #expect(svg.hasSuffix("</svg>\n"))
            #expect(svg.contains("main · series"))
            #expect(svg.contains(">a</text>"))
            // Ids are tame today; names are escaped anyway, in case they ever are not.
            #expect(GraphSVG.escape("<img src=x onerror='a&b'>\u{1}") == "&lt;img src=x onerror=&#39;a&amp;b&#39;&gt;")
            #expect(svg.contains("fan · parallel"))
            #expect(svg.contains("y</text>"))
            #expect(svg.contains("22 instances"), "a map of more than 20 instances is one box")
            #expect(!svg.contains(">m[3]<"))
            #expect(svg.components(separatedBy: "marker-end").count - 1 == 2, "an arrow between each step")
        }
    }

    @Test func anUnknownDrawingFormatIs400AndAnUnknownJob404() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1))
            expectProblem(
                try await server.get("/v1/jobs/\(id)/graph?format=png"),
                400,
                "query.invalid",
                detail: "format must be mermaid, dot or svg"
            )
            expectProblem(try await server.get("/v1/jobs/nope/graph"), 404, "job.notFound", detail: "no job nope")
        }
    }

    // MARK: - Validate

    @Test func validatingAValidJobAnswersNodesAndDepthAndCreatesNothing() async throws {
        try await withServer { server in
            let response = try await server.post("/v1/graphs/validate", json: Self.seriesJob)
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            expectJSON(response.json, jsonValue(#"{"valid": true, "nodes": 4, "depth": 2}"#))
            expectJSON(
                try await server.post("/v1/graphs/validate", json: Jobs.value(1)).json,
                jsonValue(#"{"valid": true, "nodes": 1, "depth": 1}"#)
            )
            #expect(try await server.get("/v1/jobs").json["items"] == [])
        }
    }

    @Test func validatingAnInvalidJobIs422WithEveryProblem() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"{"graph": {"type": "series", "steps": [{"type": "task"}, {"type": "task", "action": "value", "executor": "gpu"}]}}"#
            )
            let response = try await server.post("/v1/graphs/validate", json: job)
            expectProblem(
                response,
                422,
                "graph.invalid",
                detail: "the job is invalid (2 problems)",
                errors: jsonValue(
                    #"""
                    [{"pointer": "/graph/steps/0/action", "message": "required"},
                     {"pointer": "/graph/steps/1/executor", "message": "unknown executor \"gpu\"; configured: default, immediate"}]
                    """#
                ).arrayValue
            )
            expectProblem(try await server.post("/v1/graphs/validate", text: "{"), 400, "json.malformed")
        }
    }

    // MARK: - Concurrency

    @Test func thirtyTwoConcurrentSubmittersOfFiftyJobsEachAllSucceed() async throws {
        try await withServer({ $0.executors = ["default": 8] }) { server in
            let submitters = 32
            let jobsEach = 50
            let ids = try await withThrowingTaskGroup(of: [String].self) { group in
                for submitter in 0..<submitters {
                    group.addTask {
                        try await server.raw { connection in
                            var ids: [String] = []
                            for n in 0..<jobsEach {
                                let body = Jobs.value(jsonValue(#"{"submitter": \#(submitter), "n": \#(n)}"#)).jsonBytes
                                try connection.send(
                                    HTTPRequestBytes.make(
                                        "POST",
                                        "/v1/jobs",
                                        headers: [("Content-Type", "application/json")],
                                        body: body
                                    )
                                )
                                guard let response = try connection.readResponse(), response.status == 201,
                                    let id = response.json["id"]?.stringValue
                                else { throw SocketError.malformed("submit failed") }
                                ids.append(id)
                            }
                            return ids
                        }
                    }
                }
                var all: [String] = []
                for try await ids in group { all += ids }
                return all
            }
            #expect(ids.count == submitters * jobsEach)
            #expect(Set(ids).count == submitters * jobsEach)
            // Every job succeeds: page through the list, waiting on any that has not finished yet.
            var listed: [JSONValue] = []
            var cursor: String?
            repeat {
                let page = try await server.get("/v1/jobs?limit=1000" + (cursor.map { "&cursor=\($0)" } ?? "")).json
                listed += page["items"]?.arrayValue ?? []
                cursor = page["nextCursor"]?.stringValue
            } while cursor != nil
            #expect(listed.count == submitters * jobsEach)
            #expect(Set(listed.compactMap { $0["id"]?.stringValue }) == Set(ids))
            for item in listed where item["state"] != "succeeded" {
                let id = item["id"]!.stringValue!
                #expect(try await server.finished(id)["state"] == "succeeded")
            }
            let succeeded = try await server.get("/v1/jobs?state=succeeded&limit=1000").json
            #expect(succeeded["items"]?.arrayValue?.count == 1000)
            #expect(succeeded["nextCursor"]?.stringValue != nil)
        }
    }

    /// A batch's keys are its items' `idempotencyKey`s: the header, which would do nothing and
    /// let a retried batch duplicate, is refused (#43).
    @Test func anIdempotencyKeyHeaderOnABatchIsRefused() async throws {
        try await withServer { server in
            let batch: JSONValue = ["jobs": [Jobs.value(1)]]
            let refused = try await server.post("/v1/jobs/batch", json: batch, headers: [("Idempotency-Key", "b-1")])
            #expect(refused.status == 422, "\(refused)")
            #expect(refused.json["code"] == "batch.invalid")
            #expect(refused.json["errors"]?.arrayValue?.first?["pointer"] == "/jobs/0/idempotencyKey", "\(refused)")
            #expect(try await server.get("/v1/jobs").json["items"] == [], "nothing was created")
            let bad = try await server.post("/v1/jobs/batch", json: ["jobs": [1]])
            let problem = bad.json["items"]?.arrayValue?.first?["problem"]
            #expect(problem?["detail"] == "the job is invalid: the batch item must be an object", "\(bad)")
        }
    }

    /// `?answer=ids`: each created or repeated job answered with its id only; problems as ever.
    @Test(arguments: [StoreKind.memory, .sqlite])
    func aBatchAnsweredWithIdsOnly(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            var keyed = try #require(Jobs.value(2).objectValue)
            keyed["idempotencyKey"] = "lean-1"
            let batch: JSONValue = ["jobs": [Jobs.value(1), .object(keyed), ["graph": ["type": "nope"]]]]
            let answer = try await server.post("/v1/jobs/batch?answer=ids", json: batch)
            #expect(answer.status == 200, "\(answer)")
            let items = try #require(answer.json["items"]?.arrayValue)
            #expect(items.map { $0["status"] } == [201, 201, 422], "\(answer)")
            #expect(items[0].objectValue?.keys.sorted() == ["id", "status"], "\(answer)")
            #expect(items[2]["problem"]?["code"] == "graph.invalid")
            let first = try #require(items[0]["id"]?.stringValue)
            #expect(try await server.finished(first)["result"] == 1)
            let again = try await server.post("/v1/jobs/batch?answer=ids", json: ["jobs": [.object(keyed)]])
            #expect(again.json["items"] == [["status": 200, "id": items[1]["id"]!]], "\(again)")
            let wrong = try await server.post("/v1/jobs/batch?answer=all", json: batch)
            #expect(wrong.status == 400 && wrong.json["code"] == "query.invalid", "\(wrong)")
        }
    }
}
