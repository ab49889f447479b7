import Foundation
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// `POST /v1/jobs/{id}/redrive` (SPEC §8): a failed or cancelled job runs again from where it
/// stopped — succeeded nodes keep their outcomes, the rest run again, attempts counting on.
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct RedriveTests {
    /// `a` (a value), then the `gate` (await), then `b` (the gate's result).
    static let approval = SQLiteStoreTests.approval

    static func events(_ server: TestServer, _ id: String) async throws -> [JSONValue] {
        try await server.get("/v1/jobs/\(id)/events?limit=1000").json["items"]?.arrayValue ?? []
    }

    /// Fails the job at its gate, redrives it, and lets it succeed; the same on every store.
    static func failRedriveSucceed(_ server: TestServer) async throws {
        let id = try await server.submitID(Self.approval)
        try await server.waitUntilStarted(id, task: "gate")
        let failed = try await server.post(
            "/v1/jobs/\(id)/tasks/gate/complete",
            text: #"{"error": {"code": "approval.denied", "message": "not yet"}}"#
        )
        #expect(failed.status == 200, "\(failed)")
        #expect(try await server.finished(id)["state"] == "failed")
        // Its stream, read now, ends at job.failed (and must not make a later one end there).
        let before = try await server.raw { connection in
            try connection.send(StreamsTests.request("/v1/jobs/\(id)/events?stream=true"))
            return try connection.readToEnd()
        }
        #expect(StreamsTests.parse(StreamsTests.dechunk(before)).events.last?.event == "job.failed")

        let redriven = try await server.post("/v1/jobs/\(id)/redrive")
        #expect(redriven.status == 202, "\(redriven)")
        #expect(redriven.json["state"] == "running")
        #expect(redriven.json["error"] == nil)
        try await server.waitUntilStarted(id, task: "gate")
        let gate = try await server.get("/v1/jobs/\(id)/tasks/gate").json
        #expect(gate["state"] == "running")
        #expect(gate["attempts"] == 2, "the count goes on: \(gate)")
        let a = try await server.get("/v1/jobs/\(id)/tasks/a").json
        #expect(a["state"] == "succeeded" && a["attempts"] == 1 && a["result"] == 42)

        let completed = try await server.post("/v1/jobs/\(id)/tasks/gate/complete", text: #"{"result": "yes"}"#)
        #expect(completed.status == 200, "\(completed)")
        let job = try await server.finished(id)
        #expect(job["state"] == "succeeded")
        #expect(job["result"] == "yes")

        let events = try await Self.events(server, id)
        let types = events.compactMap { $0["type"]?.stringValue }
        #expect(events.map { $0["seq"] } == (1...events.count).map { .int($0) }, "one history, no gap")
        #expect(types.filter { $0 == "job.failed" }.count == 1)
        #expect(Array(types.drop { $0 != "job.failed" }.prefix(2)) == ["job.failed", "job.redriven"])
        #expect(types.last == "job.succeeded")
        #expect(
            events.filter { $0["type"] == "task.started" && $0["taskId"] == "a" }.count == 1,
            "a succeeded before: it does not run again"
        )
        // A stream of the history goes past the first terminal event, to the last.
        let raw = try await server.raw { connection in
            try connection.send(StreamsTests.request("/v1/jobs/\(id)/events?stream=true"))
            return try connection.readToEnd()
        }
        #expect(StreamsTests.parse(StreamsTests.dechunk(raw)).events.map(\.event) == types)

        // Succeeded now: not again.
        expectProblem(try await server.post("/v1/jobs/\(id)/redrive"), 409, "job.notRedrivable")
    }

    @Test func aFailedJobRunsAgainFromWhereItStopped() async throws {
        try await withServer { server in try await Self.failRedriveSucceed(server) }
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await SQLiteStoreTests.server(path)
        try await Self.failRedriveSucceed(server)
        await server.stop()
    }

    @Test func onlyAFailedOrCancelledJobIsRedriven() async throws {
        try await withServer { server in
            expectProblem(try await server.post("/v1/jobs/j_nope/redrive"), 404, "job.notFound")
            let id = try await server.submitID(Self.approval)
            try await server.waitUntilStarted(id, task: "gate")
            let running = try await server.post("/v1/jobs/\(id)/redrive")
            expectProblem(running, 409, "job.notRedrivable")
            #expect(running.json["detail"]?.stringValue?.contains("running") == true)
            // Cancelled: it runs again, and the gate waits anew.
            #expect(try await server.post("/v1/jobs/\(id)/cancel").status == 202)
            #expect(try await server.finished(id)["state"] == "cancelled")
            #expect(try await server.post("/v1/jobs/\(id)/redrive").status == 202)
            try await server.waitUntilStarted(id, task: "gate")
            #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "running")
            #expect(try await server.post("/v1/jobs/\(id)/tasks/gate/complete", text: #"{"result": 1}"#).status == 200)
            #expect(try await server.finished(id)["state"] == "succeeded")
        }
    }

    /// A delayed job cancelled before its time never started; redriven, it runs now, and a
    /// running job has a `startedAt` (the redrive's time): read live, listed, and after a crash.
    static func cancelledBeforeItsTimeThenRedriven(
        _ server: TestServer
    ) async throws -> (id: String, startedAt: JSONValue?) {
        let job =
            #"{"delayMs": 604800000, "graph": {"type": "series", "id": "s", "steps": ["#
            + #"{"type": "task", "id": "a", "action": "value", "params": {"value": 42}},"#
            + #"{"type": "task", "id": "gate", "action": "await"}]}}"#
        let id = try await server.submitID(jsonValue(job))
        #expect(try await server.post("/v1/jobs/\(id)/cancel").status == 202)
        let cancelled = try await server.finished(id)
        #expect(cancelled["state"] == "cancelled" && cancelled["startedAt"] == nil, "\(cancelled)")
        let before = Timestamp.now()
        let redriven = try await server.post("/v1/jobs/\(id)/redrive")
        #expect(redriven.status == 202 && redriven.json["state"] == "running", "\(redriven)")
        let startedAt = redriven.json["startedAt"]?.stringValue.flatMap(Timestamp.init(rfc3339:))
        #expect(startedAt.map { $0.milliseconds >= before.milliseconds } ?? false, "running, so started: \(redriven)")
        try await server.waitUntilStarted(id, task: "gate")
        // It starts with this run: `job.started` after `job.redriven`, as for any job that runs.
        let types = try await DelayedStartTests.events(server, id)
        #expect(Array(types.drop { $0 != "job.redriven" }.prefix(2)) == ["job.redriven", "job.started"], "\(types)")
        #expect(types.filter { $0 == "job.started" }.count == 1, "\(types)")
        let listed = try await server.get("/v1/jobs?state=running").json["items"]?.arrayValue ?? []
        #expect(listed.filter { $0["id"] == .string(id) }.map { $0["startedAt"] } == [redriven.json["startedAt"]])
        return (id, redriven.json["startedAt"])
    }

    @Test func aJobRedrivenBeforeItEverStartedHasAStartTime() async throws {
        try await withServer { server in
            let (id, startedAt) = try await Self.cancelledBeforeItsTimeThenRedriven(server)
            #expect(try await server.post("/v1/jobs/\(id)/tasks/gate/complete", text: #"{"result": 1}"#).status == 200)
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded" && job["startedAt"] == startedAt, "\(job)")
        }
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let first = try await SQLiteStoreTests.server(path)
        let (id, startedAt) = try await Self.cancelledBeforeItsTimeThenRedriven(first)
        let image = try await SQLiteStoreTests.crashImage(of: first, path: path)
        await first.stop()
        let second = try await SQLiteStoreTests.server(image)
        let resumed = try await second.get("/v1/jobs/\(id)").json
        #expect(resumed["state"] == "running" && resumed["startedAt"] == startedAt, "\(resumed)")
        await second.stop()

        // PostgreSQL: another server reads the job from its row.
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let one = try await ClusterWorkerTests.start(settings, "one")
        let two = try await ClusterWorkerTests.start(settings, "two")
        let (shared, sharedStartedAt) = try await Self.cancelledBeforeItsTimeThenRedriven(one)
        let read = try await two.get("/v1/jobs/\(shared)").json
        #expect(read["state"] == "running" && read["startedAt"] == sharedStartedAt, "\(read)")
        await two.stop()
        await one.stop()
    }

    /// A redriven job is an unfinished job like any other: a crash resumes it, and what had
    /// succeeded before the redrive still does not run again.
    @Test func aRedrivenJobResumesAfterACrash() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let first = try await SQLiteStoreTests.server(path)
        let id = try await first.submitID(Self.approval)
        try await first.waitUntilStarted(id, task: "gate")
        _ = try await first.post(
            "/v1/jobs/\(id)/tasks/gate/complete",
            text: #"{"error": {"code": "approval.denied", "message": "not yet"}}"#
        )
        #expect(try await first.finished(id)["state"] == "failed")
        #expect(try await first.post("/v1/jobs/\(id)/redrive").status == 202)
        try await first.waitUntilStarted(id, task: "gate")
        let image = try await SQLiteStoreTests.crashImage(of: first, path: path)
        await first.stop()

        let second = try await SQLiteStoreTests.server(image)
        let gate = try await second.get("/v1/jobs/\(id)/tasks/gate").json
        #expect(gate["attempts"] == 2 || gate["attempts"] == 3, "\(gate)")
        #expect(try await second.get("/v1/jobs/\(id)").json["state"] == "running")
        try await second.waitUntilStarted(id, task: "gate")
        #expect(try await second.post("/v1/jobs/\(id)/tasks/gate/complete", text: #"{"result": 7}"#).status == 200)
        let job = try await second.finished(id)
        #expect(job["state"] == "succeeded" && job["result"] == 7)
        let events = try await Self.events(second, id)
        #expect(events.filter { $0["type"] == "task.started" && $0["taskId"] == "a" }.count == 1)
        await second.stop()
    }
}
