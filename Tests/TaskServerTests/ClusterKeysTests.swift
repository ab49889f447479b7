import Foundation
import Synchronization
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Concurrency keys for the whole cluster (SPEC §8, §9): `max` holders of a key on all servers
/// together, counted as filled slots in PostgreSQL (`PostgresKeySlots`). Three servers on one
/// schema, jobs submitted through each.
@Suite(.serialized, .timeLimit(.minutes(2 * TestTiming.slowdown)))
struct ClusterKeysTests {
    typealias Rules = QueueRulesAPITests

    static func start(_ settings: PostgresSettings) async throws -> [TestServer] {
        var servers: [TestServer] = []
        for name in ["a", "b", "c"] { servers.append(try await TestServer.node(settings, name)) }
        return servers
    }

    /// The state of each job's task `work`, read through `server`.
    static func states(_ server: TestServer, _ ids: [String]) async throws -> [String] {
        var states: [String] = []
        for id in ids { states.append(try await Rules.node(server, id)["state"]?.stringValue ?? "?") }
        return states
    }

    static func heldSlots(_ admin: PostgresConnection, _ key: String) throws -> Int {
        Int(try admin.query("SELECT count(*) FROM key_slots WHERE key = $1", [.text(key)]).int(0, 0))
    }

    @Test func aTaskKeyWithMaxOneRunsOneTaskOnAllServersTogether() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let servers = try await Self.start(settings)
        let admin = try PostgresConnection(settings)
        var ids: [String] = []
        for server in servers + servers { ids.append(try await server.submitID(Rules.awaitJob(customer: 42))) }

        // One at a time, whichever server runs it; each completion (through any server) lets the
        // next one in.
        var done: Set<String> = []
        for round in 0..<ids.count {
            let reader = servers[round % servers.count]
            var running: [String] = []
            #expect(
                try await Rules.eventually {
                    let states = try await Self.states(reader, ids)
                    running = zip(ids, states).filter { $0.1 == "running" }.map(\.0)
                    return running.count == 1
                },
                "round \(round): one task runs"
            )
            // Looked at again a moment later: still one (no second server let one in).
            try await Task.sleep(for: .milliseconds(100))
            let again = try await Self.states(reader, ids)
            #expect(again.filter { $0 == "running" }.count == 1, "round \(round): \(again)")
            #expect(try Self.heldSlots(admin, "customer-42") == 1)
            guard let holder = running.first else { break }
            try await Rules.complete(servers[(round + 1) % servers.count], holder)
            #expect(try await reader.finished(holder)["state"] == "succeeded")
            done.insert(holder)
        }
        #expect(done.count == ids.count)
        #expect(try await Rules.eventually { try Self.heldSlots(admin, "customer-42") == 0 }, "no slot left held")
        for server in servers { await server.stop() }
    }

    /// A job-level key with `max: 3`: three jobs run on the three servers together; a holder
    /// cancelled gives its slot to the next; a slot moves with its job when its server leaves.
    @Test func aJobKeyAdmitsMaxHoldersAndMovesWithItsJob() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let servers = try await Self.start(settings)
        let admin = try PostgresConnection(settings)
        let job = jsonValue(
            #"{"concurrency": {"key": "batch", "max": 3}, "graph": {"type": "task", "id": "work", "action": "await"}}"#
        )
        var ids: [String] = []
        for index in 0..<5 { ids.append(try await servers[index % 3].submitID(job)) }
        func running() async throws -> [String] {
            zip(ids, try await Self.states(servers[0], ids)).filter { $0.1 == "running" }.map(\.0)
        }
        #expect(try await Rules.eventually { try await running().count == 3 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(try await running().count == 3)
        #expect(try Self.heldSlots(admin, "batch") == 3)

        // A holder cancelled: the fourth job runs, never more than three.
        let holders = try await running()
        #expect(try await servers[1].post("/v1/jobs/\(holders[0])/cancel").status == 202)
        #expect(try await servers[0].finished(holders[0])["state"] == "cancelled")
        #expect(try await Rules.eventually { try await running().filter { $0 != holders[0] }.count == 3 })
        #expect(try Self.heldSlots(admin, "batch") == 3)

        // Server c leaves with its jobs unfinished: a and b take them up, holders and waiters both;
        // the slots of c's holders move with them (never a fourth).
        await servers[2].stop()
        for _ in 0..<20 {
            #expect(try await running().count <= 3)
            #expect(try Self.heldSlots(admin, "batch") <= 3)
            try await Task.sleep(for: .milliseconds(100))
        }
        // Completed one by one, every job ends: each slot's holder (a job-level key's holder is
        // its job) is completed once its task runs again where it was taken up.
        for _ in 0..<4 {
            let held = try admin.query("SELECT holder FROM key_slots WHERE key = 'batch' ORDER BY slot")
            #expect(held.count >= 1 && held.count <= 3)
            guard held.count > 0 else { break }
            let next = held.text(0, 0)
            #expect(
                try await Rules.eventually {
                    let response = try await servers[0].post(
                        "/v1/jobs/\(next)/tasks/work/complete",
                        json: ["result": "done"]
                    )
                    return response.status == 200 || response.status == 202
                }
            )
            #expect(try await servers[1].finished(next)["state"] == "succeeded")
            #expect(
                try await Rules.eventually {
                    try admin.query("SELECT count(*) FROM key_slots WHERE holder = $1", [.text(next)]).int(0, 0) == 0
                },
                "an ended job holds no slot"
            )
        }
        for id in ids {
            let state = try await servers[0].finished(id)["state"]
            #expect(state == "succeeded" || state == "cancelled")
        }
        #expect(try await Rules.eventually { try Self.heldSlots(admin, "batch") == 0 }, "no slot left held")
        await servers[0].stop()
        await servers[1].stop()
    }

    /// A server that gives its jobs up (it could not renew its lease in time, while its
    /// registration is still live) frees none of their slots: a given-up attempt's worker may still
    /// run, so the slot waits for the server that takes the job over.
    @Test func aServerThatGivesItsJobsUpKeepsTheirSlotsForTheirTakeover() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await TestServer.node(settings, "a")
        let b = try await TestServer.node(settings, "b")
        let admin = try PostgresConnection(settings)
        let holder = try await a.submitID(Rules.awaitJob(customer: 7))
        #expect(try await Rules.eventually { try await Rules.node(a, holder)["state"] == "running" })
        #expect(try Self.heldSlots(admin, "customer-7") == 1)

        a.app.jobs.abandonAll()
        let waiter = try await b.submitID(Rules.awaitJob(customer: 7))
        try await Task.sleep(for: .milliseconds(1_500))
        #expect(try await Rules.node(b, waiter)["state"] != "running", "the given-up holder's slot is not free")
        #expect(try admin.query("SELECT holder FROM key_slots WHERE key = 'customer-7'").text(0, 0) == holder + "/work")
        await b.stop()
        await a.stop()
    }
}

/// The ends of a key's holder, and many keys at once, on a cluster.
@Suite(.serialized, .timeLimit(.minutes(2 * TestTiming.slowdown)))
struct ClusterKeyHoldersTests {
    typealias Rules = QueueRulesAPITests

    /// A holder cancelled lets the next in; cancelled, it can be deleted (nothing held), or
    /// redriven: its task lines up for the key again, and runs once the holder before it ends.
    @Test func aHoldersJobCancelledDeletedOrRedrivenHoldsNoSlotItShouldNot() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await TestServer.node(settings, "a")
        let b = try await TestServer.node(settings, "b")
        let admin = try PostgresConnection(settings)
        /// Completes `id`'s task once it runs (its slot may be recorded a moment before).
        func complete(_ server: TestServer, _ id: String) async throws {
            #expect(
                try await Rules.eventually {
                    let response = try await server.post("/v1/jobs/\(id)/tasks/work/complete", json: ["result": "done"])
                    return response.status == 200 || response.status == 202
                }
            )
        }
        func holders() throws -> [String] {
            let rows = try admin.query("SELECT holder FROM key_slots WHERE key = 'customer-7'")
            return (0..<rows.count).map { rows.text($0, 0) }
        }
        let first = try await a.submitID(Rules.awaitJob(customer: 7))
        try await a.waitUntilStarted(first, task: "work")
        let second = try await b.submitID(Rules.awaitJob(customer: 7))
        let third = try await b.submitID(Rules.awaitJob(customer: 7))
        #expect(try await Rules.eventually { try await Rules.node(b, second)["waitingFor"] == "concurrency" })
        #expect(try holders() == ["\(first)/work"])

        // Cancelled through b: a's holder gives its slot to one of b's waiters.
        #expect(try await b.post("/v1/jobs/\(first)/cancel").status == 202)
        #expect(try await a.finished(first)["state"] == "cancelled")
        #expect(try await Rules.eventually { try holders() == ["\(second)/work"] })
        // Redriven: it lines up again behind the holder; the third job still waits too.
        #expect(try await a.post("/v1/jobs/\(first)/redrive").status == 202)
        #expect(try await Rules.eventually { try await Rules.node(a, first)["waitingFor"] == "concurrency" })
        #expect(try holders() == ["\(second)/work"])
        try await complete(b, second)
        #expect(try await b.finished(second)["state"] == "succeeded")
        // One of the two waiters (one per server's line) gets it; then the other.
        var next = ""
        #expect(
            try await Rules.eventually {
                next = try holders().first ?? ""
                return next == "\(first)/work" || next == "\(third)/work"
            }
        )
        let (done, last) = next == "\(first)/work" ? (first, third) : (third, first)
        try await complete(a, done)
        #expect(try await a.finished(done)["state"] == "succeeded")
        #expect(try await Rules.eventually { try holders() == ["\(last)/work"] })
        try await complete(b, last)
        #expect(try await b.finished(last)["state"] == "succeeded")
        // Deleted once it ended: no slot of it anywhere.
        #expect(try await b.delete("/v1/jobs/\(first)").status == 204)
        #expect(try await Rules.eventually { try holders().isEmpty })
        await a.stop()
        await b.stop()
    }

    /// 10,000 distinct keys held at once through two servers: each holder its own slot, and a
    /// 10,001st job on one of the keys waits for it.
    @Test func tenThousandKeysHeldAtOnce() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let servers = [try await TestServer.node(settings, "a"), try await TestServer.node(settings, "b")]
        let admin = try PostgresConnection(settings)
        for batch in 0..<10 {
            let jobs = (0..<1000).map { index in Rules.awaitJob(customer: .int(batch * 1000 + index)) }
            let response = try await servers[batch % 2].post("/v1/jobs/batch", json: ["jobs": .array(jobs)])
            #expect(response.status == 200, "\(response.status)")
        }
        #expect(
            try await Rules.eventually {
                try admin.query("SELECT count(*) FROM key_slots").int(0, 0) == 10_000
            },
            "every job's task holds its own key"
        )
        let waiting = try await servers[0].submitID(Rules.awaitJob(customer: 4242))
        #expect(try await Rules.eventually { try await Rules.node(servers[0], waiting)["waitingFor"] == "concurrency" })
        #expect(try admin.query("SELECT count(*) FROM key_slots").int(0, 0) == 10_000)
        for server in servers { await server.stop() }
    }
}

/// Rate limits for the whole cluster (SPEC §8, §9): each server gives out 1/N of a pool's rate,
/// N the live servers, re-divided at every heartbeat.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ClusterRateTests {
    static func share(_ server: TestServer) async throws -> Double? {
        let items = try await server.get("/v1/executors").json["items"]?.arrayValue ?? []
        return items.first { $0["name"] == "paced" }?["rate"]?["share"]?.doubleValue
    }

    @Test func serversDivideAPoolsRateAndTakeItBackWhenOneLeaves() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            configuration.executors["paced"] = 4
            configuration.rates["paced"] = RateLimit(count: 100, period: .seconds(1))
        }
        let a = try await TestServer.node(settings, "a", configure)
        #expect(try await Self.share(a) == 1)
        let b = try await TestServer.node(settings, "b", configure)
        // b counts a at once (at registration); a counts b at its next heartbeat.
        #expect(try await Self.share(b) == 0.5)
        #expect(try await ClusterKeysTests.Rules.eventually { try await Self.share(a) == 0.5 })
        await b.stop()
        #expect(try await ClusterKeysTests.Rules.eventually { try await Self.share(a) == 1 })
        await a.stop()
    }

    /// `GET /v1/executors` answers for the cluster on any server: totals, and each server's counts
    /// (the others' as of their last heartbeat).
    @Test func executorsAnswerForTheClusterOnAnyServer() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            configuration.executors["paced"] = 4
            configuration.externalExecutors = ["images"]
        }
        let a = try await TestServer.node(settings, "a", configure)
        let b = try await TestServer.node(settings, "b", configure)
        // Two tasks queued on a (it runs their jobs), one of them urgent.
        _ = try await a.submitID(ClusterWorkerTests.job)
        guard case .object(var urgent) = ClusterWorkerTests.job else { return }
        urgent["priority"] = 9
        _ = try await a.submitID(.object(urgent))
        func executor(_ name: String) async throws -> JSONValue? {
            try await b.get("/v1/executors").json["items"]?.arrayValue?.first { $0["name"] == .string(name) }
        }
        #expect(try await ClusterKeysTests.Rules.eventually { try await executor("images")?["queued"] == 2 })
        let images = try #require(try await executor("images"))
        #expect(images["queuedByPriority"] == ["9": 1, "5": 1])
        let servers = images["servers"]?.arrayValue ?? []
        #expect(servers.compactMap { $0["server"]?.stringValue } == ["b", "a"], "this server first, then the others")
        #expect(servers.compactMap { $0["queued"]?.intValue } == [0, 2])
        #expect(try await executor("paced")?["size"] == 8, "the cluster's slots")

        // The workers list too: w1 claimed through both servers (a lease through a), w2 through b.
        func claim(_ server: TestServer, _ worker: String) async throws {
            let response = try await server.post(
                "/v1/executors/images/claim",
                json: ["workerId": .string(worker), "max": 1, "waitMs": 0]
            )
            #expect(response.status == 200)
        }
        try await claim(a, "w1")
        try await claim(b, "w1")
        try await claim(b, "w2")
        var workers: [JSONValue] = []
        #expect(
            try await ClusterKeysTests.Rules.eventually {
                workers = try await b.get("/v1/executors/images/workers").json["items"]?.arrayValue ?? []
                return workers.count == 2 && workers.contains { $0["servers"]?.arrayValue?.count == 2 }
            },
            "\(workers)"
        )
        let w1 = try #require(workers.first { $0["workerId"] == "w1" })
        #expect(w1["servers"]?.arrayValue?.compactMap { $0["server"]?.stringValue } == ["b", "a"])
        let byServer = w1["servers"]?.arrayValue?.compactMap { $0["leases"]?.intValue } ?? []
        #expect(byServer.count == 2 && byServer[1] >= 1, "a holds the lease it handed out")
        #expect(w1["leases"]?.intValue == byServer.reduce(0, +), "the leases of all servers")
        let w2 = try #require(workers.first { $0["workerId"] == "w2" })
        // (A claim through b that b relays to a, which queues the tasks, is seen by both.)
        #expect(w2["servers"]?.arrayValue?.first?["server"] == "b")
        #expect(
            try await a.get("/v1/executors").json["items"]?.arrayValue?.allSatisfy { $0["workerList"] == nil } == true
        )
        await b.stop()
        await a.stop()
    }
}

/// `PostgresKeySlots` at the seam, with the real database: a holder taking its slot up after a
/// takeover is granted at once, also while its server's line for the key waits behind it.
///
/// Async throughout: a test that blocks its thread holds one of the cooperative pool's few
/// threads (two on two cores), and the other suites' timings suffer.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct PostgresKeySlotsTests {
    @Test func aHolderTakesItsSlotUpPastTheWaitersItHoldsBack() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let repository = try ClusterFencingTests.open(settings, "a")
        let admin = try PostgresConnection(settings)
        // Job j's task held the key's one slot on a server that died (another registration).
        try admin.query("INSERT INTO key_slots VALUES ('k', 0, 'j/t', 'j', 999, 1, 0)")
        let slots = repository.keySlots
        // A waiter asks first: refused, the head of this server's line.
        let waiter = slots.acquire(key: "k", max: 1, priority: 5, holder: "w/t", jobID: "w", cancellationToken: nil)
        // j, taken over by this server, runs its task again: its slot comes back at once.
        let holder = slots.acquire(key: "k", max: 1, priority: 5, holder: "j/t", jobID: "j", cancellationToken: nil)
        let held = try await holder.value
        #expect(!waiter.isCompleted, "the waiter still waits: the one slot is j's")
        #expect(
            try admin.query("SELECT token FROM key_slots WHERE holder = 'j/t'").int(0, 0)
                == repository.membership.token.load(ordering: .relaxed),
            "taken up under this server's registration"
        )
        // Given back: the waiter gets it.
        held.release()
        _ = try await waiter.value
        #expect(try admin.query("SELECT holder FROM key_slots WHERE key = 'k'").text(0, 0) == "w/t")
        try await repository.close().value
    }

    /// One line per key across the servers: a freed slot goes to the head that waits ahead — a
    /// higher priority, then the longer wait — whichever server frees it or asks first (here the
    /// freeing server's own head asks in the very batch that frees it).
    @Test func aFreedSlotGoesToTheHeadThatWaitsAheadOnAnyServer() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try ClusterFencingTests.open(settings, "a")
        let b = try ClusterFencingTests.open(settings, "b")
        let admin = try PostgresConnection(settings)
        // Registered for 10 minutes, as live servers are: a dead server's waiting mark holds
        // nobody back. (Not started, so no heartbeat renews them: a leader's sweep would free the
        // slots of these made-up jobs.)
        try admin.query("UPDATE servers SET lease_until = taskserver_now_ms() + 600000")
        func take(_ repository: PostgresJobRepository, _ job: String, priority: Int) -> Future<any HeldKey> {
            repository.keySlots.acquire(
                key: "k",
                max: 1,
                priority: priority,
                holder: job + "/t",
                jobID: job,
                cancellationToken: nil
            )
        }
        func waiting(_ count: Int) async throws {
            for _ in 0..<100 where try admin.query("SELECT count(*) FROM key_waiters").int(0, 0) != count {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(try admin.query("SELECT count(*) FROM key_waiters").int(0, 0) == count)
        }
        func holder() throws -> String { try admin.query("SELECT holder FROM key_slots WHERE key = 'k'").text(0, 0) }
        /// `future`'s key, granted within 5 s.
        func granted(
            _ future: Future<any HeldKey>,
            sourceLocation: SourceLocation = #_sourceLocation
        ) async throws -> any HeldKey {
            for _ in 0..<100 where !future.isCompleted { try await Task.sleep(for: .milliseconds(50)) }
            let rows = try admin.query("SELECT server || ' ' || priority || ' ' || since FROM key_waiters")
            let waiters = (0..<rows.count).map { rows.text($0, 0) }
            try #require(future.isCompleted, "granted in 5 s; waiting: \(waiters)", sourceLocation: sourceLocation)
            return try await future.value
        }

        // A higher priority on another server goes first, though a's head waited longer.
        let first = try await take(a, "h", priority: 5).value
        let low = take(a, "low", priority: 5)
        try await waiting(1)
        let high = take(b, "high", priority: 9)
        try await waiting(2)
        first.release()
        let second = try await granted(high)
        #expect(!low.isCompleted, "a's own head asked first, and yielded")
        #expect(try holder() == "high/t")

        // As high a priority: the longer wait goes first (b's head waits since before a's).
        let early = take(b, "early", priority: 5)
        try await waiting(2)
        let late = take(a, "late", priority: 5)
        second.release()
        let third = try await granted(low)
        #expect(try holder() == "low/t")
        third.release()
        let fourth = try await granted(early)
        #expect(!late.isCompleted)
        fourth.release()
        try await granted(late).release()
        try await waiting(0)
        try await a.close().value
        try await b.close().value
    }

    /// A retry of a holder can take its slot up before its previous attempt's release is sent:
    /// that release then frees nothing (it names the earlier taking), so no third party gets in.
    @Test func aLateReleaseOfAnEarlierAttemptFreesNothing() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let repository = try ClusterFencingTests.open(settings, "a")
        let admin = try PostgresConnection(settings)
        let slots = repository.keySlots
        let first = try await slots.acquire(
            key: "k",
            max: 1,
            priority: 5,
            holder: "j/t",
            jobID: "j",
            cancellationToken: nil
        ).value
        let retry = try await slots.acquire(
            key: "k",
            max: 1,
            priority: 5,
            holder: "j/t",
            jobID: "j",
            cancellationToken: nil
        ).value
        let other = slots.acquire(key: "k", max: 1, priority: 5, holder: "w/t", jobID: "w", cancellationToken: nil)
        first.release()
        // The release is sent, and the other waiter asks again: still j's.
        try await repository.flush().value
        try await Task.sleep(for: .milliseconds(600))
        #expect(!other.isCompleted, "the slot is the retry's")
        #expect(try admin.query("SELECT holder FROM key_slots WHERE key = 'k'").text(0, 0) == "j/t")
        retry.release()
        _ = try await other.value
        #expect(try admin.query("SELECT holder FROM key_slots WHERE key = 'k'").text(0, 0) == "w/t")
        try await repository.close().value
    }
}
