import Foundation
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// Child jobs (issue #45): a `job` node starts a job of a definition and ends as it ends — on
/// every store, over real sockets.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ChildJobsTests {
    static func value(_ value: JSONValue, id: String = "v") -> JSONValue {
        ["type": "task", "id": .string(id), "action": "value", "params": ["value": value]]
    }

    static func jobNode(_ definition: String, id: String = "kid", input: JSONValue? = nil) -> JSONValue {
        var node: JSONObject = ["type": "job", "id": .string(id), "definition": .string(definition)]
        if let input { node["input"] = input }
        return .object(node)
    }

    /// The children of job `id`, oldest first.
    static func children(_ server: TestServer, of id: String) async throws -> [JSONValue] {
        let page = try await server.get("/v1/jobs?parent=\(id)&limit=1000")
        #expect(page.status == 200, "\(page)")
        return (page.json["items"]?.arrayValue ?? []).reversed()
    }

    /// The first child of job `id`, waited for (up to 4 s): a child is listed once its insert commits.
    static func firstChild(_ server: TestServer, of id: String) async throws -> String {
        for _ in 0..<200 {
            if let child = try await Self.children(server, of: id).first?["id"]?.stringValue { return child }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("job \(id) has no child after 4 s")
        throw CancellationError()
    }

    @Test(arguments: StoreKind.allCases)
    func aJobNodeRunsAChildAndEndsAsItEnds(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            _ = try await server.put("/v1/definitions/greet", json: ["graph": Self.value("hello ${input.name}")])
            _ = try await server.put(
                "/v1/definitions/broken",
                json: ["graph": ["type": "task", "id": "f", "action": "fail", "params": ["code": "greet.down"]]]
            )
            let parent = try await server.submit(
                [
                    "graph": [
                        "type": "series",
                        "steps": [
                            Self.jobNode("greet", input: ["name": "${input.who}"]),
                            Self.value("${tasks.kid.result}!", id: "after"),
                        ],
                    ],
                    "input": ["who": "ada"],
                ],
                waitMs: 10000
            )
            #expect(parent["state"] == "succeeded" && parent["result"] == "hello ada!", "\(parent)")
            let id = try #require(parent["id"]?.stringValue)
            let children = try await Self.children(server, of: id)
            #expect(children.count == 1, "\(children)")
            let childID = try #require(children.first?["id"]?.stringValue)
            let child = try await server.get("/v1/jobs/\(childID)").json
            #expect(child["parentJobId"] == .string(id) && child["parentTaskId"] == "kid", "\(child)")
            #expect(child["labels"] == ["parent": .string(id), "parentTask": "kid"], "\(child)")
            #expect(child["definition"] == ["name": "greet", "version": 1] && child["input"] == ["name": "ada"])
            let node = try await server.get("/v1/jobs/\(id)/tasks/kid").json
            #expect(node["type"] == "job" && node["state"] == "succeeded" && node["result"] == "hello ada", "\(node)")
            #expect(parent["parentJobId"] == nil)

            // A child that fails fails the node with its code and a pointer to it.
            let failed = try await server.submit(["graph": Self.jobNode("broken")], waitMs: 10000)
            #expect(failed["state"] == "failed", "\(failed)")
            let failedID = try #require(failed["id"]?.stringValue)
            let broken = try #require(try await Self.children(server, of: failedID).first?["id"]?.stringValue)
            #expect(failed["error"]?["code"] == "greet.down", "\(failed)")
            #expect(failed["error"]?["details"]?["jobId"] == .string(broken), "\(failed)")

            // A job node naming a definition that does not start is refused at the door; one
            // retired after its parent was accepted fails the node when it runs, without a retry.
            expectProblem(
                try await server.post("/v1/jobs", json: ["graph": Self.jobNode("nope")]),
                422,
                "graph.invalid",
                errors: [
                    ["pointer": "/graph/definition", "message": "no definition named \"nope\" (or it is retired)"]
                ]
            )
            let batch = try await server.post(
                "/v1/jobs/batch",
                json: [
                    "jobs": [["graph": Self.jobNode("greet", input: ["name": "x"])], ["graph": Self.jobNode("nope")]]
                ]
            )
            #expect(batch.json["items"]?.arrayValue?.map { $0["status"] } == [201, 422], "\(batch)")
            _ = try await server.put("/v1/definitions/gone", json: ["graph": Self.value(1)])
            let waiting = try await server.submitID([
                "graph": [
                    "type": "series",
                    "steps": [
                        ["type": "task", "id": "gate", "action": "await"],
                        ["type": "job", "id": "kid", "definition": "gone", "retry": ["maxAttempts": 3, "delayMs": 1]],
                    ],
                ]
            ])
            #expect(try await server.delete("/v1/definitions/gone").status == 204)
            try await server.waitUntilStarted(waiting, task: "gate")
            _ = try await server.post("/v1/jobs/\(waiting)/tasks/gate/complete", json: ["result": 1])
            let unknown = try await server.finished(waiting)
            #expect(unknown["state"] == "failed" && unknown["error"]?["code"] == "definition.unknown", "\(unknown)")
            #expect(try await server.get("/v1/jobs/\(waiting)/tasks/kid").json["attempts"] == 1)
            expectProblem(
                try await server.post("/v1/jobs", json: ["graph": Self.value(1), "labels": ["parent": "x"]]),
                422,
                "graph.invalid",
                errors: [["pointer": "/labels/parent", "message": "is set by the server on child jobs"]]
            )
            let bad = try await server.post(
                "/v1/jobs",
                json: ["graph": ["type": "job", "definition": "-no", "version": 0, "params": [:]]]
            )
            #expect(bad.status == 422, "\(bad)")
            let pointers = bad.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue } ?? []
            #expect(Set(pointers) == ["/graph/definition", "/graph/version", "/graph/params"], "\(bad)")
            let forged = try await server.post(
                "/v1/jobs",
                json: ["graph": ["type": "task", "action": "job", "params": ["definition": "greet"]]]
            )
            #expect(forged.status == 422, "\(forged)")
        }
    }

    /// `map` over a `job` node: one child per item, the results in item order.
    @Test func aMapOverAJobNodeFansOutChildren() async throws {
        try await withServer { server in
            _ = try await server.put("/v1/definitions/double", json: ["graph": Self.value("${input}${input}")])
            let parent = try await server.submit(
                [
                    "graph": [
                        "type": "map", "id": "each", "items": ["a", "b", "c"], "template": Self.jobNode("double"),
                    ]
                ],
                waitMs: 10000
            )
            #expect(parent["state"] == "succeeded" && parent["result"] == ["aa", "bb", "cc"], "\(parent)")
            let id = try #require(parent["id"]?.stringValue)
            let children = try await Self.children(server, of: id)
            #expect(children.count == 3 && Set(children.compactMap { $0["parentTaskId"]?.stringValue }).count == 3)
        }
    }

    /// Cancelling the parent cancels the child, whose cleanup continuation runs.
    @Test(arguments: [StoreKind.memory, .sqlite])
    func cancellingTheParentCancelsTheChild(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            let hold: JSONValue = [
                "type": "continuation", "on": "cancellation",
                "antecedent": ["type": "task", "id": "hold", "action": "await"],
                "then": Self.value("cleaned", id: "cleanup"),
            ]
            _ = try await server.put("/v1/definitions/hold", json: ["graph": hold])
            let id = try await server.submitID(["graph": Self.jobNode("hold")])
            try await server.waitUntilStarted(id, task: "kid")
            let child = try await Self.firstChild(server, of: id)
            try await server.waitUntilStarted(child, task: "hold")
            #expect(try await server.post("/v1/jobs/\(id)/cancel").status == 202)
            #expect(try await server.finished(id)["state"] == "cancelled")
            let ended = try await server.finished(child)
            #expect(ended["state"] == "cancelled", "\(ended)")
            #expect(try await server.get("/v1/jobs/\(child)/tasks/cleanup").json["state"] == "succeeded")
        }
    }

    /// A retry of the node starts a new child; a redrive of the parent redrives the failed child.
    @Test(arguments: [StoreKind.memory, .sqlite])
    func aRetryStartsANewChildAndARedriveRedrivesTheFailedOne(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            _ = try await server.put(
                "/v1/definitions/broken",
                json: ["graph": ["type": "task", "id": "f", "action": "fail", "params": ["code": "down"]]]
            )
            let node: JSONValue = [
                "type": "job", "id": "kid", "definition": "broken", "retry": ["maxAttempts": 2, "delayMs": 1],
            ]
            let retried = try await server.submit(["graph": node], waitMs: 10000)
            #expect(retried["state"] == "failed", "\(retried)")
            let retriedID = try #require(retried["id"]?.stringValue)
            #expect(try await Self.children(server, of: retriedID).count == 2)

            let id = try await server.submitID(["graph": Self.jobNode("broken")])
            #expect(try await server.finished(id)["state"] == "failed")
            let first = try await Self.children(server, of: id)
            let child = try #require(first.first?["id"]?.stringValue)
            #expect(first.count == 1)
            #expect(try await server.post("/v1/jobs/\(id)/redrive").status == 202)
            let again = try await server.finished(id)
            #expect(again["state"] == "failed" && again["error"]?["details"]?["jobId"] == .string(child), "\(again)")
            #expect(try await Self.children(server, of: id).map { $0["id"] } == [.string(child)])
            let events = try await server.get("/v1/jobs/\(child)/events").json["items"]?.arrayValue ?? []
            #expect(events.contains { $0["type"] == "job.redriven" }, "\(events)")
        }
    }

    /// The parent's server restarts while the child runs: the resumed attempt waits for the same
    /// child, and the parent ends as it ends.
    @Test func aChildSurvivesItsParentsRestart() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let (id, child) = try await withServer({ $0.dataPath = path }) { server in
            _ = try await server.put(
                "/v1/definitions/gate",
                json: ["graph": ["type": "task", "id": "gate", "action": "await"]]
            )
            let id = try await server.submitID(["graph": Self.jobNode("gate")])
            let started = try await Self.firstChild(server, of: id)
            try await server.waitUntilStarted(started, task: "gate")
            return (id, started)
        }
        try await withServer({ $0.dataPath = path }) { server in
            try await server.waitUntilStarted(child, task: "gate")
            let completed = try await server.post("/v1/jobs/\(child)/tasks/gate/complete", json: ["result": "open"])
            #expect(completed.status == 200, "\(completed)")
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded" && job["result"] == "open", "\(job)")
            #expect(try await Self.children(server, of: id).count == 1)
        }
    }

    /// A chain of definitions deeper than the bound is refused when it is stored or started, and
    /// fails at the level past it when a definition changed since makes it deeper; a cycle of
    /// definitions is refused when it would close.
    @Test func depthIsBoundedAndACycleIsRefused() async throws {
        try await withServer { server in
            let bottom = ChildJobs.maxDepth + 2
            _ = try await server.put("/v1/definitions/level\(bottom)", json: ["graph": Self.value("deeper")])
            _ = try await server.put("/v1/definitions/level\(bottom - 1)", json: ["graph": Self.value("bottom")])
            for level in stride(from: bottom - 2, through: 2, by: -1) {
                let put = try await server.put(
                    "/v1/definitions/level\(level)",
                    json: ["graph": Self.jobNode("level\(level + 1)")]
                )
                #expect(put.status == 201, "\(put)")
            }
            // The top waits at a gate first, so that a run can be in flight while the chain changes.
            let top: JSONValue = [
                "type": "series",
                "steps": [["type": "task", "id": "gate", "action": "await"], Self.jobNode("level2")],
            ]
            #expect(try await server.put("/v1/definitions/level1", json: ["graph": top]).status == 201)
            let deepID = try await server.submitID(["definition": "level1"])
            try await server.waitUntilStarted(deepID, task: "gate")
            _ = try await server.post("/v1/jobs/\(deepID)/tasks/gate/complete", json: ["result": 1])
            let deep = try await server.finished(deepID)
            #expect(deep["state"] == "succeeded" && deep["result"] == "bottom", "\(deep)")
            let levels = "starts \(ChildJobs.maxDepth + 1) levels of child jobs; at most \(ChildJobs.maxDepth)"
            expectProblem(
                try await server.put("/v1/definitions/level0", json: ["graph": Self.jobNode("level1")]),
                422,
                "definition.invalid",
                errors: [["pointer": "/graph/definition", "message": .string(levels)]]
            )
            expectProblem(
                try await server.post("/v1/jobs", json: ["graph": Self.jobNode("level1")]),
                422,
                "graph.invalid",
                errors: [["pointer": "/graph/definition", "message": .string(levels)]]
            )
            // A run in flight while the bottom changes to start one more level: it fails where the
            // chain passes the bound.
            let inFlight = try await server.submitID(["definition": "level1"])
            try await server.waitUntilStarted(inFlight, task: "gate")
            let changed = try await server.put(
                "/v1/definitions/level\(bottom - 1)",
                json: ["graph": Self.jobNode("level\(bottom)")]
            )
            #expect(changed.status == 201, "\(changed)")
            _ = try await server.post("/v1/jobs/\(inFlight)/tasks/gate/complete", json: ["result": 1])
            let tooDeep = try await server.finished(inFlight)
            #expect(tooDeep["state"] == "failed" && tooDeep["error"]?["code"] == "job.tooDeep", "\(tooDeep)")

            _ = try await server.put("/v1/definitions/b", json: ["graph": Self.value(1)])
            _ = try await server.put("/v1/definitions/a", json: ["graph": Self.jobNode("b")])
            expectProblem(
                try await server.put("/v1/definitions/b", json: ["graph": Self.jobNode("a")]),
                422,
                "definition.invalid",
                errors: [["pointer": "/graph/definition", "message": "starts a, which starts b: a cycle"]]
            )
            expectProblem(
                try await server.put("/v1/definitions/self", json: ["graph": Self.jobNode("self")]),
                422,
                "definition.invalid",
                errors: [["pointer": "/graph/definition", "message": "starts self: a cycle"]]
            )
        }
    }
}
