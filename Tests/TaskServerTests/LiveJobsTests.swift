import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// The live set's rules, driven by hand with real runs and no store: a recovery never resumes a
/// job that ended here while its claim was on its way, and a command on a job that just finished
/// waits for its end to be recorded.
@Suite struct LiveJobsTests {
    static let engine = Engine(configuration: EngineConfiguration(executors: ["default": 1]))

    /// A run of a one-task job that is never started (its state stays as the test sets it).
    static func run(_ id: String) throws -> JobRun {
        let spec = try Self.engine.decoder.decodeJob(
            jsonValue(#"{"graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}}}"#)
        )
        return Self.engine.makeRun(id: id, spec: spec)
    }

    @Test func aJobThatEndedWhileARecoveryWasOnItsWayIsNotResumed() throws {
        let live = LiveJobs()
        let running = try Self.run("j1")
        live.add(running)
        // The recovery's claim excludes what is live now …
        #expect(live.beginRecovery() == ["j1"])
        // … and the job ends meanwhile: the claim may have read its record before the end was
        // committed, so the run it builds from that record is not made live.
        live.ended(running)
        #expect(live.run("j1") == nil)
        #expect(!live.addRecovered(try Self.run("j1")))
        #expect(live.run("j1") == nil)
        // A job that did not leave is resumed, once.
        let other = try Self.run("j2")
        #expect(live.addRecovered(other))
        #expect(!live.addRecovered(try Self.run("j2")), "live already")
        #expect(live.run("j2") === other)
        live.endRecovery()
    }

    @Test func theExclusionLastsWhileAnyRecoveryIsInFlight() throws {
        let live = LiveJobs()
        let run = try Self.run("j")
        live.add(run)
        _ = live.beginRecovery()
        _ = live.beginRecovery()
        live.ended(run)
        live.endRecovery()
        #expect(!live.addRecovered(try Self.run("j")), "the second recovery may still hold a stale record")
        live.endRecovery()
        // No recovery in flight: the next one's claim reads the end.
        _ = live.beginRecovery()
        #expect(live.addRecovered(try Self.run("j")))
        live.endRecovery()
    }

    @Test func anEndOutsideARecoveryLeavesNothingBehind() throws {
        let live = LiveJobs()
        let run = try Self.run("j")
        live.add(run)
        live.ended(run)
        _ = live.beginRecovery()
        #expect(live.addRecovered(try Self.run("j")), "it left before this recovery began")
        live.endRecovery()
    }

    @Test func aCommandOnAJobThatJustFinishedWaitsForItsEnd() throws {
        let live = LiveJobs()
        #expect({ if case .notLive = live.place("j") { true } else { false } }())
        let run = try Self.run("j")
        live.add(run)
        #expect({ if case .running = live.place("j") { true } else { false } }())
        run.start()
        try run.waitForTerminal(timeout: .seconds(10)).wait()
        guard case .ending(let recorded) = live.place("j") else {
            Issue.record("a finished run not yet recorded is ending")
            return
        }
        #expect(!recorded.isCompleted)
        live.ended(run)
        #expect(recorded.isCompleted)
        #expect(live.count == 0)
    }

    @Test func onlyTheLiveRunIsForgotten() throws {
        let live = LiveJobs()
        let first = try Self.run("j")
        live.add(first)
        let second = try Self.run("j")
        live.forget(second)
        #expect(live.run("j") === first, "another run of the same id leaves the live one alone")
        #expect(live.removeAll().map(\.id) == ["j"])
        #expect(live.count == 0)
    }
}
