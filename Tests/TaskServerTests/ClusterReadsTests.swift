import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// What every server of a cluster answers about a job another server changed (SPEC §9, #41): a
/// finished job's record kept for fast reads is dropped on every server as soon as a redrive or a
/// delete through any server commits (`changed` notices), so no server answers from a stale copy.
/// Three servers on one PostgreSQL schema.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ClusterReadsTests {
    /// Polls `condition` every 20 ms for up to `seconds` (scaled).
    static func within(_ seconds: Int, _ condition: () async throws -> Bool) async throws -> Bool {
        for _ in 0..<(50 * seconds * TestTiming.slowdown) {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    static func state(_ server: TestServer, _ id: String) async throws -> String? {
        try await server.get("/v1/jobs/\(id)").json["state"]?.stringValue
    }

    @Test func aRedriveOrDeleteThroughAnyServerIsSeenAtOnceByEveryOther() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try await TestServer.node(settings, "a")
        let b = try await TestServer.node(settings, "b")
        let c = try await TestServer.node(settings, "c")

        // A job that waits for approval, cancelled through a: every server reads it cancelled
        // (b and c from the database, and keep the finished record).
        let id = try await a.submitID(Jobs.await(id: "gate"))
        #expect(try await a.post("/v1/jobs/\(id)/cancel").status == 202)
        for server in [a, b, c] {
            #expect(try await Self.within(5) { try await Self.state(server, id) == "cancelled" })
        }

        // Redriven through c: a (which ran it) and b (which read it) see it run again within a
        // second — not from the copy they kept.
        #expect(try await c.post("/v1/jobs/\(id)/redrive").status == 202)
        for server in [a, b] {
            #expect(try await Self.within(1) { try await Self.state(server, id) == "running" })
        }
        // A long-poll for its end through b waits (it is running), and an approval through b
        // reaches the server that runs it.
        let approved = try await b.post("/v1/jobs/\(id)/tasks/gate/complete", json: ["result": "ok"])
        #expect(approved.status == 200, "\(approved)")
        #expect(try await b.finished(id)["state"] == "succeeded")
        for server in [a, b, c] {
            #expect(try await Self.within(5) { try await Self.state(server, id) == "succeeded" })
        }

        // Deleted through a: b and c answer 404 within a second.
        #expect(try await a.delete("/v1/jobs/\(id)").status == 204)
        for server in [b, c] {
            #expect(try await Self.within(1) { try await server.get("/v1/jobs/\(id)").status == 404 })
        }
        await c.stop()
        await b.stop()
        await a.stop()
    }
}
