import Foundation
import InMemoryLogging
import Logging
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// `/healthz`, `/readyz`, `/v1/executors`, `/metrics` (SPEC §3.8; `/openapi.yaml` is in
/// `RouteContractTests`).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ServiceAPITests {
    @Test func healthzAnswersOK() async throws {
        try await withServer { server in
            let response = try await server.get("/healthz")
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            #expect(response.text == "{\"status\":\"ok\"}")
        }
    }

    @Test func readyzAnswersReadyThen503DrainingOnceDrainingBegins() async throws {
        try await withServer { server in
            let ready = try await server.get("/readyz")
            #expect(ready.status == 200)
            #expect(ready.contentType == "application/json")
            #expect(ready.json == ["status": "ready"])
            server.app.beginDraining()
            let draining = try await server.get("/readyz")
            #expect(draining.status == 503)
            #expect(draining.contentType == "application/json")
            #expect(draining.json == ["status": "draining"])
            // Liveness is unaffected.
            #expect(try await server.isHealthy())
        }
    }

    static func pool(_ name: String, _ size: Int, completed: Int = 0) -> String {
        let kind = name == "immediate" ? "inline" : "pool"
        return
            #"{"name": "\#(name)", "kind": "\#(kind)", "size": \#(size), "running": 0, "queued": 0, "completed": \#(completed), "queuedByPriority": {}}"#
    }

    static func pools(_ pools: String...) -> JSONValue {
        jsonValue(#"{"items": [\#(pools.joined(separator: ", "))]}"#)
    }

    @Test func executorsListsDefaultAndImmediate() async throws {
        try await withServer { server in
            let response = try await server.get("/v1/executors")
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            expectJSON(response.json, Self.pools(Self.pool("default", 8), Self.pool("immediate", 0)))
        }
    }

    @Test func executorsListsConfiguredPoolsSortedByName() async throws {
        try await withServer({ $0.executors = ["io": 16, "cpu": 2, "default": 4] }) { server in
            expectJSON(
                try await server.get("/v1/executors").json,
                Self.pools(Self.pool("cpu", 2), Self.pool("default", 4), Self.pool("immediate", 0), Self.pool("io", 16))
            )
        }
    }

    @Test func aPoolMissingDefaultStillHasDefault() async throws {
        try await withServer({ $0.executors = ["io": 3] }) { server in
            expectJSON(
                try await server.get("/v1/executors").json,
                Self.pools(Self.pool("default", 8), Self.pool("immediate", 0), Self.pool("io", 3))
            )
        }
    }

    @Test func executorsCountCompletedWork() async throws {
        try await withServer({ $0.executors = ["default": 2, "io": 2] }) { server in
            for _ in 0..<3 { _ = try await server.submitID(Jobs.value(1, executor: "io"), waitMs: 10_000) }
            _ = try await server.submitID(Jobs.value(1, executor: "immediate"), waitMs: 10_000)
            expectJSON(
                try await server.get("/v1/executors").json,
                Self.pools(Self.pool("default", 2), Self.pool("immediate", 0), Self.pool("io", 2, completed: 3))
            )
        }
    }

    @Test func aTaskOnAnUnknownExecutorIsRejectedAtSubmission() async throws {
        try await withServer { server in
            let response = try await server.post("/v1/jobs", json: Jobs.value(1, executor: "gpu"))
            expectProblem(response, 422, "graph.invalid")
            #expect(response.json["errors"]?.arrayValue?.first?["pointer"] == "/graph/executor")
        }
    }

    @Test func metricsArePrometheusTextWithTaskserverMetrics() async throws {
        try await withServer({ $0.executors = ["default": 3, "io": 5] }) { server in
            _ = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            _ = try await server.submitID(Jobs.fail(code: "x", message: "y"), waitMs: 10_000)
            _ = try await server.get("/v1/jobs/nope")
            _ = try await server.get("/no/such/route")
            // Counters are updated just after a response is written or a job ends: read until they
            // show this test's traffic (a bounded number of reads, no sleeping).
            var text = ""
            for _ in 0..<200 {
                let response = try await server.get("/metrics")
                #expect(response.status == 200)
                #expect(response.contentType == "text/plain; version=0.0.4; charset=utf-8")
                text = response.text
                if text.contains("taskserver_jobs_finished_total{state=\"failed\"} 1\n"),
                    text.contains(
                        "taskserver_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1\n"
                    )
                {
                    break
                }
            }
            for line in [
                "taskserver_jobs_submitted_total 2",
                "taskserver_jobs_finished_total{state=\"succeeded\"} 1",
                "taskserver_jobs_finished_total{state=\"failed\"} 1",
                "taskserver_jobs_finished_total{state=\"cancelled\"} 0",
                "taskserver_tasks_finished_total{state=\"succeeded\",action=\"value\",executor=\"default\"} 1",
                "taskserver_tasks_finished_total{state=\"failed\",action=\"fail\",executor=\"default\"} 1",
                "taskserver_jobs 2.0",
                "taskserver_executor_slots{executor=\"default\"} 3.0",
                "taskserver_executor_slots{executor=\"io\"} 5.0",
                "taskserver_executor_queued{executor=\"io\"} 0.0",
                "taskserver_webhook_attempts_total{result=\"failed\"} 0",
                "taskserver_http_requests_total{route=\"/v1/jobs\",method=\"POST\",status=\"201\"} 2",
                "taskserver_http_requests_total{route=\"/v1/jobs/{id}\",method=\"GET\",status=\"404\"} 1",
                "taskserver_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
                "taskserver_http_request_duration_seconds_count{route=\"/v1/jobs\",method=\"POST\"} 2",
            ] {
                #expect(text.contains(line + "\n"), "missing \(line)")
            }
            Self.expectWellFormedExposition(text)
        }
    }

    @Test func jobAndTaskEventsAreLoggedWithTheirIDsAtDebugOnly() async throws {
        let debug = InMemoryLogHandler()
        let server = try await TestServer.start(logger: debug.logger(level: .debug))
        let id = try await server.submitID(Jobs.fail(code: "x", message: "y"), waitMs: 10_000)
        await server.stop()
        let lines = debug.entries.filter { $0.metadata["job.id"] == "\(id)" }
        #expect(lines.map(\.message).contains("job.created"))
        let failed = lines.first { $0.message == "job.failed" }
        #expect(failed?.level == .debug)
        #expect(failed?.metadata["error.code"] == "x")
        #expect(lines.contains { $0.message == "task.failed" && $0.metadata["task.id"] != nil })

        let info = InMemoryLogHandler()
        let quiet = try await TestServer.start(logger: info.logger(level: .info))
        let quietID = try await quiet.submitID(Jobs.fail(code: "x", message: "y"), waitMs: 10_000)
        await quiet.stop()
        #expect(!info.entries.contains { $0.metadata["job.id"] == "\(quietID)" })
    }

    @Test func storeCommitsAreTimedOnTheSQLiteStore() async throws {
        let directory = try SQLiteStoreTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await withServer({ $0.dataPath = directory + "/store.sqlite" }) { server in
            _ = try await server.submitID(Jobs.value(1), waitMs: 10_000)
            let text = try await server.get("/metrics").text
            let count = text.split(separator: "\n").first {
                $0.hasPrefix("taskserver_store_commit_duration_seconds_count ")
            }
            #expect(
                (count?.split(separator: " ").last).flatMap { Int($0) } ?? 0 >= 1,
                "no commits counted: \(count ?? "no line")"
            )
            Self.expectWellFormedExposition(text)
        }
    }

    /// Every sample belongs to a family with `# HELP` and `# TYPE` declared before it, names are
    /// `taskserver_…`, and values are numbers; histogram buckets are cumulative.
    static func expectWellFormedExposition(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(text.hasSuffix("\n"), sourceLocation: sourceLocation)
        var helped: Set<String> = []
        var typed: [String: String] = [:]
        // Buckets are cumulative within each series (the labels other than `le`).
        var lastBucket: [String: Double] = [:]
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# HELP ") {
                helped.insert(String(line.dropFirst(7).split(separator: " ")[0]))
                continue
            }
            if line.hasPrefix("# TYPE ") {
                let parts = line.dropFirst(7).split(separator: " ")
                #expect(parts.count == 2, "\(line)", sourceLocation: sourceLocation)
                #expect(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(String(parts.last ?? "")),
                    "\(line)",
                    sourceLocation: sourceLocation
                )
                typed[String(parts[0])] = String(parts.last ?? "")
                continue
            }
            #expect(!line.hasPrefix("#"), "\(line)", sourceLocation: sourceLocation)
            let parts = line.split(separator: " ")
            #expect(parts.count == 2, "\(line)", sourceLocation: sourceLocation)
            let series = parts[0]
            let name = String(series.split(separator: "{")[0])
            #expect(name.hasPrefix("taskserver_"), "\(line)", sourceLocation: sourceLocation)
            var family = name
            for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) && typed[name] == nil {
                family = String(name.dropLast(suffix.count))
            }
            #expect(
                helped.contains(family) && typed[family] != nil,
                "no HELP/TYPE before \(line)",
                sourceLocation: sourceLocation
            )
            let value = Double(String(parts.last ?? ""))
            #expect(value != nil, "\(line)", sourceLocation: sourceLocation)
            if series.contains("{"), !series.hasSuffix("}") {
                Issue.record("unterminated labels: \(line)", sourceLocation: sourceLocation)
            }
            if name.hasSuffix("_bucket"), let value {
                let seriesKey = series.split(separator: ",").filter { !$0.contains("le=") }.joined(separator: ",")
                #expect(
                    value >= lastBucket[seriesKey, default: -1],
                    "buckets must be cumulative: \(line)",
                    sourceLocation: sourceLocation
                )
                lastBucket[seriesKey] = value
            }
        }
        #expect(!typed.isEmpty, sourceLocation: sourceLocation)
    }
}
