import Synchronization
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Worker claims and leases through any server of a cluster (SPEC §9): a task queued on the server
/// that runs its job is claimed through another, heartbeated and completed through either, and a
/// claim waiting on one server gets a task submitted on another. Two servers on one PostgreSQL
/// schema, real heartbeats (1 s).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ClusterWorkerTests {
    static func start(_ settings: PostgresSettings, _ name: String) async throws -> TestServer {
        try await TestServer.node(settings, name) { $0.externalExecutors = ["images"] }
    }

    /// Polls `condition` every 50 ms for up to 10 s (scaled).
    static func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        for _ in 0..<(200 * TestTiming.slowdown) {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    static let job = jsonValue(
        #"{"input": {"w": 3}, "graph": {"type": "task", "id": "thumb", "executor": "images", "action": "resize", "params": {"width": "${input.w}"}, "heartbeatTimeoutMs": 20000}}"#
    )

    @Test func aTaskQueuedOnOneServerIsClaimedHeartbeatedAndCompletedThroughTheOther() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await Self.start(settings, "a")
        let b = try await Self.start(settings, "b")

        // Queued on a (it runs the job); b learns of it with a's next heartbeat.
        let first = try await a.submitID(Self.job)
        var items: [JSONValue] = []
        #expect(
            try await Self.eventually {
                items = try await ExternalPoolsAPITests.claim(b, worker: "w-b", max: 5)
                return !items.isEmpty
            }
        )
        try #require(items.count == 1)
        let item = items[0]
        #expect(item["jobId"]?.stringValue == first)
        #expect(item["params"] == ["width": 3])
        #expect(item["attempt"] == 1)
        let leaseId = try #require(item["leaseId"]?.stringValue)
        #expect(LeaseID.isPlausible(leaseId), "a lease id made by the claiming server")
        // Only its hash was stored; the id is nowhere in the database.
        let admin = try PostgresConnection(settings)
        let stored = try admin.query(
            "SELECT count(*) FROM leases WHERE lease_hash = $1",
            [.text(LeaseID.hash(leaseId))]
        )
        #expect(stored.int(0, 0) == 1)
        #expect(
            try admin.query(
                "SELECT count(*) FROM commands WHERE position($1 in coalesce(result, '') || coalesce(convert_from(body, 'UTF8'), '')) > 0",
                [.text(leaseId)]
            ).int(0, 0) == 0
        )

        // Heartbeats through either server reach a's lease.
        let throughB = try await b.post("/v1/leases/\(leaseId)/heartbeat", json: ["progress": ["done": 0.5]])
        #expect(throughB.status == 200, "\(throughB)")
        #expect(throughB.json["cancelRequested"] == false)
        let throughA = try await a.post("/v1/leases/heartbeat", json: ["items": [["leaseId": .string(leaseId)]]])
        #expect(throughA.json["items"]?.arrayValue?.first?["status"] == 200, "\(throughA)")
        #expect(try await a.get("/v1/jobs/\(first)/tasks/thumb").json["progress"] == ["done": 0.5])

        // Completed through b: answered once durable, with the node as a recorded it.
        let done = try await b.post("/v1/leases/\(leaseId)/complete", json: ["result": ["url": "s3://x"]])
        #expect(done.status == 200, "\(done)")
        #expect(done.json["state"] == "succeeded")
        #expect(done.json["result"] == ["url": "s3://x"])
        let job = try await b.get("/v1/jobs/\(first)?waitMs=5000").json
        #expect(job["state"] == "succeeded")
        #expect(job["result"] == ["url": "s3://x"])

        // The ended lease is gone through either server: a held it (under its hash) and remembers
        // it ended; b finds it stored as ended (its hash only, never its id).
        expectProblem(try await b.post("/v1/leases/\(leaseId)/complete", json: ["result": 1]), 409, "lease.gone")
        expectProblem(try await a.post("/v1/leases/\(leaseId)/heartbeat", json: [:]), 409, "lease.gone")
        #expect(
            try await Self.eventually {
                try admin.query(
                    "SELECT count(*) FROM ended_leases WHERE lease_hash = $1 AND job_id = $2",
                    [.text(LeaseID.hash(leaseId)), .text(first)]
                ).int(0, 0) == 1
            }
        )
        let beatB = try await b.post("/v1/leases/heartbeat", json: ["items": [["leaseId": .string(leaseId)]]])
        #expect(beatB.json["items"]?.arrayValue?.first?["status"] == 409, "\(beatB)")

        // Claimed through a, which runs the job (a lease under its id): heartbeated and completed
        // through b, which finds a by the lease's hash.
        let second = try await a.submitID(Self.job)
        let local = try await ExternalPoolsAPITests.claim(a, worker: "w-a", waitMs: 5000)
        try #require(local.count == 1)
        #expect(local[0]["jobId"]?.stringValue == second)
        let localLease = try #require(local[0]["leaseId"]?.stringValue)
        let beat = try await b.post("/v1/leases/heartbeat", json: ["items": [["leaseId": .string(localLease)]]])
        #expect(beat.json["items"]?.arrayValue?.first?["status"] == 200, "\(beat)")
        let completed = try await b.post("/v1/leases/\(localLease)/complete", json: ["result": 2])
        #expect(completed.status == 200, "\(completed)")
        #expect(try await a.get("/v1/jobs/\(second)?waitMs=5000").json["result"] == 2)
        // Ended: gone through a server that never held it too, and nothing changes.
        let twice = try await b.post("/v1/leases/\(localLease)/complete", json: ["result": 3])
        expectProblem(twice, 409, "lease.gone")
        expectProblem(try await a.post("/v1/leases/\(localLease)/complete", json: ["result": 3]), 409, "lease.gone")
        #expect(try await b.get("/v1/jobs/\(second)").json["result"] == 2)

        // Once its job is deleted, the ended lease is forgotten by the database: no server that
        // did not hold it knows it any more (a still remembers it, in memory).
        #expect(try await a.delete("/v1/jobs/\(second)").status == 204)
        expectProblem(try await b.post("/v1/leases/\(localLease)/complete", json: ["result": 3]), 404, "lease.notFound")
        #expect(
            try admin.query("SELECT count(*) FROM ended_leases WHERE job_id = $1", [.text(second)]).int(0, 0) == 0
        )

        await b.stop()
        await a.stop()
    }

    /// A server that applies no pool command, as one that just died before any server took its
    /// jobs over: lease commands relayed to it go unanswered, and stay recorded.
    final class DeafPools: ClusterPoolsObserver {
        func clusterQueuedCounts() -> [String: Int] { [:] }
        func clusterPeersQueued(_ queued: [String: [String: Int]]) {}
        func clusterApplyPoolCommand(_ id: Int64, _ command: ClusterCommand) {}
        func clusterPeerQueued(server: String, pool: String, count: Int) {}
    }

    @Test func batchItemsWhoseServerDoesNotAnswerAre503AndMayStillApply() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await Self.start(settings, "a")
        let b = try await Self.start(settings, "b")
        // Two tasks of jobs a runs, leased through a (under their ids; b knows only their hashes).
        let jobs = try await [a.submitID(Self.job), a.submitID(Self.job)]
        var leases: [String] = []
        #expect(
            try await Self.eventually {
                let items = try await ExternalPoolsAPITests.claim(a, worker: "w-a", max: 2 - leases.count)
                leases += items.compactMap { $0["leaseId"]?.stringValue }
                return leases.count == 2
            }
        )
        try #require(leases.count == 2)
        let cluster = try #require(a.app.repository.cluster)
        cluster.observePools(DeafPools())

        // Each item is answered alone: the two whose server does not answer are 503 (after the
        // relay's 3 s), the unknown one 404, in a 200 — not a 500 for the whole batch.
        let unknown = LeaseID.make()
        let beatItems: [JSONValue] = (leases + [unknown]).map { ["leaseId": .string($0)] }
        let beats = try await b.post("/v1/leases/heartbeat", json: ["items": .array(beatItems)])
        #expect(beats.status == 200, "\(beats)")
        let beaten = beats.json["items"]?.arrayValue ?? []
        #expect(beaten.compactMap { $0["status"]?.intValue } == [503, 503, 404], "\(beats)")
        let codes = beaten.compactMap { $0["code"]?.stringValue }
        #expect(codes == ["store.unavailable", "store.unavailable", "lease.notFound"], "\(beats)")
        #expect(beaten.compactMap { $0["leaseId"]?.stringValue } == leases + [unknown])
        let completions: JSONValue = [
            "items": [["leaseId": .string(leases[0]), "result": 0], ["leaseId": .string(leases[1]), "result": 1]]
        ]
        let completed = try await b.post("/v1/leases/complete", json: completions)
        #expect(completed.status == 200, "\(completed)")
        let items = completed.json["items"]?.arrayValue ?? []
        #expect(items.compactMap { $0["status"]?.intValue } == [503, 503], "\(completed)")
        #expect(items.allSatisfy { $0["code"] == "store.unavailable" }, "\(completed)")
        #expect(
            items.allSatisfy { $0["detail"]?.stringValue?.contains("may still apply") == true },
            "\(completed)"
        )
        // The relayed commands carry the leases' hashes, never their ids.
        let admin = try PostgresConnection(settings)
        for lease in leases {
            let found = try admin.query(
                "SELECT count(*) FROM commands WHERE position($1 in coalesce(result, '') || coalesce(convert_from(body, 'UTF8'), '')) > 0",
                [.text(lease)]
            )
            #expect(found.int(0, 0) == 0)
        }

        // The relayed completions stayed recorded: once a applies pool commands again (as the
        // server taking the jobs over would), they apply, and a retry finds the leases gone.
        let relay = try #require(a.app.workerLeases.relay)
        cluster.observePools(relay)
        for (index, id) in jobs.enumerated() {
            #expect(try await Self.eventually { try await a.get("/v1/jobs/\(id)").json["state"] == "succeeded" })
            #expect(try await b.get("/v1/jobs/\(id)?waitMs=5000").json["result"] == .int(index))
        }
        let retried = try await b.post("/v1/leases/complete", json: completions)
        #expect(retried.json["items"]?.arrayValue?.compactMap { $0["status"]?.intValue } == [409, 409], "\(retried)")

        await b.stop()
        await a.stop()
    }

    @Test func aLeaseCarriesOnWhenItsJobIsTakenUpAgain() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await Self.start(settings, "a")
        let b = try await Self.start(settings, "b")
        let id = try await a.submitID(Self.job)
        let items = try await ExternalPoolsAPITests.claim(a, worker: "w-a", waitMs: 5000)
        let leaseId = try #require(items.first?["leaseId"]?.stringValue)

        // a's registration is gone, as after a takeover: a gives its runs up, registers again and
        // claims its jobs back; the job's stored lease carries on (by its hash) instead of a new
        // attempt being queued.
        let admin = try PostgresConnection(settings)
        try admin.query("DELETE FROM servers WHERE id = 'a'")
        #expect(
            try await Self.eventually {
                try admin.query("SELECT count(*) FROM servers WHERE id = 'a'").int(0, 0) == 1
                    && a.app.jobs.liveRun(id) != nil
            }
        )
        for server in [b, a] {
            let beat = try await server.post("/v1/leases/\(leaseId)/heartbeat", json: [:])
            #expect(beat.status == 200, "\(beat)")
            #expect(beat.json["cancelRequested"] == false, "\(beat)")
        }
        let done = try await b.post("/v1/leases/\(leaseId)/complete", json: ["result": 5])
        #expect(done.status == 200, "\(done)")
        let task = try await a.get("/v1/jobs/\(id)/tasks/thumb").json
        #expect(task["state"] == "succeeded")
        #expect(task["attempts"] == 1, "the attempt carried on: \(task)")
        #expect(try await b.get("/v1/jobs/\(id)?waitMs=5000").json["result"] == 5)

        await b.stop()
        await a.stop()
    }

    @Test func aClaimWaitingOnOneServerGetsATaskSubmittedOnTheOther() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await Self.start(settings, "a")
        let b = try await Self.start(settings, "b")

        // A claim waits on b with nothing queued anywhere; a gets a task. a announces it at once
        // (a notification), not with its next heartbeat: b's claim has it well within one (the
        // heartbeats alone took 1.0–1.5 s; the notification takes milliseconds).
        // (Once a knows of b, at its first heartbeat after b joined: a server announces only
        // while it has peers; until then, the heartbeats carry the news.)
        let cluster = try #require(a.app.repository.cluster as? PostgresCluster)
        #expect(try await Self.eventually { cluster.peers.load(ordering: .relaxed) > 0 })
        var items: [JSONValue] = []
        var id = ""
        for _ in 0..<3 {
            async let waiting = ExternalPoolsAPITests.claim(b, worker: "w-b", max: 2, waitMs: 8000)
            try await Task.sleep(for: .milliseconds(200))
            id = try await a.submitID(Self.job)
            let submitted = ContinuousClock.now
            items = try await waiting
            let waited = ContinuousClock.now - submitted
            try #require(items.count == 1, "the waiting claim on b got a's task")
            #expect(items[0]["jobId"]?.stringValue == id)
            #expect(waited < .milliseconds(700 * TestTiming.slowdown), "woken by a's announcement: \(waited)")
        }
        let leaseId = try #require(items[0]["leaseId"]?.stringValue)

        // Completed through a (it holds the lease, by the id's hash) with claimNext: nothing more.
        let done = try await a.post(
            "/v1/leases/complete",
            json: ["items": [["leaseId": .string(leaseId), "result": 7]], "claimNext": ["max": 1]]
        )
        #expect(done.json["items"]?.arrayValue?.first?["status"] == 200, "\(done)")
        #expect(done.json["claimed"] == [])
        #expect(try await b.get("/v1/jobs/\(id)?waitMs=5000").json["state"] == "succeeded")

        await b.stop()
        await a.stop()
    }
}
