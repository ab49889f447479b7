import Synchronization
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph

/// A pool whose "workers" are the test: it keeps every attempt handed to it.
final class RecordingPool: ExternalExecutor {
    let name: String
    private let tasks = Mutex<[WorkerTask]>([])

    init(name: String) { self.name = name }

    func enqueue(_ task: WorkerTask) { self.tasks.withLock { $0.append(task) } }

    var received: [WorkerTask] { self.tasks.withLock { $0 } }

    /// Waits (bounded) until `count` attempts were handed over.
    func waitFor(_ count: Int) async throws -> [WorkerTask] {
        for _ in 0..<2000 {
            let received = self.received
            if received.count >= count { return received }
            try await Task.sleep(for: .milliseconds(5))
        }
        Issue.record("the pool received \(self.received.count) attempts, not \(count)")
        return self.received
    }
}

/// How the engine hands tasks on external executors to their pool (SPEC §6): the node waits as
/// `pending`, turns `running` on its first claim, and ends with whatever ends its attempt.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ExternalExecutorTests {
    static func engine(_ pool: RecordingPool) -> Engine {
        Engine(configuration: EngineConfiguration(executors: ["default": 2], externalExecutors: [pool]))
    }

    @Test func aWorkerTaskWaitsPendingThenRunsWhenClaimed() async throws {
        let pool = RecordingPool(name: "gpu")
        let engine = Self.engine(pool)
        let run = try startJob(
            #"{"input": {"n": 2}, "graph": {"type": "series", "steps": [{"type": "task", "id": "w", "executor": "gpu", "action": "train", "params": {"n": "${input.n}"}, "heartbeatTimeoutMs": 5000}, {"type": "task", "id": "v", "action": "value"}]}}"#,
            engine: engine
        )
        let task = try #require(try await pool.waitFor(1).first)
        #expect(task.jobID == run.id)
        #expect(task.taskID == "w")
        #expect(task.action == "train")
        #expect(task.params == ["n": 2])
        #expect(task.input == ["n": 2])
        #expect(task.attempt == 1)
        #expect(task.heartbeatTimeoutMs == 5000)
        #expect(run.node("w")?.state == .pending)
        #expect(run.snapshot.progress.pending == 2)
        #expect(!run.events(after: 0).contains { $0.type == .taskStarted && $0.taskId == "w" })

        #expect(task.markClaimed(by: "host-1"))
        #expect(run.node("w")?.state == .running)
        #expect(run.node("w")?.workerId == "host-1")
        #expect(
            run.events(after: 0).last
                == JobEvent(
                    seq: run.events(after: 0).last!.seq,
                    type: .taskStarted,
                    time: run.events(after: 0).last!.time,
                    taskId: "w",
                    data: ["workerId": "host-1"]
                )
        )
        task.setProgress(["epoch": 3])
        #expect(run.node("w")?.json["progress"] == ["epoch": 3])

        #expect(task.finish(.success("model")))
        #expect(!task.finish(.success("late")), "the first outcome wins")
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.result == "model")
        checkInvariants(run)
    }

    @Test func cancellingAQueuedTaskCancelsItsAttemptAndTheNode() async throws {
        let pool = RecordingPool(name: "gpu")
        let run = try startJob(
            #"{"graph": {"type": "task", "id": "w", "executor": "gpu", "action": "train"}}"#,
            engine: Self.engine(pool)
        )
        let task = try #require(try await pool.waitFor(1).first)
        guard case .done = run.cancel(node: "w") else {
            Issue.record("cancel(node:) did not take")
            return
        }
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(task.future.outcome?.isCancelled == true)
        #expect(task.isCancelled)
        #expect(run.node("w")?.state == .cancelled)
        #expect(!task.markClaimed(by: "late"), "a claim after the end changes nothing")
        checkInvariants(run)
    }

    @Test func aNonRetryableFailureIsNotRetriedAndARetryableOneIs() async throws {
        let pool = RecordingPool(name: "gpu")
        let engine = Self.engine(pool)
        let job =
            #"{"graph": {"type": "task", "id": "w", "executor": "gpu", "action": "train", "retry": {"maxAttempts": 3}}}"#
        let final = try startJob(job, id: "final", engine: engine)
        let first = try #require(try await pool.waitFor(1).first)
        first.markClaimed(by: "a")
        first.finish(.failure(TaskError(code: "data.bad", message: "no")), retryable: false)
        try await final.waitForTerminal(timeout: .seconds(10)).value
        #expect(final.snapshot.error == TaskError(code: "data.bad", message: "no", taskId: "w"))
        #expect(final.node("w")?.attempts == 1)

        let retried = try startJob(job, id: "retried", engine: engine)
        let attempt1 = try await pool.waitFor(2)[1]
        attempt1.markClaimed(by: "a")
        attempt1.finish(.failure(TaskError(code: "net.flaky", message: "again")))
        let attempt2 = try await pool.waitFor(3)[2]
        #expect(attempt2.attempt == 2)
        #expect(retried.node("w")?.state == .running, "a retry waits as running: the task has started")
        attempt2.markClaimed(by: "b")
        #expect(retried.node("w")?.workerId == "b")
        attempt2.finish(.success(1))
        try await retried.waitForTerminal(timeout: .seconds(10)).value
        #expect(retried.snapshot.state == .succeeded)
        checkInvariants(retried)
    }

    @Test func aJobCancelledWhileItsWorkerTaskIsQueuedEndsAtOnce() async throws {
        let pool = RecordingPool(name: "gpu")
        let run = try startJob(
            #"{"graph": {"type": "parallel", "branches": [{"type": "task", "id": "w", "executor": "gpu", "action": "train"}, {"type": "task", "id": "d", "action": "delay", "params": {"ms": 60000}}]}}"#,
            engine: Self.engine(pool)
        )
        _ = try await pool.waitFor(1)
        run.cancel()
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.state == .cancelled)
        #expect(run.node("w")?.state == .cancelled, "a queued task is cancelled, not skipped")
        checkInvariants(run)
    }
}

/// With a durable store, readers see an event only once the store committed it (SPEC §7: events
/// are delivered after their commit, so a crash never takes back one a client saw).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct DurableEventsTests {
    @Test func eventsBecomeVisibleWhenMarkedDurable() async throws {
        var configuration = EngineConfiguration(executors: ["default": 2])
        configuration.eventsAwaitDurability = true
        let engine = Engine(configuration: configuration)
        let run = try startJob(#"{"graph": {"type": "task", "id": "v", "action": "value"}}"#, engine: engine)
        #expect(run.snapshot.state == .succeeded, "the job itself runs on (inline here)")
        let terminal = run.waitForTerminal(timeout: .seconds(30))
        #expect(terminal.outcome == nil, "whoever waits for the end waits for its commit")
        #expect(run.events(after: 0).isEmpty, "nothing is visible before the commit")
        #expect(!run.isTerminalAndVisible)
        let waiting = run.waitForEvents(after: 0, timeout: .seconds(30))
        #expect(waiting.outcome == nil)
        let durable = run.waitForDurability(through: 3)
        #expect(durable.outcome == nil)
        run.markDurable(through: 2)
        #expect(waiting.outcome != nil, "a waiter wakes when events become visible")
        #expect(run.events(after: 0).map(\.seq) == [1, 2])
        #expect(run.lastVisibleSeq == 2)
        #expect(durable.outcome == nil, "seq 3 is not committed yet")
        run.markDurable(through: 1)
        #expect(run.lastVisibleSeq == 2, "the mark never goes back")
        #expect(terminal.outcome == nil)
        run.markDurable(through: 5)
        #expect(durable.outcome != nil, "a wait for seq 3 ends once seq 5 is committed")
        #expect(run.events(after: 0).map(\.seq) == [1, 2, 3, 4, 5])
        #expect(run.isTerminalAndVisible)
        #expect(terminal.outcome != nil, "the terminal event is committed: the waiter wakes")
    }

    /// Waits for durability registered in any order each end once their seq is committed, and
    /// not before (they are kept in seq order, and a commit takes those it covers).
    @Test func durabilityWaitsEndInSeqOrderWhateverTheOrderTheyCameIn() throws {
        var configuration = EngineConfiguration(executors: ["default": 2])
        configuration.eventsAwaitDurability = true
        let engine = Engine(configuration: configuration)
        let run = try startJob(#"{"graph": {"type": "task", "id": "v", "action": "value"}}"#, engine: engine)
        let waits = [4, 2, 5, 3, 2].map { (seq: $0, future: run.waitForDurability(through: $0)) }
        func ended() -> [Int] { waits.filter { $0.future.outcome != nil }.map(\.seq).sorted() }
        #expect(ended().isEmpty)
        run.markDurable(through: 2)
        #expect(ended() == [2, 2])
        run.markDurable(through: 4)
        #expect(ended() == [2, 2, 3, 4])
        run.markDurable(through: 5)
        #expect(ended() == [2, 2, 3, 4, 5])
    }

    /// A run given up to another server (SPEC §9: a cluster's takeover, or a server that stalled
    /// past its lease's stale stop) ends its worker's attempt at once — claimed or not — so that
    /// no worker's outcome is applied to a run whose events are no longer recorded (#41: results
    /// acknowledged and dropped), and hands out nothing more.
    @Test func abandoningARunEndsItsWorkerAttemptsClaimedOrNot() async throws {
        let pool = RecordingPool(name: "gpu")
        let engine = ExternalExecutorTests.engine(pool)
        let run = try startJob(
            #"{"graph": {"type": "parallel", "branches": [{"type": "task", "id": "a", "executor": "gpu", "action": "x"}, {"type": "task", "id": "b", "executor": "gpu", "action": "x"}]}}"#,
            engine: engine
        )
        let tasks = try await pool.waitFor(2)
        let claimed = try #require(tasks.first { $0.taskID == "a" })
        let queued = try #require(tasks.first { $0.taskID == "b" })
        #expect(claimed.markClaimed(by: "w1"))
        run.abandon()
        #expect(claimed.isAbandoned)
        #expect(claimed.future.isCompleted, "the claimed attempt ended with its run")
        #expect(queued.future.isCompleted, "the queued attempt ended with its run")
        #expect(!claimed.finish(.success("late")), "a late outcome is not taken")
        #expect(!queued.markClaimed(by: "w2"), "nothing is handed out from a given-up run")
        await #expect(throws: JobAbandoned.self) { try await claimed.waitUntilDurable().value }
    }
}
