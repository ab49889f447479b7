// Decoding and validation of submitted jobs (SPEC §1, §3.9).
//
// `JobDecoder` turns a `JSONValue` into a `JobSpec` (or, for `dynamic` nodes at run time, a `Node`)
// and reports every problem it finds, each with the RFC 6901 pointer of the offending value.
// One run's state and problem list are `DecodeState` (DecodeState.swift); nodes are decoded in
// DecodeState+Nodes.swift, `labels` in DecodeState+Fields.swift, and the checks shared with fields
// decoded elsewhere (scalars, `retry`) in ProblemReporter.swift. Top-level fields defined outside
// TaskGraph, such as the server's `webhook`, come in through `JobField`.
//
// Choices where the spec is silent (also described in `openapi.yaml`):
// - `null` is a value like any other: where a field has a type (a string, an object, …), `null` is
//   the wrong type and is reported, so the document and openapi.yaml agree exactly. Where any JSON
//   is allowed (`input`, `params.value`, …), `null` is that value.
// - Numbers written as `2.0` count as the integer 2.
// - Label names are 1…63 characters of `[A-Za-z0-9_.-]` (so `key:value` filters stay unambiguous),
//   values at most 200 characters, at most 64 labels.
// - A job's `timeoutMs` is capped at 31 days, a task's at 24 hours.
// - An id that names a generated id (e.g. an explicit `"root"` while the root node has none) is a
//   duplicate.
// - Template values (`params`, `input`, `items`) nested deeper than 256 levels are refused (the
//   parser's own limit), so no hand-built value can make the decoder's checks recurse without bound.
//
// Performance: the decoder runs on every submission. It walks each node object once, builds a
// node's JSON pointer and (when it has no id) its generated id by one concatenation each, and
// renders every other pointer only when a problem is reported. Recursion follows the graph's
// nesting and stops (with a problem) below `GraphLimits.maxDepth`, so a hostile document cannot
// exhaust the stack.

/// Size limits for job graphs (SPEC §1.4).
public struct GraphLimits: Sendable, Equatable {
    /// The most nodes a job may have: static ones here; map instances and dynamic graphs count too,
    /// which the engine enforces at run time.
    public var maxNodes: Int = 10_000
    /// The deepest nesting of the graph (a lone task has depth 1). It also bounds the decoder's
    /// recursion (under 1 KB of stack per level in release builds), so keep it in the hundreds.
    public var maxDepth: Int = 100

    /// Limits with the given values (defaults: SPEC §1.4).
    public init(maxNodes: Int = 10_000, maxDepth: Int = 100) {
        self.maxNodes = maxNodes
        self.maxDepth = maxDepth
    }
}

/// Decodes and validates submitted jobs and dynamic graphs (SPEC §1), reporting every problem.
public struct JobDecoder: Sendable {
    /// The actions `task` nodes may name.
    public let actions: ActionRegistry
    /// The configured in-process executor names; `immediate` is always accepted too.
    public let executors: Set<String>
    /// The external executors (SPEC §6): their tasks name worker actions, not registered ones.
    public let externalExecutors: Set<String>
    /// The node and depth limits.
    public let limits: GraphLimits
    /// The top-level job fields defined outside TaskGraph (the server's `webhook`), decoded in order.
    public let fields: [any JobField]
    /// The names of every top-level job field, SPEC §1's and `fields`', for unknown-field messages.
    private let knownJobFields: [String]

    /// The most problems reported; the rest are summed up in one final problem.
    static let maxProblems = 100
    /// The deepest a `params`, `input` or `items` value may be nested.
    static let maxValueDepth = 256
    /// The longest job timeout: 31 days.
    static let maxJobTimeoutMs = 2_678_400_000
    /// The longest task timeout: 24 hours.
    static let maxTaskTimeoutMs = 86_400_000
    /// The range of a worker task's `heartbeatTimeoutMs` (1 s to 1 hour).
    public static let heartbeatTimeoutRange = 1000...3_600_000
    /// The default `heartbeatTimeoutMs`: one minute.
    public static let defaultHeartbeatTimeoutMs = 60_000

    /// Whether `name` may name a worker action: 1…100 characters of `[A-Za-z0-9_.:-]`.
    public static func isWorkerActionName(_ name: some StringProtocol) -> Bool {
        let utf8 = name.utf8
        guard !utf8.isEmpty, utf8.count <= 100 else { return false }
        return utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || (byte.lowercasedASCII >= UInt8(ascii: "a") && byte.lowercasedASCII <= UInt8(ascii: "z"))
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
                || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "-")
        }
    }

    /// The largest integer openapi.yaml allows where it sets no smaller bound (2^53 - 1, exact in JSON).
    static let maxSafeInteger = 9_007_199_254_740_991

    /// A decoder for the given actions, executors and limits.
    ///
    /// - Parameter fields: extra top-level job fields, each decoded by its `JobField` after the job's
    ///   `labels` and before its `graph`. Their names must differ from SPEC §1's fields and from each
    ///   other, and each field type may be given once (values are kept by type).
    public init(
        actions: ActionRegistry,
        executors: Set<String>,
        externalExecutors: Set<String> = [],
        limits: GraphLimits = .init(),
        fields: [any JobField] = []
    ) {
        let names = fields.map(\.name)
        precondition(
            Set(names).count == names.count && Set(names).isDisjoint(with: DecodeState.jobFields),
            "JobDecoder: extra job fields need names of their own, got \(names)"
        )
        precondition(
            Set(fields.map { ObjectIdentifier(type(of: $0)) }).count == fields.count,
            "JobDecoder: each JobField type may be given once"
        )
        self.actions = actions
        self.executors = executors
        self.externalExecutors = externalExecutors
        self.limits = limits
        self.fields = fields
        self.knownJobFields = DecodeState.jobFields + names
    }

    /// Decodes and validates a whole job document (SPEC §1).
    ///
    /// - Throws: a `ValidationError` with every problem found (at most 100, then a summary), each at
    ///   the JSON pointer of the offending value.
    public func decodeJob(_ json: JSONValue) throws(ValidationError) -> JobSpec {
        guard case .object(let object) = json else {
            throw ValidationError([ValidationProblem(pointer: "", message: "must be an object")])
        }
        var state = DecodeState(
            decoder: self,
            idPrefix: "",
            reservedIDs: [],
            lenientReferences: false,
            rootPointer: "/graph"
        )
        var nameValue: JSONValue?
        var input: JSONValue = .null
        var graphValue: JSONValue?
        var timeoutValue: JSONValue?
        var labelsValue: JSONValue?
        var runAtValue: JSONValue?
        var delayValue: JSONValue?
        var priorityValue: JSONValue?
        var concurrencyValue: JSONValue?
        var definitionValue: JSONValue?
        var unknown = false
        for member in object.members {
            switch member.key {
            case "name": nameValue = member.value
            case "input": input = member.value
            case "graph": graphValue = member.value
            case "timeoutMs": timeoutValue = member.value
            case "labels": labelsValue = member.value
            case "runAt": runAtValue = member.value
            case "delayMs": delayValue = member.value
            case "priority": priorityValue = member.value
            case "concurrency": concurrencyValue = member.value
            case "definition": definitionValue = member.value
            default: if !self.fields.contains(where: { $0.name == member.key }) { unknown = true }
            }
        }
        if unknown {
            let known = self.knownJobFields
            state.reportUnknownFields(object, at: "", known: known, isKnown: { known.contains($0) })
        }
        var name: String?
        switch nameValue {
        case nil: break
        case .string(let text)?:
            name = text
            if !DecodeState.fits(text, 200) { state.report("", "name", "must be at most 200 characters") }
        default: state.report("", "name", "must be a string")
        }
        var timeoutMs: Int?
        if let value = timeoutValue {
            timeoutMs = state.integer(
                value,
                "",
                "timeoutMs",
                min: 1,
                max: JobDecoder.maxJobTimeoutMs,
                note: " (31 days)"
            )
        }
        var labels: [String: String] = [:]
        if let value = labelsValue { labels = state.decodeLabels(value) }
        let start = Self.decodeStart(runAt: runAtValue, delayMs: delayValue, state: &state)
        var priority = JobSpec.defaultPriority
        if let value = priorityValue, !value.isNull {
            priority = state.integer(value, "", "priority", min: 0, max: 9, note: " (9 starts first)") ?? priority
        }
        var concurrency: ConcurrencySpec?
        if let value = concurrencyValue, !value.isNull {
            concurrency = state.decodeConcurrency(value, at: "/concurrency")
        }
        // The object form is what the server writes into the document of a job started by a
        // definition's name (it resolves the name first); a client's own would be refused there.
        var definition: DefinitionRef?
        if let value = definitionValue, !value.isNull {
            definition = DefinitionRef(json: value)
            if definition == nil {
                state.report(
                    "",
                    "definition",
                    value.stringValue != nil
                        ? "names a definition: only POST /v1/jobs and /v1/jobs/batch start one"
                        : "must be {\"name\", \"version\"}"
                )
            }
        }
        var fields = JobFieldValues()
        for field in self.fields {
            if let value = object[field.name] { Self.decode(field, value, into: &fields, state: &state) }
        }

        var graph: Node?
        if let value = graphValue, !value.isNull {
            graph = state.decodeNode(value, pointer: "/graph", pathBase: nil, index: -1, depth: 1)
        } else {
            state.report("", "graph", "required")
        }
        state.checkReferences()
        if state.nodeCount > self.limits.maxNodes {
            state.insertFirst(
                ValidationProblem(
                    pointer: "/graph",
                    message: "the graph has \(state.nodeCount) nodes; the limit is \(self.limits.maxNodes)"
                )
            )
        }
        if let error = state.error(summaryPointer: "") { throw error }
        guard let graph else { throw ValidationError([ValidationProblem(pointer: "/graph", message: "invalid")]) }
        return JobSpec(
            name: name,
            input: input,
            graph: graph,
            timeoutMs: timeoutMs,
            labels: labels,
            start: start,
            fields: fields,
            nodeCount: state.nodeCount,
            depth: state.maxDepthSeen,
            priority: priority,
            concurrency: concurrency,
            definition: definition
        )
    }

    /// The latest delayed start: `delayMs` up to ten years (365-day years), and `runAt` is any
    /// RFC 3339 time (one in the past starts at once).
    public static let maxDelayMs = 10 * 365 * 86_400_000

    /// A job's delayed start (SPEC §8): `runAt` (RFC 3339) or `delayMs`, not both; `null` is absent.
    private static func decodeStart(runAt: JSONValue?, delayMs: JSONValue?, state: inout DecodeState) -> JobStart? {
        let runAt: JSONValue? = runAt?.isNull == false ? runAt : nil
        let delayMs: JSONValue? = delayMs?.isNull == false ? delayMs : nil
        if runAt != nil, delayMs != nil {
            state.report("", "delayMs", "give runAt or delayMs, not both")
            return nil
        }
        if let runAt {
            guard case .string(let text) = runAt, let time = Timestamp(rfc3339: text) else {
                state.report("", "runAt", "must be an RFC 3339 date-time with an offset, such as 2026-12-24T18:00:00Z")
                return nil
            }
            return .at(time)
        }
        if let delayMs {
            let delay = state.integer(delayMs, "", "delayMs", min: 0, max: Self.maxDelayMs, note: " (ten years)")
            return delay.map(JobStart.after)
        }
        return nil
    }

    /// Decodes the extra job field `field` from `value` into `values`, reporting its problems to `state`.
    private static func decode<Field: JobField>(
        _ field: Field,
        _ value: JSONValue,
        into values: inout JobFieldValues,
        state: inout DecodeState
    ) {
        let pointer = "/" + JSONValue.escapePointerToken(field.name)
        do {
            values[Field.self] = try field.decode(value, at: pointer)
        } catch {
            for problem in error.problems { state.report(pointer: problem.pointer, problem.message) }
            state.countUnreported(error.unreported)
            if error.problems.isEmpty && error.unreported == 0 { state.report(pointer: pointer, "invalid") }
        }
    }

    /// Decodes and validates a standalone graph (used for `dynamic` nodes at run time).
    ///
    /// - Parameters:
    ///   - json: the node object.
    ///   - idPrefix: prepended to every id, explicit and generated (`"dyn/"` gives `dyn/step`, `dyn/root.steps.0`).
    ///   - pointer: the pointer of `json`, the base of every problem's pointer.
    ///   - maxNodes: the remaining node budget of the job.
    ///   - reservedIDs: ids already used in the job; a spawned node may not take one. Template
    ///     references to them are accepted, as are references to the spawned graph's own ids with
    ///     or without the prefix (`tasks.step` or `tasks["dyn/step"]`: inside a spawned graph, the
    ///     engine looks a task id up with the prefix first).
    /// - Throws: a `ValidationError` with every problem found.
    public func decodeGraph(
        _ json: JSONValue,
        idPrefix: String,
        pointer: String,
        maxNodes: Int,
        reservedIDs: Set<String>
    ) throws(ValidationError) -> Node {
        var state = DecodeState(
            decoder: self,
            idPrefix: idPrefix,
            reservedIDs: reservedIDs,
            lenientReferences: true,
            rootPointer: pointer
        )
        let node = state.decodeNode(json, pointer: pointer, pathBase: nil, index: -1, depth: 1)
        state.checkReferences()
        if state.nodeCount > maxNodes {
            state.insertFirst(
                ValidationProblem(
                    pointer: pointer,
                    message:
                        "the graph has \(state.nodeCount) nodes; only \(max(maxNodes, 0)) remain within the job's node limit"
                )
            )
        }
        if let error = state.error(summaryPointer: pointer) { throw error }
        guard let node else { throw ValidationError([ValidationProblem(pointer: pointer, message: "invalid")]) }
        return node
    }
}

// MARK: - Retry rules

extension JobDecoder {
    /// What a `retry` object may hold where it appears: a task's (SPEC §1.2), or a variant of it
    /// such as a webhook's, which allows a shorter first delay and no `on`.
    package struct RetryRules: Sendable {
        /// The policy of the fields the object leaves out.
        package var defaults: RetrySpec
        /// The largest `delayMs` (the first delay) accepted.
        package var delayMsLimit: Int
        /// Whether `on`, the error codes to retry on, is a field.
        package var allowsErrorCodes: Bool

        package init(defaults: RetrySpec, delayMsLimit: Int, allowsErrorCodes: Bool) {
            self.defaults = defaults
            self.delayMsLimit = delayMsLimit
            self.allowsErrorCodes = allowsErrorCodes
        }

        /// A task's `retry`: SPEC §1.2's defaults, a first delay of at most 24 hours, and `on`.
        package static let task = RetryRules(defaults: RetrySpec(), delayMsLimit: 86_400_000, allowsErrorCodes: true)

        private static let fieldsWithErrorCodes = ["maxAttempts", "delayMs", "backoff", "maxDelayMs", "jitter", "on"]
        private static let fieldsWithoutErrorCodes = ["maxAttempts", "delayMs", "backoff", "maxDelayMs", "jitter"]

        /// The fields the object may have, in the order of SPEC §1.2 (for "did you mean" suggestions).
        package var fields: [String] {
            self.allowsErrorCodes ? Self.fieldsWithErrorCodes : Self.fieldsWithoutErrorCodes
        }
    }
}
