import Foundation
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// `POST /v1/jobs/redrive` and `POST /v1/jobs/cancel` (issue #45): a page of what `GET /v1/jobs`
/// lists, each job judged alone; and the list's time filters.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct BulkCommandsTests {
    /// A job whose `gate` task waits to be completed (by the test, with a result or an error).
    static func gated(_ label: String) -> JSONValue {
        ["labels": ["outage": .string(label)], "graph": ["type": "task", "id": "gate", "action": "await"]]
    }

    /// Fails `id`'s gate and waits for the job to end.
    static func fail(_ server: TestServer, _ id: String) async throws {
        try await server.waitUntilStarted(id, task: "gate")
        let failed = try await server.post(
            "/v1/jobs/\(id)/tasks/gate/complete",
            json: ["error": ["code": "downstream.unavailable", "message": "503 from the ledger"]]
        )
        #expect(failed.status == 200, "\(failed)")
        #expect(try await server.finished(id)["state"] == "failed")
    }

    @Test(arguments: StoreKind.allCases)
    func aBulkRedriveWalksEveryFailedJobOnceAPageAtATime(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            var failed: [String] = []
            for _ in 0..<5 {
                let id = try await server.submitID(Self.gated("ledger"))
                try await Self.fail(server, id)
                failed.append(id)
            }
            let running = try await server.submitID(Self.gated("ledger"))
            try await server.waitUntilStarted(running, task: "gate")
            let succeeded = try await server.submitID(Jobs.with(Jobs.value(1), ["labels": ["outage": "ledger"]]))
            _ = try await server.finished(succeeded)
            let other = try await server.submitID(Self.gated("other"))
            try await Self.fail(server, other)

            // A page of two, newest first; the cursor walks on by position though the redriven
            // jobs no longer match state=failed.
            var redriven: [String] = []
            var cursor: String?
            var calls = 0
            repeat {
                let target =
                    "/v1/jobs/redrive?state=failed&label=outage:ledger&limit=2" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await server.post(target)
                #expect(page.status == 200, "\(page)")
                let items = try #require(page.json["items"]?.arrayValue)
                #expect(items.allSatisfy { $0["status"] == 202 && $0["problem"] == nil }, "\(page)")
                redriven += items.compactMap { $0["id"]?.stringValue }
                cursor = page.json["nextCursor"]?.stringValue
                calls += 1
            } while cursor != nil && calls < 10
            #expect(redriven == failed.reversed(), "every failed job of the outage, once, newest first")
            for id in failed {
                let job = try await server.get("/v1/jobs/\(id)").json
                #expect(job["state"] == "running", "\(job)")
            }
            #expect(try await server.get("/v1/jobs/\(other)").json["state"] == "failed", "another label: untouched")

            // Judged alone: the running, succeeded and redriven jobs say why they are not redriven.
            let again = try await server.post("/v1/jobs/redrive?label=outage:ledger&limit=1000")
            let items = try #require(again.json["items"]?.arrayValue)
            #expect(items.count == 7 && again.json["nextCursor"] == .null, "\(again)")
            #expect(
                items.allSatisfy { $0["status"] == 409 && $0["problem"]?["code"] == "job.notRedrivable" },
                "\(again)"
            )
            let reason = items.first { $0["id"]?.stringValue == succeeded }?["problem"]?["detail"]
            #expect(reason == "the job succeeded; only a failed or cancelled job can be redriven")
        }
    }

    @Test(arguments: StoreKind.allCases)
    func aBulkCancelCancelsWhatRunsAndSaysWhyNotForTheRest(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            let waiting = try await server.submitID(Self.gated("batch"))
            try await server.waitUntilStarted(waiting, task: "gate")
            let done = try await server.submitID(Jobs.with(Jobs.value(1), ["labels": ["outage": "batch"]]))
            _ = try await server.finished(done)
            let response = try await server.post("/v1/jobs/cancel?label=outage:batch")
            #expect(response.status == 200, "\(response)")
            let items = try #require(response.json["items"]?.arrayValue)
            let byID = Dictionary(uniqueKeysWithValues: items.map { ($0["id"]?.stringValue ?? "", $0) })
            #expect(byID[waiting]?["status"] == 202, "\(response)")
            #expect(byID[done]?["status"] == 409 && byID[done]?["problem"]?["code"] == "job.terminal", "\(response)")
            #expect(try await server.finished(waiting)["state"] == "cancelled")
            // Again: harmless — the succeeded job still 409, the cancelled one 200 (cancelled
            // already), as their own calls answer.
            let again = try await server.post("/v1/jobs/cancel?label=outage:batch")
            #expect(again.json["items"]?.arrayValue?.map { $0["status"] } == [409, 200], "\(again)")
        }
    }

    /// A page larger than a chunk (`BulkJobsAPI.chunk`): every job answered, in the page's order.
    @Test func aPageOfManyChunksAnswersEveryJobInOrder() async throws {
        try await withServer { server in
            let count = BulkJobsAPI.chunk * 2 + 50
            let batch = try await server.post(
                "/v1/jobs/batch",
                json: ["jobs": .array(Array(repeating: Self.gated("many"), count: count))]
            )
            let submitted = try #require(batch.json["items"]?.arrayValue).compactMap { $0["job"]?["id"]?.stringValue }
            #expect(submitted.count == count, "\(batch)")
            let response = try await server.post("/v1/jobs/cancel?label=outage:many&limit=1000")
            let items = try #require(response.json["items"]?.arrayValue)
            #expect(items.compactMap { $0["id"]?.stringValue } == submitted.reversed(), "newest first, each once")
            #expect(items.allSatisfy { $0["status"] == 202 || $0["status"] == 200 }, "\(response)")
            for id in submitted.prefix(3) { #expect(try await server.finished(id)["state"] == "cancelled") }
        }
    }

    @Test func badFiltersAndBodiesAre400AndActOnNothing() async throws {
        try await withServer { server in
            let id = try await server.submitID(Self.gated("x"))
            try await server.waitUntilStarted(id, task: "gate")
            for target in [
                "/v1/jobs/cancel?createdAfter=yesterday", "/v1/jobs/cancel?limit=1001", "/v1/jobs/cancel?limit=0",
                "/v1/jobs/cancel?state=broken", "/v1/jobs/cancel?cursor=zz", "/v1/jobs/cancel?definition=-x",
                "/v1/jobs/redrive?finishedBefore=2026-13-01T00:00:00Z", "/v1/jobs/cancel?label=nocolon",
            ] {
                expectProblem(try await server.post(target), 400, "query.invalid")
            }
            expectProblem(
                try await server.post("/v1/jobs/cancel", json: ["state": "running"]),
                400,
                "query.invalid"
            )
            #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "running")
        }
    }

    @Test(arguments: StoreKind.allCases)
    func listsFilterByCreationAndFinishTimes(_ store: StoreKind) async throws {
        try await withServer(on: store) { server in
            let first = try await server.submitID(Jobs.value(1))
            _ = try await server.finished(first)
            try await Task.sleep(for: .milliseconds(20))
            let middle = Timestamp.now()
            try await Task.sleep(for: .milliseconds(20))
            let second = try await server.submitID(Self.gated("t"))
            try await server.waitUntilStarted(second, task: "gate")
            func ids(_ query: String) async throws -> [String] {
                let page = try await server.get("/v1/jobs?\(query)")
                #expect(page.status == 200, "\(page)")
                return page.json["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            }
            let at = middle.rfc3339
            #expect(try await ids("createdAfter=\(at)") == [second])
            #expect(try await ids("createdBefore=\(at)") == [first])
            #expect(try await ids("finishedBefore=\(at)") == [first])
            #expect(try await ids("finishedAfter=\(at)") == [], "the running job has not finished")
            #expect(try await ids("createdAfter=\(at)&createdBefore=\(at)") == [])
        }
    }
}
