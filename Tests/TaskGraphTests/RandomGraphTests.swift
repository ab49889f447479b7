import TaskCore
import TestSupport
import Testing

@testable import TaskGraph

/// Invariants over many random valid graphs (SPEC §1.1), some of them cancelled while they run:
/// every node ends in exactly one terminal state, events are gap-free and complete, the job's
/// outcome is the root's, and a cancellation leaves nothing running.
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct RandomGraphTests {
    /// Builds a random valid job graph from a seed.
    struct GraphGenerator {
        var random: SplitMix64
        var nodes = 0
        let maxNodes = 30

        init(seed: UInt64) { self.random = SplitMix64(seed: seed) }

        mutating func chance(_ percent: Int) -> Bool { Int(self.random.next() % 100) < percent }
        mutating func pick<T>(_ options: [T]) -> T { options[Int(self.random.next() % UInt64(options.count))] }
        mutating func count(_ range: ClosedRange<Int>) -> Int {
            range.lowerBound + Int(self.random.next() % UInt64(range.count))
        }

        mutating func nextID() -> JSONValue {
            self.nodes += 1
            return .string("n\(self.nodes)")
        }

        mutating func leaf() -> JSONValue {
            let id = self.nextID()
            switch self.count(0...5) {
            case 0, 1:
                return ["type": "task", "id": id, "action": "value", "params": ["value": .int(self.count(0...99))]]
            case 2:
                var task: JSONValue = [
                    "type": "task", "id": id, "action": "fail", "params": ["code": "e.boom", "message": "boom"],
                ]
                if self.chance(30) { task = Self.with(task, "retry", ["maxAttempts": 2, "on": ["e.*"]]) }
                return task
            case 3: return ["type": "task", "id": id, "action": "value"]  // passes its input on
            default: return ["type": "task", "id": id, "action": "delay", "params": ["ms": .int(self.count(0...5))]]
            }
        }

        mutating func node(depth: Int) -> JSONValue {
            // The root is always composite; deeper down, a quarter of the nodes are leaves.
            if depth >= 4 || self.nodes >= self.maxNodes || (depth > 0 && self.chance(25)) { return self.leaf() }
            let id = self.nextID()
            switch self.count(0...(depth == 0 ? 3 : 4)) {
            case 0:
                let steps = (0..<self.count(1...3)).map { _ in self.node(depth: depth + 1) }
                return ["type": "series", "id": id, "steps": .array(steps)]
            case 1:
                let branches = (0..<self.count(1...3)).map { _ in self.node(depth: depth + 1) }
                var node: JSONValue = [
                    "type": "parallel", "id": id, "branches": .array(branches),
                    "mode": .string(self.pick(["all", "any", "settled"])),
                ]
                if self.chance(30) { node = Self.with(node, "failFast", true) }
                if self.chance(30) { node = Self.with(node, "maxConcurrency", .int(self.count(1...2))) }
                return node
            case 2:
                return [
                    "type": "continuation", "id": id,
                    "on": .string(self.pick(["success", "failure", "cancellation", "always"])),
                    "antecedent": self.node(depth: depth + 1), "then": self.node(depth: depth + 1),
                ]
            case 3:
                let items = JSONValue.array((0..<self.count(0...3)).map { .int($0) })
                return [
                    "type": "map", "id": id, "items": items, "mode": .string(self.pick(["parallel", "series"])),
                    "template": self.leaf(),
                ]
            default:
                return self.leaf()
            }
        }

        static func with(_ node: JSONValue, _ key: String, _ value: JSONValue) -> JSONValue {
            guard case .object(var object) = node else { return node }
            object[key] = value
            return .object(object)
        }
    }

    @Test(arguments: 0..<8)
    func randomGraphsKeepTheEngineInvariants(batch: Int) async throws {
        for seed in UInt64(batch * 40)..<UInt64(batch * 40 + 40) {
            var generator = GraphGenerator(seed: seed &* 0x9E37_79B9 &+ 1)
            let graph = generator.node(depth: 0)
            let spec = try testEngine.decoder.decodeJob(["input": 7, "graph": graph])
            let run = testEngine.makeRun(id: "random-\(seed)", spec: spec)
            run.start()
            var cancelled = false
            // A third run to the end, a third are cancelled at once, a third a moment later.
            switch generator.count(0...2) {
            case 1:
                cancelled = run.cancel() == .cancelling
            case 2:
                try await Future<Void>.delay(.milliseconds(generator.count(1...3))).value
                cancelled = run.cancel() == .cancelling
            default:
                break
            }
            try await run.waitForTerminal(timeout: .seconds(20)).value
            checkInvariants(run)
            let snapshot = run.snapshot
            let root = try #require(run.nodes.first)
            #expect(root.parent == nil)
            if cancelled {
                #expect(snapshot.state == .cancelled, "seed \(seed): a cancelled job ended \(snapshot.state)")
            } else {
                // The job's outcome is its root's.
                switch root.state {
                case .succeeded:
                    #expect(snapshot.state == .succeeded && snapshot.result == root.result, "seed \(seed)")
                case .failed:
                    #expect(snapshot.state == .failed && snapshot.error?.code == root.error?.code, "seed \(seed)")
                default:
                    #expect(
                        snapshot.state == .cancelled && root.state == .cancelled,
                        "seed \(seed): root \(root.state), job \(snapshot.state)"
                    )
                }
            }
            // A node starts at most once, and never after the job ended.
            var started: [String: Int] = [:]
            for event in run.events(after: 0) where event.type == .taskStarted {
                started[event.taskId ?? "", default: 0] += 1
            }
            #expect(started.values.allSatisfy { $0 == 1 }, "seed \(seed): a node started twice")
            let jobEnd = run.events(after: 0).last { $0.type.isJobEvent }
            #expect(jobEnd?.seq == run.events(after: 0).last?.seq, "seed \(seed): events after the job ended")
        }
    }

    // MARK: - The Bolts documentation's examples, as graphs

    /// Bolts: `findAsync(query).continueWithSuccessBlock { saveAsync(students[0]) }`.
    @Test func chainingFindsThenSaves() async throws {
        let run = try await runJob(
            """
            {"input": {"name": "Ada"}, "graph": {"type": "series", "steps": [
              {"type": "task", "id": "find", "action": "value", "params": {"value": [{"name": "${input.name}", "grade": 3}]}},
              {"type": "task", "id": "save", "action": "value", "params": {"value": {"saved": "${input[0].name}"}}}]}}
            """
        )
        #expect(run.snapshot.result == ["saved": "Ada"])
        checkInvariants(run)
    }

    /// Bolts: a failure skips the success continuations, and one error handler at the end
    /// recovers it (`continueWithBlock` checking `task.error`).
    @Test func aFailureSkipsSuccessContinuationsAndAHandlerRecovers() async throws {
        let run = try await runJob(
            """
            {"graph": {"type": "continuation", "id": "handler", "on": "failure",
              "antecedent": {"type": "continuation", "id": "then-save", "on": "success",
                "antecedent": {"type": "task", "id": "find", "action": "fail", "params": {"code": "not.found", "message": "no such student"}},
                "then": {"type": "task", "id": "save", "action": "value"}},
              "then": {"type": "task", "id": "recover", "action": "value", "params": {"value": {"recovered": "${input.error.code}"}}}}}
            """
        )
        #expect(run.snapshot.state == .succeeded)
        #expect(run.snapshot.result == ["recovered": "not.found"])
        #expect(run.state(of: "save") == .skipped)
        checkInvariants(run)
    }

    /// Bolts: deleting every comment of a list, one after another (a chain built in a loop), and
    /// all at once (`taskForCompletionOfAllTasks`).
    @Test(arguments: ["series", "parallel"])
    func commentsAreDeleted(mode: String) async throws {
        let run = try await runJob(
            """
            {"input": {"comments": [11, 12, 13, 14]}, "graph": {"type": "map", "id": "delete", "mode": "\(mode)",
              "items": "${input.comments}",
              "template": {"type": "task", "id": "del", "action": "delay", "params": {"ms": 200}}}}
            """
        )
        #expect(run.snapshot.result == [11, 12, 13, 14])
        let events = run.events(after: 0).filter { $0.taskId?.hasPrefix("del[") == true }
        if mode == "series" {
            // Each delete starts only after the previous one ended.
            let order = events.filter { $0.type == .taskStarted || $0.type == .taskSucceeded }.map {
                "\($0.type.rawValue) \($0.taskId!)"
            }
            #expect(order == (0..<4).flatMap { ["task.started del[\($0)]", "task.succeeded del[\($0)]"] })
        } else {
            // All four start before the first one ends.
            let firstEnd = try #require(events.firstIndex { $0.type == .taskSucceeded })
            #expect(events[..<firstEnd].filter { $0.type == .taskStarted }.count == 4)
        }
        checkInvariants(run)
    }
}
