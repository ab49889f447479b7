import Testing

@testable import TaskGraph
@testable import TaskServer

/// The protocol between servers (SPEC §9): every relayed command and every answer goes through
/// one codec each (`ClusterCommand.Row`, `ClusterAnswer.json`) and comes back as it went.
@Suite struct ClusterCommandTests {
    static let node = NodeRecord(
        id: "gate",
        type: "task",
        action: "await",
        executor: "immediate",
        state: .succeeded,
        attempts: 1,
        result: "ok"
    )

    @Test func everyCommandRoundTripsThroughItsRow() {
        let error = TaskError(code: "demo.no", message: "refused", details: ["why": "test"])
        let commands: [ClusterCommand] = [
            .cancelTask(job: "01job", task: "t"),
            .complete(job: "01job", task: "gate", outcome: .result(["ok": true])),
            .complete(job: "01job", task: "gate", outcome: .error(error)),
            .claim(server: "n2", pool: "images", workerId: "w-1", actions: ["resize"], leases: ["h1", "h2"]),
            .claim(server: "n2", pool: "images", workerId: "w-1", actions: nil, leases: []),
            .leaseHeartbeat(lease: "h1", progress: ["pct": 40]),
            .leaseHeartbeat(lease: "h1", progress: nil),
            .leaseComplete(lease: "h1", outcome: .result(7), retryable: true),
            .leaseComplete(lease: "h1", outcome: .error(error), retryable: false),
            .leaseRelease(lease: "h1"),
        ]
        for command in commands {
            // As stored: its body through its JSON text, as the column holds it.
            var row = command.row
            row.body = row.body.map { try! JSONParser.parse($0.jsonString) }
            #expect(ClusterCommand(row: row) == command, "\(command)")
        }
    }

    @Test func commandsAreRoutedByJobServerOrLeaseHashOnly() {
        #expect(ClusterCommand.cancelTask(job: "j", task: "t").jobID == "j")
        #expect(
            ClusterCommand.claim(server: "n1", pool: "p", workerId: "w", actions: nil, leases: []).row.server == "n1"
        )
        #expect(ClusterCommand.leaseRelease(lease: "h").leaseHash == "h")
        #expect(ClusterCommand.leaseRelease(lease: "h").jobID == nil)
        #expect(ClusterCommand.claim(server: "n1", pool: "p", workerId: "w", actions: nil, leases: []).isPoolCommand)
        #expect(!ClusterCommand.cancelTask(job: "j", task: "t").isPoolCommand)
    }

    @Test func rowsThisServerCannotReadAreNoCommand() {
        let rows = [
            ClusterCommand.Row(kind: "from-a-newer-server", taskID: "t", jobID: "j"),
            ClusterCommand.Row(kind: "complete", taskID: "t", body: ["neither": 1], jobID: "j"),
            ClusterCommand.Row(kind: "cancel-task", taskID: "t"),
            ClusterCommand.Row(kind: "claim", taskID: "p", body: ["pool": "p"], server: "n1"),
            ClusterCommand.Row(kind: "lease-complete", taskID: "", body: ["lease": "h"]),
        ]
        for row in rows { #expect(ClusterCommand(row: row) == nil, "\(row)") }
    }

    @Test func everyAnswerRoundTrips() {
        let answers: [ClusterAnswer] = [
            .task(.done(Self.node)), .task(.alreadyCancelled(Self.node)), .task(.jobNotFound), .task(.taskNotFound),
            .task(.terminal), .task(.notAwait), .task(.notRunning),
            .claimed([]), .claimed([["jobId": "j", "attempt": 1]]),
            .lease(.alive(cancelRequested: true)), .lease(.alive(cancelRequested: false)),
            .lease(.completed(node: ["id": "w"], pool: "images", workerId: "w-1")),
            .lease(.gone(pool: "images", workerId: "w-1")), .lease(.gone(pool: nil, workerId: nil)),
            .lease(.notFound), .lease(.released), .unavailable,
        ]
        for answer in answers {
            let stored = try! JSONParser.parse(answer.json.jsonString)
            #expect(ClusterAnswer(json: stored) == answer, "\(answer)")
        }
        #expect(ClusterAnswer(json: ["outcome": "leaseNotStored"]) == .lease(.notFound))
        #expect(ClusterAnswer(json: ["outcome": "from-a-newer-server"]) == nil)
        #expect(ClusterAnswer(json: ["outcome": "done"]) == nil, "a job command's done carries its node")
    }
}
