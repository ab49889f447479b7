import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Schedules on two servers sharing one PostgreSQL schema (SPEC §8, §9): either server answers
/// for every schedule, a change through one is seen by the other, only the leader fires, and when
/// the leader goes its successor fires on. Each server has a clock moved by hand; leases run on
/// the database's clock.
///
/// Under ThreadSanitizer it runs alone, after the rest of its module (`scripts/test.sh`): beside
/// ~320 other tests every request of its two servers took seconds there, its wait for the first
/// fire ran out, and its polling starved the stream tests running beside it.
@Suite(
    .timeLimit(.minutes(1 * TestTiming.slowdown))
)
struct ClusterScheduleTests {
    static func start(_ settings: PostgresSettings, _ name: String, _ clock: ManualClock) async throws -> TestServer {
        try await TestServer.node(settings, name, clock: clock)
    }

    /// Polls `condition` every 50 ms for up to 10 s (scaled).
    static func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        for _ in 0..<(200 * TestTiming.slowdown) {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    @Test func oneServerFiresAndAnotherTakesOverWhenItGoes() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let clockA = ManualClock(start: .now())
        let clockB = ManualClock(start: clockA.now())
        let a = try await Self.start(settings, "a", clockA)
        let b = try await Self.start(settings, "b", clockB)
        var aRunning = true
        defer { if aRunning { Task { await a.stop() } } }

        // a registered first: the leader, once the heartbeats said so; b never fires meanwhile.
        #expect(try await Self.eventually { a.app.scheduler.isLeading })
        #expect(!b.app.scheduler.isLeading)

        // Created through b, seen by a.
        let created = try await b.post("/v1/schedules", json: ScheduleTests.schedule("minutely"))
        #expect(created.status == 201, "\(created)")
        #expect(try await Self.eventually { try await a.get("/v1/schedules/minutely").status == 200 })

        // The minute passes on both clocks: a fires, once.
        ScheduleTests.advanceToNextMinute(clockA)
        ScheduleTests.advanceToNextMinute(clockB)
        let first = try await ScheduleTests.waitForJobs(b, "minutely", count: 1, nudging: clockA)
        #expect(first.count == 1)
        // b hears of the fire: its record of the schedule shows it.
        #expect(
            try await Self.eventually {
                try await b.get("/v1/schedules/minutely").json["lastJobId"] == first.first?["id"]
            }
        )

        // Paused through a, seen by b.
        let paused = try await a.patch("/v1/schedules/minutely", json: #"{"paused": true}"#)
        #expect(paused.status == 200, "\(paused)")
        #expect(try await Self.eventually { try await b.get("/v1/schedules/minutely").json["paused"] == true })
        let resumed = try await b.patch("/v1/schedules/minutely", json: #"{"paused": false}"#)
        #expect(resumed.status == 200, "\(resumed)")
        #expect(try await Self.eventually { try await a.get("/v1/schedules/minutely").json["paused"] == false })

        // a leaves: b leads within a heartbeat or two, and fires the next minute.
        await a.stop()
        aRunning = false
        #expect(try await Self.eventually { b.app.scheduler.isLeading })
        ScheduleTests.advanceToNextMinute(clockB)
        let second = try await ScheduleTests.waitForJobs(b, "minutely", count: 2, nudging: clockB)
        #expect(second.count == 2, "\(second)")

        // Deleted through b: gone.
        #expect(try await b.delete("/v1/schedules/minutely").status == 204)
        await b.stop()
    }

    /// A manual run started through a server that does not fire counts for the leader's overlap
    /// rule: the leader judges it from the stored last run, not from its own memory.
    @Test func aRunTriggeredThroughAnotherServerCountsForTheOverlapRule() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let clockA = ManualClock(start: .now())
        let clockB = ManualClock(start: clockA.now())
        let a = try await Self.start(settings, "a", clockA)
        let b = try await Self.start(settings, "b", clockB)
        #expect(try await Self.eventually { a.app.scheduler.isLeading })
        var triggered: [String: String] = [:]
        for overlap in ["skip", "cancelPrevious"] {
            let created = try await a.post(
                "/v1/schedules",
                json: ScheduleTests.schedule(overlap, job: ScheduleTests.gate, ["overlap": .string(overlap)])
            )
            #expect(created.status == 201, "\(created)")
            let run = try await b.post("/v1/schedules/\(overlap)/trigger")
            #expect(run.status == 201, "\(run)")
            triggered[overlap] = run.json["id"]?.stringValue
        }

        // The minute passes: a fires both.
        ScheduleTests.advanceToNextMinute(clockA)
        ScheduleTests.advanceToNextMinute(clockB)
        let replaced = try await ScheduleTests.waitForJobs(a, "cancelPrevious", count: 2, nudging: clockA)
        #expect(replaced.count == 2, "\(replaced)")
        #expect(
            try await Self.eventually {
                try await a.get("/v1/schedules/skip").json["lastFireAt"] != nil
            }
        )
        let skipped = try await ScheduleTests.jobs(a, "skip")
        #expect(
            skipped.compactMap { $0["id"]?.stringValue } == [triggered["skip"]].compactMap { $0 },
            "skip: no second run"
        )
        #expect(
            try await Self.eventually {
                try await a.get("/v1/jobs/\(triggered["cancelPrevious"] ?? "")").json["state"] == "cancelled"
            },
            "cancelPrevious cancelled the run triggered through b"
        )
        await a.stop()
        await b.stop()
    }

    /// A server that does not hear of a change at once (the announcement is on its way) still
    /// answers for a schedule created through another server the moment the `201` came back:
    /// read, listed, changed, triggered, deleted, or created again (409), as a job would be.
    @Test func aScheduleCreatedThroughOneServerIsThereAtOnceThroughAnother() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let clockA = ManualClock(start: .now())
        let clockB = ManualClock(start: clockA.now())
        let a = try await Self.start(settings, "a", clockA)
        let b = try await Self.start(settings, "b", clockB)
        #expect(try await Self.eventually { a.app.scheduler.isLeading })
        // From here on b hears of no change: every announcement is still on its way.
        try #require(b.app.repository.cluster).observeSchedules(NotListening())

        func created(_ id: String) async throws {
            let response = try await a.post("/v1/schedules", json: ScheduleTests.schedule(id))
            #expect(response.status == 201, "\(response)")
        }

        try await created("read")
        let read = try await b.get("/v1/schedules/read")
        #expect(read.status == 200, "\(read)")
        #expect(read.json["cron"] == "* * * * *")
        #expect(try await b.get("/v1/schedules/none").status == 404)

        try await created("changed")
        let changed = try await b.patch("/v1/schedules/changed", json: #"{"paused": true}"#)
        #expect(changed.status == 200, "\(changed)")
        #expect(changed.json["paused"] == true)
        #expect(try await Self.eventually { try await a.get("/v1/schedules/changed").json["paused"] == true })

        try await created("triggered")
        let triggered = try await b.post("/v1/schedules/triggered/trigger")
        #expect(triggered.status == 201, "\(triggered)")

        try await created("deleted")
        #expect(try await b.delete("/v1/schedules/deleted").status == 204)
        #expect(try await Self.eventually { try await a.get("/v1/schedules/deleted").status == 404 })
        #expect(try await b.delete("/v1/schedules/deleted").status == 404)

        try await created("taken")
        let again = try await b.post("/v1/schedules", json: ScheduleTests.schedule("taken", cron: "0 * * * *"))
        #expect(again.status == 409, "\(again)")
        #expect(try await a.get("/v1/schedules/taken").json["cron"] == "* * * * *")

        try await created("listed")
        let listed = try await b.get("/v1/schedules").json["items"]?.arrayValue ?? []
        #expect(listed.compactMap { $0["id"]?.stringValue } == ["changed", "listed", "read", "taken", "triggered"])

        await a.stop()
        await b.stop()
    }
}

/// A scheduler's link to its cluster cut: it hears of no change another server makes.
private final class NotListening: ClusterScheduleObserver {
    func clusterLeadership(_ leading: Bool) {}
    func clusterSchedulesChanged(_ id: String?) {}
}
