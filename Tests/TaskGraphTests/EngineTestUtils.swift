import TaskCore
import Testing

@testable import TaskGraph

/// One engine for the engine tests: pools are threads, so share them.
let testEngine = Engine(
    configuration: EngineConfiguration(
        executors: ["default": 4, "io": 8, "single": 1],
        limits: GraphLimits(maxNodes: 5_000, maxDepth: 100)
    )
)

/// Decodes a job from JSON text (failing the test on invalid JSON or graph).
func decodeJob(_ text: String, engine: Engine = testEngine) throws -> JobSpec {
    let json = try JSONParser.parse(text)
    return try engine.decoder.decodeJob(json)
}

/// Starts the job and returns its run (not waiting).
func startJob(_ text: String, id: String = "job", engine: Engine = testEngine) throws -> JobRun {
    let run = engine.makeRun(id: id, spec: try decodeJob(text, engine: engine))
    run.start()
    return run
}

/// Runs the job to its end (bounded) and returns the run.
func runJob(
    _ text: String,
    id: String = "job",
    engine: Engine = testEngine,
    timeout: Duration = .seconds(20)
) async throws -> JobRun {
    let run = try startJob(text, id: id, engine: engine)
    try await run.waitForTerminal(timeout: timeout).value
    #expect(run.snapshot.state.isTerminal, "job did not end within \(timeout)")
    return run
}

/// Waits (bounded) until node `id` reaches `state`, by following the job's events.
func waitForNode(_ run: JobRun, _ id: String, _ state: NodeState, timeout: Duration = .seconds(10)) async throws {
    var seen = 0
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if run.node(id)?.state == state { return }
        let last = run.events(after: 0).last?.seq ?? 0
        if last == seen {
            try await run.waitForEvents(after: seen, timeout: .milliseconds(200)).value
        }
        seen = last
    }
    Issue.record("node \(id) did not reach \(state); it is \(String(describing: run.node(id)?.state))")
}

extension JobRun {
    func state(of id: String) -> NodeState? { self.node(id)?.state }
}

/// Checks the invariants every finished job must satisfy: every node terminal, events gap-free
/// from 1 with job.created first and one job.<terminal> last, exactly one terminal event per node.
func checkInvariants(_ run: JobRun, sourceLocation: SourceLocation = #_sourceLocation) {
    let snapshot = run.snapshot
    #expect(snapshot.state.isTerminal, sourceLocation: sourceLocation)
    let nodes = run.nodes
    for node in nodes {
        #expect(node.state.isTerminal, "node \(node.id) is \(node.state)", sourceLocation: sourceLocation)
    }
    let events = run.events(after: 0)
    #expect(events.map(\.seq) == Array(1...events.count), "events are not gap-free", sourceLocation: sourceLocation)
    #expect(events.first?.type == .jobCreated, sourceLocation: sourceLocation)
    #expect(events.last?.type.isJobEvent == true && events.last?.type != .jobStarted, sourceLocation: sourceLocation)
    var terminalEvents: [String: Int] = [:]
    for event in events {
        switch event.type {
        case .taskSucceeded, .taskFailed, .taskCancelled, .taskSkipped:
            terminalEvents[event.taskId ?? "", default: 0] += 1
        default: break
        }
    }
    for node in nodes {
        #expect(
            terminalEvents[node.id] == 1,
            "node \(node.id) has \(terminalEvents[node.id] ?? 0) terminal events",
            sourceLocation: sourceLocation
        )
    }
    let tasks = nodes.filter(\.isTask)
    #expect(snapshot.progress.total == tasks.count, sourceLocation: sourceLocation)
    #expect(snapshot.progress.pending == 0 && snapshot.progress.running == 0, sourceLocation: sourceLocation)
    #expect(
        snapshot.progress.succeeded + snapshot.progress.failed + snapshot.progress.cancelled + snapshot.progress.skipped
            == tasks.count,
        sourceLocation: sourceLocation
    )
}
