import Foundation
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Delayed starts (SPEC §8 `runAt` / `delayMs`): a job waits `pending` with its `runAt`, starts
/// then and only once, can be cancelled before, and — due later than a short horizon — sleeps in
/// the store instead of memory.
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct DelayedStartTests {
    static func job(_ start: JSONValue) -> JSONValue {
        var job = jsonValue(
            #"{"labels": {"kind": "delayed"}, "graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 7}}}"#
        )
        if case .object(var object) = job, case .object(let extra) = start {
            for (key, value) in extra { object[key] = value }
            job = .object(object)
        }
        return job
    }

    static func events(_ server: TestServer, _ id: String) async throws -> [String] {
        try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue?.compactMap { $0["type"]?.stringValue }
            ?? []
    }

    /// Polls until `condition` holds (10 s at most, scaled): every 50 ms, so that the suites
    /// running beside it under TSan are not starved by its requests.
    static func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        for _ in 0..<(200 * TestTiming.slowdown) {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// The job, long-polled until it ends (the delays here outlast one long-poll under TSan).
    static func finished(_ server: TestServer, _ id: String) async throws -> JSONValue {
        let terminal: Set<String> = ["succeeded", "failed", "cancelled"]
        var job = try await server.finished(id)
        for _ in 0..<(TestTiming.slowdown * 3) where !terminal.contains(job["state"]?.stringValue ?? "") {
            job = try await server.finished(id)
        }
        return job
    }

    static func startsAtItsTime(_ server: TestServer) async throws {
        let delay = TestTiming.ms(1_500)
        let created = try await server.submit(Self.job(["delayMs": .int(delay)]))
        let id = try #require(created["id"]?.stringValue)
        #expect(created["state"] == "pending")
        let createdAt = try #require(created["createdAt"]?.stringValue.flatMap(Timestamp.init(rfc3339:)))
        let runAt = try #require(created["runAt"]?.stringValue.flatMap(Timestamp.init(rfc3339:)))
        #expect(runAt.milliseconds == createdAt.milliseconds + Int64(delay))
        // Read before its time (the answer came before it): pending. A read the machine delayed
        // past it may find it started; that it did not start early is checked below either way.
        let early = try await server.get("/v1/jobs/\(id)").json
        if Timestamp.now() < runAt { #expect(early["state"] == "pending", "\(early)") }
        let job = try await Self.finished(server, id)
        #expect(job["state"] == "succeeded" && job["result"] == 7)
        let startedAt = try #require(job["startedAt"]?.stringValue.flatMap(Timestamp.init(rfc3339:)))
        #expect(startedAt >= runAt, "started \(startedAt), due \(runAt)")
        #expect(job["runAt"] == created["runAt"])
        #expect(
            try await Self.events(server, id) == [
                "job.created", "job.started", "task.started", "task.succeeded", "job.succeeded",
            ]
        )

        // A time in the past starts at once.
        let past = try await server.submitID(Self.job(["runAt": "2020-01-01T00:00:00Z"]))
        #expect(try await server.finished(past)["state"] == "succeeded")
    }

    @Test func aDelayedJobIsPendingThenStartsAtItsTime() async throws {
        try await withServer { server in try await Self.startsAtItsTime(server) }
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await SQLiteStoreTests.server(path)
        try await Self.startsAtItsTime(server)
        await server.stop()
    }

    /// Due beyond the horizon: no live run until the loader takes it, then it starts on time.
    static func sleepsThenStarts(_ server: TestServer, _ clock: ManualClock) async throws {
        let id = try await server.submitID(Self.job(["delayMs": 60_000]))
        #expect(server.app.jobs.liveRun(id) == nil, "a job due in a minute sleeps in the store")
        #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "pending")
        let listed = try await server.get("/v1/jobs?state=pending&label=kind:delayed").json["items"]?.arrayValue
        #expect(listed?.map { $0["id"] } == [.string(id)])
        // 45 s later it is within the horizon (20 s): the loader takes it and holds it.
        clock.advance(by: .seconds(45))
        // (The loader's claims may complete after `advance` returns: time moves on by steps.)
        #expect(
            try await Self.eventually {
                clock.advance(by: .milliseconds(50))
                return server.app.jobs.liveRun(id) != nil
            }
        )
        #expect(try await server.get("/v1/jobs/\(id)").json["state"] == "pending")
        // Its time has come (by steps again: the loader may still be arming the start timer).
        clock.advance(by: .seconds(15))
        #expect(
            try await Self.eventually {
                clock.advance(by: .milliseconds(100))
                return try await server.get("/v1/jobs/\(id)").json["state"] == "succeeded"
            }
        )
        #expect(try await server.finished(id)["state"] == "succeeded")
        #expect(try await Self.events(server, id).filter { $0 == "job.started" }.count == 1)
    }

    static func horizon(_ configuration: inout ServerConfiguration) {
        configuration.delayedStarts.horizon = .seconds(20)
        configuration.delayedStarts.interval = .seconds(1)
    }

    @Test func aJobDueLaterSleepsInTheStoreUntilItsHorizon() async throws {
        let clock = ManualClock(start: .now())
        try await withServer(clock: clock, Self.horizon) { server in try await Self.sleepsThenStarts(server, clock) }
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let sqliteClock = ManualClock(start: .now())
        let server = try await TestServer.start(clock: sqliteClock) { configuration in
            configuration.dataPath = path
            Self.horizon(&configuration)
        }
        try await Self.sleepsThenStarts(server, sqliteClock)
        await server.stop()
    }

    /// Cancelled before its time, held or asleep: it ends `cancelled` at once, nothing ran.
    static func cancelBeforeStart(_ server: TestServer) async throws {
        // Due within the 10 s horizon (held live; under TSan's slowdown it sleeps), and in an hour:
        // 8 s leaves a loaded machine time to cancel before the job is due.
        for delay in [TestTiming.ms(8_000), 3_600_000] {
            let id = try await server.submitID(Self.job(["delayMs": .int(delay)]))
            let cancelled = try await server.post("/v1/jobs/\(id)/cancel")
            #expect(cancelled.status == 202, "\(cancelled)")
            let job = try await Self.finished(server, id)
            #expect(job["state"] == "cancelled", "\(job)")
            #expect(job["startedAt"] == nil, "it never started: \(job)")
            #expect(try await Self.events(server, id) == ["job.created", "task.cancelled", "job.cancelled"])
            #expect(try await server.post("/v1/jobs/\(id)/cancel").status == 200)
            #expect(try await server.delete("/v1/jobs/\(id)").status == 204)
        }
    }

    @Test func aDelayedJobCancelledBeforeItsTimeNeverRuns() async throws {
        try await withServer { server in try await Self.cancelBeforeStart(server) }
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await SQLiteStoreTests.server(path)
        try await Self.cancelBeforeStart(server)
        await server.stop()
    }

    /// What a SIGKILL leaves (held, asleep, due while down) starts once each after the restart.
    @Test func delayedJobsSurviveACrashAndStartOnce() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let horizon: @Sendable (inout ServerConfiguration) -> Void = {
            $0.delayedStarts.horizon = .milliseconds(TestTiming.ms(5_000))
        }
        let first = try await SQLiteStoreTests.server(path, horizon)
        let held = try await first.submitID(Self.job(["delayMs": .int(TestTiming.ms(2_000))]))
        let asleep = try await first.submitID(Self.job(["delayMs": .int(TestTiming.ms(6_000))]))
        let due = try await first.submitID(Self.job(["delayMs": .int(TestTiming.ms(300))]))
        // `held` is due within the horizon, `asleep` beyond it when submitted (which one is live by
        // now depends on the machine's speed: the manual-clock test checks that a later job sleeps).
        let image = try await SQLiteStoreTests.crashImage(of: first, path: path)
        await first.stop()
        try await Task.sleep(for: .milliseconds(TestTiming.ms(400)))

        let second = try await SQLiteStoreTests.server(image, horizon)
        for id in [due, held] {
            let job = try await Self.finished(second, id)
            #expect(job["state"] == "succeeded", "\(id): \(job)")
            #expect(try await Self.events(second, id).filter { $0 == "job.started" }.count == 1)
        }
        // Pending still — unless the machine took past its time to get here (it then must have
        // started at or after its time, checked below).
        let beforeItsTime = try await second.get("/v1/jobs/\(asleep)").json
        if let runAt = beforeItsTime["runAt"]?.stringValue.flatMap(Timestamp.init(rfc3339:)), Timestamp.now() < runAt {
            #expect(beforeItsTime["state"] == "pending", "\(beforeItsTime)")
        }
        #expect(try await Self.finished(second, asleep)["state"] == "succeeded")
        let startedAt = try #require(
            try await second.get("/v1/jobs/\(asleep)").json["startedAt"]?.stringValue.flatMap(Timestamp.init(rfc3339:))
        )
        let runAt = try #require(
            try await second.get("/v1/jobs/\(asleep)").json["runAt"]?.stringValue.flatMap(Timestamp.init(rfc3339:))
        )
        #expect(startedAt >= runAt)
        await second.stop()
    }

    /// A stream opened on a sleeping job follows it once it is live, to its end.
    @Test func aStreamOfASleepingJobFollowsItsStart() async throws {
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let server = try await SQLiteStoreTests.server(path) { configuration in
            configuration.delayedStarts.horizon = .milliseconds(TestTiming.ms(500))
            configuration.delayedStarts.interval = .milliseconds(100)
        }
        // Due 2.5 s past the horizon: asleep when read, even on a loaded machine (at 1.5 s, a
        // stall of a second between the submission and the read made it live once).
        let id = try await server.submitID(Self.job(["delayMs": .int(TestTiming.ms(3_000))]))
        #expect(server.app.jobs.liveRun(id) == nil)
        let raw = try await server.raw { connection in
            try connection.send(StreamsTests.request("/v1/jobs/\(id)/events?stream=true"))
            return try connection.readToEnd()
        }
        #expect(
            StreamsTests.parse(StreamsTests.dechunk(raw)).events.map(\.event)
                == ["job.created", "job.started", "task.started", "task.succeeded", "job.succeeded"]
        )
        await server.stop()
    }

    @Test func badStartsAreRefusedWithPointers() async throws {
        try await withServer { server in
            let cases: [(JSONValue, String)] = [
                (["runAt": "2026-12-24T18:00:00Z", "delayMs": 5], "/delayMs"),
                (["runAt": "tomorrow"], "/runAt"),
                (["runAt": "2026-02-30T00:00:00Z"], "/runAt"),
                (["runAt": 5], "/runAt"),
                (["delayMs": -1], "/delayMs"),
                (["delayMs": 1.5], "/delayMs"),
                (["delayMs": 400_000_000_000], "/delayMs"),
            ]
            for (start, pointer) in cases {
                let response = try await server.post("/v1/jobs", json: Self.job(start))
                #expect(response.status == 422, "\(start): \(response)")
                let pointers = response.json["errors"]?.arrayValue?.compactMap { $0["pointer"]?.stringValue } ?? []
                #expect(pointers == [pointer], "\(start): \(response)")
            }
            // null is no delay.
            let id = try await server.submitID(Self.job(["runAt": .null, "delayMs": .null]))
            #expect(try await server.finished(id)["runAt"] == nil)
        }
    }
}
