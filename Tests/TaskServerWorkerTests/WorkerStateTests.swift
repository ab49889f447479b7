import Foundation
import TaskGraph
import TaskWorkerProtocol
import Testing

@testable import TaskServerWorker

/// The worker's shared state: pure transitions, no I/O.
struct WorkerStateTests {
    static func task(_ lease: String, heartbeatTimeoutMs: Int = 3000, deadline: String? = nil) -> LeasedTask {
        LeasedTask(
            ClaimItem(
                leaseId: lease,
                jobId: "j",
                taskId: "t-\(lease)",
                action: "a",
                params: ["z": 1, "a": 2],
                input: .null,
                attempt: 1,
                heartbeatTimeoutMs: heartbeatTimeoutMs,
                deadline: deadline
            )
        )
    }

    let start = ContinuousClock.now

    @Test func aLeasedTaskGivesItsCommandTheTaskInOrder() {
        let task = Self.task("l1", deadline: "2030-01-02T03:04:05.678Z")
        #expect(
            String(decoding: task.stdin, as: UTF8.self)
                == #"{"action":"a","params":{"z":1,"a":2},"input":null,"jobId":"j","taskId":"t-l1","attempt":1}"#
        )
        #expect(task.deadline == Date(timeIntervalSince1970: 1_893_553_445.678))
        #expect(LeasedTask.date("2030-01-02T03:04:05Z") == Date(timeIntervalSince1970: 1_893_553_445))
        #expect(LeasedTask.date("yesterday") == nil)
    }

    @Test func heartbeatsAreDueEveryThirdOfTheTimeoutCappedAndFloored() {
        var state = WorkerState()
        let a = state.add(Self.task("a", heartbeatTimeoutMs: 3000), now: self.start, maxInterval: nil)
        let b = state.add(Self.task("b", heartbeatTimeoutMs: 3000), now: self.start, maxInterval: .milliseconds(400))
        let c = state.add(Self.task("c", heartbeatTimeoutMs: 150), now: self.start, maxInterval: nil)
        #expect(state.running == 3)
        #expect(state.leases[a]?.interval == .seconds(1))
        #expect(state.leases[b]?.interval == .milliseconds(400))
        #expect(state.leases[c]?.interval == .milliseconds(100))
        // Nothing is due at the start; b and c within a quarter of their interval are.
        #expect(state.dueHeartbeats(now: self.start, limit: 100).due.isEmpty)
        let due = state.dueHeartbeats(now: self.start + .milliseconds(320), limit: 100)
        #expect(due.due.map(\.leaseId) == ["b", "c"])
        #expect(due.next == self.start + .seconds(1))
        // The limit holds; an answered heartbeat is due an interval after it was sent.
        #expect(state.dueHeartbeats(now: self.start + .seconds(2), limit: 2).due.map(\.leaseId) == ["a", "b"])
        state.heartbeatAnswered(a, at: self.start + .seconds(2))
        #expect(state.leases[a]?.nextHeartbeat == self.start + .seconds(3))
        // A failed one is tried again at the time given, but no later than an interval on.
        state.postponeHeartbeats([a], to: self.start + .seconds(10))
        #expect(state.leases[a]?.nextHeartbeat == self.start + .seconds(4))
    }

    @Test func aCommandThatEndsQueuesItsCompletionUnlessItWasStopped() {
        var state = WorkerState()
        let a = state.add(Self.task("a"), now: self.start, maxInterval: nil)
        let b = state.add(Self.task("b"), now: self.start, maxInterval: nil)
        #expect(state.stop(b, .cancelled) == nil, "a running command is stopped by its thread")
        let (isBStopping, isAStopping) = (state.shouldStop(b, now: Date()), state.shouldStop(a, now: Date()))
        #expect(isBStopping && !isAStopping)
        #expect(state.childEnded(a, completion: [1], outcome: "succeeded", exitStatus: 0) == nil)
        let dropped = state.childEnded(b, completion: [2], outcome: "succeeded", exitStatus: 0)
        #expect(dropped?.stopReason == .cancelled)
        #expect(state.running == 0)
        #expect(state.outbox == [a])
        #expect(state.leases.keys.sorted() == [a])
        // A stopped lease is no longer heartbeated.
        _ = state.add(Self.task("c"), now: self.start, maxInterval: nil)
        #expect(state.dueHeartbeats(now: self.start + .seconds(5), limit: 100).due.map(\.leaseId) == ["a", "c"])
    }

    @Test func aDeadlineThatPassedStopsTheCommand() {
        var state = WorkerState()
        let number = state.add(Self.task("a", deadline: "2020-01-01T00:00:00Z"), now: self.start, maxInterval: nil)
        let isStopping = state.shouldStop(number, now: Date())
        #expect(isStopping)
        #expect(state.leases[number]?.stopReason == .deadlinePassed)
    }

    @Test func batchesRespectTheLimitTheSizeAndLeasesThatMustGoAlone() {
        var state = WorkerState()
        let numbers = (0..<5).map { state.add(Self.task("l\($0)"), now: self.start, maxInterval: nil) }
        for number in numbers {
            _ = state.childEnded(number, completion: Array(repeating: 0, count: 10), outcome: "", exitStatus: 0)
        }
        #expect(state.takeBatch(limit: 2, maxBytes: 1000).map(\.number) == [numbers[0], numbers[1]])
        #expect(state.takeBatch(limit: 100, maxBytes: 15).map(\.number) == [numbers[2]], "at least one, ~15 bytes")
        // Sent items go back to the front, in their order; `alone` makes each go on its own.
        #expect(state.putBack([numbers[0], numbers[1]], alone: true).isEmpty)
        #expect(state.outbox == [numbers[0], numbers[1], numbers[3], numbers[4]])
        #expect(state.takeBatch(limit: 100, maxBytes: 1000).map(\.number) == [numbers[0]])
        #expect(state.takeBatch(limit: 100, maxBytes: 1000).map(\.number) == [numbers[1]])
        #expect(state.takeBatch(limit: 100, maxBytes: 1000).map(\.number) == [numbers[3], numbers[4]])
        #expect(state.takeBatch(limit: 100, maxBytes: 1000).isEmpty)
    }

    @Test func connectionFailuresCountOnlyWhileTheServerAnswersOthers() {
        var state = WorkerState()
        let number = state.add(Self.task("a"), now: self.start, maxInterval: nil)
        _ = state.childEnded(number, completion: [1], outcome: "", exitStatus: 0)
        _ = state.takeBatch(limit: 1, maxBytes: 100)
        #expect(state.completionFailed([number]) == 1)
        state.isServerUnreachable = true
        #expect(state.completionFailed([number]) == 1, "an unreachable server is no sign of a bad body")
        state.isServerUnreachable = false
        #expect(state.completionFailed([number]) == 2)
    }

    @Test func aLeaseStoppedWhileItsCompletionWasBeingSentIsDroppedWhenPutBack() {
        var state = WorkerState()
        let number = state.add(Self.task("a"), now: self.start, maxInterval: nil)
        _ = state.childEnded(number, completion: [1], outcome: "", exitStatus: 0)
        _ = state.takeBatch(limit: 1, maxBytes: 100)
        #expect(state.stop(number, .leaseGone) == nil, "left to the server's answer")
        #expect(state.putBack([number], alone: false).map(\.stopReason) == [.leaseGone])
        #expect(state.leases.isEmpty && state.outbox.isEmpty)
        // A waiting completion of a stopped lease is dropped at once.
        let other = state.add(Self.task("b"), now: self.start, maxInterval: nil)
        _ = state.childEnded(other, completion: [1], outcome: "", exitStatus: 0)
        #expect(state.stop(other, .shutdown)?.task.leaseId == "b")
        #expect(state.outbox.isEmpty)
    }
}
