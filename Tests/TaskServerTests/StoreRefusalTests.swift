import Foundation
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// A store that refuses commits for another reason than a lost connection (#43): PostgreSQL
/// refusing every new `events` row (a `CHECK` constraint standing in for a full disk, `53100`, or
/// a DBA's trigger). Every request gets an answer, none claims what is not stored, `/readyz` says
/// 503 meanwhile, and what was accepted is committed once the database takes writes again.
@Suite(.serialized, .timeLimit(.minutes(2 * TestTiming.slowdown)))
struct StoreRefusalTests {
    @Test func aPostgresCommitRefusedKeepsTheJournalAndAnswers503() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let server = try await TestServer.node(settings, "a")
        let admin = try PostgresConnection(settings)
        let gate: JSONValue = ["graph": ["type": "task", "id": "gate", "action": "await"]]
        let id = try await server.submitID(gate)
        #expect(
            try await QueueRulesAPITests.eventually {
                try await QueueRulesAPITests.node(server, id, "gate")["state"] == "running"
            }
        )
        #expect(try await server.get("/readyz").status == 200)

        try admin.execute("ALTER TABLE events ADD CONSTRAINT refuse_all CHECK (seq < 0) NOT VALID")
        // The completion's events cannot be committed: answered 503 within the bound, not left
        // hanging, and not acknowledged.
        let started = ContinuousClock.now
        let completed = try await server.post("/v1/jobs/\(id)/tasks/gate/complete", json: ["result": "ok"])
        #expect(completed.status == 503, "\(completed)")
        #expect(completed.json["code"] == "store.unavailable")
        #expect(ContinuousClock.now - started < DurableWait.bound + TestTiming.scaled(.seconds(5)))
        #expect(try await server.get("/readyz").status == 503, "the store cannot commit")
        // A new job is refused at once (its insert could not be stored either).
        let refused = try await server.post("/v1/jobs", json: gate)
        #expect(refused.status == 503, "\(refused)")
        #expect(try admin.query("SELECT state FROM jobs WHERE id = $1", [.text(id)]).text(0, 0) == "running")

        // Writes succeed again: the kept completion is committed, the job ends, /readyz is 200.
        try admin.execute("ALTER TABLE events DROP CONSTRAINT refuse_all")
        #expect(try await server.finished(id)["state"] == "succeeded")
        #expect(
            try await QueueRulesAPITests.eventually {
                try admin.query("SELECT state FROM jobs WHERE id = $1", [.text(id)]).text(0, 0) == "succeeded"
            },
            "stored"
        )
        #expect(try await QueueRulesAPITests.eventually { try await server.get("/readyz").status == 200 })
        #expect(try await server.post("/v1/jobs", json: gate).status == 201)
        await server.stop()
    }

    /// SQLite refusing commits with `SQLITE_FULL`, as on a full disk: the database may grow no
    /// further (`max_page_count`), so any commit that needs a new page is refused.
    @Test func aSQLiteCommitRefusedByAFullDiskKeepsTheJournalAndAnswers503() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await TestServer.start { $0.dataPath = path }
        let repository = try #require(server.app.repository as? SQLiteJobRepository)
        /// Runs `sql` on the writer's connection, on the writer's thread.
        func onWriter(_ sql: String) async throws -> Int64? {
            let promise = Promise<Int64?>()
            repository.writerPool.execute {
                do { promise.succeed(try repository.writer.scalar(sql)) } catch { promise.fail(error) }
            }
            return try await promise.future.value
        }
        let gate: JSONValue = ["graph": ["type": "task", "id": "gate", "action": "await"]]
        let id = try await server.submitID(gate)
        #expect(
            try await QueueRulesAPITests.eventually {
                try await QueueRulesAPITests.node(server, id, "gate")["state"] == "running"
            }
        )

        let pages = try #require(try await onWriter("PRAGMA page_count"))
        _ = try await onWriter("PRAGMA max_page_count = \(pages)")
        let large = JSONValue.string(String(repeating: "x", count: 200_000))
        let completed = try await server.post("/v1/jobs/\(id)/tasks/gate/complete", json: ["result": large])
        #expect(completed.status == 503, "\(completed)")
        #expect(try await server.get("/readyz").status == 503, "the store cannot commit")
        let refused = try await server.post(
            "/v1/jobs",
            json: ["graph": ["type": "task", "id": "t", "action": "value", "params": ["value": large]]]
        )
        #expect(refused.status == 503, "\(refused)")

        // Space again: the kept completion is committed and the job ends with its result.
        _ = try await onWriter("PRAGMA max_page_count = 1073741823")
        #expect(try await server.finished(id)["state"] == "succeeded")
        #expect(try await server.get("/v1/jobs/\(id)/tasks/gate").json["result"] == large)
        #expect(try await QueueRulesAPITests.eventually { try await server.get("/readyz").status == 200 })
        await server.stop()
        // And it is on disk: a server started on the file finds the job succeeded.
        let again = try await TestServer.start { $0.dataPath = path }
        #expect(try await again.get("/v1/jobs/\(id)").json["state"] == "succeeded")
        await again.stop()
    }
}
