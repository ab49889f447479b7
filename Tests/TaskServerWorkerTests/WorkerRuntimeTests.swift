import InMemoryLogging
import Logging
import TaskCore
import TaskGraph
import TestSupport
import Testing

@testable import TaskServerWorker

/// The worker runtime against a real, in-process server, running real commands (`/bin/sh`).
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct WorkerRuntimeTests {
    /// Twelve keys in a fixed order that is not alphabetical (nor any hash order by chance).
    static let ordered =
        #"{"r_zeta":0,"r_alpha":1,"r_mike":2,"r_bravo":3,"r_yankee":4,"r_charlie":5,"r_xray":6,"r_delta":7,"#
        + #""r_whiskey":8,"r_echo":9,"r_victor":10,"r_foxtrot":11}"#

    static func job(_ id: String = "t", extra: String = "") -> JSONValue {
        try! JSONParser.parse(
            #"{"input": {"z": 1, "a": 2}, "graph": {"type": "task", "id": "\#(id)", "executor": "images", "action": "run", "params": {"y": "${input.z}", "b": 3}\#(extra)}}"#
        )
    }

    @Test func aCommandsJSONOutputKeepsItsKeyOrderAllTheWayToTheJob() async throws {
        try await withServer { server in
            let worker = try RunningWorker(
                server: server.url,
                command: ["/bin/sh", "-c", "cat >/dev/null; printf '%s\\n' '\(Self.ordered)'"]
            )
            let id = try await server.submit(Self.job())
            let job = try await server.finished(id)
            #expect(job["state"] == "succeeded")
            // Byte for byte: the ordered parser re-serialized compactly gives back what the
            // command printed only if every key kept its place.
            let node = try await server.request("GET", "/v1/jobs/\(id)/tasks/t")
            let result = try #require(try JSONParser.parse(node.body)["result"])
            #expect(Array(result.jsonString.utf8) == Array(Self.ordered.utf8))
            #expect(job["result"]?.jsonString == Self.ordered)
            #expect(try await worker.stop() == 0)
        }
    }

    @Test func theCommandReadsItsTaskWithParamsAndInputInTheServersOrder() async throws {
        try await withServer { server in
            // The command echoes its standard input: the result is the task as the worker gave it.
            let worker = try RunningWorker(server: server.url, command: ["/bin/cat"])
            let id = try await server.submit(Self.job())
            let job = try await server.finished(id)
            #expect(
                job["result"]?.jsonString
                    == #"{"action":"run","params":{"y":1,"b":3},"input":{"z":1,"a":2},"jobId":"\#(id)","taskId":"t","attempt":1}"#
            )
            #expect(try await worker.stop() == 0)
        }
    }

    @Test func aNonZeroExitFailsTheAttemptWithWorkerExit() async throws {
        try await withServer { server in
            let worker = try RunningWorker(
                server: server.url,
                command: ["/bin/sh", "-c", "cat >/dev/null; echo oops >&2; exit 3"]
            )
            let id = try await server.submit(Self.job())
            let job = try await server.finished(id)
            #expect(job["state"] == "failed")
            #expect(
                job["error"]?.jsonString
                    == #"{"code":"worker.exit","message":"/bin/sh exited with status 3","taskId":"t","details":{"exitStatus":3,"stderr":"oops\n"}}"#
            )
            #expect(try await worker.stop() == 0)
        }
    }

    @Test func aCancelledTaskStopsItsCommand() async throws {
        let logs = InMemoryLogHandler()
        try await withServer { server in
            let worker = try RunningWorker(
                server: server.url,
                command: ["/bin/sh", "-c", "exec sleep 60"],
                logger: Logger(label: "worker") { _ in logs }
            )
            let id = try await server.submit(Self.job(extra: #", "heartbeatTimeoutMs": 1000"#))
            // The task runs once the worker has claimed it (the job runs from its start: waiting
            // for the job alone let the cancellation reach the task before any claim, and the
            // worker had nothing to stop).
            #expect(try await Self.waitForTaskState(server, id, "t", "running") == "running")
            let started = ContinuousClock.now
            _ = try await server.request("POST", "/v1/jobs/\(id)/cancel")
            // The next heartbeat (a third of 1000 ms) answers cancelRequested: the command gets
            // SIGTERM and dies; its lease is left to the server.
            #expect(try await worker.stop() == 0)
            #expect(ContinuousClock.now - started < TestTiming.scaled(.seconds(4)))
            let stopped = logs.entries.filter { $0.message == "task stopped, not completed" }
            #expect(stopped.map { $0.metadata["reason"]?.description } == ["cancelled"])
            #expect(!logs.entries.contains { "\($0.metadata)".contains("lease_") }, "no lease id in the logs")
        }
    }

    @Test func aServerThatRefusesTheWorkerEndsItWithStatus3() async throws {
        try await withServer { server in
            let worker = try RunningWorker(server: server.url, executor: "nope", command: ["/bin/cat"])
            #expect(try await worker.exit.value == WorkerRuntime.failureExitStatus)
            #expect(try await worker.stop() == 3)
        }
    }

    /// Polls task `task` of job `id` until it is in `state` (at most 20 s, scaled).
    static func waitForTaskState(
        _ server: TestServer,
        _ id: String,
        _ task: String,
        _ state: String
    ) async throws -> String? {
        let deadline = ContinuousClock.now + TestTiming.scaled(.seconds(20))
        while ContinuousClock.now < deadline {
            let node = try await server.json("GET", "/v1/jobs/\(id)/tasks/\(task)")
            if node["state"]?.stringValue == state { return state }
            try await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }
}
