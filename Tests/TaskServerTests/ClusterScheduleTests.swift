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
}
