import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// `GET /v1/jobs/{id}/events?after=&waitMs=` (SPEC §3.4).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct EventsAPITests {
    static func event(_ seq: Int, _ type: String, task: String? = nil, data: JSONValue? = nil) -> JSONValue {
        var object = JSONObject()
        object["seq"] = .int(seq)
        object["type"] = .string(type)
        object["time"] = .string("<time>")
        if let task { object["taskId"] = .string(task) }
        if let data { object["data"] = data }
        return .object(object)
    }

    static let twoSteps = jsonValue(
        #"""
        {"graph": {"type": "series", "id": "main", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": 1}},
            {"type": "task", "id": "b", "action": "value", "params": {"value": 2}}]}}
        """#
    )

    @Test func theEventsOfAFinishedJobAreInOrderFromSeq1WithoutGaps() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.twoSteps, waitMs: 10_000)
            let response = try await server.get("/v1/jobs/\(id)/events")
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            let expected: [JSONValue] = [
                Self.event(1, "job.created"),
                Self.event(2, "job.started"),
                Self.event(3, "task.started", task: "main"),
                Self.event(4, "task.started", task: "a"),
                Self.event(5, "task.succeeded", task: "a"),
                Self.event(6, "task.started", task: "b"),
                Self.event(7, "task.succeeded", task: "b"),
                Self.event(8, "task.succeeded", task: "main"),
                Self.event(9, "job.succeeded"),
            ]
            var body = JSONObject()
            body["items"] = .array(expected)
            expectJSON(response.json, .object(body))
        }
    }

    @Test func failuresSkipsAndRetriesCarryTheirData() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "series", "id": "main", "steps": [
                    {"type": "task", "id": "flaky", "action": "fail", "params": {"code": "x.flaky", "message": "again"},
                     "retry": {"maxAttempts": 2, "delayMs": 0}},
                    {"type": "task", "id": "never", "action": "value"}]}}
                """#
            )
            let id = try await server.submitID(job, waitMs: 10_000)
            let error = jsonValue(#"{"code": "x.flaky", "message": "again", "taskId": "flaky"}"#)
            let items = try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue ?? []
            let seqs = items.compactMap { $0["seq"]?.intValue }
            #expect(seqs == Array(1...seqs.count))
            let types = items.compactMap { $0["type"]?.stringValue }
            #expect(
                types == [
                    "job.created", "job.started", "task.started", "task.started", "task.retrying", "task.failed",
                    "task.failed",
                    "task.skipped", "job.failed",
                ]
            )
            guard items.count == 9 else { return }
            #expect(items[4]["taskId"] == "flaky")
            #expect(items[4]["data"]?["attempt"] == 1)
            #expect(items[4]["data"]?["delayMs"] == 0)
            #expect(items[4]["data"]?["error"]?["code"] == "x.flaky")
            expectJSON(items[5], Self.event(6, "task.failed", task: "flaky", data: error))
            expectJSON(items[6], Self.event(7, "task.failed", task: "main", data: error))
            expectJSON(items[7], Self.event(8, "task.skipped", task: "never"))
            expectJSON(items[8], Self.event(9, "job.failed", data: error))
            #expect(try await server.get("/v1/jobs/\(id)/tasks/flaky").json["attempts"] == 2)
        }
    }

    @Test func afterReturnsOnlyLaterEvents() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.twoSteps, waitMs: 10_000)
            let all = try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue ?? []
            #expect(all.count == 9)
            let tail = try await server.get("/v1/jobs/\(id)/events?after=6").json["items"]?.arrayValue ?? []
            #expect(tail == Array(all.dropFirst(6)))
            #expect(try await server.get("/v1/jobs/\(id)/events?after=9").json == ["items": []])
            #expect(try await server.get("/v1/jobs/\(id)/events?after=1000").json == ["items": []])
            #expect(try await server.get("/v1/jobs/\(id)/events?after=0").json["items"]?.arrayValue == all)
            let page = try await server.get("/v1/jobs/\(id)/events?after=2&limit=3").json["items"]?.arrayValue ?? []
            #expect(page.compactMap { $0["seq"]?.intValue } == [3, 4, 5])
        }
    }

    @Test func aLongPollWakesOnTheNextEvent() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.delay(1000))
            let started = try await server.waitForEvent(id) { $0["type"] == "task.started" }
            let last = try #require(started?["seq"]?.intValue)
            let (response, elapsed) = try await elapsedMilliseconds {
                try await server.get("/v1/jobs/\(id)/events?after=\(last)&waitMs=10000")
            }
            #expect(response.status == 200)
            let items = response.json["items"]?.arrayValue ?? []
            #expect(items.first?["seq"] == .int(last + 1))
            #expect(items.first?["type"] == "task.succeeded")
            #expect(elapsed < TestTiming.ms(3000), "the long poll took \(elapsed) ms")
        }
    }

    @Test func aLongPollWakesWhenAnAwaitTaskIsCompleted() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.await())
            try await server.waitUntilStarted(id, task: "approve")
            let last = try #require(
                try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue?.last?["seq"]?.intValue
            )
            let start = ContinuousClock.now
            async let poll = server.get("/v1/jobs/\(id)/events?after=\(last)&waitMs=20000")
            let completed = try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: #"{"result": "yes"}"#)
            #expect(completed.status == 200)
            let response = try await poll
            let elapsed = ContinuousClock.now - start
            let items = response.json["items"]?.arrayValue ?? []
            #expect(items.first?["seq"] == .int(last + 1))
            #expect(items.first?["type"] == "task.succeeded")
            #expect(items.first?["taskId"] == "approve")
            #expect(elapsed < TestTiming.scaled(.seconds(10)))
        }
    }

    @Test func aLongPollWithNoNewEventAnswersAnEmptyListWhenTheTimeIsUp() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.await())
            try await server.waitUntilStarted(id, task: "approve")
            let last = try #require(
                try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue?.last?["seq"]?.intValue
            )
            let (response, elapsed) = try await elapsedMilliseconds {
                try await server.get("/v1/jobs/\(id)/events?after=\(last)&waitMs=250")
            }
            #expect(response.status == 200)
            #expect(response.json == ["items": []])
            #expect(elapsed >= 200)
            _ = try await server.post("/v1/jobs/\(id)/cancel")
        }
    }

    @Test func aCancelledJobEndsWithTaskAndJobCancelledEvents() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.delay(60_000))
            try await server.waitUntilStarted(id, task: "wait")
            _ = try await server.post("/v1/jobs/\(id)/cancel")
            _ = try await server.finished(id)
            let types = try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue?.compactMap {
                $0["type"]?.stringValue
            }
            #expect(types == ["job.created", "job.started", "task.started", "task.cancelled", "job.cancelled"])
        }
    }

    @Test(arguments: ["abc", "-1", "1.0", "", "9007199254740992"])
    func anAfterThatIsNotANonNegativeIntegerIs400(_ after: String) async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1))
            expectProblem(
                try await server.get("/v1/jobs/\(id)/events?after=\(after)"),
                400,
                "query.invalid",
                detail: "after must be an integer from 0 to 9007199254740991, got \"\(after)\""
            )
        }
    }

    @Test func aLimitOutOfRangeIs400AndAnUnknownJob404() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1))
            expectProblem(
                try await server.get("/v1/jobs/\(id)/events?limit=0"),
                400,
                "query.invalid",
                detail: "limit must be an integer from 1 to 10000, got \"0\""
            )
            expectProblem(try await server.get("/v1/jobs/nope/events"), 404, "job.notFound", detail: "no job nope")
            expectProblem(
                try await server.get("/v1/jobs/nope/events?waitMs=5000"),
                404,
                "job.notFound",
                detail: "no job nope"
            )
        }
    }
}
