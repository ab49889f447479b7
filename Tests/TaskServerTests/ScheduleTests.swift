import Foundation
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Cron schedules (SPEC §8): each fire starts a job labelled with the schedule, at most once per
/// fire time (also across a crash), with the overlap and catch-up rules; the clock is moved by hand.
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct ScheduleTests {
    static let value = jsonValue(#"{"graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}}}"#)
    static let gate = jsonValue(#"{"graph": {"type": "task", "id": "gate", "action": "await"}}"#)

    static func schedule(
        _ id: String,
        cron: String = "* * * * *",
        job: JSONValue = value,
        _ extra: [String: JSONValue] = [:]
    ) -> JSONValue {
        var object: JSONObject = ["id": .string(id), "cron": .string(cron), "job": job]
        for (key, value) in extra { object[key] = value }
        return .object(object)
    }

    /// The jobs of schedule `id`, oldest first.
    static func jobs(_ server: TestServer, _ id: String) async throws -> [JSONValue] {
        let items = try await server.get("/v1/jobs?label=schedule:\(id)&limit=1000").json["items"]?.arrayValue ?? []
        return items.reversed()
    }

    /// Polls until schedule `id` has `count` jobs (10 s at most, scaled; every 50 ms so as not to
    /// starve the suites beside it under TSan); returns them. With `clock`, each poll moves it by
    /// 5 ms: the scheduler's timer for a fire already due (a catch-up, a
    /// fire that came while the last was handled) waits for the manual clock to move.
    static func waitForJobs(
        _ server: TestServer,
        _ id: String,
        count: Int,
        nudging clock: ManualClock? = nil
    ) async throws -> [JSONValue] {
        for _ in 0..<(200 * TestTiming.slowdown) {
            let jobs = try await Self.jobs(server, id)
            if jobs.count >= count { return jobs }
            clock?.advance(by: .milliseconds(5))
            try await Task.sleep(for: .milliseconds(50))
        }
        return try await Self.jobs(server, id)
    }

    /// Moves `clock` to `seconds` past the next whole minute.
    static func advanceToNextMinute(_ clock: ManualClock, plus seconds: Int64 = 1) {
        let now = clock.now().milliseconds
        let next = (now / 60_000 + 1) * 60_000
        clock.advance(by: .milliseconds(next - now + seconds * 1000))
    }

    static func firesEachMinute(_ server: TestServer, _ clock: ManualClock) async throws {
        let created = try await server.post("/v1/schedules", json: Self.schedule("minutely", [:]))
        #expect(created.status == 201, "\(created)")
        #expect(created.header("location") == "/v1/schedules/minutely")
        let runs = created.json["nextRuns"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(runs.count == 5 && runs.allSatisfy { $0.hasSuffix(":00Z") }, "\(runs)")
        #expect(try await Self.jobs(server, "minutely").isEmpty)

        Self.advanceToNextMinute(clock)
        let first = try await Self.waitForJobs(server, "minutely", count: 1)
        #expect(first.count == 1)
        #expect(first.first?["labels"]?["schedule"] == "minutely")
        Self.advanceToNextMinute(clock)
        let second = try await Self.waitForJobs(server, "minutely", count: 2, nudging: clock)
        #expect(second.count == 2)
        // Recorded: the last fire (a whole minute) and its job.
        let schedule = try await server.get("/v1/schedules/minutely").json
        #expect(schedule["lastFireAt"]?.stringValue?.hasSuffix(":00Z") == true, "\(schedule)")
        #expect(schedule["lastJobId"] == second.last?["id"])
        #expect(try await server.get("/v1/schedules").json["items"]?.arrayValue?.count == 1)
    }

    @Test func aScheduleFiresEachMinuteWithItsLabel() async throws {
        let clock = ManualClock(start: .now())
        try await withServer(clock: clock) { server in try await Self.firesEachMinute(server, clock) }
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let sqliteClock = ManualClock(start: .now())
        let server = try await TestServer.start(clock: sqliteClock) { $0.dataPath = path }
        try await Self.firesEachMinute(server, sqliteClock)
        await server.stop()
    }

    /// Hundreds of schedules: each fire comes off the scheduler's heap once (`Scheduler.Table`),
    /// at its own times, and the list comes in pages by id.
    @Test func manySchedulesFireOnceEachAtTheirOwnTimesAndListInPages() async throws {
        let clock = ManualClock(start: .now())
        try await withServer(clock: clock) { server in
            let ids = (0..<300).map { String(format: "s%03d", $0) }
            for id in ids.shuffled() {
                let cron = Int(id.dropFirst())! < 200 ? "* * * * *" : "*/2 * * * *"
                let created = try await server.post("/v1/schedules", json: Self.schedule(id, cron: cron))
                try #require(created.status == 201, "\(created)")
            }
            // Pages of 128 by id, each `next` the `after` of the one that follows.
            var listed: [String] = []
            var after: String?
            for _ in 0..<4 {
                let page = try await server.get("/v1/schedules?limit=128" + (after.map { "&after=\($0)" } ?? "")).json
                listed += page["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
                after = page["next"]?.stringValue
                if after == nil { break }
            }
            #expect(listed == ids)
            #expect(try await server.get("/v1/schedules").json["items"]?.arrayValue?.count == 100)
            #expect(try await server.get("/v1/schedules?limit=0").status == 400)
            #expect(try await server.get("/v1/schedules?limit=1001").status == 400)
            #expect(try await server.get("/v1/schedules?after=s299").json == ["items": [], "next": nil])

            // Two minutes: every `* * * * *` fires twice, every `*/2` once (one minute is even).
            var minutes: [Int64] = []
            var jobs: [JSONValue] = []
            for _ in 0..<2 {
                Self.advanceToNextMinute(clock)
                minutes.append(clock.now().milliseconds / 60_000)
                let count = 200 * minutes.count + 100 * minutes.filter { $0 % 2 == 0 }.count
                for _ in 0..<(200 * TestTiming.slowdown) {
                    jobs = try await server.get("/v1/jobs?limit=1000").json["items"]?.arrayValue ?? []
                    if jobs.count >= count { break }
                    clock.advance(by: .milliseconds(5))
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(jobs.count == count)
            }
            #expect(jobs.count == 500)
            var fires: [String: Int] = [:]
            for job in jobs { fires[job["labels"]?["schedule"]?.stringValue ?? "?", default: 0] += 1 }
            #expect(ids.allSatisfy { fires[$0] == (Int($0.dropFirst())! < 200 ? 2 : 1) }, "\(fires)")
        }
    }

    /// A client's job under the key an older version gave a fire (`taskserver-schedule:<id>@<ms>`)
    /// does not take the fire's place: fire keys hold a space, which no client's key may.
    @Test func aClientsIdempotencyKeyCannotSilenceAFire() async throws {
        let clock = ManualClock(start: .now())
        try await withServer(clock: clock) { server in
            let now = clock.now().milliseconds
            let next = (now / 60_000 + 1) * 60_000
            let job: JSONValue = ["graph": ["type": "task", "id": "t", "action": "value", "params": ["value": 1]]]
            let squatter = try await server.post(
                "/v1/jobs",
                json: job,
                headers: [("idempotency-key", "taskserver-schedule:minutely@\(next)")]
            )
            #expect(squatter.status == 201)
            let spaced = try await server.post(
                "/v1/jobs",
                json: job,
                headers: [("idempotency-key", "taskserver-schedule minutely@\(next)")]
            )
            #expect(spaced.status == 400, "a key with a space is no client's")
            #expect(try await server.post("/v1/schedules", json: Self.schedule("minutely", [:])).status == 201)
            Self.advanceToNextMinute(clock)
            let fired = try await Self.waitForJobs(server, "minutely", count: 1)
            #expect(fired.count == 1, "the fire started its job")
            #expect(fired.first?["id"] != squatter.json["id"])
        }
    }

    /// `* * * * *` with a run that lasts: `skip` does not pile runs up, `cancelPrevious` replaces
    /// the run, `allow` adds one per minute.
    @Test func overlapDecidesWhatAFireDoesWhileTheLastRunRuns() async throws {
        let clock = ManualClock(start: .now())
        try await withServer(clock: clock) { server in
            for overlap in ["skip", "cancelPrevious", "allow"] {
                let created = try await server.post(
                    "/v1/schedules",
                    json: Self.schedule(overlap, job: Self.gate, ["overlap": .string(overlap)])
                )
                #expect(created.status == 201, "\(created)")
            }
            for minute in 1...3 {
                Self.advanceToNextMinute(clock)
                // Each fire is handled before the next minute comes.
                for id in ["cancelPrevious", "allow"] {
                    _ = try await Self.waitForJobs(server, id, count: minute, nudging: clock)
                }
                for _ in 0..<(100 * TestTiming.slowdown) {
                    if try await server.get("/v1/schedules/skip").json["lastFireAt"] != nil { break }
                    try await Task.sleep(for: .milliseconds(50))
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            let skipped = try await Self.jobs(server, "skip")
            #expect(skipped.count == 1, "skip: one run, still waiting")
            #expect(skipped.first?["state"] == "running")
            let allowed = try await Self.jobs(server, "allow")
            #expect(allowed.count == 3 && allowed.allSatisfy { $0["state"] == "running" })
            let replaced = try await Self.jobs(server, "cancelPrevious")
            #expect(replaced.count == 3)
            #expect(replaced.map { $0["state"] } == ["cancelled", "cancelled", "running"], "\(replaced)")
        }
    }

    /// A crash image restarted later: the fires missed meanwhile follow `catchUp`, and a fire whose
    /// record was lost starts no second job (its job's idempotency key finds the first).
    @Test func missedFiresFollowCatchUpAndNoFireStartsTwice() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let clock = ManualClock(start: .now())
        let first = try await TestServer.start(clock: clock) { $0.dataPath = path }
        for catchUp in ["none", "last", "all"] {
            let created = try await first.post(
                "/v1/schedules",
                json: Self.schedule(catchUp, ["catchUp": .string(catchUp)])
            )
            #expect(created.status == 201, "\(created)")
        }
        Self.advanceToNextMinute(clock)
        for id in ["none", "last", "all"] { #expect(try await Self.waitForJobs(first, id, count: 1).count == 1) }
        for _ in 0..<(200 * TestTiming.slowdown) {
            let recorded = try await first.get("/v1/schedules").json["items"]?.arrayValue?.filter {
                $0["lastFireAt"] != nil
            }
            if recorded?.count == 3 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let image = try await SQLiteStoreTests.crashImage(of: first, path: path)
        await first.stop()
        // The record of `all`'s fire is lost (as if the crash came between its job and its record).
        let db = try SQLiteConnection(path: image)
        try db.execute("UPDATE schedules SET last_fire_at = NULL WHERE id = 'all'")

        // Three and a half minutes later.
        let later = ManualClock(start: Timestamp(milliseconds: clock.now().milliseconds + 210_000))
        let second = try await TestServer.start(clock: later) { $0.dataPath = image }
        #expect(
            try await Self.waitForJobs(second, "all", count: 4, nudging: later).count == 4,
            "the lost fire again (no job) and three missed"
        )
        #expect(
            try await Self.waitForJobs(second, "last", count: 2, nudging: later).count == 2,
            "the latest missed fire"
        )
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await Self.jobs(second, "none").count == 1, "none: nothing missed is run")
        #expect(try await Self.jobs(second, "all").count == 4)
        #expect(try await Self.jobs(second, "last").count == 2)
        await second.stop()
    }

    @Test func schedulesArePausedChangedTriggeredAndDeleted() async throws {
        let clock = ManualClock(start: .now())
        try await withServer(clock: clock) { server in
            #expect(try await server.post("/v1/schedules", json: Self.schedule("s", ["paused": true])).status == 201)
            expectProblem(try await server.post("/v1/schedules", json: Self.schedule("s")), 409, "schedule.exists")
            #expect(try await server.get("/v1/schedules/s").json["nextRuns"] == [])
            Self.advanceToNextMinute(clock)
            try await Task.sleep(for: .milliseconds(100))
            #expect(try await Self.jobs(server, "s").isEmpty, "paused: no fire")

            let triggered = try await server.post("/v1/schedules/s/trigger")
            #expect(triggered.status == 201, "\(triggered)")
            #expect(triggered.json["labels"]?["schedule"] == "s")

            let patch = try await server.patch(
                "/v1/schedules/s",
                json: #"{"paused": false, "cron": "@hourly", "timezone": "Asia/Kolkata"}"#
            )
            #expect(patch.status == 200, "\(patch)")
            #expect(patch.json["cron"] == "@hourly" && patch.json["timezone"] == "Asia/Kolkata")
            // Kolkata is UTC+5:30: its whole hours fall on half hours in UTC.
            #expect(patch.json["nextRuns"]?.arrayValue?.first?.stringValue?.hasSuffix(":30:00Z") == true, "\(patch)")
            let renamed = try await server.patch("/v1/schedules/s", json: #"{"id": "t"}"#)
            expectProblem(renamed, 422, "request.invalid")

            #expect(try await server.delete("/v1/schedules/s").status == 204)
            expectProblem(try await server.get("/v1/schedules/s"), 404, "schedule.notFound")
            expectProblem(try await server.delete("/v1/schedules/s"), 404, "schedule.notFound")
            expectProblem(try await server.post("/v1/schedules/s/trigger"), 404, "schedule.notFound")
            // Its jobs stay.
            #expect(try await Self.jobs(server, "s").count == 1)
        }
    }

    @Test func badSchedulesAreRefusedWithAPointerPerProblem() async throws {
        try await withServer { server in
            let cases: [(String, [String])] = [
                (#"{"cron": "61 * * * *", "job": {"graph": {"type": "task", "action": "value"}}}"#, ["/cron"]),
                (
                    #"{"cron": "* * * *", "timezone": "Mars/Base", "job": {"graph": {"type": "task", "action": "value"}}}"#,
                    ["/cron", "/timezone"]
                ),
                (#"{"cron": "@daily", "job": {"graph": {"type": "task", "action": "nope"}}}"#, ["/job/graph/action"]),
                (#"{"cron": "@daily"}"#, ["/job"]),
                (
                    #"{"cron": "@daily", "job": {"graph": {"type": "task", "action": "value"}, "runAt": "2030-01-01T00:00:00Z"}}"#,
                    ["/job"]
                ),
                (
                    #"{"id": "no spaces", "cron": "@daily", "overlap": "never", "catchUp": 1, "paused": "no", "extra": 1, "job": {"graph": {"type": "task", "action": "value"}}}"#,
                    ["/id", "/overlap", "/catchUp", "/paused", "/extra"]
                ),
            ]
            for (body, pointers) in cases {
                let response = try await server.post("/v1/schedules", text: body)
                #expect(response.status == 422, "\(body): \(response)")
                let found = response.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue } ?? []
                #expect(found.sorted() == pointers.sorted(), "\(body): \(response)")
            }
            #expect(try await server.get("/v1/schedules").json["items"] == [])
        }
    }
}
