import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// `GET /v1/jobs/{id}/tasks…`, task cancel and `await` completion (SPEC §3.3, §3.5, §3.6).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct TasksAPITests {
    /// A series whose second step maps over the first step's result.
    static let mapJob = jsonValue(
        #"""
        {"input": {"items": [1, 2]},
         "graph": {"type": "series", "id": "main", "steps": [
            {"type": "task", "id": "pick", "action": "value", "params": {"value": "${input.items}"}},
            {"type": "map", "id": "each",
             "template": {"type": "task", "id": "echo", "action": "value", "executor": "immediate", "params": {"value": {"item": "${input}"}}}}]}}
        """#
    )

    static let mapJobNodes: [JSONValue] =
        jsonValue(
            #"""
            [{"id": "main", "type": "series", "state": "succeeded", "attempts": 0, "result": [{"item": 1}, {"item": 2}],
              "startedAt": "<time>", "finishedAt": "<time>"},
             {"id": "pick", "type": "task", "action": "value", "executor": "default", "state": "succeeded", "attempts": 1, "result": [1, 2],
              "startedAt": "<time>", "finishedAt": "<time>", "parent": "main"},
             {"id": "each", "type": "map", "state": "succeeded", "attempts": 0, "result": [{"item": 1}, {"item": 2}],
              "startedAt": "<time>", "finishedAt": "<time>", "parent": "main"},
             {"id": "echo[0]", "type": "task", "action": "value", "executor": "immediate", "state": "succeeded", "attempts": 1,
              "result": {"item": 1}, "startedAt": "<time>", "finishedAt": "<time>", "parent": "each"},
             {"id": "echo[1]", "type": "task", "action": "value", "executor": "immediate", "state": "succeeded", "attempts": 1,
              "result": {"item": 2}, "startedAt": "<time>", "finishedAt": "<time>", "parent": "each"}]
            """#
        ).arrayValue ?? []

    // MARK: - Read

    @Test func theTaskListHasEveryNodeParentsFirstWithMapInstances() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.mapJob, waitMs: 10_000)
            let response = try await server.get("/v1/jobs/\(id)/tasks")
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            expectJSON(response.json, ["items": .array(Self.mapJobNodes)])
            let job = try await server.get("/v1/jobs/\(id)").json
            #expect(job["result"] == jsonValue(#"[{"item": 1}, {"item": 2}]"#))
            #expect(job["progress"] == jsonValue(JobsAPITests.progress(total: 3, succeeded: 3)))
        }
    }

    @Test func oneTaskIsReadByItsPercentEncodedID() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.mapJob, waitMs: 10_000)
            let pick = try await server.get("/v1/jobs/\(id)/tasks/pick")
            #expect(pick.status == 200)
            expectJSON(pick.json, Self.mapJobNodes[1])
            let instance = try await server.get("/v1/jobs/\(id)/tasks/echo%5B1%5D")
            #expect(instance.status == 200)
            expectJSON(instance.json, Self.mapJobNodes[4])
            let lowercaseEscapes = try await server.get("/v1/jobs/\(id)/tasks/echo%5b0%5d")
            expectJSON(lowercaseEscapes.json, Self.mapJobNodes[3])
        }
    }

    @Test func nodesOfDynamicGraphsAreReadWithAnEncodedSlash() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "dynamic", "id": "dyn",
                    "source": {"type": "task", "id": "plan", "action": "value",
                        "params": {"value": {"graph": {"type": "task", "id": "x", "action": "value", "params": {"value": 42}}}}}}}
                """#
            )
            let id = try await server.submitID(job, waitMs: 10_000)
            let response = try await server.get("/v1/jobs/\(id)/tasks/dyn%2Fx")
            #expect(response.status == 200)
            expectJSON(
                response.json,
                jsonValue(
                    #"""
                    {"id": "dyn/x", "type": "task", "action": "value", "executor": "default", "state": "succeeded", "attempts": 1,
                     "result": 42, "startedAt": "<time>", "finishedAt": "<time>", "parent": "dyn"}
                    """#
                )
            )
            // An unencoded slash is another path, which has no route.
            expectProblem(
                try await server.get("/v1/jobs/\(id)/tasks/dyn/x"),
                404,
                "route.notFound",
                detail: "no route for /v1/jobs/\(id)/tasks/dyn/x"
            )
        }
    }

    @Test func generatedIDsWithDotsAreReadable() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"{"graph": {"type": "series", "steps": [{"type": "task", "action": "value", "params": {"value": 1}}]}}"#
            )
            let id = try await server.submitID(job, waitMs: 10_000)
            let items = try await server.get("/v1/jobs/\(id)/tasks").json["items"]?.arrayValue ?? []
            #expect(items.compactMap { $0["id"]?.stringValue } == ["root", "root.steps.0"])
            let step = try await server.get("/v1/jobs/\(id)/tasks/root.steps.0")
            #expect(step.status == 200)
            #expect(step.json["result"] == 1)
            #expect(step.json["parent"] == "root")
        }
    }

    @Test func unknownTasksAndJobsAre404() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            expectProblem(
                try await server.get("/v1/jobs/\(id)/tasks/nope"),
                404,
                "task.notFound",
                detail: "job \(id) has no task nope"
            )
            expectProblem(
                try await server.get("/v1/jobs/\(id)/tasks/v%5B0%5D"),
                404,
                "task.notFound",
                detail: "job \(id) has no task v[0]"
            )
            expectProblem(try await server.get("/v1/jobs/nope/tasks"), 404, "job.notFound", detail: "no job nope")
            expectProblem(try await server.get("/v1/jobs/nope/tasks/v"), 404, "job.notFound", detail: "no job nope")
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/nope/cancel"),
                404,
                "task.notFound",
                detail: "job \(id) has no task nope"
            )
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/nope/complete", text: #"{"result": 1}"#),
                404,
                "task.notFound",
                detail: "job \(id) has no task nope"
            )
            expectProblem(
                try await server.post("/v1/jobs/nope/tasks/v/cancel"),
                404,
                "job.notFound",
                detail: "no job nope"
            )
            expectProblem(
                try await server.post("/v1/jobs/nope/tasks/v/complete", text: #"{"result": 1}"#),
                404,
                "job.notFound",
                detail: "no job nope"
            )
        }
    }

    // MARK: - Cancel one node

    static let waitThenValue = jsonValue(
        #"""
        {"graph": {"type": "series", "id": "main", "steps": [
            {"type": "task", "id": "wait", "action": "delay", "params": {"ms": 60000}},
            {"type": "task", "id": "after", "action": "value", "params": {"value": 1}}]}}
        """#
    )

    @Test func cancellingARunningTaskAnswers202AndEndsItsSeriesCancelled() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.waitThenValue)
            try await server.waitUntilStarted(id, task: "wait")
            let first = try await server.post("/v1/jobs/\(id)/tasks/wait/cancel")
            #expect(first.status == 202, "\(first)")
            #expect(first.json["id"] == "wait")
            let job = try await server.finished(id)
            #expect(job["state"] == "cancelled")
            #expect(job["progress"] == jsonValue(JobsAPITests.progress(total: 2, cancelled: 1, skipped: 1)))
            let wait = try await server.get("/v1/jobs/\(id)/tasks/wait").json
            expectJSON(
                wait,
                jsonValue(
                    #"""
                    {"id": "wait", "type": "task", "action": "delay", "executor": "default", "state": "cancelled", "attempts": 1,
                     "startedAt": "<time>", "finishedAt": "<time>", "parent": "main"}
                    """#
                )
            )
            #expect(try await server.get("/v1/jobs/\(id)/tasks/after").json["state"] == "skipped")
            // Repeating it: the node is already cancelled.
            let repeated = try await server.post("/v1/jobs/\(id)/tasks/wait/cancel")
            #expect(repeated.status == 200)
            #expect(repeated.json == wait)
        }
    }

    @Test func cancellingAPendingTaskCancelsItWhenItsTurnComes() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "series", "id": "main", "steps": [
                    {"type": "task", "id": "gate", "action": "await"},
                    {"type": "task", "id": "later", "action": "value", "params": {"value": 1}}]}}
                """#
            )
            let id = try await server.submitID(job)
            let response = try await server.post("/v1/jobs/\(id)/tasks/later/cancel")
            #expect(response.status == 202)
            #expect(response.json["state"] == "pending")
            // Nothing happens until the series reaches the cancelled step.
            #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "running")
            try await server.waitUntilStarted(id, task: "gate")
            #expect(try await server.post("/v1/jobs/\(id)/tasks/gate/complete", text: #"{"result": 1}"#).status == 200)
            let finished = try await server.finished(id)
            #expect(finished["state"] == "cancelled")
            #expect(try await server.get("/v1/jobs/\(id)/tasks/gate").json["state"] == "succeeded")
            #expect(try await server.get("/v1/jobs/\(id)/tasks/later").json["state"] == "cancelled")
        }
    }

    @Test func cancellingAFinishedTaskIs409Terminal() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/v/cancel"),
                409,
                "task.terminal",
                detail: "task v already ended"
            )
        }
    }

    // MARK: - Complete an await task

    @Test func completingARunningAwaitTaskAnswers200WithTheNodeAndTheJobSucceeds() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.await())
            try await server.waitUntilStarted(id, task: "approve")
            let response = try await server.post(
                "/v1/jobs/\(id)/tasks/approve/complete",
                text: #"{"result": {"approved": true}}"#
            )
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            expectJSON(
                response.json,
                jsonValue(
                    #"""
                    {"id": "approve", "type": "task", "action": "await", "executor": "default", "state": "succeeded", "attempts": 1,
                     "result": {"approved": true}, "startedAt": "<time>", "finishedAt": "<time>"}
                    """#
                )
            )
            let approved = jsonValue(#"{"approved": true}"#)
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded")
            #expect(job["result"] == approved)
            // First completion wins.
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: #"{"result": 2}"#),
                409,
                "task.terminal",
                detail: "task approve already ended"
            )
            #expect(try await server.get("/v1/jobs/\(id)").json["result"] == approved)
        }
    }

    @Test func completingAnAwaitTaskWithAnErrorFailsTheJob() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.await())
            try await server.waitUntilStarted(id, task: "approve")
            let response = try await server.post(
                "/v1/jobs/\(id)/tasks/approve/complete",
                text:
                    #"{"error": {"code": "approval.denied", "message": "Rejected by reviewer", "details": {"by": "ann"}}}"#
            )
            #expect(response.status == 200)
            #expect(response.json["state"] == "failed")
            let error = jsonValue(
                #"{"code": "approval.denied", "message": "Rejected by reviewer", "taskId": "approve", "details": {"by": "ann"}}"#
            )
            expectJSON(response.json["error"] ?? .null, error)
            let job = try await server.finished(id)
            #expect(job["state"] == "failed")
            expectJSON(job["error"] ?? .null, error)
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: #"{"result": 1}"#),
                409,
                "task.terminal",
                detail: "task approve already ended"
            )
        }
    }

    @Test func completingATaskThatIsNotAnAwaitIs409NotAwait() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.waitThenValue)
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/wait/complete", text: #"{"result": 1}"#),
                409,
                "task.notAwait",
                detail: "task wait is not an await task"
            )
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/main/complete", text: #"{"result": 1}"#),
                409,
                "task.notAwait",
                detail: "task main is not an await task"
            )
            _ = try await server.post("/v1/jobs/\(id)/cancel")
        }
    }

    @Test func completingAnAwaitTaskThatHasNotStartedIs409NotRunning() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "series", "id": "main", "steps": [
                    {"type": "task", "id": "wait", "action": "delay", "params": {"ms": 60000}},
                    {"type": "task", "id": "approve", "action": "await"}]}}
                """#
            )
            let id = try await server.submitID(job)
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: #"{"result": 1}"#),
                409,
                "task.notRunning",
                detail: "task approve has not started waiting yet"
            )
            #expect(try await server.get("/v1/jobs/\(id)/tasks/approve").json["state"] == "pending")
            _ = try await server.post("/v1/jobs/\(id)/cancel")
            #expect(try await server.finished(id)["state"] == "cancelled")
            // Once the job is cancelled the never-started await is skipped, hence terminal.
            expectProblem(
                try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: #"{"result": 1}"#),
                409,
                "task.terminal",
                detail: "task approve already ended"
            )
        }
    }

    @Test func anAwaitWithATimeoutFailsWithTaskTimeout() async throws {
        try await withServer { server in
            let job = jsonValue(
                #"{"graph": {"type": "task", "id": "approve", "action": "await", "params": {"timeoutMs": 100}}}"#
            )
            let finished = try await server.submit(job, waitMs: 10_000)
            #expect(finished["state"] == "failed")
            #expect(finished["error"]?["code"] == "task.timeout")
            #expect(finished["error"]?["taskId"] == "approve")
        }
    }

    /// Bodies that are JSON but not completions, with the problems expected for each.
    static let badCompletions: [(body: String, errors: String)] = [
        ("{}", #"[{"pointer": "", "message": "give exactly one of \"result\" and \"error\""}]"#),
        ("[1]", #"[{"pointer": "", "message": "must be an object"}]"#),
        (
            #"{"result": 1, "error": {"code": "a", "message": "b"}}"#,
            #"[{"pointer": "", "message": "give exactly one of \"result\" and \"error\""}]"#
        ),
        (#"{"result": 1, "extra": 2}"#, #"[{"pointer": "/extra", "message": "unknown field \"extra\""}]"#),
        (#"{"error": "no"}"#, #"[{"pointer": "/error", "message": "must be an object"}]"#),
        (
            #"{"error": {"code": "", "message": 5, "why": 1}}"#,
            #"""
            [{"pointer": "/error/why", "message": "unknown field \"why\""},
             {"pointer": "/error/code", "message": "must be a non-empty string"},
             {"pointer": "/error/message", "message": "must be a string"}]
            """#
        ),
    ]

    @Test(arguments: 0..<TasksAPITests.badCompletions.count)
    func anInvalidCompletionBodyIs422WithPointers(_ index: Int) async throws {
        let (body, errors) = Self.badCompletions[index]
        try await withServer { server in
            let id = try await server.submitID(Jobs.await())
            try await server.waitUntilStarted(id, task: "approve")
            let response = try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: body)
            expectProblem(response, 422, "graph.invalid", errors: jsonValue(errors).arrayValue ?? [])
            // The task is still waiting.
            #expect(try await server.get("/v1/jobs/\(id)/tasks/approve").json["state"] == "running")
            #expect(
                try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: #"{"result": null}"#).status == 200
            )
            #expect(try await server.finished(id)["result"] == .null)
        }
    }

    @Test func aCompletionBodyThatIsNotJSONIs415Or400() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.await())
            try await server.waitUntilStarted(id, task: "approve")
            let target = "/v1/jobs/\(id)/tasks/approve/complete"
            expectProblem(
                try await server.post(target, text: "{\"result\": 1}", contentType: "text/plain"),
                415,
                "contentType.unsupported"
            )
            expectProblem(try await server.post(target, text: "{\"result\": }"), 400, "json.malformed")
            #expect(try await server.post(target, text: #"{"result": 1}"#).status == 200)
        }
    }
}
