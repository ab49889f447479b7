import Foundation
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// Workflow definitions (issue #45): versions, starts by name, input schemas, retirement — on
/// every store, over real sockets.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct DefinitionsTests {
    static func valueGraph(_ value: JSONValue) -> JSONValue {
        ["type": "task", "id": "v", "action": "value", "params": ["value": value]]
    }

    @Test(arguments: StoreKind.allCases)
    func everyChangeIsAVersionAndAnIdenticalBodyIsNone(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            let first: JSONValue = ["graph": Self.valueGraph("one"), "description": "the first"]
            let created = try await server.put("/v1/definitions/report", json: first)
            #expect(created.status == 201, "\(created)")
            #expect(created.header("location") == "/v1/definitions/report/versions/1")
            #expect(created.json["name"] == "report" && created.json["version"] == 1, "\(created)")
            #expect(created.json["graph"] == Self.valueGraph("one") && created.json["description"] == "the first")

            // The same definition, its members in another order: no new version.
            let reordered = try await server.put(
                "/v1/definitions/report",
                json: [
                    "description": "the first",
                    "graph": ["params": ["value": "one"], "action": "value", "id": "v", "type": "task"],
                ]
            )
            #expect(reordered.status == 200, "\(reordered)")
            #expect(reordered.json["version"] == 1)

            let second = try await server.put("/v1/definitions/report", json: ["graph": Self.valueGraph("two")])
            #expect(second.status == 201 && second.json["version"] == 2, "\(second)")
            #expect(try await server.get("/v1/definitions/report").json["version"] == 2)
            let one = try await server.get("/v1/definitions/report/versions/1")
            #expect(one.status == 200 && one.json["graph"] == Self.valueGraph("one") && one.json["latestVersion"] == 2)
            let versions = try await server.get("/v1/definitions/report/versions?limit=1")
            #expect(versions.json["items"]?.arrayValue?.map { $0["version"] } == [2], "\(versions)")
            let cursor = try #require(versions.json["nextCursor"]?.stringValue)
            let rest = try await server.get("/v1/definitions/report/versions?limit=1&cursor=\(cursor)")
            #expect(rest.json["items"]?.arrayValue?.map { $0["version"] } == [1] && rest.json["nextCursor"] == .null)

            _ = try await server.put("/v1/definitions/audit", json: ["graph": Self.valueGraph(1)])
            let page = try await server.get("/v1/definitions?limit=1")
            #expect(page.json["items"]?.arrayValue?.map { $0["name"] } == ["audit"], "\(page)")
            let next = try #require(page.json["nextCursor"]?.stringValue)
            let last = try await server.get("/v1/definitions?limit=1&cursor=\(next)")
            #expect(
                last.json["items"]?.arrayValue?.map { $0["name"] } == ["report"] && last.json["nextCursor"] == .null
            )

            // Retired: gone from reads and lists, its versions readable, no new runs; a PUT brings
            // it back with the next version.
            #expect(try await server.delete("/v1/definitions/report").status == 204)
            expectProblem(try await server.delete("/v1/definitions/report"), 404, "definition.notFound")
            expectProblem(try await server.get("/v1/definitions/report"), 404, "definition.notFound")
            #expect(try await server.get("/v1/definitions").json["items"]?.arrayValue?.map { $0["name"] } == ["audit"])
            let retired = try await server.get("/v1/definitions/report/versions/2")
            #expect(retired.status == 200 && retired.json["retiredAt"]?.stringValue != nil, "\(retired)")
            expectProblem(
                try await server.post("/v1/jobs", json: ["definition": "report"]),
                422,
                "definition.unknown",
                errors: [["pointer": "/definition", "message": "no definition named \"report\""]]
            )
            expectProblem(
                try await server.post("/v1/jobs", json: ["definition": "report", "version": 1]),
                422,
                "definition.unknown",
                errors: [["pointer": "/definition", "message": "definition \"report\" is retired"]]
            )
            let back = try await server.put("/v1/definitions/report", json: ["graph": Self.valueGraph("three")])
            #expect(back.status == 201 && back.json["version"] == 3 && back.json["retiredAt"] == nil, "\(back)")
        }
    }

    @Test(arguments: StoreKind.allCases)
    func aStartRunsTheLatestOrThePinnedVersionWithItsDefaults(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            let defaults: JSONValue = ["priority": 7, "labels": ["team": "ops", "tier": "gold"]]
            _ = try await server.put(
                "/v1/definitions/report",
                json: ["graph": Self.valueGraph("one"), "defaults": defaults]
            )
            _ = try await server.put(
                "/v1/definitions/report",
                json: ["graph": Self.valueGraph("${input.word}"), "defaults": defaults]
            )

            let latest = try await server.submit(
                ["definition": "report", "input": ["word": "two"], "labels": ["tier": "silver"]],
                waitMs: 5000
            )
            #expect(latest["state"] == "succeeded" && latest["result"] == "two", "\(latest)")
            #expect(latest["definition"] == ["name": "report", "version": 2])
            #expect(latest["priority"] == 7 && latest["labels"] == ["team": "ops", "tier": "silver"], "\(latest)")

            let pinned = try await server.submit(["definition": "report", "version": 1, "priority": 2], waitMs: 5000)
            #expect(pinned["result"] == "one" && pinned["definition"] == ["name": "report", "version": 1], "\(pinned)")
            #expect(pinned["priority"] == 2)

            let id = try #require(pinned["id"]?.stringValue)
            #expect(try await server.get("/v1/jobs/\(id)").json["definition"] == ["name": "report", "version": 1])
            let listed = try await server.get("/v1/jobs?definition=report")
            #expect(listed.json["items"]?.arrayValue?.count == 2, "\(listed)")
            #expect(listed.json["items"]?.arrayValue?.last?["definition"] == ["name": "report", "version": 2])
            _ = try await server.submit(Jobs.value(1))
            #expect(try await server.get("/v1/jobs?definition=other").json["items"] == [])
            #expect(try await server.get("/v1/jobs").json["items"]?.arrayValue?.count == 3)

            expectProblem(
                try await server.post("/v1/jobs", json: ["definition": "report", "version": 9]),
                422,
                "definition.unknown",
                errors: [["pointer": "/version", "message": "definition \"report\" has no version 9"]]
            )
            expectProblem(
                try await server.post("/v1/jobs", json: ["definition": "nope"]),
                422,
                "definition.unknown",
                errors: [["pointer": "/definition", "message": "no definition named \"nope\""]]
            )
            expectProblem(
                try await server.post("/v1/jobs", json: ["definition": "report", "graph": Self.valueGraph(1)]),
                422,
                "graph.invalid",
                errors: [["pointer": "/graph", "message": "give graph or definition, not both"]]
            )
            // A document's own object form is the server's to write.
            let forged = try await server.post(
                "/v1/jobs",
                json: ["definition": ["name": "report", "version": 1], "graph": Self.valueGraph(1)]
            )
            #expect(forged.status == 422, "\(forged)")

            // A batch: each item judged alone.
            let batch = try await server.post(
                "/v1/jobs/batch",
                json: ["jobs": [["definition": "report", "version": 1], ["definition": "nope"], Jobs.value(3)]]
            )
            let items = try #require(batch.json["items"]?.arrayValue)
            #expect(items.map { $0["status"] } == [201, 422, 201], "\(batch)")
            #expect(items[0]["job"]?["definition"] == ["name": "report", "version": 1])
            #expect(items[1]["problem"]?["code"] == "definition.unknown")
        }
    }

    @Test func theInputIsCheckedAgainstTheSchemaWithAPointerPerProblem() async throws {
        try await withServer { server in
            let schema: JSONValue = [
                "type": "object",
                "required": ["customer", "amount"],
                "additionalProperties": false,
                "properties": [
                    "customer": ["type": "string", "minLength": 2],
                    "amount": ["type": "integer", "minimum": 1, "maximum": 1000],
                    "currency": ["enum": ["EUR", "USD"]],
                    "tags": ["type": "array", "items": ["type": "string"], "maxItems": 2],
                ],
            ]
            let put = try await server.put(
                "/v1/definitions/charge",
                json: ["graph": Self.valueGraph("${input.amount}"), "inputSchema": schema]
            )
            #expect(put.status == 201, "\(put)")
            #expect(put.json["inputSchema"] == schema)

            let good = try await server.submit(
                ["definition": "charge", "input": ["customer": "ab", "amount": 5, "currency": "EUR", "tags": ["x"]]],
                waitMs: 5000
            )
            #expect(good["result"] == 5, "\(good)")

            let bad = try await server.post(
                "/v1/jobs",
                json: [
                    "definition": "charge",
                    "input": [
                        "customer": "a", "amount": 2.5, "currency": "GBP", "tags": ["x", 2, "z"], "extra": true,
                    ],
                ]
            )
            expectProblem(
                bad,
                422,
                "input.invalid",
                errors: [
                    ["pointer": "/input/customer", "message": "must be at least 2 characters long"],
                    ["pointer": "/input/amount", "message": "must be an integer, not number"],
                    ["pointer": "/input/currency", "message": "must be one of: \"EUR\", \"USD\""],
                    ["pointer": "/input/tags", "message": "must have at most 2 items"],
                    ["pointer": "/input/tags/1", "message": "must be a string, not number"],
                    [
                        "pointer": "/input/extra",
                        "message": "unknown field \"extra\"; expected one of: customer, amount, currency, tags",
                    ],
                ]
            )
            expectProblem(
                try await server.post("/v1/jobs", json: ["definition": "charge"]),
                422,
                "input.invalid",
                errors: [["pointer": "/input", "message": "must be an object, not null"]]
            )
            expectProblem(
                try await server.post("/v1/jobs", json: ["definition": "charge", "input": [:]]),
                422,
                "input.invalid",
                errors: [
                    ["pointer": "/input/customer", "message": "required"],
                    ["pointer": "/input/amount", "message": "required"],
                ]
            )
            #expect(try await server.get("/v1/jobs").json["items"]?.arrayValue?.count == 1, "nothing else stored")
        }
    }

    @Test func anInvalidDefinitionIsA422WithPointersAndStoresNothing() async throws {
        try await withServer { server in
            let response = try await server.put(
                "/v1/definitions/broken",
                json: [
                    "graph": ["type": "task", "action": "no-such-action"],
                    "inputSchema": ["type": "strin", "pattern": "^a", "properties": ["a": 3]],
                    "defaults": ["priority": 12, "graph": 1],
                    "description": 5,
                    "extra": 1,
                ]
            )
            #expect(response.status == 422, "\(response)")
            #expect(response.json["code"] == "definition.invalid")
            let pointers = Set(response.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue } ?? [])
            #expect(
                pointers.isSuperset(of: [
                    "/extra", "/inputSchema/type", "/inputSchema/pattern", "/inputSchema/properties/a",
                    "/defaults/graph",
                    "/defaults/priority", "/description", "/graph/action",
                ]),
                "\(response)"
            )
            expectProblem(
                try await server.put("/v1/definitions/-bad", json: ["graph": Self.valueGraph(1)]),
                422,
                "definition.invalid"
            )
            expectProblem(try await server.put("/v1/definitions/x", json: [:]), 422, "definition.invalid")
            #expect(try await server.get("/v1/definitions").json["items"] == [])
            expectProblem(try await server.get("/v1/definitions/broken"), 404, "definition.notFound")
            expectProblem(try await server.get("/v1/definitions/broken/versions/1"), 404, "definition.notFound")
            expectProblem(try await server.get("/v1/definitions/broken/versions"), 404, "definition.notFound")
        }
    }

    @Test func aWebhookSecretAmongTheDefaultsIsNeverShown() async throws {
        try await withServer { server in
            let secret = "whsec_" + Data(repeating: 7, count: 24).base64EncodedString()
            let put = try await server.put(
                "/v1/definitions/hooked",
                json: [
                    "graph": Self.valueGraph(1),
                    "defaults": ["webhook": ["url": "http://127.0.0.1:9/hook", "secret": .string(secret)]],
                ]
            )
            #expect(put.status == 201, "\(put)")
            for response in [
                put, try await server.get("/v1/definitions/hooked"), try await server.get("/v1/definitions"),
                try await server.get("/v1/definitions/hooked/versions/1"),
            ] {
                #expect(!response.text.contains(secret), "\(response)")
            }
            #expect(put.json["defaults"]?["webhook"] == ["url": "http://127.0.0.1:9/hook", "hasSecret": true])
        }
    }

    /// The version a job started with is in its document: a restart runs it, whatever the
    /// definition became meanwhile.
    @Test func aRunningJobKeepsItsVersionAcrossARestart() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let approve: JSONValue = ["type": "task", "id": "approve", "action": "await"]
        let id = try await withServer({ $0.dataPath = path }) { server in
            _ = try await server.put(
                "/v1/definitions/flow",
                json: ["graph": ["type": "series", "steps": [approve, Self.valueGraph("v1")]]]
            )
            let id = try await server.submitID(["definition": "flow"])
            try await server.waitUntilStarted(id, task: "approve")
            let changed = try await server.put(
                "/v1/definitions/flow",
                json: ["graph": ["type": "series", "steps": [approve, Self.valueGraph("v2")]]]
            )
            #expect(changed.json["version"] == 2)
            return id
        }
        try await withServer({ $0.dataPath = path }) { server in
            try await server.waitUntilStarted(id, task: "approve")
            let completed = try await server.post("/v1/jobs/\(id)/tasks/approve/complete", json: ["result": 1])
            #expect(completed.status == 200, "\(completed)")
            let job = try await server.finished(id)
            #expect(job["result"] == "v1" && job["definition"] == ["name": "flow", "version": 1], "\(job)")
            // A new start takes the version the restarted server reads from the store.
            let fresh = try await server.submit(["definition": "flow"])
            #expect(fresh["definition"] == ["name": "flow", "version": 2])
        }
    }

    /// A schedule's job may name a definition: each fire runs the latest version; a schedule that
    /// could not start is refused at the door; a fire whose definition no longer starts (retired)
    /// starts nothing and the schedule goes on.
    @Test func aScheduleMayStartADefinitionAndEachFireTakesTheLatestVersion() async throws {
        let clock = ManualClock(start: .now())
        try await withServer(clock: clock) { server in
            let schema: JSONValue = ["type": "object", "required": ["day"]]
            _ = try await server.put(
                "/v1/definitions/nightly",
                json: ["graph": Self.valueGraph("v1 ${input.day}"), "inputSchema": schema]
            )
            let refused = try await server.post(
                "/v1/schedules",
                json: ["id": "bad", "cron": "* * * * *", "job": ["definition": "nightly", "input": [:]]]
            )
            expectProblem(
                refused,
                422,
                "request.invalid",
                errors: [["pointer": "/job/input/day", "message": "required"]]
            )
            let unknown = try await server.post(
                "/v1/schedules",
                json: ["id": "bad", "cron": "* * * * *", "job": ["definition": "nope"]]
            )
            #expect(
                unknown.status == 422 && unknown.json["errors"]?.arrayValue?.first?["pointer"] == "/job/definition",
                "\(unknown)"
            )

            let created = try await server.post(
                "/v1/schedules",
                json: [
                    "id": "nightly", "cron": "* * * * *", "job": ["definition": "nightly", "input": ["day": "mon"]],
                ]
            )
            #expect(created.status == 201, "\(created)")
            ScheduleTests.advanceToNextMinute(clock)
            let first = try await ScheduleTests.waitForJobs(server, "nightly", count: 1)
            let firstID = try #require(first.first?["id"]?.stringValue)
            let job = try await server.finished(firstID)
            #expect(job["result"] == "v1 mon" && job["definition"] == ["name": "nightly", "version": 1], "\(job)")
            #expect(job["labels"]?["schedule"] == "nightly")

            _ = try await server.put(
                "/v1/definitions/nightly",
                json: ["graph": Self.valueGraph("v2 ${input.day}"), "inputSchema": schema]
            )
            let manual = try await server.post("/v1/schedules/nightly/trigger")
            #expect(
                manual.status == 201 && manual.json["definition"] == ["name": "nightly", "version": 2],
                "\(manual)"
            )

            // Retired: the next fire starts nothing, and the one after is still looked at.
            #expect(try await server.delete("/v1/definitions/nightly").status == 204)
            ScheduleTests.advanceToNextMinute(clock)
            var fired = JSONValue.null
            var handled = false
            for _ in 0..<(100 * TestTiming.slowdown) {
                fired = try await server.get("/v1/schedules/nightly").json
                if let last = fired["lastFireAt"]?.stringValue, let time = Timestamp(rfc3339: last),
                    time.milliseconds >= clock.now().milliseconds - 2000
                {
                    handled = true
                    break
                }
                clock.advance(by: .milliseconds(5))
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(handled, "the fire after the retirement was handled: \(fired)")
            #expect(try await ScheduleTests.jobs(server, "nightly").count == 2, "no job for the retired definition")
            #expect(fired["lastJobId"] == manual.json["id"], "\(fired)")
        }
    }
}
