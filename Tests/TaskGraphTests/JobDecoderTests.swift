import TaskCore
import Testing

@testable import TaskGraph

// MARK: - Fixtures

/// A test action: validates nothing, or (with `requires`) that `params` has that key.
private struct TestAction: Action {
    let name: String
    var requires: String? = nil

    func validate(params: JSONValue, at pointer: String) -> [ValidationProblem] {
        guard let requires, params[requires] == nil else { return [] }
        return [
            ValidationProblem(pointer: JSONPointer.appending(pointer, requires), message: "required by the test action")
        ]
    }

    func run(_ context: ActionContext) -> Future<JSONValue> { Future(value: context.input) }
}

private let testActions = ActionRegistry([
    TestAction(name: "value"), TestAction(name: "fail"), TestAction(name: "check", requires: "n"),
])

private let decoder = JobDecoder(actions: testActions, executors: ["default", "io"])

/// `{"type": "task", "action": action}` plus `extra`.
private func task(_ action: String = "value", _ extra: JSONObject = [:]) -> JSONValue {
    var object: JSONObject = ["type": "task", "action": .string(action)]
    for member in extra { object[member.key] = member.value }
    return .object(object)
}

/// A job around `graph`.
private func job(_ graph: JSONValue, _ extra: JSONObject = [:]) -> JSONValue {
    var object: JSONObject = ["graph": graph]
    for member in extra { object[member.key] = member.value }
    return .object(object)
}

/// The problems `decoder` reports for `json`, as `pointer: message` lines; empty when it is valid.
private func problems(_ json: JSONValue, with decoder: JobDecoder = decoder) -> [String] {
    do {
        _ = try decoder.decodeJob(json)
        return []
    } catch {
        return error.problems.map { "\($0.pointer): \($0.message)" }
    }
}

/// The problems of decoding `json` as a dynamic graph.
private func graphProblems(
    _ json: JSONValue,
    prefix: String = "dyn/",
    pointer: String = "/graph",
    maxNodes: Int = 10_000,
    reserved: Set<String> = []
) -> [String] {
    do {
        _ = try decoder.decodeGraph(json, idPrefix: prefix, pointer: pointer, maxNodes: maxNodes, reservedIDs: reserved)
        return []
    } catch {
        return error.problems.map { "\($0.pointer): \($0.message)" }
    }
}

/// The syntax error message the template parser gives for `source`.
private func syntaxMessage(_ source: String) -> String {
    do {
        _ = try Template(parsing: source)
        return "(no syntax error)"
    } catch {
        return error.message
    }
}

/// A compiled template, for expected values.
private func template(_ value: JSONValue) throws -> JSONTemplate { try JSONTemplate(value) }

/// Every node of `root` in pre-order as `id @ pointer`.
private func idsAndPointers(_ root: Node) -> [String] {
    var out: [String] = []
    var stack = [root]
    while let node = stack.popLast() {
        out.append("\(node.id) @ \(node.pointer)")
        stack.append(contentsOf: node.children.reversed())
    }
    return out
}

/// Releases a deeply nested value one level at a time (following the last array or object inside
/// each level): letting it go at once would recurse once per level in the deinitializers and
/// overflow the stack.
private func dismantle(_ value: consuming JSONValue) {
    func isContainer(_ value: JSONValue) -> Bool {
        switch value {
        case .array, .object: return true
        default: return false
        }
    }
    var current = value
    while true {
        let next: JSONValue?
        switch current {
        case .object(let object): next = object.members.last(where: { isContainer($0.value) })?.value
        case .array(let items): next = items.last(where: isContainer)
        default: next = nil
        }
        guard let next else { return }
        current = next
    }
}

/// `levels` series nested in one another around a task.
private func nestedSeries(_ levels: Int) -> JSONValue {
    var value = task()
    for _ in 0..<levels { value = ["type": "series", "steps": [value]] }
    return value
}

/// A case of the problem tables: a document and the exact problems expected.
struct DecoderProblemCase: Sendable, CustomTestStringConvertible {
    let name: String
    let json: JSONValue
    let expected: [String]

    init(_ name: String, _ json: JSONValue, _ expected: [String]) {
        self.name = name
        self.json = json
        self.expected = expected
    }

    var testDescription: String { self.name }
}

struct JobDecoderTests {
    // MARK: - Jobs

    @Test
    func aMinimalJobDecodesWithDefaults() throws {
        let spec = try decoder.decodeJob(job(task()))
        let expected = JobSpec(
            name: nil,
            input: .null,
            graph: Node(
                id: "root",
                pointer: "/graph",
                kind: .task(TaskSpec(action: "value", params: try template([:])))
            ),
            timeoutMs: nil,
            labels: [:],
            nodeCount: 1,
            depth: 1
        )
        #expect(spec == expected)
        #expect(spec.graph.input == nil)
        if case .task(let taskSpec) = spec.graph.kind {
            #expect(taskSpec.executor == "default")
            #expect(taskSpec.retry == nil)
            #expect(taskSpec.timeoutMs == nil)
            #expect(taskSpec.params.constantValue == [:])
        } else {
            Issue.record("expected a task")
        }
    }

    @Test
    func aJobWithEveryFieldDecodesEachOne() throws {
        let json: JSONValue = [
            "name": "import-comments",
            "input": ["post": 123, "tags": ["a"]],
            "graph": task(),
            "timeoutMs": 600_000,
            "labels": ["team": "data", "tier.v-2_x": ""],
        ]
        let spec = try decoder.decodeJob(json)
        #expect(spec.name == "import-comments")
        #expect(spec.input == ["post": 123, "tags": ["a"]])
        #expect(spec.timeoutMs == 600_000)
        #expect(spec.labels == ["team": "data", "tier.v-2_x": ""])
        #expect(spec.graph.id == "root")
        #expect(spec.nodeCount == 1)
        #expect(spec.depth == 1)
    }

    @Test
    func aJobParsedFromTextDecodes() throws {
        let text =
            #"{"name":"n","graph":{"type":"series","steps":[{"type":"task","action":"value","params":{"value":2.0}}]},"timeoutMs":1000.0}"#
        let spec = try decoder.decodeJob(try JSONParser.parse(text))
        #expect(spec.timeoutMs == 1000)
        #expect(spec.nodeCount == 2)
        #expect(spec.depth == 2)
        #expect(idsAndPointers(spec.graph) == ["root @ /graph", "root.steps.0 @ /graph/steps/0"])
    }

    @Test
    func nullIsTheWrongTypeForTypedOptionalFields() throws {
        let json: JSONValue = [
            "name": nil, "timeoutMs": nil, "labels": nil,
            "graph": [
                "type": "task", "action": "value", "id": nil, "params": nil, "executor": nil, "retry": nil,
                "timeoutMs": nil,
            ],
        ]
        #expect(
            problems(json) == [
                "/name: must be a string",
                "/timeoutMs: must be an integer from 1 to 2678400000 (31 days)",
                "/labels: must be an object",
                "/graph/id: must be a string of 1 to 64 letters, digits, '_' or '-'",
                "/graph/params: must be an object",
                "/graph/executor: must be a string",
                "/graph/retry: must be an object",
                "/graph/timeoutMs: must be an integer from 1 to 86400000 (24 hours)",
            ]
        )
    }

    @Test
    func aNodeInputOfNullIsAValueNotAnAbsence() throws {
        let spec = try decoder.decodeJob(job(task("value", ["input": nil])))
        #expect(spec.graph.input == (try template(nil)))
    }

    // MARK: - Node types

    @Test
    func aTaskDecodesEveryField() throws {
        let node = task(
            "value",
            [
                "id": "fetch-1",
                "input": ["post": "${input.post}"],
                "params": ["value": "${input}", "n": 1, "literal": "plain $${x}"],
                "executor": "io",
                "retry": [
                    "maxAttempts": 5, "delayMs": 100, "backoff": 1.5, "maxDelayMs": 2000, "jitter": true,
                    "on": ["http.*", "task.timeout"],
                ],
                "timeoutMs": 86_400_000,
            ]
        )
        let spec = try decoder.decodeJob(job(node))
        let expected = Node(
            id: "fetch-1",
            pointer: "/graph",
            input: try template(["post": "${input.post}"]),
            kind: .task(
                TaskSpec(
                    action: "value",
                    params: try template(["value": "${input}", "n": 1, "literal": "plain $${x}"]),
                    executor: "io",
                    retry: RetrySpec(
                        maxAttempts: 5,
                        delayMs: 100,
                        backoff: 1.5,
                        maxDelayMs: 2000,
                        jitter: true,
                        on: ["http.*", "task.timeout"]
                    ),
                    timeoutMs: 86_400_000
                )
            )
        )
        #expect(spec.graph == expected)
        if case .task(let taskSpec) = spec.graph.kind {
            #expect(!taskSpec.params.isConstant)
        }
    }

    @Test
    func theImmediateExecutorIsAlwaysAccepted() throws {
        let spec = try decoder.decodeJob(job(task("value", ["executor": "immediate"])))
        guard case .task(let taskSpec) = spec.graph.kind else {
            Issue.record("expected a task")
            return
        }
        #expect(taskSpec.executor == "immediate")
    }

    @Test
    func aRetryObjectFillsMissingFieldsWithDefaults() throws {
        let spec = try decoder.decodeJob(job(task("value", ["retry": ["maxAttempts": 3]])))
        guard case .task(let taskSpec) = spec.graph.kind else {
            Issue.record("expected a task")
            return
        }
        #expect(
            taskSpec.retry == RetrySpec(maxAttempts: 3, delayMs: 0, backoff: 2, maxDelayMs: nil, jitter: false, on: nil)
        )
    }

    @Test
    func aSeriesDecodesItsStepsInOrder() throws {
        let spec = try decoder.decodeJob(
            job(["type": "series", "id": "s", "input": 7, "steps": [task("value"), task("fail")]])
        )
        let expected = Node(
            id: "s",
            pointer: "/graph",
            input: try template(7),
            kind: .series([
                Node(
                    id: "root.steps.0",
                    pointer: "/graph/steps/0",
                    kind: .task(TaskSpec(action: "value", params: try template([:])))
                ),
                Node(
                    id: "root.steps.1",
                    pointer: "/graph/steps/1",
                    kind: .task(TaskSpec(action: "fail", params: try template([:])))
                ),
            ])
        )
        #expect(spec.graph == expected)
        #expect(spec.nodeCount == 3)
        #expect(spec.depth == 2)
    }

    @Test
    func anEmptySeriesIsValid() throws {
        let spec = try decoder.decodeJob(job(["type": "series", "steps": []]))
        #expect(spec.graph == Node(id: "root", pointer: "/graph", kind: .series([])))
        #expect(spec.nodeCount == 1)
    }

    @Test
    func aParallelDecodesEveryField() throws {
        let spec = try decoder.decodeJob(
            job([
                "type": "parallel", "branches": [task(), task()], "mode": "settled", "maxConcurrency": 2,
                "failFast": true,
            ])
        )
        let leaf = { (index: Int) in
            Node(
                id: "root.branches.\(index)",
                pointer: "/graph/branches/\(index)",
                kind: .task(TaskSpec(action: "value", params: try template([:])))
            )
        }
        #expect(
            spec.graph
                == Node(
                    id: "root",
                    pointer: "/graph",
                    kind: .parallel(
                        ParallelSpec(
                            branches: [try leaf(0), try leaf(1)],
                            mode: .settled,
                            maxConcurrency: 2,
                            failFast: true
                        )
                    )
                )
        )
    }

    @Test(arguments: ParallelSpec.Mode.allCases)
    func everyParallelModeIsAccepted(mode: ParallelSpec.Mode) throws {
        let spec = try decoder.decodeJob(job(["type": "parallel", "branches": [], "mode": .string(mode.rawValue)]))
        guard case .parallel(let parallel) = spec.graph.kind else {
            Issue.record("expected a parallel")
            return
        }
        #expect(parallel.mode == mode)
    }

    @Test
    func aParallelDefaultsToModeAllWithoutFailFastOrConcurrencyLimit() throws {
        let spec = try decoder.decodeJob(job(["type": "parallel", "branches": [task()]]))
        guard case .parallel(let parallel) = spec.graph.kind else {
            Issue.record("expected a parallel")
            return
        }
        #expect(parallel.mode == .all)
        #expect(parallel.maxConcurrency == nil)
        #expect(parallel.failFast == false)
    }

    @Test
    func aContinuationDecodesEveryField() throws {
        let spec = try decoder.decodeJob(
            job([
                "type": "continuation", "antecedent": task("fail"), "on": "always",
                "then": task("value", ["id": "cleanup"]),
            ])
        )
        let expected = Node(
            id: "root",
            pointer: "/graph",
            kind: .continuation(
                ContinuationSpec(
                    antecedent: Node(
                        id: "root.antecedent",
                        pointer: "/graph/antecedent",
                        kind: .task(TaskSpec(action: "fail", params: try template([:])))
                    ),
                    on: .always,
                    then: Node(
                        id: "cleanup",
                        pointer: "/graph/then",
                        kind: .task(TaskSpec(action: "value", params: try template([:])))
                    )
                )
            )
        )
        #expect(spec.graph == expected)
        #expect(spec.depth == 2)
    }

    @Test(arguments: ContinuationSpec.On.allCases)
    func everyContinuationConditionIsAccepted(on: ContinuationSpec.On) throws {
        let spec = try decoder.decodeJob(
            job(["type": "continuation", "antecedent": task(), "on": .string(on.rawValue), "then": task()])
        )
        guard case .continuation(let continuation) = spec.graph.kind else {
            Issue.record("expected a continuation")
            return
        }
        #expect(continuation.on == on)
    }

    @Test
    func aContinuationRunsOnSuccessByDefault() throws {
        let spec = try decoder.decodeJob(job(["type": "continuation", "antecedent": task(), "then": task()]))
        guard case .continuation(let continuation) = spec.graph.kind else {
            Issue.record("expected a continuation")
            return
        }
        #expect(continuation.on == .success)
    }

    @Test
    func aMapDecodesEveryField() throws {
        let spec = try decoder.decodeJob(
            job(["type": "map", "items": "${input.list}", "template": task(), "mode": "series", "maxConcurrency": 4])
        )
        let expected = Node(
            id: "root",
            pointer: "/graph",
            kind: .map(
                MapSpec(
                    items: try template("${input.list}"),
                    template: Node(
                        id: "root.template",
                        pointer: "/graph/template",
                        kind: .task(TaskSpec(action: "value", params: try template([:])))
                    ),
                    mode: .series,
                    maxConcurrency: 4
                )
            )
        )
        #expect(spec.graph == expected)
    }

    @Test
    func aMapTakesItsItemsFromTheInputByDefaultAndRunsInParallel() throws {
        let spec = try decoder.decodeJob(job(["type": "map", "template": task()]))
        guard case .map(let map) = spec.graph.kind else {
            Issue.record("expected a map")
            return
        }
        #expect(map.items == (try template("${input}")))
        #expect(map.mode == .parallel)
        #expect(map.maxConcurrency == nil)
    }

    @Test(arguments: [JSONValue.array([1, 2]), ["${input.a}", "x"], "${input}", "${ job.input.items }", []])
    func mapItemsMayBeAnArrayOrASingleTemplate(items: JSONValue) throws {
        let spec = try decoder.decodeJob(job(["type": "map", "items": items, "template": task()]))
        guard case .map(let map) = spec.graph.kind else {
            Issue.record("expected a map")
            return
        }
        #expect(map.items == (try template(items)))
    }

    @Test
    func aDynamicNodeDecodesItsSource() throws {
        let spec = try decoder.decodeJob(job(["type": "dynamic", "id": "planner", "source": task()]))
        let expected = Node(
            id: "planner",
            pointer: "/graph",
            kind: .dynamic(
                source: Node(
                    id: "root.source",
                    pointer: "/graph/source",
                    kind: .task(TaskSpec(action: "value", params: try template([:])))
                )
            )
        )
        #expect(spec.graph == expected)
    }

    // MARK: - Generated ids

    @Test
    func nodesWithoutIdsGetTheirPathFromTheRootAsId() throws {
        let graph: JSONValue = [
            "type": "series",
            "steps": [
                ["type": "continuation", "antecedent": task(), "then": task()],
                ["type": "parallel", "branches": [task(), task(), task()]],
                ["type": "map", "template": ["type": "series", "steps": [task()]]],
                ["type": "dynamic", "source": task()],
            ],
        ]
        let spec = try decoder.decodeJob(job(graph))
        #expect(
            idsAndPointers(spec.graph) == [
                "root @ /graph",
                "root.steps.0 @ /graph/steps/0",
                "root.steps.0.antecedent @ /graph/steps/0/antecedent",
                "root.steps.0.then @ /graph/steps/0/then",
                "root.steps.1 @ /graph/steps/1",
                "root.steps.1.branches.0 @ /graph/steps/1/branches/0",
                "root.steps.1.branches.1 @ /graph/steps/1/branches/1",
                "root.steps.1.branches.2 @ /graph/steps/1/branches/2",
                "root.steps.2 @ /graph/steps/2",
                "root.steps.2.template @ /graph/steps/2/template",
                "root.steps.2.template.steps.0 @ /graph/steps/2/template/steps/0",
                "root.steps.3 @ /graph/steps/3",
                "root.steps.3.source @ /graph/steps/3/source",
            ]
        )
        #expect(spec.nodeCount == 13)
        #expect(spec.depth == 4)
    }

    @Test
    func generatedIdsFollowThePathEvenBelowNodesWithExplicitIds() throws {
        let graph: JSONValue = [
            "type": "series", "id": "main",
            "steps": [["type": "parallel", "id": "fan", "branches": [task(), task("value", ["id": "named"])]]],
        ]
        let spec = try decoder.decodeJob(job(graph))
        #expect(
            idsAndPointers(spec.graph) == [
                "main @ /graph", "fan @ /graph/steps/0", "root.steps.0.branches.0 @ /graph/steps/0/branches/0",
                "named @ /graph/steps/0/branches/1",
            ]
        )
    }

    @Test
    func generatedIdsAreStableForTheSameGraph() throws {
        let graph: JSONValue = ["type": "parallel", "branches": [task(), ["type": "series", "steps": [task()]]]]
        #expect(try decoder.decodeJob(job(graph)).graph == decoder.decodeJob(job(graph)).graph)
    }

    // MARK: - Problems, one kind at a time

    static let jobProblemCases: [DecoderProblemCase] = [
        DecoderProblemCase("the top level is not an object", [1, 2], [": must be an object"]),
        DecoderProblemCase("the top level is a string", "graph", [": must be an object"]),
        DecoderProblemCase("the graph is missing", ["name": "x"], ["/graph: required"]),
        DecoderProblemCase("the graph is null", ["graph": nil], ["/graph: required"]),
        DecoderProblemCase("the graph is not an object", ["graph": 5], ["/graph: must be an object"]),
        DecoderProblemCase(
            "a misspelt job field",
            ["grpah": task()],
            [#"/grpah: unknown field "grpah"; did you mean "graph"?"#, "/graph: required"]
        ),
        DecoderProblemCase(
            "an unknown job field",
            job(task(), ["weight": 1]),
            [#"/weight: unknown field "weight""#]
        ),
        DecoderProblemCase(
            "a job field with a slash",
            job(task(), ["a/b~c": 1]),
            [#"/a~1b~0c: unknown field "a/b~c""#]
        ),
        DecoderProblemCase("the name is not a string", job(task(), ["name": 5]), ["/name: must be a string"]),
        DecoderProblemCase(
            "the name is too long",
            job(task(), ["name": .string(String(repeating: "n", count: 201))]),
            ["/name: must be at most 200 characters"]
        ),
        DecoderProblemCase(
            "the job timeout is zero",
            job(task(), ["timeoutMs": 0]),
            ["/timeoutMs: must be an integer from 1 to 2678400000 (31 days)"]
        ),
        DecoderProblemCase(
            "the job timeout is over 31 days",
            job(task(), ["timeoutMs": 2_678_400_001]),
            ["/timeoutMs: must be an integer from 1 to 2678400000 (31 days)"]
        ),
        DecoderProblemCase(
            "the job timeout is a string",
            job(task(), ["timeoutMs": "1000"]),
            ["/timeoutMs: must be an integer from 1 to 2678400000 (31 days)"]
        ),
        DecoderProblemCase(
            "the job timeout has a fraction",
            job(task(), ["timeoutMs": 1.5]),
            ["/timeoutMs: must be an integer from 1 to 2678400000 (31 days)"]
        ),
        DecoderProblemCase(
            "the labels are not an object",
            job(task(), ["labels": ["a"]]),
            ["/labels: must be an object"]
        ),
        DecoderProblemCase(
            "a label name with a colon",
            job(task(), ["labels": ["team:x": "data"]]),
            [#"/labels/team:x: invalid label name "team:x": use 1 to 63 letters, digits, '_', '.' or '-'"#]
        ),
        DecoderProblemCase(
            "an empty label name",
            job(task(), ["labels": ["": "data"]]),
            [#"/labels/: invalid label name "": use 1 to 63 letters, digits, '_', '.' or '-'"#]
        ),
        DecoderProblemCase(
            "a label name of 64 characters",
            job(task(), ["labels": .object(JSONObject([(key: String(repeating: "k", count: 64), value: "v")]))]),
            [
                "/labels/\(String(repeating: "k", count: 64)): invalid label name \"\(String(repeating: "k", count: 64))\": use 1 to 63 letters, digits, '_', '.' or '-'"
            ]
        ),
        DecoderProblemCase(
            "a label value that is not a string",
            job(task(), ["labels": ["team": 1]]),
            ["/labels/team: must be a string"]
        ),
        DecoderProblemCase(
            "a label value over 200 characters",
            job(task(), ["labels": ["team": .string(String(repeating: "v", count: 201))]]),
            ["/labels/team: must be at most 200 characters"]
        ),
        DecoderProblemCase(
            "65 labels",
            job(task(), ["labels": .object(JSONObject((0..<65).map { (key: "k\($0)", value: "v") }))]),
            ["/labels: must have at most 64 labels"]
        ),
    ]

    @Test(arguments: jobProblemCases)
    func jobLevelProblemsAreReportedAtTheirPointer(_ testCase: DecoderProblemCase) {
        #expect(problems(testCase.json) == testCase.expected)
    }

    @Test
    func labelLimitsAreInclusive() throws {
        let labels = JSONObject(
            (0..<64).map {
                (key: String(repeating: "k", count: 60) + "\($0)", value: .string(String(repeating: "é", count: 200)))
            }
        )
        let spec = try decoder.decodeJob(job(task(), ["labels": .object(labels)]))
        #expect(spec.labels.count == 64)
        let name = String(repeating: "é", count: 200)
        #expect(try decoder.decodeJob(job(task(), ["name": .string(name)])).name == name)
    }

    static let nodeProblemCases: [DecoderProblemCase] = [
        DecoderProblemCase("the type is missing", job(["action": "value"]), ["/graph/type: required"]),
        DecoderProblemCase("the type is null", job(["type": nil]), ["/graph/type: required"]),
        DecoderProblemCase("the type is not a string", job(["type": 1]), ["/graph/type: must be a string"]),
        DecoderProblemCase(
            "an unknown type",
            job(["type": "taks", "action": "value"]),
            [
                #"/graph/type: unknown type "taks"; "#
                    + "expected one of task, series, parallel, continuation, map, dynamic, job"
            ]
        ),
        DecoderProblemCase(
            "a misspelt field",
            job(["type": "series", "stpes": []]),
            [#"/graph/stpes: unknown field "stpes"; did you mean "steps"?"#, "/graph/steps: required"]
        ),
        DecoderProblemCase(
            "a field of another node type",
            job(task("value", ["steps": []])),
            [#"/graph/steps: unknown field "steps""#]
        ),
        DecoderProblemCase(
            "a misspelt field of a task",
            job(task("value", ["parms": [:]])),
            [#"/graph/parms: unknown field "parms"; did you mean "params"?"#]
        ),
        DecoderProblemCase(
            "a null unknown field",
            job(task("value", ["extra": nil])),
            [#"/graph/extra: unknown field "extra""#]
        ),
        DecoderProblemCase(
            "an id with a dot",
            job(task("value", ["id": "a.b"])),
            ["/graph/id: must be a string of 1 to 64 letters, digits, '_' or '-'"]
        ),
        DecoderProblemCase(
            "an empty id",
            job(task("value", ["id": ""])),
            ["/graph/id: must be a string of 1 to 64 letters, digits, '_' or '-'"]
        ),
        DecoderProblemCase(
            "an id of 65 characters",
            job(task("value", ["id": .string(String(repeating: "a", count: 65))])),
            ["/graph/id: must be a string of 1 to 64 letters, digits, '_' or '-'"]
        ),
        DecoderProblemCase(
            "a numeric id",
            job(task("value", ["id": 5])),
            ["/graph/id: must be a string of 1 to 64 letters, digits, '_' or '-'"]
        ),
        DecoderProblemCase(
            "a duplicate id",
            job([
                "type": "series",
                "steps": [task("value", ["id": "a"]), task("value", ["id": "b"]), task("value", ["id": "a"])],
            ]),
            [#"/graph/steps/2/id: duplicate id "a" (first used at /graph/steps/0)"#]
        ),
        DecoderProblemCase(
            "a parent and a child with the same id",
            job(["type": "dynamic", "id": "x", "source": task("value", ["id": "x"])]),
            [#"/graph/source/id: duplicate id "x" (first used at /graph)"#]
        ),
        DecoderProblemCase(
            "an explicit id that is the root's generated id",
            job(["type": "series", "steps": [task("value", ["id": "root"])]]),
            [#"/graph/steps/0/id: duplicate id "root" (the generated id of the root node at /graph, which has no id)"#]
        ),
        DecoderProblemCase("the action is missing", job(["type": "task"]), ["/graph/action: required"]),
        DecoderProblemCase(
            "the action is not a string",
            job(["type": "task", "action": ["value"]]),
            ["/graph/action: must be a string"]
        ),
        DecoderProblemCase(
            "an unknown action",
            job(task("vaule")),
            [#"/graph/action: unknown action "vaule"; known: check, fail, value"#]
        ),
        DecoderProblemCase(
            "the params are not an object",
            job(task("value", ["params": [1]])),
            ["/graph/params: must be an object"]
        ),
        DecoderProblemCase(
            "the action's own params check",
            job(task("check", ["params": ["m": 1]])),
            ["/graph/params/n: required by the test action"]
        ),
        DecoderProblemCase(
            "the action's check with absent params",
            job(task("check")),
            ["/graph/params/n: required by the test action"]
        ),
        DecoderProblemCase(
            "an unknown executor",
            job(task("value", ["executor": "gpu"])),
            [#"/graph/executor: unknown executor "gpu"; configured: default, io"#]
        ),
        DecoderProblemCase(
            "the executor is not a string",
            job(task("value", ["executor": 1])),
            ["/graph/executor: must be a string"]
        ),
        DecoderProblemCase(
            "a task timeout of zero",
            job(task("value", ["timeoutMs": 0])),
            ["/graph/timeoutMs: must be an integer from 1 to 86400000 (24 hours)"]
        ),
        DecoderProblemCase(
            "a task timeout over a day",
            job(task("value", ["timeoutMs": 86_400_001])),
            ["/graph/timeoutMs: must be an integer from 1 to 86400000 (24 hours)"]
        ),
        DecoderProblemCase(
            "the retry is not an object",
            job(task("value", ["retry": 3])),
            ["/graph/retry: must be an object"]
        ),
        DecoderProblemCase(
            "zero retry attempts",
            job(task("value", ["retry": ["maxAttempts": 0]])),
            ["/graph/retry/maxAttempts: must be an integer from 1 to 100"]
        ),
        DecoderProblemCase(
            "101 retry attempts",
            job(task("value", ["retry": ["maxAttempts": 101]])),
            ["/graph/retry/maxAttempts: must be an integer from 1 to 100"]
        ),
        DecoderProblemCase(
            "a negative retry delay",
            job(task("value", ["retry": ["delayMs": -1]])),
            ["/graph/retry/delayMs: must be an integer from 0 to 86400000"]
        ),
        DecoderProblemCase(
            "a retry delay over a day",
            job(task("value", ["retry": ["delayMs": 86_400_001]])),
            ["/graph/retry/delayMs: must be an integer from 0 to 86400000"]
        ),
        DecoderProblemCase(
            "a backoff below 1",
            job(task("value", ["retry": ["backoff": 0.5]])),
            ["/graph/retry/backoff: must be a number from 1 to 100"]
        ),
        DecoderProblemCase(
            "a backoff over 100",
            job(task("value", ["retry": ["backoff": 101]])),
            ["/graph/retry/backoff: must be a number from 1 to 100"]
        ),
        DecoderProblemCase(
            "a string backoff",
            job(task("value", ["retry": ["backoff": "2"]])),
            ["/graph/retry/backoff: must be a number from 1 to 100"]
        ),
        DecoderProblemCase(
            "a negative maximum delay",
            job(task("value", ["retry": ["maxDelayMs": -5]])),
            ["/graph/retry/maxDelayMs: must be an integer from 0 to 86400000"]
        ),
        DecoderProblemCase(
            "a maximum delay over a day",
            job(task("value", ["retry": ["maxDelayMs": 86_400_001]])),
            ["/graph/retry/maxDelayMs: must be an integer from 0 to 86400000"]
        ),
        DecoderProblemCase(
            "a string jitter",
            job(task("value", ["retry": ["jitter": "yes"]])),
            ["/graph/retry/jitter: must be a boolean"]
        ),
        DecoderProblemCase(
            "retry codes that are not an array",
            job(task("value", ["retry": ["on": "http.*"]])),
            ["/graph/retry/on: must be an array of error codes"]
        ),
        DecoderProblemCase(
            "an empty and a numeric retry code",
            job(task("value", ["retry": ["on": ["ok", "", 5]]])),
            ["/graph/retry/on/1: must be a non-empty string", "/graph/retry/on/2: must be a non-empty string"]
        ),
        DecoderProblemCase(
            "an unknown retry field",
            job(task("value", ["retry": ["maxAtempts": 3]])),
            [#"/graph/retry/maxAtempts: unknown field "maxAtempts"; did you mean "maxAttempts"?"#]
        ),
        DecoderProblemCase("the steps are missing", job(["type": "series"]), ["/graph/steps: required"]),
        DecoderProblemCase(
            "the steps are not an array",
            job(["type": "series", "steps": task()]),
            ["/graph/steps: must be an array of nodes"]
        ),
        DecoderProblemCase(
            "a step is not an object",
            job(["type": "series", "steps": [task(), "value"]]),
            ["/graph/steps/1: must be an object"]
        ),
        DecoderProblemCase("the branches are missing", job(["type": "parallel"]), ["/graph/branches: required"]),
        DecoderProblemCase(
            "an unknown parallel mode",
            job(["type": "parallel", "branches": [], "mode": "race"]),
            ["/graph/mode: must be one of all, any, settled"]
        ),
        DecoderProblemCase(
            "a parallel concurrency of zero",
            job(["type": "parallel", "branches": [], "maxConcurrency": 0]),
            ["/graph/maxConcurrency: must be an integer from 1 to 9007199254740991"]
        ),
        DecoderProblemCase(
            "a parallel concurrency over 2^53 - 1",
            job(["type": "parallel", "branches": [], "maxConcurrency": 9_007_199_254_740_992]),
            ["/graph/maxConcurrency: must be an integer from 1 to 9007199254740991"]
        ),
        DecoderProblemCase(
            "a string failFast",
            job(["type": "parallel", "branches": [], "failFast": "true"]),
            ["/graph/failFast: must be a boolean"]
        ),
        DecoderProblemCase(
            "the antecedent and then are missing",
            job(["type": "continuation"]),
            ["/graph/antecedent: required", "/graph/then: required"]
        ),
        DecoderProblemCase(
            "an unknown continuation condition",
            job(["type": "continuation", "antecedent": task(), "then": task(), "on": "error"]),
            ["/graph/on: must be one of success, failure, cancellation, always"]
        ),
        DecoderProblemCase("the map template is missing", job(["type": "map"]), ["/graph/template: required"]),
        DecoderProblemCase(
            "literal map items that are an object",
            job(["type": "map", "items": ["a": 1], "template": task()]),
            ["/graph/items: must be an array or a template"]
        ),
        DecoderProblemCase(
            "literal map items that are a number",
            job(["type": "map", "items": 3, "template": task()]),
            ["/graph/items: must be an array or a template"]
        ),
        DecoderProblemCase(
            "literal map items that are a plain string",
            job(["type": "map", "items": "a,b", "template": task()]),
            ["/graph/items: must be an array or a template"]
        ),
        DecoderProblemCase(
            "map items that are an escaped template",
            job(["type": "map", "items": "$${input}", "template": task()]),
            ["/graph/items: must be an array or a template"]
        ),
        DecoderProblemCase(
            "map items that interpolate into a string",
            job(["type": "map", "items": "list: ${input}", "template": task()]),
            ["/graph/items: must be an array or a template"]
        ),
        DecoderProblemCase(
            "map items that are null",
            job(["type": "map", "items": nil, "template": task()]),
            ["/graph/items: must be an array or a template"]
        ),
        DecoderProblemCase(
            "an unknown map mode",
            job(["type": "map", "template": task(), "mode": "all"]),
            ["/graph/mode: must be one of parallel, series"]
        ),
        DecoderProblemCase(
            "a map concurrency of zero",
            job(["type": "map", "template": task(), "maxConcurrency": -1]),
            ["/graph/maxConcurrency: must be an integer from 1 to 9007199254740991"]
        ),
        DecoderProblemCase("the dynamic source is missing", job(["type": "dynamic"]), ["/graph/source: required"]),
        DecoderProblemCase(
            "the dynamic source is not an object",
            job(["type": "dynamic", "source": []]),
            ["/graph/source: must be an object"]
        ),
    ]

    @Test(arguments: nodeProblemCases)
    func nodeProblemsAreReportedAtTheirPointer(_ testCase: DecoderProblemCase) {
        #expect(problems(testCase.json) == testCase.expected)
    }

    @Test
    func anUnknownTypeStillChecksTheIdButNotTheOtherFields() {
        let graph: JSONValue = [
            "type": "series", "steps": [task("value", ["id": "a"]), ["type": "loop", "id": "a", "whatever": 1]],
        ]
        #expect(
            problems(job(graph)) == [
                #"/graph/steps/1/type: unknown type "loop"; expected one of task, series, parallel, continuation, map, dynamic, job"#,
                #"/graph/steps/1/id: duplicate id "a" (first used at /graph/steps/0)"#,
            ]
        )
    }

    // MARK: - Templates

    @Test
    func templateSyntaxProblemsAreReportedWithPointersIntoParamsInputAndItems() {
        let graph: JSONValue = [
            "type": "map",
            "items": ["${input", "ok"],
            "input": ["deep": ["list": ["fine", "${nope}"]]],
            "template": task("value", ["params": ["a/b": "${input.", "nested": [["x": "${}"]]]]),
        ]
        #expect(
            problems(job(graph)) == [
                "/graph/input/deep/list/1: " + syntaxMessage("${nope}"),
                "/graph/items/0: " + syntaxMessage("${input"),
                "/graph/template/params/a~1b: " + syntaxMessage("${input."),
                "/graph/template/params/nested/0/x: " + syntaxMessage("${}"),
            ]
        )
    }

    @Test
    func aTemplateThatIsTheWholeParamsStringIsSyntaxChecked() {
        #expect(problems(job(task("value", ["input": "${input"]))) == ["/graph/input: " + syntaxMessage("${input")])
    }

    @Test
    func templateProblemsComeBeforeTheActionsOwnParamsProblems() {
        #expect(
            problems(job(task("check", ["params": ["m": "${job.nope}"]]))) == [
                "/graph/params/m: " + syntaxMessage("${job.nope}"),
                "/graph/params/n: required by the test action",
            ]
        )
    }

    @Test
    func referencesToTasksAnywhereInTheGraphAreAccepted() throws {
        let graph: JSONValue = [
            "type": "series",
            "steps": [
                task("value", ["id": "fetch"]),
                task(
                    "value",
                    [
                        "params": [
                            "a": "${tasks.fetch.result}", "b": "${tasks.later.state}",
                            "c": #"${tasks["root.steps.2"].error}"#,
                        ]
                    ]
                ),
                task("value", ["input": "${tasks.root.state}"]),
                task("value", ["id": "later"]),
            ],
        ]
        _ = try decoder.decodeJob(job(graph))
    }

    @Test
    func referencesToUnknownTasksAreReportedAtTheStringThatHoldsThem() {
        let graph: JSONValue = [
            "type": "series",
            "steps": [
                task("value", ["id": "fetch"]),
                task(
                    "value",
                    ["params": ["a": "${tasks.fecth.result}", "b": ["x ${tasks.fetch.state} ${tasks.gone.state}"]]]
                ),
                task("value", ["input": "${tasks.fetch[2].result}"]),
                ["type": "map", "items": "${tasks.missing.result}", "template": task()],
            ],
        ]
        #expect(
            problems(job(graph)) == [
                #"/graph/steps/1/params/a: refers to unknown task "fecth""#,
                #"/graph/steps/1/params/b/0: refers to unknown task "gone""#,
                #"/graph/steps/3/items: refers to unknown task "missing""#,
            ]
        )
    }

    @Test
    func withoutAMapAnInstanceSuffixIsAnUnknownTask() {
        let graph: JSONValue = [
            "type": "series",
            "steps": [task("value", ["id": "fetch"]), task("value", ["input": "${tasks.fetch[2].result}"])],
        ]
        #expect(problems(job(graph)) == [#"/graph/steps/1/input: refers to unknown task "fetch[2]""#])
    }

    @Test
    func withAMapReferencesToInstanceIdsOfKnownTasksAreAccepted() throws {
        let graph: JSONValue = [
            "type": "series",
            "steps": [
                ["type": "map", "id": "each", "template": task("value", ["id": "delete"])],
                task(
                    "value",
                    [
                        "params": [
                            "a": "${tasks.delete[3].result}", "b": "${tasks.each.result}",
                            "c": "${tasks.delete[1][0].state}",
                        ]
                    ]
                ),
            ],
        ]
        _ = try decoder.decodeJob(job(graph))
        let bad: JSONValue = [
            "type": "series",
            "steps": [["type": "map", "template": task()], task("value", ["input": "${tasks.other[3].state}"])],
        ]
        #expect(problems(job(bad)) == [#"/graph/steps/1/input: refers to unknown task "other[3]""#])
    }

    @Test
    func withADynamicNodeReferencesIntoItsSpawnedGraphAreAccepted() throws {
        let graph: JSONValue = [
            "type": "series",
            "steps": [
                ["type": "dynamic", "id": "plan", "source": task()],
                task(
                    "value",
                    ["params": ["a": "${tasks.plan/step.result}", "b": #"${tasks["plan/root.steps.0"].state}"#]]
                ),
            ],
        ]
        _ = try decoder.decodeJob(job(graph))
        let bad: JSONValue = [
            "type": "series",
            "steps": [
                ["type": "dynamic", "id": "plan", "source": task("value", ["id": "src"])],
                task("value", ["params": ["a": "${tasks.src/step.result}", "b": "${tasks.nothing.state}"]]),
            ],
        ]
        #expect(
            problems(job(bad)) == [
                #"/graph/steps/1/params/a: refers to unknown task "src/step""#,
                #"/graph/steps/1/params/b: refers to unknown task "nothing""#,
            ]
        )
    }

    // MARK: - Many problems at once

    @Test
    func everyProblemInADocumentIsReportedInOneError() {
        let json: JSONValue = [
            "name": 1,
            "labels": ["ok": "x", "bad key": "y"],
            "graph": [
                "type": "series",
                "id": "main",
                "steps": [
                    [
                        "type": "task", "action": "nope", "executor": "gpu",
                        "retry": ["maxAttempts": 0, "colour": "red"],
                    ],
                    [
                        "type": "parallel", "id": "main", "mode": "race",
                        "branches": [task("value", ["params": ["v": "${input"]]), 7],
                    ],
                    ["type": "continuation", "antecedent": ["type": "map", "items": 3], "then": ["type": "dynamic"]],
                    task("value", ["input": "${tasks.ghost.result}", "timeoutMs": -1]),
                ],
            ],
            "extra": true,
        ]
        #expect(
            problems(json) == [
                #"/extra: unknown field "extra""#,
                "/name: must be a string",
                #"/labels/bad key: invalid label name "bad key": use 1 to 63 letters, digits, '_', '.' or '-'"#,
                #"/graph/steps/0/action: unknown action "nope"; known: check, fail, value"#,
                #"/graph/steps/0/executor: unknown executor "gpu"; configured: default, io"#,
                "/graph/steps/0/retry/maxAttempts: must be an integer from 1 to 100",
                #"/graph/steps/0/retry/colour: unknown field "colour""#,
                #"/graph/steps/1/id: duplicate id "main" (first used at /graph)"#,
                "/graph/steps/1/mode: must be one of all, any, settled",
                "/graph/steps/1/branches/0/params/v: " + syntaxMessage("${input"),
                "/graph/steps/1/branches/1: must be an object",
                "/graph/steps/2/antecedent/items: must be an array or a template",
                "/graph/steps/2/antecedent/template: required",
                "/graph/steps/2/then/source: required",
                "/graph/steps/3/timeoutMs: must be an integer from 1 to 86400000 (24 hours)",
                #"/graph/steps/3/input: refers to unknown task "ghost""#,
            ]
        )
    }

    @Test
    func problemsBeyondAHundredAreSummedUpInOneLastProblem() {
        let branches = (0..<150).map { _ in task("value", ["colour": "red"]) }
        let found = problems(job(["type": "parallel", "branches": .array(branches)]))
        #expect(found.count == 101)
        #expect(found.first == #"/graph/branches/0/colour: unknown field "colour""#)
        #expect(found[99] == #"/graph/branches/99/colour: unknown field "colour""#)
        #expect(found.last == ": … and 50 more problems")
    }

    @Test
    func oneProblemBeyondAHundredIsSummedUpInTheSingular() {
        let branches = (0..<101).map { _ in task("value", ["colour": "red"]) }
        #expect(problems(job(["type": "parallel", "branches": .array(branches)])).last == ": … and 1 more problem")
    }

    // MARK: - Limits

    @Test
    func aGraphNestedToTheDepthLimitIsAccepted() throws {
        let spec = try decoder.decodeJob(job(nestedSeries(99)))
        #expect(spec.depth == 100)
        #expect(spec.nodeCount == 100)
    }

    @Test
    func aGraphNestedBeyondTheDepthLimitIsReportedAtTheFirstNodeTooDeep() {
        let pointer = "/graph" + String(repeating: "/steps/0", count: 100)
        #expect(problems(job(nestedSeries(100))) == ["\(pointer): nesting deeper than 100 levels"])
    }

    @Test
    func aConfiguredDepthLimitAppliesToEveryBranch() {
        let shallow = JobDecoder(actions: testActions, executors: [], limits: GraphLimits(maxDepth: 3))
        let graph: JSONValue = [
            "type": "parallel", "branches": [task(), nestedSeries(1), nestedSeries(2), nestedSeries(3)],
        ]
        #expect(
            problems(job(graph), with: shallow) == [
                "/graph/branches/2/steps/0/steps/0: nesting deeper than 3 levels",
                "/graph/branches/3/steps/0/steps/0: nesting deeper than 3 levels",
            ]
        )
    }

    @Test
    func aHugelyNestedValueBuiltInCodeGivesOneProblemAndNoCrash() {
        let deep = job(nestedSeries(100_000))
        let found = problems(deep)
        dismantle(consume deep)
        #expect(found == ["/graph" + String(repeating: "/steps/0", count: 100) + ": nesting deeper than 100 levels"])
    }

    @Test
    func aHugelyNestedParamsValueIsRefusedWithoutRecursingThroughIt() {
        var value: JSONValue = 1
        for _ in 0..<100_000 { value = ["steps": [value]] }
        let json = job(task("value", ["params": ["v": value]]))
        let found = problems(json)
        dismantle(consume json)
        dismantle(consume value)
        #expect(found == ["/graph/params: must not be nested deeper than 256 levels"])
    }

    @Test
    func theNodeLimitCountsEveryStaticNode() throws {
        let limited = JobDecoder(actions: testActions, executors: [], limits: GraphLimits(maxNodes: 6))
        let four: JSONValue = [
            "type": "parallel", "branches": [task(), task(), task(), ["type": "map", "template": task()]],
        ]
        #expect(try limited.decodeJob(job(four)).nodeCount == 6)
        #expect(try limited.decodeJob(job(four)).depth == 3)
        let tooMany: JSONValue = [
            "type": "parallel", "branches": [task(), task(), task(), ["type": "dynamic", "source": task()], task()],
        ]
        #expect(problems(job(tooMany), with: limited) == ["/graph: the graph has 7 nodes; the limit is 6"])
    }

    @Test
    func theNodeLimitProblemComesFirst() {
        let limited = JobDecoder(actions: testActions, executors: [], limits: GraphLimits(maxNodes: 1))
        #expect(
            problems(job(["type": "series", "steps": [task("nope")]], ["name": 5]), with: limited) == [
                "/graph: the graph has 2 nodes; the limit is 1",
                "/name: must be a string",
                #"/graph/steps/0/action: unknown action "nope"; known: check, fail, value"#,
            ]
        )
    }

    @Test
    func defaultLimitsAreThoseOfTheSpec() {
        #expect(GraphLimits() == GraphLimits(maxNodes: 10_000, maxDepth: 100))
    }

    @Test
    func tenThousandNodesDecodeWithGeneratedIdsAndOneMoreIsTooMany() throws {
        let branches = (0..<9_999).map { index in task("value", ["params": ["value": .int(index)]]) }
        let spec = try decoder.decodeJob(job(["type": "parallel", "branches": .array(branches)]))
        #expect(spec.nodeCount == 10_000)
        #expect(spec.graph.children[9_998].id == "root.branches.9998")
        #expect(spec.graph.children[9_998].pointer == "/graph/branches/9998")
        #expect(
            problems(job(["type": "parallel", "branches": .array(branches + [task()])])) == [
                "/graph: the graph has 10001 nodes; the limit is 10000"
            ]
        )
    }

    // MARK: - Dynamic graphs

    @Test
    func aDynamicGraphGetsThePrefixOnEveryId() throws {
        let graph: JSONValue = [
            "type": "series", "steps": [task("value", ["id": "a"]), ["type": "parallel", "branches": [task()]]],
        ]
        let node = try decoder.decodeGraph(
            graph,
            idPrefix: "plan/",
            pointer: "/graph",
            maxNodes: 10,
            reservedIDs: ["plan", "root"]
        )
        #expect(
            idsAndPointers(node) == [
                "plan/root @ /graph", "plan/a @ /graph/steps/0", "plan/root.steps.1 @ /graph/steps/1",
                "plan/root.steps.1.branches.0 @ /graph/steps/1/branches/0",
            ]
        )
    }

    @Test
    func aDynamicGraphReportsProblemsUnderItsBasePointer() {
        #expect(
            graphProblems(["type": "series", "steps": [task("nope")], "extra": 1], pointer: "/result/graph") == [
                #"/result/graph/extra: unknown field "extra""#,
                #"/result/graph/steps/0/action: unknown action "nope"; known: check, fail, value"#,
            ]
        )
        #expect(graphProblems("task", pointer: "/result/graph") == ["/result/graph: must be an object"])
    }

    @Test
    func aDynamicGraphMayNotReuseAnIdOfTheJob() {
        let graph: JSONValue = ["type": "series", "steps": [task("value", ["id": "a"]), task("value", ["id": "b"])]]
        #expect(
            graphProblems(graph, reserved: ["dyn", "dyn/a", "b", "dyn/root.steps.9"]) == [
                #"/graph/steps/0/id: id "dyn/a" is already used in the job"#
            ]
        )
        #expect(
            graphProblems(task(), reserved: ["dyn/root"]) == [
                #"/graph: the generated id "dyn/root" is already used in the job"#
            ]
        )
    }

    @Test
    func aDynamicGraphReportsDuplicatesWithinItself() {
        let graph: JSONValue = [
            "type": "series",
            "steps": [task("value", ["id": "a"]), task("value", ["id": "a"]), task("value", ["id": "root"])],
        ]
        #expect(
            graphProblems(graph) == [
                #"/graph/steps/1/id: duplicate id "a" (first used at /graph/steps/0)"#,
                #"/graph/steps/2/id: duplicate id "root" (the generated id of the root node at /graph, which has no id)"#,
            ]
        )
    }

    @Test
    func aDynamicGraphMustFitTheRemainingNodeBudget() throws {
        let graph: JSONValue = ["type": "series", "steps": [task(), task()]]
        _ = try decoder.decodeGraph(graph, idPrefix: "d/", pointer: "/graph", maxNodes: 3, reservedIDs: [])
        #expect(
            graphProblems(graph, maxNodes: 2) == [
                "/graph: the graph has 3 nodes; only 2 remain within the job's node limit"
            ]
        )
    }

    @Test
    func aDynamicGraphMayReferToTheJobsTasksAndToItsOwn() {
        let graph: JSONValue = [
            "type": "series",
            "steps": [
                task("value", ["id": "a"]),
                task(
                    "value",
                    [
                        "params": [
                            "own": "${tasks.a.result}", "ownPrefixed": #"${tasks["dyn/a"].result}"#,
                            "generated": #"${tasks["root.steps.1"].state}"#,
                            "job": "${tasks.fetch.result}", "instance": "${tasks.fetch[2].result}",
                            "spawned": "${tasks.dyn/x.state}",
                            "unknown": "${tasks.zzz.state}",
                        ]
                    ]
                ),
            ],
        ]
        #expect(
            graphProblems(graph, reserved: ["fetch", "dyn"]) == [
                #"/graph/steps/1/params/unknown: refers to unknown task "zzz""#
            ]
        )
    }

    // MARK: - Built-in actions

    @Test
    func theBuiltinActionsDecodeWithTheirParams() throws {
        let builtins = JobDecoder(actions: .builtins, executors: ["default"])
        let graph: JSONValue = [
            "type": "series",
            "steps": [
                task("value", ["params": ["value": "${input}"]]),
                task("delay", ["params": ["ms": 10]]),
                task("await", ["params": ["timeoutMs": 1000]]),
                task("fail", ["params": ["code": "x.y", "message": "m"]]),
            ],
        ]
        let spec = try builtins.decodeJob(job(graph))
        #expect(spec.graph.children.map(\.id) == ["root.steps.0", "root.steps.1", "root.steps.2", "root.steps.3"])
        #expect(!problems(job(task("sleep")), with: builtins).isEmpty)
    }

    // MARK: - Helpers

    @Test(
        arguments: [
            ("stpes", "steps"), ("tpye", "type"), ("Steps", "steps"), ("branch", "branches"), ("x", nil),
            ("colour", nil),
        ] as [(String, String?)]
    )
    func suggestionsAreWithinTwoEdits(word: String, expected: String?) {
        #expect(FieldSuggestion.suggestion(for: word, among: ["type", "id", "input", "steps", "branches"]) == expected)
    }
}
