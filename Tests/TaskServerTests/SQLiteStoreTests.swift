import Foundation
import Logging
import NIOHTTP1
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// The embedded SQLite store: schema, durability before `201`, reading back after a restart,
/// resuming unfinished jobs from a crash image, list/delete/retention from the file.
///
/// A "crash image" is the data file and its WAL copied while the first server still runs, right
/// after a flush: exactly what `kill -9` leaves on disk. (scripts/crash-test.py does the same with
/// the real binary and SIGKILL.)
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct SQLiteStoreTests {
    static func temporaryDirectory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "taskserver-store-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A server on `path`.
    static func server(
        _ path: String,
        _ configure: @escaping (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        try await TestServer.start { configuration in
            configuration.dataPath = path
            configure(&configuration)
        }
    }

    /// Copies the store's file and WAL to a new directory after flushing: what a SIGKILL leaves.
    static func crashImage(of server: TestServer, path: String) async throws -> String {
        try await server.app.flushRepository()
        let copy = try Self.temporaryDirectory() + "/taskserver.sqlite"
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        if FileManager.default.fileExists(atPath: path + "-wal") {
            try FileManager.default.copyItem(atPath: path + "-wal", toPath: copy + "-wal")
        }
        return copy
    }

    static let approval = jsonValue(
        #"""
        {"name": "approval", "labels": {"team": "data"}, "graph": {"type": "series", "id": "s", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": 42}},
            {"type": "task", "id": "gate", "action": "await"},
            {"type": "task", "id": "b", "action": "value", "params": {"value": "${tasks.gate.result}"}}]}}
        """#
    )

    @Test func migrationsBuildTheSchemaOnceAndANewerFileIsRefused() throws {
        let path = try Self.temporaryDirectory() + "/nested/dir/taskserver.sqlite"
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        do {
            let store = try SQLiteJobRepository(path: path, logger: logger)
            store.close()
        }
        let db = try SQLiteConnection(path: path)
        #expect(try db.scalar("PRAGMA user_version") == Int64(SQLiteSchema.migrations.count))
        #expect(
            try db.scalar(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('jobs', 'labels', 'nodes', 'events')"
            ) == 4
        )
        // Opening again applies nothing twice.
        try SQLiteJobRepository(path: path, logger: logger).close()
        try db.execute("PRAGMA user_version = 99")
        #expect(throws: SQLiteError.self) { try SQLiteJobRepository(path: path, logger: logger) }
    }

    /// A file of schema version 3 (one row per event, node rows keyed by the job's text id) is
    /// upgraded in place: its finished jobs read back exactly as they were, and its unfinished ones
    /// resume. The version-3 file is made from real data: a server writes a file, and its rows
    /// are copied into the tables of migrations 1–3 the way the version-3 writer laid them out.
    @Test func aVersion3FileIsUpgradedInPlace() async throws {
        let directory = try Self.temporaryDirectory()
        let current = directory + "/current.sqlite"
        let old = directory + "/v3.sqlite"
        var before: [JSONValue] = []
        let finishedID: String
        let waitingID: String
        do {
            let server = try await Self.server(current)
            finishedID = try await server.submitID(Self.approval)
            try await server.waitUntilStarted(finishedID, task: "gate")
            let completed = try await server.post("/v1/jobs/\(finishedID)/tasks/gate/complete", json: ["result": "yes"])
            #expect(completed.status == 200)
            _ = try await server.finished(finishedID)
            waitingID = try await server.submitID(Self.approval)
            try await server.waitUntilStarted(waitingID, task: "gate")
            for path in ["", "/tasks", "/events"] {
                before.append(try await server.get("/v1/jobs/\(finishedID)\(path)").json)
            }
            await server.stop()
        }
        let db = try SQLiteConnection(path: old)
        for migration in SQLiteSchema.migrations[0..<3] { try db.execute(migration) }
        try db.execute(
            """
            PRAGMA user_version = 3;
            ATTACH '\(current)' AS v4;
            INSERT INTO jobs (position, id, name, document, labels, state, result, error, progress, idempotency_key,
                              body_hash, cancel_requested, created_at, started_at, finished_at)
                SELECT position, id, name, document, coalesce(labels, '{}'), state, result, error, progress,
                       idempotency_key, body_hash, cancel_requested, created_at, started_at, finished_at
                FROM v4.jobs;
            INSERT INTO labels SELECT * FROM v4.labels;
            INSERT INTO nodes
                SELECT jobs.id, node_id, ordinal, type, action, executor, parent, nodes.state, attempts, nodes.result,
                       nodes.error, nodes.started_at, nodes.finished_at
                FROM v4.nodes JOIN v4.jobs ON jobs.position = nodes.job;
            INSERT INTO nodes
                SELECT jobs.id, node.value ->> 'id', node.key, node.value ->> 'type', node.value ->> 'action',
                       node.value ->> 'executor', node.value ->> 'parent', node.value ->> 'state',
                       node.value ->> 'attempts', node.value -> 'result', node.value -> 'error',
                       node.value ->> 'startedAt', node.value ->> 'finishedAt'
                FROM v4.jobs, json_each(v4.jobs.nodes) AS node WHERE jobs.nodes IS NOT NULL;
            INSERT INTO events
                SELECT jobs.id, event.value ->> 0, event.value ->> 1, event.value ->> 2, event.value ->> 3,
                       event.value -> 4
                FROM v4.events JOIN v4.jobs ON jobs.position = events.job, json_each(events.events) AS event;
            DETACH v4;
            """
        )
        #expect(try db.scalar("SELECT count(*) FROM events") ?? 0 >= 12, "one row per event, as version 3 wrote them")

        let server = try await Self.server(old)
        #expect(try db.scalar("PRAGMA user_version") == Int64(SQLiteSchema.migrations.count))
        var after: [JSONValue] = []
        for path in ["", "/tasks", "/events"] {
            after.append(try await server.get("/v1/jobs/\(finishedID)\(path)").json)
        }
        #expect(after == before, "a finished job reads back as it was before the upgrade")
        let listed = try await server.get("/v1/jobs?label=team:data&state=succeeded").json["items"]?.arrayValue ?? []
        #expect(listed.map { $0["id"]?.stringValue } == [finishedID])
        // The waiting job resumes: its first task is not run again, its await takes the result.
        let completed = try await server.post("/v1/jobs/\(waitingID)/tasks/gate/complete", json: ["result": "later"])
        #expect(completed.status == 200)
        let job = try await server.finished(waitingID)
        #expect(job["state"] == "succeeded")
        #expect(job["result"] == "later")
        let tasks = try await server.get("/v1/jobs/\(waitingID)/tasks").json["items"]?.arrayValue ?? []
        #expect(tasks.first { $0["id"] == "a" }?["attempts"] == 1)
        let events = try await server.get("/v1/jobs/\(waitingID)/events").json["items"]?.arrayValue ?? []
        #expect(events.map { $0["seq"]?.intValue ?? 0 } == Array(1...events.count), "seqs continue without gaps")
        await server.stop()
        // And the upgraded file reads back after another restart, now from version-4 rows.
        let again = try await Self.server(old)
        var third: [JSONValue] = []
        for path in ["", "/tasks", "/events"] {
            third.append(try await again.get("/v1/jobs/\(finishedID)\(path)").json)
        }
        #expect(third == before)
        #expect(try await again.get("/v1/jobs/\(waitingID)").json["result"] == "later")
        await again.stop()
    }

    @Test func aJobIsOnDiskBeforeItsCreatedResponse() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await Self.server(path)
        // An await task: the job cannot end before the file is read, however slow the run.
        let id = try await server.submitID(Jobs.await())
        // Another connection, as another process would see the file.
        let db = try SQLiteConnection(path: path)
        let row = try db.statement("SELECT state, document FROM jobs WHERE id = ?").bind(.text(id))
        #expect(try row.step())
        #expect(["pending", "running"].contains(row.text(0)))
        #expect(row.text(1).contains("\"await\""))
        row.reset()
        await server.stop()
    }

    @Test func finishedJobsReadBackAfterARestartExactlyAsTheyWere() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let jobs: [JSONValue] = [
            Self.approval,
            Jobs.fail(code: "demo.boom", message: "no"),
            jsonValue(
                #"""
                {"input": [1, 2, 3], "graph": {"type": "map", "id": "m", "items": "${input}", "template":
                    {"type": "task", "id": "each", "action": "value", "params": {"value": "${input}"}}}}
                """#
            ),
        ]
        var before: [String: [JSONValue]] = [:]
        var ids: [String] = []
        do {
            let server = try await Self.server(path)
            for job in jobs {
                let id = try await server.submitID(job)
                if job == Self.approval {
                    try await server.waitUntilStarted(id, task: "gate")
                    let completed = try await server.post("/v1/jobs/\(id)/tasks/gate/complete", json: ["result": "yes"])
                    #expect(completed.status == 200)
                }
                _ = try await server.finished(id)
                ids.append(id)
            }
            for id in ids {
                before[id] = [
                    try await server.get("/v1/jobs/\(id)").json,
                    try await server.get("/v1/jobs/\(id)/tasks").json,
                    try await server.get("/v1/jobs/\(id)/events").json,
                ]
            }
            await server.stop()
        }
        let server = try await Self.server(path)
        for id in ids {
            let after = [
                try await server.get("/v1/jobs/\(id)").json,
                try await server.get("/v1/jobs/\(id)/tasks").json,
                try await server.get("/v1/jobs/\(id)/events").json,
            ]
            #expect(after == before[id], "job \(id) reads back differently after a restart")
        }
        #expect(before[ids[0]]?[0]["result"] == "yes")
        #expect(before[ids[2]]?[1]["items"]?.arrayValue?.count == 4, "the map's instances are stored too")
        await server.stop()
    }

    @Test func aRestartResumesUnfinishedJobsWithoutRerunningFinishedNodes() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let first = try await Self.server(path)
        let id = try await first.submitID(Self.approval)
        try await first.waitUntilStarted(id, task: "gate")
        let image = try await Self.crashImage(of: first, path: path)
        await first.stop()

        let second = try await Self.server(image)
        let tasks = try await second.get("/v1/jobs/\(id)/tasks").json["items"]?.arrayValue ?? []
        let byID = Dictionary(uniqueKeysWithValues: tasks.map { ($0["id"]?.stringValue ?? "", $0) })
        #expect(byID["a"]?["state"] == "succeeded")
        #expect(byID["a"]?["attempts"] == 1, "a finished before the crash and is not run again")
        #expect(byID["gate"]?["state"] == "running")
        #expect(byID["gate"]?["attempts"] == 2, "the await was in flight: it waits again as attempt 2")
        let completed = try await second.post("/v1/jobs/\(id)/tasks/gate/complete", json: ["result": "approved"])
        #expect(completed.status == 200)
        let job = try await second.finished(id)
        #expect(job["state"] == "succeeded")
        #expect(job["result"] == "approved")
        let events = try await second.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue ?? []
        #expect(events.map { $0["seq"]?.intValue ?? 0 } == Array(1...events.count), "seqs continue without gaps")
        #expect(events.filter { $0["type"] == "task.started" && $0["taskId"] == "a" }.count == 1)
        #expect(events.filter { $0["type"] == "job.created" }.count == 1)
        await second.stop()
    }

    @Test func aDelayResumesWithItsRemainingTime() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let first = try await Self.server(path)
        // A delay far longer than the test (60 s), so it is surely still running when the image is
        // taken, however slow the run (ThreadSanitizer); the image then says it began 58 s ago.
        let id = try await first.submitID(Jobs.delay(60_000))
        try await first.waitUntilStarted(id, task: "wait")
        let image = try await Self.crashImage(of: first, path: path)
        await first.stop()
        // 58 s pass between the crash and the restart — on the stored clock, not the test's: the
        // delay's start, as the file recorded it, moves 58 s into the past.
        let db = try SQLiteConnection(path: image)
        try db.statement(
            "UPDATE nodes SET started_at = started_at - 58000 WHERE job = (SELECT position FROM jobs WHERE id = ?) AND node_id = 'wait'"
        ).bind(.text(id)).run()
        // What the delay has left when the restart begins, by the clock the server reads: 60 s after
        // its stored start (under 2 s).
        let stored = try db.statement(
            "SELECT started_at FROM nodes WHERE job = (SELECT position FROM jobs WHERE id = ?) AND node_id = 'wait'"
        ).bind(.text(id))
        try #require(try stored.step(), "the running delay has its node row in the image")
        let left = Int(stored.int(0) + 60_000 - Timestamp.now().milliseconds)
        stored.reset()
        let (job, elapsed) = try await elapsedMilliseconds {
            let second = try await Self.server(image)
            defer { Task { await second.stop() } }
            return try await second.finished(id)
        }
        #expect(job["state"] == "succeeded")
        // It waited out what was left (not nothing: the delay was not skipped)...
        if left > 500 {
            #expect(elapsed >= left - 300, "\(left) ms were left of the delay; it ended after \(elapsed) ms")
        }
        // ...and not the whole 60 s again.
        #expect(
            elapsed < TestTiming.ms(3500),
            "at most 2 s were left of the 60 s delay; it took \(elapsed) ms after the restart"
        )
    }

    @Test func aCancellationRequestedBeforeACrashIsCarriedOut() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let first = try await Self.server(path)
        let id = try await first.submitID(Jobs.await())
        try await first.waitUntilStarted(id, task: "approve")
        // Stop the first server's job from finishing in the image: copy right after the 202.
        let cancelled = try await first.post("/v1/jobs/\(id)/cancel")
        #expect(cancelled.status == 202)
        let image = try await Self.crashImage(of: first, path: path)
        await first.stop()
        let second = try await Self.server(image)
        let job = try await second.finished(id)
        #expect(job["state"] == "cancelled")
        await second.stop()
    }

    @Test func idempotencyKeysKeepWorkingAcrossARestart() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let job = Jobs.value(7)
        let first = try await Self.server(path)
        let created = try await first.post("/v1/jobs", json: job, headers: [("Idempotency-Key", "order-1")])
        #expect(created.status == 201)
        await first.stop()
        let second = try await Self.server(path)
        let again = try await second.post("/v1/jobs", json: job, headers: [("Idempotency-Key", "order-1")])
        #expect(again.status == 200)
        #expect(again.json["id"] == created.json["id"])
        let other = try await second.post("/v1/jobs", json: Jobs.value(8), headers: [("Idempotency-Key", "order-1")])
        expectProblem(other, 422, "idempotency.mismatch")
        await second.stop()
    }

    @Test func listFiltersAndPagesFromTheFile() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        var ids: [String] = []
        do {
            let server = try await Self.server(path)
            for index in 0..<30 {
                let job = index % 3 == 0 ? Jobs.fail(code: "x.y", message: "no") : Jobs.value(.int(index))
                let labelled = Jobs.with(
                    job,
                    ["labels": ["team": index % 2 == 0 ? "even" : "odd", "n": .string("\(index)")]]
                )
                ids.append(try await server.submitID(labelled, waitMs: 10_000))
            }
            await server.stop()
        }
        let server = try await Self.server(path)
        func all(_ query: String) async throws -> [String] {
            var found: [String] = []
            var cursor: String?
            repeat {
                let target = "/v1/jobs?limit=7" + query + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await server.get(target).json
                found += page["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
                cursor = page["nextCursor"]?.stringValue
            } while cursor != nil
            return found
        }
        #expect(try await all("") == ids.reversed(), "newest first, every job once")
        let even = ids.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
        #expect(try await all("&label=team:even") == even.reversed())
        let failed = ids.enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
        #expect(try await all("&state=failed") == failed.reversed())
        #expect(try await all("&state=failed&label=team:odd&label=n:3") == [ids[3]])
        let succeeded = ids.enumerated().filter { $0.offset % 3 != 0 }.map(\.element)
        #expect(try await all("&state=succeeded") == succeeded.reversed())
        #expect(try await all("&state=succeeded&label=team:even") == succeeded.filter(even.contains).reversed())
        #expect(try await all("&state=running").isEmpty)
        let item = try await server.get("/v1/jobs?limit=1").json["items"]?.arrayValue?.first
        #expect(item?["labels"] == ["n": "29", "team": "odd"])
        #expect(item?["progress"]?["succeeded"] == 1)
        await server.stop()
    }

    @Test func deleteRemovesEveryRowOfAFinishedJob() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await Self.server(path)
        let id = try await server.submitID(Jobs.with(Jobs.value(1), ["labels": ["k": "v"]]), waitMs: 10_000)
        let running = try await server.submitID(Jobs.await())
        expectProblem(try await server.delete("/v1/jobs/\(running)"), 409, "job.notTerminal")
        try await server.app.flushRepository()
        let db = try SQLiteConnection(path: path)
        let position = try #require(try db.scalar("SELECT position FROM jobs WHERE id = '\(id)'"))
        #expect(try db.scalar("SELECT count(*) FROM events WHERE job = \(position)") ?? 0 > 0)
        #expect(try await server.delete("/v1/jobs/\(id)").status == 204)
        #expect(try await server.get("/v1/jobs/\(id)").status == 404)
        try await server.app.flushRepository()
        #expect(try db.scalar("SELECT count(*) FROM jobs WHERE id = '\(id)'") == 0)
        for table in ["nodes", "events"] {
            #expect(
                try db.scalar("SELECT count(*) FROM \(table) WHERE job = \(position)") == 0,
                "\(table) keeps rows of a deleted job"
            )
        }
        #expect(try db.scalar("SELECT count(*) FROM labels") == 0)
        await server.stop()
        let again = try await Self.server(path)
        #expect(try await again.get("/v1/jobs/\(id)").status == 404)
        await again.stop()
    }

    @Test func retentionRemovesOldFinishedJobsOnly() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        // The jobs' own timestamps are real: the clock starts at the real time and moves by hand.
        let clock = ManualClock(start: .now())
        let server = try await TestServer.start(clock: clock) { configuration in
            configuration.dataPath = path
            configuration.retention = .seconds(1)
        }
        // Older than the finished job: retention walks positions and must step past it.
        let waiting = try await server.submitID(Jobs.await())
        let done = try await server.submitID(Jobs.value(1), waitMs: 10_000)
        #expect(try await server.get("/v1/jobs/\(done)").status == 200)
        // Retention runs every second (a tenth of the retention, at least a second): the first pass
        // once the job is more than a second old removes it, and no pass before.
        let finishedAt = try #require(try await server.app.jobs.job(done).value?.snapshot.finishedAt)
        let due = finishedAt.milliseconds + 1000 - clock.now().milliseconds
        if due > 0 {
            clock.advance(by: .milliseconds(due))
            try await server.app.flushRepository()
            #expect(try await server.get("/v1/jobs/\(done)").status == 200, "not yet a second old")
        }
        clock.advance(by: .milliseconds(1001))
        try await server.app.flushRepository()
        #expect(try await server.get("/v1/jobs/\(done)").status == 404, "a job finished more than 1 s ago is removed")
        #expect(try await server.get("/v1/jobs/\(waiting)").status == 200, "an unfinished job is kept")
        await server.stop()
    }

    /// Retention walks jobs by position (schema 5 has no index on `finished_at`), at most 5,000 a
    /// call: 6,000 old jobs it cannot expire yet (finished "after" the cutoff) stand before ten it
    /// can, and the walk goes on from where it stopped until it reaches them.
    @Test func retentionWalksPastJobsItCannotExpireYet() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let dayAgo = Timestamp.now().milliseconds - 86_400_000
        let tomorrow = Timestamp.now().milliseconds + 86_400_000
        await (try await Self.server(path)).stop()
        let db = try SQLiteConnection(path: path)
        try db.execute(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6010)
            INSERT INTO jobs (position, id, state, created_at, finished_at, document)
                SELECT i, 'old' || i, 'succeeded', \(dayAgo), CASE WHEN i <= 6000 THEN \(tomorrow) ELSE \(dayAgo) END, x'7b7d'
                FROM n
            """
        )
        let server = try await Self.server(path) { $0.retention = .seconds(1) }
        var left: Int64? = 10
        for _ in 0..<100 where left != 0 {
            try await Task.sleep(for: .milliseconds(100))
            left = try db.scalar("SELECT count(*) FROM jobs WHERE position > 6000")
        }
        #expect(left == 0, "the ten jobs that finished a day ago are removed")
        #expect(try db.scalar("SELECT count(*) FROM jobs") == 6000, "the others are kept")
        await server.stop()
    }

    /// A state filter and the restart's query for unfinished jobs use the partial indexes of
    /// schema 5 — which SQLite does only when the query repeats the index's condition as written.
    @Test func stateQueriesUseThePartialIndexes() throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        try SQLiteJobRepository(path: path, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
            .close()
        let db = try SQLiteConnection(path: path)
        func plan(_ sql: String) throws -> String {
            let statement = try db.statement("EXPLAIN QUERY PLAN " + sql, cached: false)
            var details: [String] = []
            while try statement.step() { details.append(statement.text(3)) }
            return details.joined(separator: "; ")
        }
        let expected: [JobState: String] = [
            .pending: "jobs_unfinished", .running: "jobs_unfinished",
            .failed: "jobs_failed_or_cancelled", .cancelled: "jobs_failed_or_cancelled",
        ]
        // (With a label filter too, SQLite starts from the label's rows instead.)
        for (state, index) in expected {
            for before: UInt64? in [nil, 99] {
                let found = try plan(SQLiteJobRepository.listSQL(JobQuery(state: state, before: before)).sql)
                #expect(found.contains(index), "\(state): \(found)")
            }
        }
        #expect(try plan("\(SQLiteJobRepository.unfinishedSQL)").contains("jobs_unfinished"))
        // Pending jobs: the sleeping ones come from their own index; due ones by start time.
        #expect(try plan(SQLiteJobRepository.listSQL(JobQuery(state: .pending)).sql).contains("jobs_sleeping"))
        #expect(try plan("\(SQLiteJobRepository.sleepingDueSQL)").contains("jobs_sleeping_by_start"))
        let due = try plan("\(SQLiteJobRepository.sleepingSQL)")
        #expect(due.contains("jobs_sleeping_by_start") && !due.contains("TEMP B-TREE"), "\(due)")
    }

    /// The statements SQLite prepares once from literals select the columns the shared readers
    /// (`StoredRecords+Rows.swift`) read, in their order.
    @Test func preparedStatementsSelectTheColumnsTheirReadersRead() {
        func columns(_ sql: StaticString) -> String {
            let text = "\(sql)".split(whereSeparator: \.isWhitespace).joined(separator: " ")
            guard let select = text.range(of: "SELECT "), let from = text.range(of: " FROM ") else { return text }
            return String(text[select.upperBound..<from.lowerBound])
        }
        #expect(columns(SQLiteJobRepository.jobSQL) == StoredRecords.jobColumns)
        #expect(columns(SQLiteJobRepository.nodesSQL) == StoredRecords.nodeColumns)
        #expect(columns(SQLiteJobRepository.sleepingSQL) == StoredRecords.sleepingColumns)
    }

    @Test func concurrentSubmissionsAndReadsAllLand() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await Self.server(path)
        let ids = try await withThrowingTaskGroup(of: [String].self) { group in
            for worker in 0..<8 {
                group.addTask {
                    var ids: [String] = []
                    for index in 0..<25 {
                        ids.append(try await server.submitID(Jobs.value(.int(worker * 100 + index))))
                        if index % 5 == 0 { #expect(try await server.get("/v1/jobs?limit=5").status == 200) }
                    }
                    return ids
                }
            }
            var all: [String] = []
            for try await ids in group { all += ids }
            return all
        }
        #expect(Set(ids).count == 200)
        await server.stop()
        let db = try SQLiteConnection(path: path)
        #expect(try db.scalar("SELECT count(*) FROM jobs") == 200)
        #expect(
            try db.scalar("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 200,
            "every job's end was journalled before the stop"
        )
    }

    @Test func webhookDeliveriesAreStoredAndPendingOnesResumeAfterARestart() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        // The receiver refuses everything at first: the delivery stays pending with its attempts.
        let refusing = try await TestReceiver.answering(.serviceUnavailable)
        let job = Jobs.with(
            Jobs.value(1),
            [
                "webhook": [
                    "url": .string(refusing.url + "/hook"), "events": ["job.succeeded"],
                    "retry": ["maxAttempts": 100, "delayMs": 200, "backoff": 1],
                ]
            ]
        )
        let first = try await Self.server(path)
        let id = try await first.submitID(job, waitMs: 10_000)
        _ = try await refusing.waitForRequests(2)
        let image = try await Self.crashImage(of: first, path: path)
        let before = try await first.get("/v1/jobs/\(id)/deliveries").json["items"]?.arrayValue ?? []
        #expect(before.count == 1)
        #expect(before.first?["state"] == "pending")
        await first.stop()
        await refusing.stop()

        // The crash image holds the pending delivery with its attempts.
        let db = try SQLiteConnection(path: image)
        let row = try db.statement("SELECT id, state, attempts FROM deliveries WHERE job_id = ?").bind(.text(id))
        #expect(try row.step())
        let deliveryID = row.text(0)
        #expect(row.text(1) == "pending")
        #expect(row.text(2).contains("503"), "attempts are journalled: \(row.text(2))")
        row.reset()
        #expect(deliveryID == before.first?["id"]?.stringValue)

        let second = try await Self.server(image)
        let resumed = try await second.get("/v1/jobs/\(id)/deliveries").json["items"]?.arrayValue ?? []
        #expect(resumed.first?["id"] == before.first?["id"], "the delivery reads back from the file")
        #expect((resumed.first?["attempts"]?.arrayValue?.count ?? 0) >= 1)
        // The old receiver is gone: the resumed delivery's next attempt fails to connect, and that
        // attempt is recorded too — proof that the restarted server picked the delivery up.
        var retried = false
        for _ in 0..<100 where !retried {
            try await Task.sleep(for: .milliseconds(100))
            let items = try await second.get("/v1/jobs/\(id)/deliveries").json["items"]?.arrayValue ?? []
            retried = items.first?["attempts"]?.arrayValue?.contains { $0["error"] != nil } ?? false
        }
        #expect(retried, "the pending delivery resumed after the restart")
        await second.stop()
    }

    @Test func aDamagedFileIsRefusedWhenTheIntegrityCheckIsOn() async throws {
        let path = try Self.temporaryDirectory() + "/taskserver.sqlite"
        do {
            let server = try await Self.server(path)
            for index in 0..<200 {
                _ = try await server.submitID(Jobs.value(.string(String(repeating: "x", count: 200) + "\(index)")))
            }
            await server.stop()
        }
        // Overwrite the middle of the file (past the header page) with garbage.
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: size / 2)
        handle.write(Data(repeating: 0xA5, count: 8192))
        try handle.close()
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        var options = SQLiteJobRepository.Options()
        options.checkIntegrity = true
        #expect(throws: SQLiteError.self) {
            try SQLiteJobRepository(path: path, options: options, logger: logger)
        }
    }
}
