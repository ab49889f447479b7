import Foundation
import Synchronization
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

    /// A submission whose commit is stuck (the `jobs` table locked by another session, as behind
    /// a long migration) is answered 503 within the bound — not when the lock goes (a failover's
    /// queued submissions waited out the whole outage). The insert is kept: it commits once the
    /// lock goes, its job runs, and the client's retry with the same key finds it.
    @Test func aSubmissionWhoseCommitIsStuckIsAnswered503AndStillRuns() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let server = try await TestServer.start { $0.database = settings }
        let admin = try PostgresConnection(settings)
        try admin.execute("BEGIN")
        try admin.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        let key = [("Idempotency-Key", "stuck-1")]
        let started = ContinuousClock.now
        let submitted = try await server.post("/v1/jobs", json: Jobs.value(7), headers: key)
        #expect(submitted.status == 503, "\(submitted)")
        #expect(submitted.json["code"] == "store.unavailable")
        #expect(submitted.json["detail"]?.stringValue?.contains("may still apply") == true, "\(submitted)")
        #expect(ContinuousClock.now - started < DurableWait.bound + TestTiming.scaled(.seconds(5)))
        try admin.execute("ROLLBACK")

        let retried = try await server.post("/v1/jobs", json: Jobs.value(7), headers: key)
        #expect(retried.status == 200, "the kept submission, not a second job: \(retried)")
        let id = try #require(retried.json["id"]?.stringValue)
        #expect(try await server.finished(id)["result"] == 7)
        #expect(try admin.query("SELECT count(*) FROM jobs").int(0, 0) == 1)
        await server.stop()
    }

    /// A database reached again that lost commits this server saw acknowledged (a failover to an
    /// asynchronous standby that was behind: its `jobs_position` rewound) stops the server instead
    /// of writing the jobs it holds over the jobs given their positions again (#43).
    @Test func aDatabaseThatLostAcknowledgedCommitsStopsTheServer() throws {
        let fresh = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(fresh) }
        let name = "rewind\(UInt32.random(in: 0...UInt32.max))"
        let settings = try PostgresSettings(url: fresh.url + "&application_name=" + name)
        let rewound = Atomic(false)
        var options = PostgresJobRepository.Options()
        options.onRewound = { rewound.store(true, ordering: .relaxed) }
        let repository = try PostgresJobRepository(
            settings: settings,
            options: options,
            logger: RepositoryConformanceTests.Subject.logger
        )
        defer { _ = repository.close() }
        for id in ["a", "b", "c"] {
            _ = try RepositoryConformanceTests.insert(repository, RepositoryConformanceTests.record(id))
        }
        let admin = try PostgresConnection(fresh)
        // A reconnection to a database that is not behind goes on.
        try admin.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            [.text(name)]
        )
        // The insert that finds the connection lost is refused (503 for its client); the writer
        // reconnects, and a later one is stored.
        _ = try? repository.insert(RepositoryConformanceTests.record("d")).wait()
        var stored = false
        for _ in 0..<100 where !stored {
            stored = (try? RepositoryConformanceTests.insert(repository, RepositoryConformanceTests.record("e"))) != nil
            if !stored { usleep(50_000) }
        }
        #expect(stored)
        let early = rewound.load(ordering: .relaxed)
        #expect(!early)

        // The sequence as a standby 3 jobs behind has it, then the connection lost.
        try admin.query("SELECT setval('jobs_position', 2)")
        try admin.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            [.text(name)]
        )
        _ = repository.insert(RepositoryConformanceTests.record("f"))
        for _ in 0..<100 where !rewound.load(ordering: .relaxed) { usleep(50_000) }
        let stopped = rewound.load(ordering: .relaxed)
        #expect(stopped, "stopped")
        #expect(try admin.query("SELECT count(*) FROM jobs WHERE id = 'f'").int(0, 0) == 0, "nothing written after")
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
