import Foundation
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Queue rules over HTTP (SPEC §8): priorities, concurrency keys on tasks and jobs, rate limits,
/// what `GET /v1/executors` and the nodes say about waits, and bulk submission.
///
/// Serialized, and bad inputs checked on one server each: under ThreadSanitizer every suite of
/// this module runs at once on two cores, and a suite that starts a dozen servers in parallel
/// starves the timing-bound suites beside it.
@Suite(.serialized, .timeLimit(.minutes(2 * TestTiming.slowdown)))
struct QueueRulesAPITests {
    static func awaitJob(customer: JSONValue, taskKey: Bool = true, jobKey: String? = nil) -> JSONValue {
        var task: JSONObject = ["type": "task", "id": "work", "action": "await"]
        if taskKey { task["concurrency"] = ["key": "customer-${input.customer}", "max": 1] }
        var job: JSONObject = ["input": ["customer": customer], "graph": .object(task)]
        if let jobKey { job["concurrency"] = ["key": .string(jobKey), "max": 1] }
        return .object(job)
    }

    static func node(_ server: TestServer, _ id: String, _ task: String = "work") async throws -> JSONValue {
        try await server.get("/v1/jobs/\(id)/tasks/\(task)").json
    }

    static func complete(_ server: TestServer, _ id: String, _ task: String = "work") async throws {
        let response = try await server.post("/v1/jobs/\(id)/tasks/\(task)/complete", json: ["result": "done"])
        #expect(response.status == 200 || response.status == 202, "\(response)")
    }

    /// Polls until `condition` holds (every 50 ms, 10 s at most, scaled).
    static func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        for _ in 0..<(200 * TestTiming.slowdown) {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    // MARK: - Bad input

    static let badQueueRules = [
        (#"{"priority": 10}"#, "/priority"),
        (#"{"priority": -1}"#, "/priority"),
        (#"{"priority": "high"}"#, "/priority"),
        (#"{"concurrency": {"key": "k", "max": 0}}"#, "/concurrency/max"),
        (#"{"concurrency": {"key": "k", "max": 10001}}"#, "/concurrency/max"),
        (#"{"concurrency": {"max": 1}}"#, "/concurrency/key"),
        (#"{"concurrency": {"key": 5, "max": 1}}"#, "/concurrency/key"),
        (#"{"concurrency": {"key": "", "max": 1}}"#, "/concurrency/key"),
        (#"{"concurrency": {"key": "${input.", "max": 1}}"#, "/concurrency/key"),
        (#"{"concurrency": {"key": "k", "max": 1, "limit": 2}}"#, "/concurrency/limit"),
        (#"{"concurrency": "k"}"#, "/concurrency"),
    ]

    @Test func badQueueRulesAreRefusedWithPointers() async throws {
        try await withServer { server in
            for (extra, pointer) in Self.badQueueRules { try await Self.refused(server, extra, pointer) }
        }
    }

    /// `extra` merged into a one-task job (and, for `concurrency`, put on the task) is a 422 at `pointer`.
    static func refused(_ server: TestServer, _ extra: String, _ pointer: String) async throws {
        do {
            var job = jsonValue(#"{"graph": {"type": "task", "action": "value", "params": {"value": 1}}}"#)
            if case .object(var object) = job, case .object(let fields) = jsonValue(extra) {
                for (key, value) in fields { object[key] = value }
                job = .object(object)
            }
            let response = try await server.post("/v1/jobs", json: job)
            #expect(response.status == 422, "\(extra): \(response)")
            let pointers = response.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue } ?? []
            #expect(pointers.contains(pointer), "\(extra): \(pointers)")
            // The same on a task, for the concurrency object.
            if pointer.hasPrefix("/concurrency"), case .object(let fields) = jsonValue(extra) {
                var task: JSONObject = ["type": "task", "action": "value", "params": ["value": 1]]
                task["concurrency"] = fields["concurrency"]
                let response = try await server.post("/v1/jobs", json: ["graph": .object(task)])
                let pointers = response.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue } ?? []
                #expect(response.status == 422 && pointers.contains("/graph" + pointer), "\(response)")
            }
        }
    }

    @Test func aConcurrencyKeyOnlyBelongsToATask() async throws {
        try await withServer { server in
            let response = try await server.post(
                "/v1/jobs",
                json: jsonValue(#"{"graph": {"type": "series", "steps": [], "concurrency": {"key": "k", "max": 1}}}"#)
            )
            #expect(response.status == 422)
            #expect(response.json["errors"]?.arrayValue?.first?["pointer"] == "/graph/concurrency")
        }
    }

    @Test func aKeyThatIsNotAStringOrANumberFailsTheNodeOrTheJob() async throws {
        try await withServer { server in
            let taskKey = try await server.submitID(
                jsonValue(
                    #"{"input": {"customer": {"id": 1}}, "graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}, "retry": {"maxAttempts": 3}, "concurrency": {"key": "${input.customer}", "max": 1}}}"#
                )
            )
            let job = try await server.finished(taskKey)
            #expect(job["state"] == "failed")
            #expect(job["error"]?["code"] == "concurrency.invalidKey")
            // Not retried: the same input gives the same key.
            #expect(try await Self.node(server, taskKey, "t")["attempts"] == 1)

            let jobKey = try await server.submitID(
                jsonValue(
                    #"{"input": {}, "concurrency": {"key": "${input.missing}", "max": 1}, "graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}}}"#
                )
            )
            let failed = try await server.finished(jobKey)
            #expect(failed["state"] == "failed")
            #expect(failed["error"]?["code"] == "concurrency.invalidKey")
            #expect(try await Self.node(server, jobKey, "t")["state"] == "cancelled")
            #expect(try await server.isHealthy())
        }
    }

    // MARK: - Concurrency keys

    @Test func aTaskKeyAdmitsOneHolderAndTheNextWaitsHoldingNothing() async throws {
        // One slot in the default pool: a waiter that held it would stop the other customer.
        try await withServer({ $0.executors = ["default": 1] }) { server in
            let first = try await server.submitID(Self.awaitJob(customer: 42))
            try await server.waitUntilStarted(first, task: "work")
            let second = try await server.submitID(Self.awaitJob(customer: 42))
            #expect(
                try await Self.eventually { try await Self.node(server, second)["waitingFor"] == "concurrency" }
            )
            // Waiting for its key, it has not started: pending, no task.started, no startedAt.
            let waiting = try await Self.node(server, second)
            #expect(waiting["state"] == "pending" && waiting["startedAt"] == nil && waiting["attempts"] == 1)
            #expect(try await server.get("/v1/jobs/\(second)").json["tasksWaiting"] == ["concurrency": 1])
            // A number and its string are one key ("customer-42").
            let third = try await server.submitID(Self.awaitJob(customer: "42"))
            // Another customer runs at once.
            let other = try await server.submitID(Self.awaitJob(customer: 7))
            try await server.waitUntilStarted(other, task: "work")
            #expect(try await Self.node(server, other)["waitingFor"] == nil)
            let metrics = String(decoding: try await server.get("/metrics").body, as: UTF8.self)
            #expect(metrics.contains("taskserver_concurrency_waiting 2"), "\(metrics)")
            #expect(metrics.contains(#"taskserver_queue_waits_total{reason="concurrency"} 2"#))

            try await Self.complete(server, first)
            #expect(try await server.finished(first)["state"] == "succeeded")
            #expect(try await Self.eventually { try await Self.node(server, second)["state"] == "running" })
            #expect(try await Self.node(server, second)["waitingFor"] == nil)
            #expect(try await server.get("/v1/jobs/\(second)").json["tasksWaiting"] == nil)
            #expect(try await Self.node(server, third)["waitingFor"] == "concurrency")
            // A cancelled waiter leaves at once; the next in line gets the key after the holder.
            #expect(try await server.post("/v1/jobs/\(third)/cancel").status == 202)
            #expect(try await server.finished(third)["state"] == "cancelled")
            try await Self.complete(server, second)
            try await Self.complete(server, other)
            #expect(try await server.finished(second)["state"] == "succeeded")
            #expect(try await server.finished(other)["state"] == "succeeded")
            #expect(server.app.engine.concurrency.statistics == .init(keys: 0, holders: 0, waiting: 0))
        }
    }

    @Test func aRetrysBackOffHoldsNoKey() async throws {
        try await withServer { server in
            // Fails at once, then backs off for a minute before its second attempt.
            let failing = try await server.submitID(
                jsonValue(
                    #"{"graph": {"type": "task", "id": "work", "action": "fail", "params": {"code": "x.flaky", "message": "again"}, "retry": {"maxAttempts": 2, "delayMs": 60000}, "concurrency": {"key": "shared", "max": 1}}}"#
                )
            )
            #expect(try await server.waitForEvent(failing) { $0["type"] == "task.retrying" } != nil)
            // Meanwhile the key is free: another task with it starts at once.
            let other = try await server.submitID(
                jsonValue(
                    #"{"graph": {"type": "task", "id": "work", "action": "await", "concurrency": {"key": "shared", "max": 1}}}"#
                )
            )
            try await server.waitUntilStarted(other, task: "work")
            #expect(try await Self.node(server, other)["waitingFor"] == nil)
            #expect(try await server.post("/v1/jobs/\(failing)/cancel").status == 202)
            try await Self.complete(server, other)
            #expect(try await server.finished(other)["state"] == "succeeded")
        }
    }

    @Test func aJobKeyHoldsForTheWholeJob() async throws {
        try await withServer { server in
            let first = try await server.submitID(Self.awaitJob(customer: 1, taskKey: false, jobKey: "nightly"))
            try await server.waitUntilStarted(first, task: "work")
            let second = try await server.submitID(Self.awaitJob(customer: 2, taskKey: false, jobKey: "nightly"))
            #expect(
                try await Self.eventually {
                    try await server.get("/v1/jobs/\(second)").json["waitingFor"] == "concurrency"
                }
            )
            #expect(try await Self.node(server, second)["state"] == "pending")
            try await Self.complete(server, first)
            #expect(try await server.finished(first)["state"] == "succeeded")
            try await server.waitUntilStarted(second, task: "work")
            #expect(try await server.get("/v1/jobs/\(second)").json["waitingFor"] == nil)
            // Cancelling a job that waits for its key ends it without running anything.
            let third = try await server.submitID(Self.awaitJob(customer: 3, taskKey: false, jobKey: "nightly"))
            #expect(
                try await Self.eventually {
                    try await server.get("/v1/jobs/\(third)").json["waitingFor"] == "concurrency"
                }
            )
            #expect(try await server.post("/v1/jobs/\(third)/cancel").status == 202)
            let cancelled = try await server.finished(third)
            #expect(cancelled["state"] == "cancelled")
            #expect(try await Self.node(server, third)["state"] == "cancelled")
            try await Self.complete(server, second)
            #expect(try await server.finished(second)["state"] == "succeeded")
        }
    }

    // MARK: - Priorities

    @Test func anExternalPoolHandsOutHigherPrioritiesFirst() async throws {
        try await withServer({ $0.externalExecutors = ["images"] }) { server in
            var ids: [(String, Int)] = []
            for priority in [1, 5, 9, 5, 0, 9] {
                var job: JSONObject = ["graph": ["type": "task", "action": "resize", "executor": "images"]]
                if priority != 5 { job["priority"] = .int(priority) }
                let created = try await server.submit(.object(job))
                #expect(created["priority"] == (priority == 5 ? nil : .int(priority)))
                ids.append((try #require(created["id"]?.stringValue), priority))
            }
            let pools = try await server.get("/v1/executors").json["items"]?.arrayValue ?? []
            let images = pools.first { $0["name"] == "images" }
            #expect(images?["queuedByPriority"] == ["9": 2, "5": 2, "1": 1, "0": 1])
            let claimed = try await ExternalPoolsAPITests.claim(server, max: 100).compactMap {
                $0["jobId"]?.stringValue
            }
            let expected = ids.enumerated().sorted { ($0.element.1, -$0.offset) > ($1.element.1, -$1.offset) }
                .map(\.element.0)
            #expect(claimed == expected)
        }
    }

    @Test func aJobsPriorityIsKeptByTheStore() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        var server = try await SQLiteStoreTests.server(path)
        let id = try await server.submitID(
            jsonValue(#"{"priority": 8, "graph": {"type": "task", "action": "value", "params": {"value": 1}}}"#)
        )
        #expect(try await server.finished(id)["priority"] == 8)
        await server.stop()
        server = try await SQLiteStoreTests.server(path)
        #expect(try await server.get("/v1/jobs/\(id)").json["priority"] == 8)
        #expect(try await server.get("/v1/jobs").json["items"]?.arrayValue?.first?["priority"] == 8)
        await server.stop()
    }

    // MARK: - Rate limits

    @Test func aRateLimitedPoolStartsItsBurstAndTheRestWaitForTokens() async throws {
        try await withServer({ try! $0.setExecutors(["io=4,rate=2/m,burst=1"]) }) { server in
            let id = try await server.submitID(
                jsonValue(
                    #"{"graph": {"type": "parallel", "branches": [{"type": "task", "id": "a", "action": "value", "executor": "io", "params": {"value": 1}}, {"type": "task", "id": "b", "action": "value", "executor": "io", "params": {"value": 2}}, {"type": "task", "id": "c", "action": "value", "executor": "io", "params": {"value": 3}}]}}"#
                )
            )
            #expect(
                try await Self.eventually {
                    let nodes = try await server.get("/v1/jobs/\(id)/tasks").json["items"]?.arrayValue ?? []
                    return nodes.count { $0["state"] == "succeeded" } == 1
                        && nodes.count { $0["waitingFor"] == "rate" } == 2
                }
            )
            let pools = try await server.get("/v1/executors").json["items"]?.arrayValue ?? []
            let io = try #require(pools.first { $0["name"] == "io" })
            #expect(io["queued"] == 2 && io["running"] == 0 && io["queuedByPriority"] == ["5": 2])
            #expect(io["rate"]?["limit"] == 2 && io["rate"]?["per"] == "minute" && io["rate"]?["burst"] == 1)
            #expect((io["rate"]?["tokens"]?.doubleValue ?? 9) < 1)
            // Other pools run at full speed meanwhile.
            let other = try await server.submit(
                jsonValue(#"{"graph": {"type": "task", "action": "value", "params": {"value": 1}}}"#),
                waitMs: 10_000
            )
            #expect(other["state"] == "succeeded")
            #expect(try await server.post("/v1/jobs/\(id)/cancel").status == 202)
            #expect(try await server.finished(id)["state"] == "cancelled")
            let after = try await server.get("/v1/executors").json["items"]?.arrayValue ?? []
            #expect(after.first { $0["name"] == "io" }?["queued"] == 0)
        }
    }

    @Test(arguments: [
        ("io=64,rate=0/s", "rate must be N/s or N/m"),
        ("io=64,rate=abc", "rate must be N/s or N/m"),
        ("io=64,rate=100/h", "rate must be N/s or N/m"),
        ("io=64,rate=2000000/s", "rate must be N/s or N/m"),
        ("io=64,burst=5", "needs a rate"),
        ("io=64,rate=10/s,burst=0", "burst must be a positive integer"),
        ("io=64,rate=10/s,burst=11", "burst must be from 1 to the rate's count"),
        ("images=external,rate=10/s", "rate limits apply to in-process pools"),
        ("io", "must be NAME=SIZE"),
        // Given twice, one of them would be silently dropped (#43).
        ("io=64,rate=10/s,rate=20/s", "rate= is given twice"),
        ("io=64,rate=10/s,burst=2,burst=3", "burst= is given twice"),
    ])
    func badRateLimitsAreRefusedAtStartUp(spec: String, message: String) {
        var configuration = ServerConfiguration()
        #expect {
            try configuration.setExecutors([spec])
        } throws: { error in
            (error as? ConfigurationError)?.description.contains(message) == true
        }
    }

    @Test func theEnvironmentFormKeepsRateOptionsWithTheirPool() throws {
        var configuration = ServerConfiguration()
        try configuration.setExecutors(["io=64,rate=100/s,burst=5,images=external,cpu=2,rate=600/m"])
        #expect(configuration.executors == ["default": 8, "io": 64, "cpu": 2])
        #expect(configuration.externalExecutors == ["images"])
        #expect(configuration.rates["io"] == RateLimit(count: 100, period: .seconds(1), burst: 5))
        #expect(configuration.rates["cpu"] == RateLimit(count: 600, period: .seconds(60)))
        try configuration.validate()
    }

    // MARK: - Bulk submission

    static func valueJob(_ value: Int, key: String? = nil) -> JSONValue {
        var job: JSONObject = ["graph": ["type": "task", "action": "value", "params": ["value": .int(value)]]]
        if let key { job["idempotencyKey"] = .string(key) }
        return .object(job)
    }

    @Test func aBatchJudgesEachJobOnItsOwnAndAnswersInOrder() async throws {
        try await withServer { server in
            let response = try await server.post(
                "/v1/jobs/batch",
                json: [
                    "jobs": [
                        Self.valueJob(1, key: "batch-a"),
                        jsonValue(#"{"graph": {"type": "task", "action": "nope"}}"#),
                        7,
                        Self.valueJob(2),
                        Self.valueJob(1, key: "batch-a"),
                        Self.valueJob(3, key: "batch-a"),
                        jsonValue(#"{"idempotencyKey": "", "graph": {"type": "task", "action": "value"}}"#),
                    ]
                ]
            )
            #expect(response.status == 200, "\(response)")
            let items = try #require(response.json["items"]?.arrayValue)
            #expect(items.map { $0["status"]?.intValue } == [201, 422, 422, 201, 200, 422, 422])
            #expect(items[1]["problem"]?["errors"]?.arrayValue?.first?["pointer"] == "/graph/action")
            #expect(items[1]["problem"]?["code"] == "graph.invalid")
            #expect(items[2]["problem"]?["errors"]?.arrayValue?.first?["pointer"] == "")
            #expect(items[4]["job"]?["id"] == items[0]["job"]?["id"])
            #expect(items[5]["problem"]?["code"] == "idempotency.mismatch")
            #expect(items[6]["problem"]?["errors"]?.arrayValue?.first?["pointer"] == "/idempotencyKey")
            for index in [0, 3] {
                let id = try #require(items[index]["job"]?["id"]?.stringValue)
                #expect(try await server.finished(id)["state"] == "succeeded")
            }
            let metrics = String(decoding: try await server.get("/metrics").body, as: UTF8.self)
            #expect(metrics.contains("taskserver_jobs_submitted_total 2"))
        }
    }

    @Test func aBadBatchIsRefusedWhole() async throws {
        try await withServer { server in
            for (body, pointer) in [
                (#"{"jobs": []}"#, "/jobs"),
                (#"{"jobs": {}}"#, "/jobs"),
                (#"{}"#, "/jobs"),
                (#"[]"#, ""),
                (#"{"jobs": [{"graph": {"type": "task", "action": "value"}}], "wait": true}"#, "/wait"),
            ] {
                let response = try await server.post("/v1/jobs/batch", text: body)
                #expect(response.status == 422, "\(body): \(response)")
                #expect(response.json["code"] == "batch.invalid")
                let pointers = response.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue } ?? []
                #expect(pointers.contains(pointer), "\(body): \(pointers)")
            }
            let tooMany: JSONValue = ["jobs": .array(Array(repeating: Self.valueJob(1), count: 1001))]
            #expect(try await server.post("/v1/jobs/batch", json: tooMany).status == 422)
            #expect(try await server.get("/v1/jobs").json["items"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test func aBatchIsDurableBeforeItIsAnswered() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        var server = try await SQLiteStoreTests.server(path)
        let jobs = (0..<200).map { Self.valueJob($0, key: "durable-\($0)") }
        let response = try await server.post("/v1/jobs/batch", json: ["jobs": .array(jobs)])
        #expect(response.status == 200)
        let ids = (response.json["items"]?.arrayValue ?? []).compactMap { $0["job"]?["id"]?.stringValue }
        #expect(ids.count == 200)
        await server.stop()
        server = try await SQLiteStoreTests.server(path)
        for (index, id) in ids.enumerated() where index % 20 == 0 {
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded" && job["result"] == .int(index))
        }
        // The same batch again names the same jobs.
        let again = try await server.post("/v1/jobs/batch", json: ["jobs": .array(jobs)])
        #expect((again.json["items"]?.arrayValue ?? []).compactMap { $0["job"]?["id"]?.stringValue } == ids)
        #expect((again.json["items"]?.arrayValue ?? []).allSatisfy { $0["status"] == 200 })
        await server.stop()
    }
}
