import Foundation
import InMemoryLogging
import Logging
import NIOHTTP1
import Synchronization
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// External worker pools over HTTP (SPEC §6): claims, leases, heartbeats, completions, and what
/// happens to a lease when its worker vanishes, its task is cancelled, or the server restarts.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ExternalPoolsAPITests {
    static func external(_ configuration: inout ServerConfiguration) {
        configuration.externalExecutors = ["images"]
    }

    /// One worker task on `images`, with extra task fields.
    static func job(_ id: String = "thumb", action: String = "resize", _ extra: String = "") -> JSONValue {
        jsonValue(
            #"{"input": {"w": 3}, "graph": {"type": "task", "id": "\#(id)", "executor": "images", "action": "\#(action)", "params": {"width": "${input.w}"}\#(extra)}}"#
        )
    }

    static func claim(
        _ server: TestServer,
        worker: String = "w1",
        max: Int = 1,
        waitMs: Int = 0,
        actions: [String]? = nil
    ) async throws -> [JSONValue] {
        var body: JSONObject = ["workerId": .string(worker), "max": .int(max), "waitMs": .int(waitMs)]
        if let actions { body["actions"] = .array(actions.map(JSONValue.string)) }
        let response = try await server.post("/v1/executors/images/claim", json: .object(body))
        #expect(response.status == 200, "\(response)")
        return response.json["items"]?.arrayValue ?? []
    }

    // MARK: - The happy path

    @Test func aClaimedTaskIsHeartbeatedAndCompletedAndTheJobGoesOn() async throws {
        try await withServer(Self.external) { server in
            // Long enough for the whole test, even under ThreadSanitizer.
            let timeout = TestTiming.ms(10_000)
            let job = jsonValue(
                #"""
                {"input": {"w": 3}, "graph": {"type": "series", "steps": [
                  {"type": "task", "id": "thumb", "executor": "images", "action": "resize", "params": {"width": "${input.w}"}, "heartbeatTimeoutMs": \#(timeout)},
                  {"type": "task", "id": "after", "action": "value", "params": {"value": "${tasks.thumb.result.url}"}}]}}
                """#
            )
            let id = try await server.submitID(job)
            let pending = try await server.get("/v1/jobs/\(id)/tasks/thumb").json
            #expect(pending["state"] == "pending", "a worker task waits in its pool's queue as pending")

            let items = try await Self.claim(server, waitMs: 5000)
            try #require(items.count == 1)
            let item = items[0]
            let leaseId = try #require(item["leaseId"]?.stringValue)
            #expect(LeaseID.isPlausible(leaseId))
            expectJSON(
                item.withLease,
                jsonValue(
                    #"{"leaseId": "<lease>", "jobId": "\#(id)", "taskId": "thumb", "action": "resize", "params": {"width": 3}, "input": {"w": 3}, "attempt": 1, "heartbeatTimeoutMs": \#(timeout)}"#
                )
            )

            let beat = try await server.post("/v1/leases/\(leaseId)/heartbeat", json: ["progress": ["done": 0.5]])
            #expect(beat.status == 200)
            #expect(beat.json == ["cancelRequested": false])
            let running = try await server.get("/v1/jobs/\(id)/tasks/thumb")
            #expect(running.json["state"] == "running")
            #expect(running.json["workerId"] == "w1")
            #expect(running.json["progress"] == ["done": 0.5])
            let list = try await server.get("/v1/jobs/\(id)/tasks")
            #expect(!list.text.contains(leaseId), "a lease id is never shown to readers")

            let completed = try await server.post("/v1/leases/\(leaseId)/complete", json: ["result": ["url": "s3://x"]])
            #expect(completed.status == 200, "\(completed)")
            #expect(completed.json["state"] == "succeeded")
            #expect(completed.json["result"] == ["url": "s3://x"])
            let finished = try await server.finished(id)
            #expect(finished["state"] == "succeeded")
            #expect(finished["result"] == "s3://x")
            let events = try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue ?? []
            let started = events.first { $0["type"] == "task.started" && $0["taskId"] == "thumb" }
            #expect(started?["data"] == ["workerId": "w1"])

            // Exactly one outcome per attempt: a late call changes nothing.
            expectProblem(
                try await server.post("/v1/leases/\(leaseId)/complete", json: ["result": 2]),
                409,
                "lease.gone"
            )
            expectProblem(try await server.post("/v1/leases/\(leaseId)/heartbeat"), 409, "lease.gone")
            #expect(try await server.get("/v1/jobs/\(id)").json["result"] == "s3://x")
        }
    }

    @Test func aWaitingClaimIsHandedATaskTheMomentItIsReady() async throws {
        try await withServer(Self.external) { server in
            async let claimed = Self.claim(server, waitMs: 20_000)
            // Let the claim arrive and wait first.
            try await Self.waitForWaitingClaims(server, 1)
            let (id, elapsed) = try await elapsedMilliseconds { try await server.submitID(Self.job()) }
            let items = try await claimed
            #expect(items.first?["jobId"] == .string(id))
            #expect(elapsed < TestTiming.ms(2000))
        }
    }

    @Test func aClaimWhoseClientHungUpIsWithdrawn() async throws {
        try await withServer(Self.external) { server in
            let port = server.port
            let connection = try await Blocking.run { try SocketConnection(port: port) }
            let body: JSONValue = ["workerId": "ghost", "waitMs": 20_000]
            try connection.send(
                HTTPRequestBytes.make(
                    "POST",
                    "/v1/executors/images/claim",
                    headers: [("Content-Type", "application/json")],
                    body: body.jsonBytes
                )
            )
            try await Self.waitForWaitingClaims(server, 1)
            connection.close()
            try await Self.waitForWaitingClaims(server, 0)
            let id = try await server.submitID(Self.job())
            #expect(try await server.get("/v1/jobs/\(id)/tasks/thumb").json["state"] == "pending")
            let items = try await Self.claim(server, worker: "alive")
            #expect(items.first?["jobId"] == .string(id), "the task waited for a worker that reads its answer")
        }
    }

    @Test func claimsTakeTasksInFIFOOrderAndFilterByAction() async throws {
        try await withServer(Self.external) { server in
            var ids: [String] = []
            for action in ["a", "b", "a", "b"] { ids.append(try await server.submitID(Self.job(action: action))) }
            let bs = try await Self.claim(server, max: 10, actions: ["b", "c"])
            #expect(bs.map { $0["jobId"]?.stringValue } == [ids[1], ids[3]])
            let first = try await Self.claim(server, max: 1)
            #expect(first.map { $0["jobId"]?.stringValue } == [ids[0]])
            let rest = try await Self.claim(server, max: 100)
            #expect(rest.map { $0["jobId"]?.stringValue } == [ids[2]])
            #expect(try await Self.claim(server, max: 100).isEmpty)
            let pools = try await server.get("/v1/executors").json["items"]?.arrayValue ?? []
            let images = pools.first { $0["name"] == "images" }
            #expect(
                images == [
                    "name": "images", "kind": "external", "queued": 0, "leased": 4, "workers": 1,
                    "queuedByPriority": [:],
                ]
            )
            let workers = try await server.get("/v1/executors/images/workers").json["items"]?.arrayValue ?? []
            #expect(workers.map { $0["workerId"] } == ["w1"])
            #expect(workers.first?["leases"] == 4)
        }
    }

    // MARK: - Leases that end without their worker

    @Test func anExpiredLeaseFailsTheAttemptAndTheRetryGoesToAnotherWorker() async throws {
        let clock = ManualClock()
        try await withServer(clock: clock, Self.external) { server in
            let id = try await server.submitID(
                Self.job("t", #", "heartbeatTimeoutMs": 1500, "retry": {"maxAttempts": 2}"#)
            )
            let first = try await Self.claim(server, worker: "vanishing", waitMs: 5000)
            let lost = try #require(first.first?["leaseId"]?.stringValue)
            // The worker vanishes: no heartbeat. The next worker gets attempt 2 after the timeout.
            async let second = Self.claim(server, worker: "steady", waitMs: 60_000)
            try await Self.waitForWaitingClaims(server, 1)
            clock.advance(by: .milliseconds(1499))
            #expect(server.app.externalPools.statistics("images")?.leased == 1, "not expired a millisecond early")
            clock.advance(by: .milliseconds(1))
            let items = try await second
            #expect(items.first?["attempt"] == 2)
            let lease = try #require(items.first?["leaseId"]?.stringValue)
            #expect(try await server.post("/v1/leases/\(lease)/complete", json: ["result": 2]).status == 200)
            let job = try await server.finished(id)
            #expect(job["result"] == 2)
            let events = try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue ?? []
            let retrying = events.first { $0["type"] == "task.retrying" }
            #expect(retrying?["data"]?["error"]?["code"] == "task.heartbeatTimeout")
            expectProblem(try await server.post("/v1/leases/\(lost)/complete", json: ["result": 1]), 409, "lease.gone")
            #expect(server.app.externalPools.statistics("images")?.expired == 1)
        }
    }

    @Test func withoutARetryAnExpiredLeaseFailsTheTask() async throws {
        let clock = ManualClock()
        try await withServer(clock: clock, Self.external) { server in
            let id = try await server.submitID(Self.job("t", #", "heartbeatTimeoutMs": 1000"#))
            _ = try await Self.claim(server, waitMs: 5000)
            clock.advance(by: .seconds(1))
            let job = try await server.finished(id)
            #expect(job["state"] == "failed")
            #expect(job["error"]?["code"] == "task.heartbeatTimeout")
            #expect(job["error"]?["taskId"] == "t")
        }
    }

    @Test func heartbeatsKeepALeaseAlive() async throws {
        let clock = ManualClock()
        try await withServer(clock: clock, Self.external) { server in
            let id = try await server.submitID(Self.job("t", #", "heartbeatTimeoutMs": 2000"#))
            let lease = try #require(try await Self.claim(server, waitMs: 5000).first?["leaseId"]?.stringValue)
            // Seven heartbeats 1.9 s apart: the lease outlives its timeout by far.
            for _ in 0..<7 {
                clock.advance(by: .milliseconds(1900))
                #expect(try await server.post("/v1/leases/\(lease)/heartbeat").status == 200)
            }
            #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "running")
            #expect(try await server.post("/v1/leases/\(lease)/complete", json: ["result": "ok"]).status == 200)
            // Its timers went with it: what is left is the delayed-start loader's tick.
            #expect(clock.pendingTimers == 1)
        }
    }

    @Test func cancellingTheJobEndsALeasedTaskAtOnceAndTellsTheWorker() async throws {
        try await withServer(Self.external) { server in
            let id = try await server.submitID(Self.job())
            let lease = try #require(try await Self.claim(server, waitMs: 5000).first?["leaseId"]?.stringValue)
            #expect(try await server.post("/v1/jobs/\(id)/cancel").status == 202)
            let job = try await server.finished(id)
            #expect(job["state"] == "cancelled")
            #expect(try await server.get("/v1/jobs/\(id)/tasks/thumb").json["state"] == "cancelled")
            let beat = try await server.post("/v1/leases/\(lease)/heartbeat")
            #expect(beat.status == 200)
            #expect(beat.json == ["cancelRequested": true])
            expectProblem(try await server.post("/v1/leases/\(lease)/complete", json: ["result": 1]), 409, "lease.gone")
        }
    }

    @Test func aCancelledQueuedTaskIsNeverHandedOut() async throws {
        try await withServer(Self.external) { server in
            let id = try await server.submitID(Self.job())
            #expect(try await server.post("/v1/jobs/\(id)/tasks/thumb/cancel").status == 202)
            #expect(try await server.finished(id)["state"] == "cancelled")
            #expect(try await Self.claim(server, max: 10).isEmpty)
        }
    }

    @Test func aNonRetryableErrorIsNotRetried() async throws {
        try await withServer(Self.external) { server in
            let id = try await server.submitID(Self.job("t", #", "retry": {"maxAttempts": 3}"#))
            let lease = try #require(try await Self.claim(server, waitMs: 5000).first?["leaseId"]?.stringValue)
            let failed = try await server.post(
                "/v1/leases/\(lease)/complete",
                json: [
                    "error": ["code": "image.corrupt", "message": "bad header", "details": ["offset": 4]],
                    "retryable": false,
                ]
            )
            #expect(failed.status == 200)
            let job = try await server.finished(id)
            #expect(job["state"] == "failed")
            expectJSON(
                job["error"] ?? .null,
                ["code": "image.corrupt", "message": "bad header", "details": ["offset": 4], "taskId": "t"]
            )
            #expect(try await server.get("/v1/jobs/\(id)/tasks/t").json["attempts"] == 1)
        }
    }

    @Test func aRetryableErrorFollowsTheTasksRetry() async throws {
        try await withServer(Self.external) { server in
            let id = try await server.submitID(Self.job("t", #", "retry": {"maxAttempts": 2}"#))
            let lease = try #require(try await Self.claim(server, waitMs: 5000).first?["leaseId"]?.stringValue)
            let failed = try await server.post(
                "/v1/leases/\(lease)/complete",
                json: ["error": ["code": "net.flaky", "message": "try again"]]
            )
            #expect(failed.status == 200)
            let again = try await Self.claim(server, waitMs: 5000)
            #expect(again.first?["attempt"] == 2)
            let second = try #require(again.first?["leaseId"]?.stringValue)
            #expect(try await server.post("/v1/leases/\(second)/complete", json: ["result": "ok"]).status == 200)
            #expect(try await server.finished(id)["state"] == "succeeded")
        }
    }

    @Test func aTaskNoWorkerClaimsInTimeFailsWithScheduleTimeout() async throws {
        let clock = ManualClock()
        try await withServer(clock: clock, Self.external) { server in
            let id = try await server.submitID(Self.job("t", #", "scheduleTimeoutMs": 200"#))
            #expect(server.app.externalPools.statistics("images")?.queued == 1)
            clock.advance(by: .milliseconds(200))
            let job = try await server.finished(id)
            #expect(job["error"]?["code"] == "task.scheduleTimeout")
            #expect(server.app.externalPools.statistics("images")?.queued == 0)
            #expect(try await Self.claim(server).isEmpty)
        }
    }

    @Test func aTimeoutCountsFromTheClaimAndTheClaimSaysWhen() async throws {
        let clock = ManualClock()
        try await withServer(clock: clock, Self.external) { server in
            let id = try await server.submitID(Self.job("t", #", "timeoutMs": 300"#))
            clock.advance(by: .milliseconds(500))  // queued time does not count
            let item = try #require(try await Self.claim(server).first)
            let deadline = Timestamp(milliseconds: clock.now().milliseconds + 300)
            #expect(item["deadline"]?.stringValue == deadline.rfc3339)
            clock.advance(by: .milliseconds(299))
            #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "running")
            clock.advance(by: .milliseconds(1))
            let job = try await server.finished(id)
            #expect(job["error"]?["code"] == "task.timeout")
        }
    }

    // MARK: - Batches

    @Test func aBatchCompletionJudgesEachItemAndClaimsTheNextWork() async throws {
        try await withServer(Self.external) { server in
            var ids: [String] = []
            for _ in 0..<3 { ids.append(try await server.submitID(Self.job())) }
            let items = try await Self.claim(server, max: 2)
            let leases = items.compactMap { $0["leaseId"]?.stringValue }
            try #require(leases.count == 2)
            let body = jsonValue(
                #"""
                {"items": [{"leaseId": "\#(leases[0])", "result": 1},
                           {"leaseId": "lease_00000000000000000000000000000000", "result": 2},
                           {"leaseId": "\#(leases[1])", "error": {"code": "x", "message": "y"}, "retryable": false},
                           {"leaseId": "\#(leases[0])", "result": 3}],
                 "claimNext": {"max": 5, "waitMs": 1000}}
                """#
            )
            let response = try await server.post("/v1/leases/complete", json: body)
            #expect(response.status == 200, "\(response)")
            expectJSON(
                response.json["items"] ?? .null,
                jsonValue(
                    #"""
                    [{"leaseId": "\#(leases[0])", "status": 200},
                     {"leaseId": "lease_00000000000000000000000000000000", "status": 404, "code": "lease.notFound"},
                     {"leaseId": "\#(leases[1])", "status": 200},
                     {"leaseId": "\#(leases[0])", "status": 409, "code": "lease.gone"}]
                    """#
                )
            )
            let claimed = response.json["claimed"]?.arrayValue ?? []
            #expect(claimed.map { $0["jobId"]?.stringValue } == [ids[2]])
            #expect(try await server.finished(ids[0])["result"] == 1)
            #expect(try await server.finished(ids[1])["state"] == "failed")

            let beats = try await server.post(
                "/v1/leases/heartbeat",
                json: jsonValue(
                    #"{"items": [{"leaseId": "\#(claimed.first?["leaseId"]?.stringValue ?? "")", "progress": 1}, {"leaseId": "\#(leases[0])"}]}"#
                )
            )
            expectJSON(
                .array(beats.json["items"]?.arrayValue?.map { $0.removing("leaseId") } ?? []),
                [["status": 200, "cancelRequested": false], ["status": 409, "code": "lease.gone"]]
            )
        }
    }

    @Test func aSingleCompletionCanClaimTheNextTask() async throws {
        try await withServer(Self.external) { server in
            let first = try await server.submitID(Self.job())
            let second = try await server.submitID(Self.job())
            let lease = try #require(try await Self.claim(server).first?["leaseId"]?.stringValue)
            let response = try await server.post(
                "/v1/leases/\(lease)/complete",
                json: ["result": 1, "claimNext": ["max": 1]]
            )
            #expect(response.status == 200)
            #expect(response.json["id"] == "thumb")
            #expect(response.json["claimed"]?.arrayValue?.map { $0["jobId"] } == [.string(second)])
            #expect(try await server.finished(first)["result"] == 1)
        }
    }

    // MARK: - Bad input

    @Test func badClaimsAndUnknownLeasesGetClearProblems() async throws {
        try await withServer(Self.external) { server in
            let body: JSONValue = ["workerId": "w1"]
            expectProblem(try await server.post("/v1/executors/nope/claim", json: body), 404, "executor.notFound")
            expectProblem(try await server.post("/v1/executors/default/claim", json: body), 409, "executor.notExternal")
            expectProblem(try await server.get("/v1/executors/default/workers"), 409, "executor.notExternal")
            expectProblem(
                try await server.post("/v1/executors/images/claim", text: "{\"workerId\": "),
                400,
                "json.malformed"
            )
            expectProblem(
                try await server.post(
                    "/v1/executors/images/claim",
                    json: ["workerId": "a b", "max": 101, "waitMs": 60_001, "actions": ["ok", "no way"], "extra": 1]
                ),
                422,
                "request.invalid",
                errors: [
                    [
                        "pointer": "/extra",
                        "message": "unknown field \"extra\"; expected one of: actions, max, waitMs, workerId",
                    ],
                    ["pointer": "/workerId", "message": "must be 1 to 200 printable ASCII characters without spaces"],
                    ["pointer": "/actions/1", "message": "must be 1 to 100 characters of A-Z a-z 0-9 _ . : -"],
                    ["pointer": "/max", "message": "must be an integer from 1 to 100"],
                    ["pointer": "/waitMs", "message": "must be an integer from 0 to 60000"],
                ]
            )
            expectProblem(
                try await server.post("/v1/executors/images/claim", json: ["max": 0]),
                422,
                "request.invalid",
                errors: [
                    ["pointer": "/workerId", "message": "required"],
                    ["pointer": "/max", "message": "must be an integer from 1 to 100"],
                ]
            )
            let unknown = "lease_0123456789abcdef0123456789abcdef"
            expectProblem(try await server.post("/v1/leases/\(unknown)/heartbeat"), 404, "lease.notFound")
            expectProblem(
                try await server.post("/v1/leases/\(unknown)/complete", json: ["result": 1]),
                404,
                "lease.notFound"
            )
            expectProblem(
                try await server.post("/v1/leases/garbage/complete", json: ["result": 1]),
                404,
                "lease.notFound"
            )
            expectProblem(
                try await server.post("/v1/leases/\(unknown)/complete", json: ["result": 1, "error": ["code": "x"]]),
                422,
                "request.invalid",
                errors: [
                    ["pointer": "", "message": "give exactly one of \"result\" and \"error\""]
                ]
            )
            expectProblem(
                try await server.post("/v1/leases/complete", json: ["items": []]),
                422,
                "request.invalid",
                errors: [["pointer": "/items", "message": "must be an array of 1 to 100 outcomes"]]
            )
            let notFound = try await server.post("/v1/leases/\(unknown)/nothing", json: ["result": 1])
            expectProblem(notFound, 404, "route.notFound")
            #expect(!notFound.text.contains(unknown), "a lease id is never echoed in an error")
        }
    }

    @Test func workerTasksAreValidatedAgainstTheirExecutorsKind() async throws {
        try await withServer(Self.external) { server in
            let job = jsonValue(
                #"""
                {"graph": {"type": "series", "steps": [
                  {"type": "task", "executor": "images", "action": "value"},
                  {"type": "task", "action": "resize", "heartbeatTimeoutMs": 5000},
                  {"type": "task", "executor": "images", "action": "x y", "heartbeatTimeoutMs": 999}]}}
                """#
            )
            expectProblem(
                try await server.post("/v1/jobs", json: job),
                422,
                "graph.invalid",
                errors: [
                    [
                        "pointer": "/graph/steps/0/action",
                        "message":
                            "\"value\" is a built-in action; tasks on the external executor \"images\" run worker actions (run built-ins on an in-process executor)",
                    ],
                    [
                        "pointer": "/graph/steps/1/action",
                        "message":
                            "unknown action \"resize\"; known: await, delay, fail, http, value; worker actions run on an external executor (images)",
                    ],
                    [
                        "pointer": "/graph/steps/1/heartbeatTimeoutMs",
                        "message": "applies only to tasks on an external executor (SPEC §6)",
                    ],
                    [
                        "pointer": "/graph/steps/2/action",
                        "message": "must be 1 to 100 characters of A-Z a-z 0-9 _ . : -",
                    ],
                    [
                        "pointer": "/graph/steps/2/heartbeatTimeoutMs",
                        "message": "must be an integer from 1000 to 3600000",
                    ],
                ]
            )
        }
    }

    @Test func leaseIdsNeverReachTheLog() async throws {
        let handler = InMemoryLogHandler()
        let server = try await TestServer.start(logger: handler.logger(level: .trace), Self.external)
        defer { Task { await server.stop() } }
        _ = try await server.submitID(Self.job())
        let lease = try #require(try await Self.claim(server, waitMs: 5000).first?["leaseId"]?.stringValue)
        _ = try await server.post("/v1/leases/\(lease)/heartbeat")
        _ = try await server.post("/v1/leases/\(lease)/complete", json: ["result": 1])
        _ = try await server.post("/v1/leases/\(lease)/bogus")
        let lines = handler.entries.map { "\($0.message) \($0.metadata)" }
        #expect(lines.contains { $0.contains("/v1/leases/{leaseId}/heartbeat") }, "the request was logged")
        #expect(!lines.contains { $0.contains(lease) })
    }

    @Test func anEmptyLeaseIdIsAnUnknownLeaseNotTheBatchRoute() async throws {
        try await withServer(Self.external) { server in
            expectProblem(try await server.post("/v1/leases//complete", json: ["result": 1]), 404, "lease.notFound")
            expectProblem(try await server.post("/v1/leases//heartbeat"), 404, "lease.notFound")
            // The batch routes are still where they are.
            #expect(try await server.post("/v1/leases/complete", json: ["items": []]).status != 404)
        }
    }

    @Test func aWorkerHoldingALeaseIsListedWhenTheRegistryIsFull() throws {
        let clock = ManualClock()
        let pools = ExternalPools(pools: ["images"], clock: clock)
        let engine = Engine(configuration: EngineConfiguration(externalExecutors: pools.executors))
        defer { engine.shutdown() }
        // Ten thousand ids fill the registry (claims that found nothing).
        for index in 0..<ExternalPools.maxWorkersPerPool {
            _ = try pools.claim(pool: "images", workerId: "flood-\(index)", actions: nil, max: 1, waitMs: 0)
        }
        let run = engine.makeRun(id: "job", spec: try engine.decoder.decodeJob(Self.job()))
        run.start()
        let leased = try pools.claim(pool: "images", workerId: "real", actions: nil, max: 1, waitMs: 0).outcome?.value
        #expect(leased?.count == 1)
        // More ids come; the real worker keeps its place while its lease lives.
        for index in 0..<ExternalPools.maxWorkersPerPool {
            _ = try pools.claim(pool: "images", workerId: "more-\(index)", actions: nil, max: 1, waitMs: 0)
            clock.advance(by: .milliseconds(1))
        }
        let listed = pools.workers("images")?.map(\.workerId) ?? []
        #expect(listed.contains("real"), "the worker holding a lease is listed")
        #expect(listed.count <= ExternalPools.maxWorkersPerPool + 1)
        #expect(pools.workers("images")?.first { $0.workerId == "real" }?.leases == 1)
        run.cancel()
    }

    @Test func aClaimWhoseAnswerWasNotDeliveredGivesItsTaskBackAsTheSameAttempt() async throws {
        try await withServer(Self.external) { server in
            let id = try await server.submitID(Self.job("t"))
            let lost = try #require(try await Self.claim(server, worker: "gone").first)
            // The answer did not reach "gone" (its connection closed first): the lease is given back.
            server.app.externalPools.giveBack([try #require(lost["leaseId"]?.stringValue)])
            let again = try #require(try await Self.claim(server, worker: "steady").first)
            #expect(again["attempt"] == 1, "the same attempt, not a new one")
            #expect(again["taskId"] == "t")
            let lease = try #require(again["leaseId"]?.stringValue)
            #expect(try await server.post("/v1/leases/\(lease)/complete", json: ["result": 2]).status == 200)
            #expect(try await server.finished(id)["result"] == 2)
            #expect(try await server.get("/v1/jobs/\(id)/tasks/t").json["attempts"] == 1)
            expectProblem(
                try await server.post(
                    "/v1/leases/\(try #require(lost["leaseId"]?.stringValue))/complete",
                    json: ["result": 1]
                ),
                409,
                "lease.gone"
            )
            #expect(server.app.externalPools.statistics("images")?.claimed == 1)
        }
    }

    @Test func aTaskGivenBackGoesToAWaitingClaim() async throws {
        try await withServer(Self.external) { server in
            _ = try await server.submitID(Self.job("t"))
            let lost = try #require(try await Self.claim(server, worker: "gone").first?["leaseId"]?.stringValue)
            async let waiting = Self.claim(server, worker: "steady", waitMs: 10_000)
            try await Self.waitForWaitingClaims(server, 1)
            server.app.externalPools.giveBack([lost])
            #expect(try await waiting.first?["attempt"] == 1)
        }
    }

    // MARK: - The hub on its own: bounds and draining

    @Test func theThousandAndFirstWaitingClaimIsRefusedWith429() throws {
        let clock = ManualClock()
        let hub = ExternalPools(pools: ["images"], clock: clock)
        var waiting: [Future<[ExternalPools.Claimed]>] = []
        for index in 0..<ExternalPools.maxWaitingClaims {
            waiting.append(try hub.claim(pool: "images", workerId: "w\(index)", actions: nil, max: 1, waitMs: 60_000))
        }
        #expect(hub.statistics("images")?.waitingClaims == 1000)
        #expect(throws: ExternalPoolsError.tooManyClaims(pool: "images", limit: 1000)) {
            _ = try hub.claim(pool: "images", workerId: "late", actions: nil, max: 1, waitMs: 60_000)
        }
        let problem = ExternalPoolsAPI.problem(.tooManyClaims(pool: "images", limit: 1000))
        #expect(problem.status == .tooManyRequests)
        #expect(problem.code == "executor.tooManyClaims")
        #expect(problem.headers.first(name: "retry-after") == "1")
        // A claim that does not wait is still answered.
        #expect(try hub.claim(pool: "images", workerId: "late", actions: nil, max: 1, waitMs: 0).outcome != nil)
        // Half the claims' wait passes: they all still wait; then all of it: each is answered empty.
        clock.advance(by: .seconds(30))
        #expect(hub.statistics("images")?.waitingClaims == 1000)
        #expect(waiting.allSatisfy { $0.outcome == nil })
        clock.advance(by: .seconds(30))
        #expect(waiting.allSatisfy { $0.outcome?.value?.isEmpty == true }, "every waiting claim timed out")
        #expect(hub.statistics("images")?.waitingClaims == 0)
        #expect(clock.pendingTimers == 0)
        let late = try hub.claim(pool: "images", workerId: "late", actions: nil, max: 1, waitMs: 60_000)
        hub.drain()
        #expect(late.outcome?.value?.isEmpty == true, "draining answers every waiting claim")
        #expect(hub.statistics("images")?.waitingClaims == 0)
        #expect(try hub.claim(pool: "images", workerId: "w", actions: nil, max: 1, waitMs: 60_000).outcome != nil)
    }

    // MARK: - Durability

    /// A batch's items of one job share one wait for durability (issue #44): the batch is still
    /// answered only once every outcome in it is committed — not while the store's writer is held.
    @Test func aBatchOfOneJobsCompletionsIsAnsweredOnceEveryOutcomeIsCommitted() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await SQLiteStoreTests.server(path, Self.external)
        defer { Task { await server.stop() } }
        let repository = try #require(server.app.repository as? SQLiteJobRepository)
        let id = try await server.submitID(
            jsonValue(
                #"{"graph": {"type": "map", "id": "each", "mode": "parallel", "items": [10, 11, 12], "template": {"type": "task", "id": "t", "executor": "images", "action": "resize", "params": {"n": "${input}"}}}}"#
            )
        )
        var items: [JSONValue] = []
        for _ in 0..<20 where items.count < 3 {
            items += try await Self.claim(server, max: 3 - items.count, waitMs: 1000)
        }
        try #require(items.count == 3)
        let completions: [JSONValue] = items.map { item in
            ["leaseId": item["leaseId"] ?? .null, "result": item["params"]?["n"] ?? .null]
        }
        // The writer's thread held: nothing commits until it is let go.
        let held = Flag(true)
        let answered = Flag(false)
        repository.writerPool.execute { while held.value.load(ordering: .acquiring) { usleep(1_000) } }
        let answer = Task {
            let response = try await server.post("/v1/leases/complete", json: ["items": .array(completions)])
            answered.value.store(true, ordering: .releasing)
            return response
        }
        try await Task.sleep(for: .milliseconds(300))
        let early = answered.value.load(ordering: .acquiring)
        held.value.store(false, ordering: .releasing)
        #expect(!early, "answered while its outcomes could not be committed")
        let response = try await answer.value
        #expect(response.json["items"]?.arrayValue?.map { $0["status"] } == [200, 200, 200], "\(response)")
        let job = try await server.finished(id)
        #expect(job["result"] == [10, 11, 12], "\(job)")
    }

    @Test func leasesAndQueuedTasksSurviveACrash() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let first = try await SQLiteStoreTests.server(path, Self.external)
        let leased = try await first.submitID(Self.job("a"))
        let queued = try await first.submitID(Self.job("b"))
        let lease = try #require(try await Self.claim(first).first?["leaseId"]?.stringValue)
        let image = try await SQLiteStoreTests.crashImage(of: first, path: path)
        await first.stop()
        // The store keeps the lease's hash, never the id.
        let db = try SQLiteConnection(path: image)
        #expect(try db.scalar("SELECT count(*) FROM leases WHERE lease_hash = '\(LeaseID.hash(lease))'") == 1)
        #expect(try db.scalar("SELECT count(*) FROM leases WHERE lease_hash = '\(lease)'") == 0)

        let second = try await SQLiteStoreTests.server(image, Self.external)
        defer { Task { await second.stop() } }
        let beat = try await second.post("/v1/leases/\(lease)/heartbeat", json: ["progress": "still here"])
        #expect(beat.status == 200, "the lease carries on after the restart: \(beat)")
        let items = try await Self.claim(second, max: 10)
        #expect(items.map { $0["jobId"]?.stringValue } == [queued], "the queued task is claimable again")
        let completed = try await second.post("/v1/leases/\(lease)/complete", json: ["result": "after"])
        #expect(completed.status == 200)
        #expect(try await second.finished(leased)["result"] == "after")
        // The lease named one attempt, which carried on: counted once, started once (SPEC §6).
        let node = try await second.get("/v1/jobs/\(leased)/tasks/a")
        #expect(node.json["attempts"] == 1, "\(node)")
        let events = try await second.get("/v1/jobs/\(leased)/events").json["items"]?.arrayValue ?? []
        #expect(events.count { $0["type"] == "task.started" } == 1, "\(events)")
        try await second.app.flushRepository()
        let check = try SQLiteConnection(path: image)
        #expect(try check.scalar("SELECT count(*) FROM leases WHERE job_id = '\(leased)'") == 0)
    }

    /// Polls `/v1/executors`-level statistics until `count` claims wait on `images` (10 s, scaled
    /// with `TestTiming`: under ThreadSanitizer, beside the rest of the module, a claim's request
    /// took more than 16 s to arrive).
    static func waitForWaitingClaims(_ server: TestServer, _ count: Int) async throws {
        for _ in 0..<(2000 * TestTiming.slowdown) {
            if server.app.externalPools.statistics("images")?.waitingClaims == count { return }
            try await Task.sleep(for: .milliseconds(5))
        }
        Issue.record("\(count) claims never waited")
    }
}

extension JSONValue {
    /// The value with `leaseId` replaced by `<lease>`.
    fileprivate var withLease: JSONValue {
        guard case .object(var object) = self else { return self }
        if object["leaseId"] != nil { object["leaseId"] = "<lease>" }
        return .object(object)
    }

    fileprivate func removing(_ key: String) -> JSONValue {
        guard case .object(var object) = self else { return self }
        object[key] = nil
        return .object(object)
    }
}

/// A flag shared with a closure (an `Atomic` cannot be captured).
private final class Flag: Sendable {
    let value: Atomic<Bool>

    init(_ value: Bool) { self.value = Atomic(value) }
}
