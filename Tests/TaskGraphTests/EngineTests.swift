import Synchronization
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph

/// The rows of SPEC §1.1 and §1.2, run end to end through the engine.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct EngineTests {
    // MARK: - Actions

    @Test func valueReturnsItsParamOrItsInput() async throws {
        let withParam = try await runJob(#"{"graph":{"type":"task","action":"value","params":{"value":{"a":[1,2]}}}}"#)
        #expect(withParam.snapshot.result == ["a": [1, 2]])
        let withInput = try await runJob(#"{"input":"hi","graph":{"type":"task","action":"value"}}"#)
        #expect(withInput.snapshot.result == "hi")
        checkInvariants(withParam)
    }

    @Test func failFailsWithItsCodeMessageAndDetails() async throws {
        let run = try await runJob(
            #"{"graph":{"type":"task","id":"f","action":"fail","params":{"code":"x.bad","message":"no","details":{"n":1}}}}"#
        )
        #expect(run.snapshot.state == .failed)
        #expect(run.snapshot.error == TaskError(code: "x.bad", message: "no", taskId: "f", details: ["n": 1]))
        let defaults = try await runJob(#"{"graph":{"type":"task","id":"g","action":"fail"}}"#)
        #expect(defaults.snapshot.error?.code == "task.failed")
        #expect(defaults.snapshot.error?.taskId == "g")
    }

    @Test func delayWaitsThenReturnsItsInput() async throws {
        let clock = ContinuousClock()
        let start = clock.now
        let run = try await runJob(#"{"input":{"k":1},"graph":{"type":"task","action":"delay","params":{"ms":120}}}"#)
        #expect(clock.now - start >= .milliseconds(110))
        #expect(run.snapshot.result == ["k": 1])
    }

    // MARK: - series

    @Test func seriesPassesEachResultToTheNextStep() async throws {
        let run = try await runJob(
            #"""
            {"input":5,"graph":{"type":"series","steps":[
              {"type":"task","id":"a","action":"value","params":{"value":{"n":"${input}"}}},
              {"type":"task","id":"b","action":"value","params":{"value":["${input.n}","${job.input}"]}},
              {"type":"task","id":"c","action":"value","params":{"value":"n=${input[0]}"}}
            ]}}
            """#
        )
        #expect(run.snapshot.result == "n=5")
        #expect(run.node("b")?.result == [5, 5])
        checkInvariants(run)
    }

    @Test func emptySeriesReturnsItsInput() async throws {
        let run = try await runJob(#"{"input":[1],"graph":{"type":"series","steps":[]}}"#)
        #expect(run.snapshot.result == [1])
    }

    @Test func aFailedStepEndsTheSeriesAndSkipsTheRest() async throws {
        let run = try await runJob(
            #"""
            {"graph":{"type":"series","id":"s","steps":[
              {"type":"task","id":"a","action":"value"},
              {"type":"task","id":"b","action":"fail","params":{"code":"boom"}},
              {"type":"task","id":"c","action":"value"},
              {"type":"series","id":"d","steps":[{"type":"task","id":"e","action":"value"}]}
            ]}}
            """#
        )
        #expect(run.snapshot.state == .failed)
        #expect(run.snapshot.error?.code == "boom")
        #expect(run.snapshot.error?.taskId == "b")
        #expect(run.state(of: "a") == .succeeded)
        #expect(run.state(of: "s") == .failed)
        #expect(run.state(of: "c") == .skipped)
        #expect(run.state(of: "d") == .skipped)
        #expect(run.state(of: "e") == .skipped)
        #expect(run.snapshot.progress.skipped == 2)
        checkInvariants(run)
    }

    // MARK: - parallel

    @Test func parallelAllReturnsResultsInBranchOrder() async throws {
        let run = try await runJob(
            #"""
            {"input":1,"graph":{"type":"parallel","branches":[
              {"type":"task","action":"delay","params":{"ms":60}},
              {"type":"task","action":"value","params":{"value":"b"}},
              {"type":"task","action":"value","params":{"value":"${input}"}}
            ]}}
            """#
        )
        #expect(run.snapshot.result == [1, "b", 1])
        checkInvariants(run)
    }

    @Test func parallelAllWaitsForEveryBranchAndAggregatesErrors() async throws {
        let run = try await runJob(
            #"""
            {"graph":{"type":"parallel","branches":[
              {"type":"task","id":"x","action":"fail","params":{"code":"e1"}},
              {"type":"task","id":"slow","action":"delay","params":{"ms":50}},
              {"type":"task","id":"y","action":"fail","params":{"code":"e2"}}
            ]}}
            """#
        )
        #expect(run.snapshot.state == .failed)
        let error = try #require(run.snapshot.error)
        #expect(error.code == "aggregate")
        let errors = error.details?["errors"]?.arrayValue ?? []
        #expect(errors.map { $0["code"] } == ["e1", "e2"])
        #expect(errors.map { $0["taskId"] } == ["x", "y"])
        #expect(run.state(of: "slow") == .succeeded)
        checkInvariants(run)
    }

    @Test func parallelFailFastCancelsTheOtherBranches() async throws {
        let clock = ContinuousClock()
        let start = clock.now
        let run = try await runJob(
            #"""
            {"graph":{"type":"parallel","failFast":true,"branches":[
              {"type":"task","id":"slow","action":"delay","params":{"ms":30000}},
              {"type":"series","steps":[{"type":"task","action":"delay","params":{"ms":20}},{"type":"task","id":"bad","action":"fail"}]}
            ]}}
            """#
        )
        #expect(clock.now - start < TestTiming.scaled(.seconds(5)))
        #expect(run.snapshot.state == .failed)
        #expect(run.state(of: "slow") == .cancelled)
        #expect(run.snapshot.error?.details?["errors"]?.arrayValue?.count == 1)
        checkInvariants(run)
    }

    @Test func parallelAnyTakesTheFirstSuccessAndCancelsTheOthers() async throws {
        let run = try await runJob(
            #"""
            {"graph":{"type":"parallel","mode":"any","branches":[
              {"type":"task","id":"bad","action":"fail"},
              {"type":"task","id":"slow","action":"delay","params":{"ms":30000}},
              {"type":"series","steps":[{"type":"task","action":"delay","params":{"ms":30}},{"type":"task","id":"win","action":"value","params":{"value":"won"}}]}
            ]}}
            """#
        )
        #expect(run.snapshot.result == "won")
        #expect(run.state(of: "slow") == .cancelled)
        #expect(run.state(of: "bad") == .failed)
        checkInvariants(run)
    }

    @Test func parallelAnyFailsOnlyWhenEveryBranchFails() async throws {
        let run = try await runJob(
            #"{"graph":{"type":"parallel","mode":"any","branches":[{"type":"task","action":"fail","params":{"code":"a"}},{"type":"task","action":"fail","params":{"code":"b"}}]}}"#
        )
        #expect(run.snapshot.error?.code == "aggregate")
        #expect(run.snapshot.error?.details?["errors"]?.arrayValue?.count == 2)
    }

    @Test func parallelSettledAlwaysSucceedsWithOutcomeObjects() async throws {
        let run = try await runJob(
            #"{"graph":{"type":"parallel","mode":"settled","branches":[{"type":"task","action":"value","params":{"value":1}},{"type":"task","id":"f","action":"fail","params":{"code":"c","message":"m"}}]}}"#
        )
        #expect(run.snapshot.state == .succeeded)
        #expect(
            run.snapshot.result == [
                ["state": "succeeded", "result": 1],
                ["state": "failed", "error": ["code": "c", "message": "m", "taskId": "f"]],
            ]
        )
    }

    @Test func maxConcurrencyBoundsHowManyBranchesRunAtOnce() async throws {
        let branches = (0..<6).map { #"{"type":"task","id":"d\#($0)","action":"delay","params":{"ms":40}}"# }.joined(
            separator: ","
        )
        let run = try await runJob(#"{"graph":{"type":"parallel","maxConcurrency":2,"branches":[\#(branches)]}}"#)
        var running = 0
        var peak = 0
        for event in run.events(after: 0) where event.taskId?.hasPrefix("d") == true {
            if event.type == .taskStarted { running += 1 }
            if event.type == .taskSucceeded { running -= 1 }
            peak = max(peak, running)
        }
        #expect(peak == 2)
        checkInvariants(run)
    }

    // MARK: - continuation

    @Test(arguments: [
        // (on, antecedent action, then runs?, job state, result)
        ("success", "value", true, JobState.succeeded),
        ("success", "fail", false, JobState.failed),
        ("failure", "fail", true, JobState.succeeded),
        ("failure", "value", false, JobState.succeeded),
        ("always", "value", true, JobState.succeeded),
        ("always", "fail", true, JobState.succeeded),
        ("cancellation", "value", false, JobState.succeeded),
    ])
    func continuationRunsThenWhenOnMatches(
        on: String,
        antecedent: String,
        thenRuns: Bool,
        jobState: JobState
    ) async throws {
        let run = try await runJob(
            #"""
            {"input":"in","graph":{"type":"continuation","id":"c","on":"\#(on)",
              "antecedent":{"type":"task","id":"a","action":"\#(antecedent)","params":{}},
              "then":{"type":"task","id":"t","action":"value","params":{"value":{"saw":"${input}"}}}}}
            """#
        )
        #expect(run.state(of: "t") == (thenRuns ? .succeeded : .skipped))
        #expect(run.snapshot.state == jobState)
        if thenRuns, on == "success" { #expect(run.snapshot.result == ["saw": "in"]) }
        if thenRuns, on != "success" {
            // failure / always: the then's input is the antecedent's outcome object.
            let saw = run.snapshot.result?["saw"]
            #expect(saw?["state"] == (antecedent == "fail" ? "failed" : "succeeded"))
        }
        if !thenRuns, antecedent == "value" { #expect(run.snapshot.result == "in") }
        checkInvariants(run)
    }

    @Test func aFailureHandlerRecoversTheError() async throws {
        let run = try await runJob(
            #"""
            {"graph":{"type":"continuation","on":"failure",
              "antecedent":{"type":"task","id":"load","action":"fail","params":{"code":"db.down"}},
              "then":{"type":"task","id":"fallback","action":"value","params":{"value":"cached after ${input.error.code}"}}}}
            """#
        )
        #expect(run.snapshot.state == .succeeded)
        #expect(run.snapshot.result == "cached after db.down")
        #expect(run.node("load")?.error?.code == "db.down")
    }

    // MARK: - map

    @Test func mapRunsTheTemplateOncePerItemInItemOrder() async throws {
        let run = try await runJob(
            #"""
            {"input":{"ids":[3,1,2]},"graph":{"type":"map","id":"m","items":"${input.ids}",
              "template":{"type":"task","id":"each","action":"value","params":{"value":{"id":"${input}"}}}}}
            """#
        )
        #expect(run.snapshot.result == [["id": 3], ["id": 1], ["id": 2]])
        #expect(run.node("each[1]")?.result == ["id": 1])
        #expect(run.node("each[1]")?.parent == "m")
        #expect(run.snapshot.progress.total == 3)
        checkInvariants(run)
    }

    @Test func seriesMapRunsOneInstanceAfterAnother() async throws {
        let run = try await runJob(
            #"""
            {"input":[1,2,3],"graph":{"type":"map","mode":"series",
              "template":{"type":"series","id":"step","steps":[{"type":"task","id":"wait","action":"delay","params":{"ms":15}},{"type":"task","id":"del","action":"value","params":{"value":"deleted ${input}"}}]}}}
            """#
        )
        #expect(run.snapshot.result == ["deleted 1", "deleted 2", "deleted 3"])
        let order = run.events(after: 0).filter { $0.type == .taskStarted && $0.taskId?.hasPrefix("wait") == true }.map(
            \.taskId
        )
        #expect(order == ["wait[0]", "wait[1]", "wait[2]"])
        checkInvariants(run)
    }

    @Test func mapOverANonArrayFailsWithMapItems() async throws {
        let run = try await runJob(
            #"{"input":{"a":1},"graph":{"type":"map","template":{"type":"task","action":"value"}}}"#
        )
        #expect(run.snapshot.error?.code == "map.items")
    }

    @Test func mapOverAnEmptyListReturnsAnEmptyArray() async throws {
        let run = try await runJob(#"{"input":[],"graph":{"type":"map","template":{"type":"task","action":"value"}}}"#)
        #expect(run.snapshot.result == [])
        checkInvariants(run)
    }

    @Test func mapBeyondTheNodeLimitFails() async throws {
        let run = try await runJob(
            #"{"input":{"n":1},"graph":{"type":"map","items":"${input.n}","template":{"type":"task","action":"value"}}}"#
        )
        #expect(run.snapshot.error?.code == "map.items")
        let items = "[" + (0..<6000).map(String.init).joined(separator: ",") + "]"
        let big = try await runJob(
            #"{"input":\#(items),"graph":{"type":"map","template":{"type":"task","action":"value"}}}"#
        )
        #expect(big.snapshot.error?.code == "job.nodeLimit")
    }

    // MARK: - dynamic

    @Test func dynamicRunsTheGraphItsSourceReturns() async throws {
        let run = try await runJob(
            #"""
            {"input":4,"graph":{"type":"dynamic","id":"dyn","source":{"type":"task","id":"plan","action":"value","params":{"value":
              {"graph":{"type":"series","steps":[{"type":"task","id":"x","action":"value","params":{"value":"$${input}"}}]},"input":"spawned"}}}}}
            """#
        )
        #expect(run.snapshot.result == "spawned")
        #expect(run.node("dyn/x")?.state == .succeeded)
        #expect(run.node("dyn/x")?.result == "spawned")
        checkInvariants(run)
    }

    @Test func anInvalidDynamicGraphFailsWithGraphInvalid() async throws {
        let run = try await runJob(
            #"{"graph":{"type":"dynamic","source":{"type":"task","action":"value","params":{"value":{"graph":{"type":"nope"}}}}}}"#
        )
        #expect(run.snapshot.error?.code == "graph.invalid")
        #expect((run.snapshot.error?.details?["errors"]?.arrayValue?.count ?? 0) >= 1)
    }

    // MARK: - templates

    @Test func templatesSeeTheJobAndFinishedTasks() async throws {
        let run = try await runJob(
            #"""
            {"name":"t","input":{"x":2},"graph":{"type":"series","steps":[
              {"type":"task","id":"first","action":"value","params":{"value":{"v":"${job.input.x}"}}},
              {"type":"task","id":"second","action":"value","params":{"value":"${job.name}:${tasks.first.result.v}:${tasks.first.state}"}}
            ]}}
            """#
        )
        #expect(run.snapshot.result == "t:2:succeeded")
    }

    @Test func anUnresolvedTemplateFailsTheNode() async throws {
        let run = try await runJob(
            #"{"input":{},"graph":{"type":"task","id":"t","action":"value","params":{"value":"${input.missing}"}}}"#
        )
        #expect(run.snapshot.error?.code == "template.unresolved")
        #expect(run.snapshot.error?.message.contains("${input.missing}") == true)
    }

    @Test func aNodeInputTemplateReplacesItsInput() async throws {
        let run = try await runJob(
            #"{"input":{"a":{"b":7}},"graph":{"type":"task","action":"value","input":"${input.a}"}}"#
        )
        #expect(run.snapshot.result == ["b": 7])
    }

    // MARK: - retry and timeouts

    @Test func aFailedTaskIsRetriedUntilItsAttemptsRunOut() async throws {
        let run = try await runJob(
            #"{"graph":{"type":"task","id":"r","action":"fail","params":{"code":"flaky"},"retry":{"maxAttempts":3,"delayMs":5}}}"#
        )
        #expect(run.node("r")?.attempts == 3)
        #expect(run.events(after: 0).filter { $0.type == .taskRetrying }.count == 2)
        #expect(run.snapshot.error?.code == "flaky")
    }

    @Test func retryOnlyRetriesListedCodes() async throws {
        let run = try await runJob(
            #"{"graph":{"type":"task","id":"r","action":"fail","params":{"code":"fatal"},"retry":{"maxAttempts":3,"on":["http.*"]}}}"#
        )
        #expect(run.node("r")?.attempts == 1)
        let prefixed = try await runJob(
            #"{"graph":{"type":"task","id":"r","action":"fail","params":{"code":"http.timeout"},"retry":{"maxAttempts":2,"on":["http.*"]}}}"#
        )
        #expect(prefixed.node("r")?.attempts == 2)
    }

    @Test func aTaskTimeoutFailsTheAttemptWithTaskTimeout() async throws {
        let run = try await runJob(
            #"{"graph":{"type":"task","id":"slow","action":"delay","params":{"ms":30000},"timeoutMs":50}}"#
        )
        #expect(run.snapshot.error?.code == "task.timeout")
        #expect(run.state(of: "slow") == .failed)
    }

    @Test func aJobTimeoutFailsTheJobAndRunsCleanup() async throws {
        let run = try await runJob(
            #"""
            {"timeoutMs":80,"graph":{"type":"continuation","on":"always",
              "antecedent":{"type":"task","id":"slow","action":"delay","params":{"ms":30000}},
              "then":{"type":"task","id":"cleanup","action":"value"}}}
            """#
        )
        #expect(run.snapshot.state == .failed)
        #expect(run.snapshot.error?.code == "job.timeout")
        #expect(run.state(of: "slow") == .cancelled)
        #expect(run.state(of: "cleanup") == .succeeded)
        checkInvariants(run)
    }

    @Test func aJobTimeoutIsArmedOnlyWhileTheJobOutlivesStart() async throws {
        // Every node inline: the job ends inside `start`, with no timer left behind.
        let inline = try startJob(
            #"{"timeoutMs":600000,"graph":{"type":"series","steps":[{"type":"task","action":"value"},{"type":"task","action":"value"}]}}"#
        )
        #expect(inline.snapshot.state == .succeeded)
        #expect(inline.state.withLock { $0.timer } == nil)
        // A job still running holds its timer until it ends, which cancels it.
        let waiting = try startJob(#"{"timeoutMs":600000,"graph":{"type":"task","action":"delay","params":{"ms":50}}}"#)
        #expect(waiting.state.withLock { $0.timer } != nil)
        try await waiting.waitForTerminal(timeout: .seconds(20)).value
        #expect(waiting.snapshot.state == .succeeded)
        #expect(waiting.state.withLock { $0.timer } == nil)
    }

    // MARK: - cancellation

    @Test func cancellingAJobStopsWaitsAndRunsCleanupHooks() async throws {
        let run = try startJob(
            #"""
            {"graph":{"type":"series","steps":[
              {"type":"continuation","on":"cancellation",
                "antecedent":{"type":"task","id":"wait","action":"delay","params":{"ms":60000}},
                "then":{"type":"task","id":"undo","action":"value","params":{"value":"${input.state}"}}},
              {"type":"task","id":"after","action":"value"}
            ]}}
            """#
        )
        try await waitForNode(run, "wait", .running)
        #expect(run.cancel() == .cancelling)
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.state == .cancelled)
        #expect(run.state(of: "wait") == .cancelled)
        #expect(run.state(of: "undo") == .succeeded)
        #expect(run.node("undo")?.result == "cancelled")
        // The cleanup recovered the step, so the series went on: the cancellation reached `after`.
        #expect(run.state(of: "after") == .cancelled)
        #expect(run.cancel() == .alreadyCancelled)
        checkInvariants(run)
    }

    /// A job cancelled before it started (a delayed one) never runs: between being taken for
    /// execution and ending `cancelled` it reads `pending`, never `running` without a start time.
    @Test func aJobCancelledBeforeItStartedNeverReadsRunning() async throws {
        let run = testEngine.makeRun(
            id: "job",
            spec: try decodeJob(#"{"graph":{"type":"task","id":"t","action":"value"}}"#),
            createdAt: .now(),
            restored: RestoredJob(nodes: [:], events: [], startedAt: nil, cancelRequested: true)
        )
        let prepared = try #require(run.prepareStart())
        #expect(run.snapshot.state == .pending && run.snapshot.startedAt == nil)
        prepared.run()
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.state == .cancelled && run.snapshot.startedAt == nil)
        #expect(run.events(after: 0).map(\.type) == [.jobCreated, .taskCancelled, .jobCancelled])
    }

    @Test func cancellingAFinishedJobIsAConflict() async throws {
        let run = try await runJob(#"{"graph":{"type":"task","action":"value"}}"#)
        #expect(run.cancel() == .terminal(.succeeded))
    }

    @Test func cancellingOneNodePropagatesByTheRules() async throws {
        let run = try startJob(
            #"""
            {"graph":{"type":"parallel","mode":"settled","branches":[
              {"type":"task","id":"a","action":"delay","params":{"ms":60000}},
              {"type":"task","id":"b","action":"delay","params":{"ms":30}}
            ]}}
            """#
        )
        try await waitForNode(run, "a", .running)
        guard case .done = run.cancel(node: "a") else {
            Issue.record("cancel(node:) did not accept a running node")
            return
        }
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.state == .succeeded)
        #expect(run.snapshot.result == [["state": "cancelled"], ["state": "succeeded", "result": nil]])
        #expect(run.cancel(node: "a") == .terminal)
        #expect(run.cancel(node: "zzz") == .notFound)
    }

    @Test func cancellingACompositeNodeCancelsEverythingRunningBelowIt() async throws {
        // The cancellation of `inner` must reach tasks two and three levels down (map instances,
        // a series step inside a continuation), while the sibling `other` runs on.
        let run = try startJob(
            #"""
            {"input":[1,2,3],"graph":{"type":"parallel","mode":"settled","branches":[
              {"type":"parallel","id":"inner","branches":[
                {"type":"map","id":"m","template":{"type":"task","id":"w","action":"delay","params":{"ms":60000}}},
                {"type":"continuation","id":"c","on":"success",
                  "antecedent":{"type":"series","id":"s","steps":[{"type":"task","id":"deep","action":"delay","params":{"ms":60000}}]},
                  "then":{"type":"task","id":"never","action":"value"}}
              ]},
              {"type":"task","id":"other","action":"delay","params":{"ms":50}}
            ]}}
            """#
        )
        try await waitForNode(run, "w[2]", .running)
        try await waitForNode(run, "deep", .running)
        guard case .done = run.cancel(node: "inner") else {
            Issue.record("cancel(node:) did not accept a running node")
            return
        }
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.state == .succeeded)
        for id in ["inner", "m", "w[0]", "w[1]", "w[2]", "c", "s", "deep"] {
            #expect(run.state(of: id) == .cancelled, "\(id) is \(String(describing: run.state(of: id)))")
        }
        #expect(run.state(of: "never") == .skipped)
        #expect(run.state(of: "other") == .succeeded)
        checkInvariants(run)
    }

    @Test func cancellingAJobReachesNestedBranchesAndFailFastBranchTokens() async throws {
        let run = try startJob(
            #"""
            {"input":[1,2],"graph":{"type":"series","steps":[
              {"type":"parallel","failFast":true,"branches":[
                {"type":"map","template":{"type":"series","id":"ts","steps":[{"type":"task","id":"t","action":"delay","params":{"ms":60000}}]}},
                {"type":"parallel","mode":"any","branches":[{"type":"task","id":"slow","action":"delay","params":{"ms":60000}}]}
              ]}
            ]}}
            """#
        )
        try await waitForNode(run, "slow", .running)
        try await waitForNode(run, "t[1]", .running)
        #expect(run.cancel() == .cancelling)
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.state == .cancelled)
        #expect(run.state(of: "slow") == .cancelled)
        #expect(run.nodes.filter(\.isTask).allSatisfy { $0.state == .cancelled })
        checkInvariants(run)
    }

    // MARK: - await

    @Test func anAwaitTaskCompletesFromOutside() async throws {
        let run = try startJob(
            #"""
            {"graph":{"type":"series","steps":[
              {"type":"task","id":"approval","action":"await"},
              {"type":"task","id":"use","action":"value","params":{"value":"by ${input.who}"}}
            ]}}
            """#
        )
        #expect(run.complete(node: "use", with: .success(nil)) == .notAwait)
        try await waitForNode(run, "approval", .running)
        guard case .done(let node) = run.complete(node: "approval", with: .success(["who": "ada"])) else {
            Issue.record("completion was refused")
            return
        }
        #expect(node.state == .succeeded)
        #expect(run.complete(node: "approval", with: .success(1)) == .terminal)
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.result == "by ada")
        checkInvariants(run)
    }

    @Test func anAwaitTaskNotYetStartedCannotBeCompleted() async throws {
        let run = try startJob(
            #"{"graph":{"type":"series","steps":[{"type":"task","id":"w","action":"delay","params":{"ms":60000}},{"type":"task","id":"ok","action":"await"}]}}"#
        )
        #expect(run.complete(node: "ok", with: .success(1)) == .notRunning)
        #expect(run.complete(node: "nope", with: .success(1)) == .notFound)
        run.cancel()
        try await run.waitForTerminal(timeout: .seconds(10)).value
    }

    @Test func anAwaitTaskCanBeFailedFromOutsideAndTimesOut() async throws {
        let run = try startJob(#"{"graph":{"type":"task","id":"a","action":"await"}}"#)
        try await waitForNode(run, "a", .running)
        _ = run.complete(node: "a", with: .failure(TaskError(code: "rejected", message: "no")))
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.error?.code == "rejected")
        let timed = try await runJob(#"{"graph":{"type":"task","action":"await","params":{"timeoutMs":40}}}"#)
        #expect(timed.snapshot.error?.code == "task.timeout")
    }

    // MARK: - Executors

    @Test func waitsHoldNoSlotOfTheirExecutor() async throws {
        // Twenty delays on a one-slot pool all wait at once, and the pool stays free.
        let branches = (0..<20).map {
            #"{"type":"task","id":"w\#($0)","executor":"single","action":"delay","params":{"ms":60000}}"#
        }
        let run = try startJob(#"{"graph":{"type":"parallel","branches":[\#(branches.joined(separator: ","))]}}"#)
        for index in 0..<20 { try await waitForNode(run, "w\(index)", .running) }
        #expect(run.snapshot.progress.running == 20)
        #expect(testEngine.pools["single"]!.statistics.running == 0)
        run.cancel()
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.state == .cancelled)
    }

    @Test func workHoldsASlotOfItsExecutor() async throws {
        // A value task on a one-slot pool waits while another holder occupies the slot.
        let engine = Engine(configuration: EngineConfiguration(executors: ["default": 1, "one": 1]))
        defer { engine.shutdown() }
        let pool = engine.pools["one"]!
        let slot = try await pool.acquireSlot().value
        let run = try startJob(
            #"{"graph":{"type":"task","id":"v","executor":"one","action":"value","params":{"value":1}}}"#,
            engine: engine
        )
        try await waitForNode(run, "v", .running)
        #expect(pool.statistics.queued == 1)
        #expect(run.snapshot.state == .running)
        slot.release()
        try await run.waitForTerminal(timeout: .seconds(10)).value
        #expect(run.snapshot.result == 1)
    }

    // MARK: - Observers

    @Test func observersSeeEveryEventOnceInOrder() async throws {
        let engine = Engine(configuration: EngineConfiguration(executors: ["default": 2]))
        defer { engine.shutdown() }
        let recorder = EventRecorder()
        engine.addObserver(recorder)
        let run = try await runJob(
            #"{"graph":{"type":"parallel","branches":[{"type":"task","action":"delay","params":{"ms":5}},{"type":"task","action":"value"},{"type":"task","action":"fail"}]}}"#,
            engine: engine
        )
        // Observers run after the state change; the last event may land a moment after the waiter wakes.
        for _ in 0..<100 where recorder.seqs.count < run.events(after: 0).count {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(recorder.seqs == run.events(after: 0).map(\.seq))
    }
}

final class EventRecorder: JobObserver {
    private let state = MutexBox<[Int]>([])
    func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        self.state.withLock { $0.append(contentsOf: events.map(\.seq)) }
    }
    var seqs: [Int] { self.state.withLock { $0 } }
}

final class MutexBox<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { self.mutex = Mutex(value) }
    func withLock<R>(_ body: (inout Value) -> R) -> R { self.mutex.withLock { body(&$0) } }
}
