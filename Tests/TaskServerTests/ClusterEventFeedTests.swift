import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// The server-wide feed (`GET /v1/events`, SPEC §7) of servers sharing one PostgreSQL schema
/// (SPEC §9): every server gives the same entries at the same cursors, whichever server ran the
/// jobs, and a cursor outlives the server that gave it.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ClusterEventFeedTests {
    static let job = jsonValue(#"{"graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}}}"#)

    /// An entry without its job, which each server gives as it knows it at the time (SPEC §7: the
    /// job as it is now).
    static func event(_ entry: JSONValue) -> JSONValue {
        guard case .object(var object) = entry else { return entry }
        object["job"] = nil
        return .object(object)
    }

    /// Entries after `cursor` read through `server` until `count` have come (long-polls).
    static func read(_ server: TestServer, after cursor: String, count: Int) async throws -> [JSONValue] {
        var items: [JSONValue] = []
        var next = cursor
        for _ in 0..<(40 * TestTiming.slowdown) where items.count < count {
            let page = try await server.get("/v1/events?after=\(next)&waitMs=500").json
            items += page["items"]?.arrayValue ?? []
            next = page["next"]?.stringValue ?? next
            #expect(page["reset"] == nil, "\(page)")
        }
        return items
    }

    @Test func everyServerGivesTheSameEntriesAtTheSameCursors() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await TestServer.node(settings, "a")
        let b = try await TestServer.node(settings, "b")

        let start = try #require(try await b.get("/v1/events").json["next"]?.stringValue)
        #expect(start.hasPrefix("pg."), "\(start)")
        // Jobs run on both servers; each reader sees all of them.
        var ids: [String] = []
        for server in [a, b, a] { ids.append(try await server.submitID(Self.job)) }
        for id in ids { #expect(try await a.get("/v1/jobs/\(id)?waitMs=5000").json["state"] == "succeeded") }

        let throughB = try await Self.read(b, after: start, count: 9)
        let throughA = try await Self.read(a, after: start, count: 9)
        #expect(throughA.count == 9)
        #expect(throughA.map(Self.event) == throughB.map(Self.event), "the same entries at the same cursors")
        for (a, b) in zip(throughA, throughB) {
            #expect(a["job"]?["id"] == b["job"]?["id"] && a["job"]?["id"] == a["jobId"])
        }
        for id in ids {
            let types = throughA.filter { $0["jobId"]?.stringValue == id }.compactMap { $0["type"]?.stringValue }
            #expect(types == ["job.created", "job.started", "job.succeeded"], "\(id): \(types)")
        }
        // Cursors count on from the start's, one per entry.
        let positions = throughA.compactMap { $0["cursor"]?.stringValue?.dropFirst(3) }.compactMap { Int($0) }
        let first = try #require(Int(start.dropFirst(3)))
        #expect(positions == Array((first + 1)...(first + 9)))
        #expect(throughA.last?["job"]?["state"] == "succeeded")

        // A cursor from the middle, through the other server: what follows it.
        let middle = try #require(throughA[3]["cursor"]?.stringValue)
        #expect(try await Self.read(a, after: middle, count: 5).map(Self.event) == throughA[4...].map(Self.event))

        // a restarted (a new process): the cursor b gave still means the same.
        await a.stop()
        let again = try await TestServer.node(settings, "a")
        #expect(try await Self.read(again, after: start, count: 9).map(Self.event) == throughA.map(Self.event))
        // A server's own commits are in its feed as soon as they are committed (no wait).
        let before = try #require(try await again.get("/v1/events").json["next"]?.stringValue)
        let own = try await again.submitID(Self.job)
        #expect(try await again.get("/v1/jobs/\(own)?waitMs=5000").json["state"] == "succeeded")
        let mine = try await again.get("/v1/events?after=\(before)").json["items"]?.arrayValue ?? []
        #expect(mine.compactMap { $0["type"]?.stringValue } == ["job.created", "job.started", "job.succeeded"])
        // A cursor of no feed of this database: a reset, not an error.
        let stale = try await again.get("/v1/events?after=1abc.5").json
        #expect(stale["reset"] == true)
        await again.stop()
        await b.stop()
    }

    /// A job cancelled before its time, then redriven: each entry's job is a valid one (SPEC §7),
    /// never `running` without `startedAt` — the feed takes the job as the commit's events left it.
    @Test func everyEntryShowsAValidJob() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await TestServer.node(settings, "a")
        let start = try #require(try await a.get("/v1/events").json["next"]?.stringValue)
        let week =
            #"{"delayMs": 604800000, "graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}}}"#
        let id = try await a.submitID(jsonValue(week))
        #expect(try await a.post("/v1/jobs/\(id)/cancel").status == 202)
        #expect(try await a.get("/v1/jobs/\(id)?waitMs=5000").json["state"] == "cancelled")
        #expect(try await a.post("/v1/jobs/\(id)/redrive").status == 202)
        #expect(try await a.get("/v1/jobs/\(id)?waitMs=5000").json["state"] == "succeeded")
        let entries = try await Self.read(a, after: start, count: 5)
        // Redriven before it ever started, it starts with that run (`job.started`, #43).
        #expect(
            entries.compactMap { $0["type"]?.stringValue }
                == ["job.created", "job.cancelled", "job.redriven", "job.started", "job.succeeded"]
        )
        for entry in entries {
            let job = entry["job"]
            #expect(job?["state"] != "running" || job?["startedAt"] != nil, "\(entry)")
            #expect(job?["state"] != "pending" || job?["startedAt"] == nil, "\(entry)")
        }
        await a.stop()
    }
}
