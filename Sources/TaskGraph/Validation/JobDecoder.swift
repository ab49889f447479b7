// Decoding and validation of submitted jobs (SPEC §1, §3.9).
//
// `JobDecoder` turns a `JSONValue` into a `JobSpec` (or, for `dynamic` nodes at run time, a `Node`)
// and reports every problem it finds, each with the RFC 6901 pointer of the offending value.
//
// Choices where the spec is silent (also described in `openapi.yaml`):
// - `null` is a value like any other: where a field has a type (a string, an object, …), `null` is
//   the wrong type and is reported, so the document and openapi.yaml agree exactly. Where any JSON
//   is allowed (`input`, `params.value`, …), `null` is that value.
// - Numbers written as `2.0` count as the integer 2.
// - Label names are 1…63 characters of `[A-Za-z0-9_.-]` (so `key:value` filters stay unambiguous),
//   values at most 200 characters, at most 64 labels.
// - A webhook `secret` starting with `whsec_` must continue with standard base64 (padding optional)
//   that decodes to 1…64 bytes (the Standard Webhooks form); any other non-empty string of at most
//   256 characters is used as raw key bytes. Webhook `events` entries are event types of §3.4 or
//   patterns ending in `*` that match at least one of them (`job.*`, `task.*`, `*`). The webhook
//   `retry` object also accepts `jitter` (a boolean, default true).
// - A job's `timeoutMs` is capped at 31 days, a task's at 24 hours.
// - An id that names a generated id (e.g. an explicit `"root"` while the root node has none) is a
//   duplicate.
// - Template values (`params`, `input`, `items`) nested deeper than 256 levels are refused (the
//   parser's own limit), so no hand-built value can make the checks below recurse without bound.
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
    /// The configured executor names; `immediate` is always accepted too.
    public let executors: Set<String>
    /// The node and depth limits.
    public let limits: GraphLimits

    /// The most problems reported; the rest are summed up in one final problem.
    static let maxProblems = 100
    /// The deepest a `params`, `input` or `items` value may be nested.
    static let maxValueDepth = 256
    /// The longest job timeout: 31 days.
    static let maxJobTimeoutMs = 2_678_400_000
    /// The longest task timeout: 24 hours.
    static let maxTaskTimeoutMs = 86_400_000
    /// The largest integer openapi.yaml allows where it sets no smaller bound (2^53 - 1, exact in JSON).
    static let maxSafeInteger = 9_007_199_254_740_991

    /// A decoder for the given actions, executors and limits.
    public init(actions: ActionRegistry, executors: Set<String>, limits: GraphLimits = .init()) {
        self.actions = actions
        self.executors = executors
        self.limits = limits
    }

    /// Decodes and validates a whole job document (SPEC §1).
    ///
    /// - Throws: a `ValidationError` with every problem found (at most 100, then a summary), each at
    ///   the JSON pointer of the offending value.
    public func decodeJob(_ json: JSONValue) throws(ValidationError) -> JobSpec {
        guard case .object(let object) = json else {
            throw ValidationError([ValidationProblem(pointer: "", message: "must be an object")])
        }
        var state = DecodeState(decoder: self, idPrefix: "", reservedIDs: [], lenientReferences: false, rootPointer: "/graph")
        var nameValue: JSONValue?
        var input: JSONValue = .null
        var graphValue: JSONValue?
        var timeoutValue: JSONValue?
        var labelsValue: JSONValue?
        var webhookValue: JSONValue?
        var unknown = false
        for member in object.members {
            switch member.key {
            case "name": nameValue = member.value
            case "input": input = member.value
            case "graph": graphValue = member.value
            case "timeoutMs": timeoutValue = member.value
            case "labels": labelsValue = member.value
            case "webhook": webhookValue = member.value
            default: unknown = true
            }
        }
        if unknown {
            state.reportUnknownFields(object, at: "", known: DecodeState.jobFields, isKnown: { DecodeState.jobFields.contains($0) })
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
                value, "", "timeoutMs", min: 1, max: JobDecoder.maxJobTimeoutMs, note: " (31 days)")
        }
        var labels: [String: String] = [:]
        if let value = labelsValue { labels = state.decodeLabels(value) }
        var webhook: WebhookSpec?
        if let value = webhookValue { webhook = state.decodeWebhook(value, at: "/webhook") }

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
                    pointer: "/graph", message: "the graph has \(state.nodeCount) nodes; the limit is \(self.limits.maxNodes)"))
        }
        if let error = state.error(summaryPointer: "") { throw error }
        guard let graph else { throw ValidationError([ValidationProblem(pointer: "/graph", message: "invalid")]) }
        return JobSpec(
            name: name, input: input, graph: graph, timeoutMs: timeoutMs, labels: labels, webhook: webhook,
            nodeCount: state.nodeCount, depth: state.maxDepthSeen)
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
        _ json: JSONValue, idPrefix: String, pointer: String, maxNodes: Int, reservedIDs: Set<String>
    ) throws(ValidationError) -> Node {
        var state = DecodeState(
            decoder: self, idPrefix: idPrefix, reservedIDs: reservedIDs, lenientReferences: true, rootPointer: pointer)
        let node = state.decodeNode(json, pointer: pointer, pathBase: nil, index: -1, depth: 1)
        state.checkReferences()
        if state.nodeCount > maxNodes {
            state.insertFirst(
                ValidationProblem(
                    pointer: pointer,
                    message: "the graph has \(state.nodeCount) nodes; only \(max(maxNodes, 0)) remain within the job's node limit"))
        }
        if let error = state.error(summaryPointer: pointer) { throw error }
        guard let node else { throw ValidationError([ValidationProblem(pointer: pointer, message: "invalid")]) }
        return node
    }
}

// MARK: - Decoding state

/// The node types of SPEC §1.1, with the fields each accepts.
private enum NodeType: CaseIterable {
    case task, series, parallel, continuation, map, dynamic

    init?(_ name: String) {
        switch name {
        case "task": self = .task
        case "series": self = .series
        case "parallel": self = .parallel
        case "continuation": self = .continuation
        case "map": self = .map
        case "dynamic": self = .dynamic
        default: return nil
        }
    }

    static let expected = "task, series, parallel, continuation, map, dynamic"

    /// The type-specific fields, in the order they are listed in SPEC §1.1.
    var fields: [String] {
        switch self {
        case .task: return ["action", "params", "executor", "retry", "timeoutMs"]
        case .series: return ["steps"]
        case .parallel: return ["branches", "mode", "maxConcurrency", "failFast"]
        case .continuation: return ["antecedent", "on", "then"]
        case .map: return ["items", "template", "mode", "maxConcurrency"]
        case .dynamic: return ["source"]
        }
    }

    /// The bit mask of `NodeField`s this type accepts (`type`, `id`, `input` included).
    var allowed: UInt32 {
        let common = NodeField.type.bit | NodeField.id.bit | NodeField.input.bit
        switch self {
        case .task:
            return common | NodeField.action.bit | NodeField.params.bit | NodeField.executor.bit | NodeField.retry.bit
                | NodeField.timeoutMs.bit
        case .series: return common | NodeField.steps.bit
        case .parallel:
            return common | NodeField.branches.bit | NodeField.mode.bit | NodeField.maxConcurrency.bit | NodeField.failFast.bit
        case .continuation: return common | NodeField.antecedent.bit | NodeField.on.bit | NodeField.then.bit
        case .map: return common | NodeField.items.bit | NodeField.template.bit | NodeField.mode.bit | NodeField.maxConcurrency.bit
        case .dynamic: return common | NodeField.source.bit
        }
    }
}

/// Every field any node type has.
private enum NodeField: UInt32 {
    case type, id, input, action, params, executor, retry, timeoutMs, steps, branches, mode, maxConcurrency,
        failFast, antecedent, on, then, items, template, source

    var bit: UInt32 { 1 << self.rawValue }

    /// The field named `key`. Dispatches on the length first: this runs for every member of every node.
    init?(key: String) {
        let field: NodeField?
        switch key.utf8.count {
        case 2: field = key == "id" ? .id : key == "on" ? .on : nil
        case 4: field = key == "type" ? .type : key == "mode" ? .mode : key == "then" ? .then : nil
        case 5:
            field = key == "input" ? .input : key == "steps" ? .steps : key == "retry" ? .retry : key == "items" ? .items : nil
        case 6: field = key == "action" ? .action : key == "params" ? .params : key == "source" ? .source : nil
        case 8:
            field = key == "branches" ? .branches : key == "executor" ? .executor : key == "template" ? .template
                : key == "failFast" ? .failFast : nil
        case 9: field = key == "timeoutMs" ? .timeoutMs : nil
        case 10: field = key == "antecedent" ? .antecedent : nil
        case 14: field = key == "maxConcurrency" ? .maxConcurrency : nil
        default: field = nil
        }
        guard let field else { return nil }
        self = field
    }
}

/// Where a node object's fields are: for each `NodeField`, the index of its member (absent and
/// `null` ones are not recorded, except `input: null`, which is a value). Indices rather than values,
/// so reading the fields retains nothing until a value is used.
private struct NodeFields {
    let members: [JSONObject.Member]
    /// Per `NodeField` raw value: the member's index + 1, or 0.
    private var slots = SIMD32<Int32>.zero
    /// The `NodeField` bits of every member present, `null` ones included.
    private(set) var present: UInt32 = 0
    /// Whether some member is no node field at all.
    private(set) var unrecognized = false

    init(_ object: JSONObject) {
        self.members = object.members
        for index in self.members.indices {
            guard let field = NodeField(key: self.members[index].key) else {
                self.unrecognized = true
                continue
            }
            self.present |= field.bit
            self.slots[Int(field.rawValue)] = Int32(truncatingIfNeeded: index + 1)
        }
    }

    /// The field's value; `nil` when absent or `null` (but `input: null` is `.null`).
    subscript(field: NodeField) -> JSONValue? {
        let slot = Int(self.slots[Int(field.rawValue)])
        // (Not a `?:` with `nil`: JSONValue is ExpressibleByNilLiteral, so that `nil` would be `.null`.)
        guard slot != 0 else { return nil }
        return self.members[slot - 1].value
    }
}

/// A template value that refers to tasks, checked once every id is known.
private struct Reference {
    /// The pointer of the templated value (`/graph/steps/1/params`).
    var pointer: String
    var value: JSONValue
    var template: JSONTemplate
}

/// The mutable state of one decoding run.
private struct DecodeState {
    static let jobFields = ["name", "input", "graph", "timeoutMs", "labels", "webhook"]
    static let webhookFields = ["url", "secret", "events", "headers", "retry"]
    static let taskRetryFields = ["maxAttempts", "delayMs", "backoff", "maxDelayMs", "jitter", "on"]
    static let webhookRetryFields = ["maxAttempts", "delayMs", "backoff", "maxDelayMs", "jitter"]
    static let eventTypes = [
        "job.created", "job.started", "job.succeeded", "job.failed", "job.cancelled",
        "task.started", "task.succeeded", "task.failed", "task.cancelled", "task.skipped", "task.retrying",
    ]
    static let reservedHeaders: Set<String> = [
        "webhook-id", "webhook-timestamp", "webhook-signature", "content-type", "content-length", "host",
    ]
    static let defaultItems: JSONTemplate = {
        do { return try JSONTemplate(.string("${input}")) } catch { fatalError("\(error)") }
    }()

    let decoder: JobDecoder
    let idPrefix: String
    let reservedIDs: Set<String>
    /// Whether references may name ids the graph does not show (a dynamic graph's job ids).
    let lenientReferences: Bool

    var problems: [ValidationProblem] = []
    /// Every problem found, also those beyond `JobDecoder.maxProblems`.
    var problemCount = 0
    var nodeCount = 0
    var maxDepthSeen = 0
    /// Explicit ids (prefixed), with the pointer of their node (for duplicate messages).
    var explicitIDs: [String: String] = [:]
    /// The root's generated id (`root`, prefixed) when it has no explicit one: the only generated id
    /// without a '.', so the only one an explicit id can take.
    var rootGeneratedID: String?
    /// Generated ids (prefixed), for template references.
    var generatedIDs: [String] = []
    var dynamicIDs: Set<String> = []
    var hasMap = false
    var references: [Reference] = []
    var lastAction: (name: String, action: any Action)?
    /// The pointer of the graph's root node.
    let rootPointer: String

    init(decoder: JobDecoder, idPrefix: String, reservedIDs: Set<String>, lenientReferences: Bool, rootPointer: String) {
        self.decoder = decoder
        self.rootPointer = rootPointer
        self.idPrefix = idPrefix
        self.reservedIDs = reservedIDs
        self.lenientReferences = lenientReferences
    }

    // MARK: Problems

    /// Records a problem; pointer and message are only rendered while under the cap.
    mutating func report(pointer: @autoclosure () -> String, _ message: @autoclosure () -> String) {
        self.problemCount += 1
        if self.problems.count < JobDecoder.maxProblems {
            self.problems.append(ValidationProblem(pointer: pointer(), message: message()))
        }
    }

    /// Records a problem at `base/field` (`field` needs no escaping).
    mutating func report(_ base: String, _ field: String, _ message: @autoclosure () -> String) {
        self.report(pointer: base + "/" + field, message())
    }

    /// Puts `problem` first (the node limit, found last, matters most).
    mutating func insertFirst(_ problem: ValidationProblem) {
        self.problemCount += 1
        self.problems.insert(problem, at: 0)
    }

    /// The error to throw, or `nil` when nothing was found.
    func error(summaryPointer: String) -> ValidationError? {
        guard self.problemCount > 0 else { return nil }
        var problems = self.problems
        let more = self.problemCount - problems.count
        if more > 0 {
            problems.append(
                ValidationProblem(pointer: summaryPointer, message: "… and \(more) more problem\(more == 1 ? "" : "s")"))
        }
        return ValidationError(problems)
    }

    /// Reports the members of `object` that `isKnown` rejects, in document order, suggesting the
    /// nearest of `known`.
    mutating func reportUnknownFields(_ object: JSONObject, at base: String, known: [String], isKnown: (String) -> Bool) {
        for member in object.members where !isKnown(member.key) {
            self.report(
                pointer: base + "/" + JSONValue.escapePointerToken(member.key),
                DecodeState.unknownFieldMessage(member.key, known: known))
        }
    }

    static func unknownFieldMessage(_ key: String, known: [String]) -> String {
        var message = "unknown field " + TemplateExpression.quoted(key)
        if let suggestion = FieldSuggestion.suggestion(for: key, among: known) {
            message += "; did you mean " + TemplateExpression.quoted(suggestion) + "?"
        }
        return message
    }

    // MARK: Scalars

    /// Whether `text` has at most `limit` characters (counted only when its UTF-8 form is longer).
    static func fits(_ text: String, _ limit: Int) -> Bool {
        text.utf8.count <= limit || text.count <= limit
    }

    /// The integer at `base/field` within `min…max`, or `nil` after reporting a problem.
    mutating func integer(_ value: JSONValue, _ base: String, _ field: String, min: Int, max: Int? = nil, note: String = "") -> Int? {
        if let int = value.intValue, int >= min, max.map({ int <= $0 }) ?? true { return int }
        self.report(base, field, DecodeState.integerMessage(min: min, max: max) + note)
        return nil
    }

    static func integerMessage(min: Int, max: Int?) -> String {
        if let max { return "must be an integer from \(min) to \(max)" }
        if min == 1 { return "must be a positive integer" }
        if min == 0 { return "must be a non-negative integer" }
        return "must be an integer of at least \(min)"
    }

    /// The boolean at `base/field`, or `nil` after reporting a problem.
    mutating func boolean(_ value: JSONValue, _ base: String, _ field: String) -> Bool? {
        if case .bool(let bool) = value { return bool }
        self.report(base, field, "must be a boolean")
        return nil
    }

    /// The string at `base/field` if it is one of `options` (listed in the message), else `nil`.
    mutating func choice<T>(_ value: JSONValue, _ base: String, _ field: String, _ parse: (String) -> T?, _ options: String) -> T? {
        if case .string(let text) = value, let parsed = parse(text) { return parsed }
        self.report(base, field, "must be one of " + options)
        return nil
    }

    // MARK: Templates

    /// Whether `value` nests containers deeper than `remaining` levels.
    static func exceedsDepth(_ value: JSONValue, _ remaining: Int) -> Bool {
        switch value {
        case .array(let items):
            if remaining <= 0 { return true }
            for item in items where DecodeState.exceedsDepth(item, remaining - 1) { return true }
            return false
        case .object(let object):
            if remaining <= 0 { return true }
            for member in object.members where DecodeState.exceedsDepth(member.value, remaining - 1) { return true }
            return false
        default:
            return false
        }
    }

    /// Compiles the templated value at `pointer`, reporting every syntax problem; notes its task references.
    mutating func compileTemplate(_ value: JSONValue, at pointer: String) -> JSONTemplate? {
        switch value {
        case .array, .object:
            if DecodeState.exceedsDepth(value, JobDecoder.maxValueDepth) {
                self.report(pointer: pointer, "must not be nested deeper than \(JobDecoder.maxValueDepth) levels")
                return nil
            }
        default:
            break
        }
        let template: JSONTemplate
        do {
            template = try JSONTemplate(value)
        } catch {
            let problems = value.templateSyntaxProblems()
            for problem in problems {
                self.report(pointer: pointer + problem.pointer, problem.message)
            }
            if problems.isEmpty { self.report(pointer: pointer, error.message) }
            return nil
        }
        if !template.isConstant, template.expressions.contains(where: { $0.referencedTaskID != nil }) {
            self.references.append(Reference(pointer: pointer, value: value, template: template))
        }
        return template
    }

    /// Reports every `${tasks.X…}` whose X names no node.
    mutating func checkReferences() {
        guard !self.references.isEmpty else { return }
        var generated: Set<String>?
        let references = self.references
        for reference in references {
            var allKnown = true
            for expression in reference.template.expressions {
                if let id = expression.referencedTaskID, !self.isKnownTask(id, generated: &generated) {
                    allKnown = false
                    break
                }
            }
            if allKnown { continue }
            // Rare: find each unknown reference's string for its pointer.
            for found in reference.value.templateExpressions() {
                if let id = found.expression.referencedTaskID, !self.isKnownTask(id, generated: &generated) {
                    self.report(
                        pointer: reference.pointer + found.pointer,
                        "refers to unknown task " + TemplateExpression.quoted(id))
                }
            }
        }
    }

    /// Whether a template may refer to `id` (see SPEC §1.1 for map instance and dynamic ids).
    func isKnownTask(_ id: String, generated: inout Set<String>?) -> Bool {
        if self.isStaticID(id, generated: &generated) { return true }
        if self.hasMap || self.lenientReferences {
            let stripped = DecodeState.strippingInstanceSuffixes(id)
            if stripped != id, self.isStaticID(stripped, generated: &generated) { return true }
        }
        if !self.dynamicIDs.isEmpty || self.lenientReferences, let slash = id.utf8.firstIndex(of: UInt8(ascii: "/")) {
            let head = DecodeState.strippingInstanceSuffixes(String(decoding: id.utf8[..<slash], as: UTF8.self))
            for candidate in [head, self.idPrefix + head] {
                if self.dynamicIDs.contains(candidate) || self.reservedIDs.contains(candidate) { return true }
            }
        }
        return false
    }

    /// Whether `id` (as written, or with the prefix) is an explicit, generated or reserved id.
    func isStaticID(_ id: String, generated: inout Set<String>?) -> Bool {
        if self.explicitIDs[id] != nil || self.reservedIDs.contains(id) { return true }
        if generated == nil { generated = Set(self.generatedIDs) }
        if generated!.contains(id) { return true }
        if !self.idPrefix.isEmpty {
            let prefixed = self.idPrefix + id
            if self.explicitIDs[prefixed] != nil || generated!.contains(prefixed) { return true }
        }
        return false
    }

    /// `id` without trailing `[digits]` suffixes (`x[3][1]` → `x`).
    static func strippingInstanceSuffixes(_ id: String) -> String {
        guard id.utf8.last == UInt8(ascii: "]") else { return id }
        var bytes = Array(id.utf8)
        while bytes.last == UInt8(ascii: "]") {
            var index = bytes.count - 2
            while index >= 0, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index -= 1 }
            guard index >= 0, index < bytes.count - 2, bytes[index] == UInt8(ascii: "[") else { break }
            bytes.removeSubrange(index...)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: Nodes

    /// Whether `id` matches `^[A-Za-z0-9_-]{1,64}$`.
    static func isValidID(_ id: String) -> Bool {
        let utf8 = id.utf8
        guard !utf8.isEmpty, utf8.count <= 64 else { return false }
        return utf8.allSatisfy(TemplateSyntax.isNameByte)
    }

    /// `base` followed by the decimal digits of `index` (nothing when negative), built in one allocation:
    /// this makes the pointer and the generated id of every node.
    static func join(_ base: String, _ index: Int) -> String {
        guard index >= 0 else { return base }
        var digits = 1
        var rest = index / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        var base = base
        let count = base.utf8.count
        return base.withUTF8 { source in
            String(unsafeUninitializedCapacity: count + digits) { buffer in
                _ = buffer.initialize(fromContentsOf: source)
                var value = index
                var position = count + digits
                repeat {
                    position -= 1
                    buffer[position] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: value % 10)
                    value /= 10
                } while value > 0
                return count + digits
            }
        }
    }

    /// Decodes the node at `pointer`, whose path (its generated id without the prefix) is
    /// `pathBase` followed by `index` (e.g. `root.steps.` and 2; `root.then` and -1; `root` when
    /// `pathBase` is nil). Returns `nil` when it or a descendant has a problem (always reported).
    mutating func decodeNode(_ value: JSONValue, pointer: String, pathBase: String?, index: Int, depth: Int) -> Node? {
        let maxDepth = self.decoder.limits.maxDepth
        if depth > maxDepth {
            self.report(pointer: pointer, "nesting deeper than \(maxDepth) levels")
            return nil
        }
        guard case .object(let object) = value else {
            self.report(pointer: pointer, "must be an object")
            return nil
        }
        self.nodeCount += 1
        if depth > self.maxDepthSeen { self.maxDepthSeen = depth }
        let problemsBefore = self.problemCount
        let fields = NodeFields(object)

        // The node's path from the root, for its generated id and its children's.
        var pathStorage: String?
        func path() -> String {
            if let pathStorage { return pathStorage }
            let made = pathBase.map { DecodeState.join($0, index) } ?? "root"
            pathStorage = made
            return made
        }

        var type: NodeType?
        switch fields[.type] {
        case nil, .null?:
            self.report(pointer, "type", "required")
        case .string(let name)?:
            type = NodeType(name)
            if type == nil {
                self.report(
                    pointer, "type", "unknown type " + TemplateExpression.quoted(name) + "; expected one of " + NodeType.expected)
            }
        default:
            self.report(pointer, "type", "must be a string")
        }
        if let type, fields.unrecognized || fields.present & ~type.allowed != 0 {
            let allowed = type.allowed
            self.reportUnknownFields(object, at: pointer, known: ["type", "id", "input"] + type.fields) { key in
                guard let field = NodeField(key: key) else { return false }
                return allowed & field.bit != 0
            }
        }

        // id
        var id: String?
        if let idValue = fields[.id] {
            if case .string(let text) = idValue, DecodeState.isValidID(text) {
                let full = self.idPrefix.isEmpty ? text : self.idPrefix + text
                if let first = self.explicitIDs[full] {
                    self.report(pointer, "id", "duplicate id \(TemplateExpression.quoted(text)) (first used at \(first))")
                } else if full == self.rootGeneratedID {
                    let rootPointer = self.rootPointer
                    self.report(
                        pointer, "id",
                        "duplicate id \(TemplateExpression.quoted(text)) (the generated id of the root node at \(rootPointer), which has no id)")
                } else {
                    self.explicitIDs[full] = pointer
                    if self.reservedIDs.contains(full) {
                        self.report(pointer, "id", "id \(TemplateExpression.quoted(full)) is already used in the job")
                    }
                }
                id = full
            } else {
                self.report(pointer, "id", "must be a string of 1 to 64 letters, digits, '_' or '-'")
            }
        }
        if id == nil {
            let generated = self.idPrefix.isEmpty ? path() : self.idPrefix + path()
            if pathBase == nil { self.rootGeneratedID = generated }
            self.generatedIDs.append(generated)
            if !self.reservedIDs.isEmpty, self.reservedIDs.contains(generated) {
                self.report(pointer: pointer, "the generated id \(TemplateExpression.quoted(generated)) is already used in the job")
            }
            id = generated
        }

        var input: JSONTemplate?
        if let inputValue = fields[.input] {
            input = self.compileTemplate(inputValue, at: pointer + "/input")
        }

        guard let type else { return nil }
        let kind: Node.Kind?
        switch type {
        case .task:
            kind = self.decodeTask(fields, at: pointer)
        case .series:
            let steps = self.decodeChildren(fields[.steps], "steps", pointer: pointer, path: path, depth: depth)
            kind = steps.map { .series($0) }
        case .parallel:
            var mode = ParallelSpec.Mode.all
            if let value = fields[.mode] {
                mode = self.choice(value, pointer, "mode", ParallelSpec.Mode.init(rawValue:), "all, any, settled") ?? mode
            }
            var maxConcurrency: Int?
            if let value = fields[.maxConcurrency] { maxConcurrency = self.integer(value, pointer, "maxConcurrency", min: 1, max: JobDecoder.maxSafeInteger) }
            var failFast = false
            if let value = fields[.failFast] { failFast = self.boolean(value, pointer, "failFast") ?? false }
            let branches = self.decodeChildren(fields[.branches], "branches", pointer: pointer, path: path, depth: depth)
            kind = branches.map { .parallel(ParallelSpec(branches: $0, mode: mode, maxConcurrency: maxConcurrency, failFast: failFast)) }
        case .continuation:
            var on = ContinuationSpec.On.success
            if let value = fields[.on] {
                on = self.choice(value, pointer, "on", ContinuationSpec.On.init(rawValue:), "success, failure, cancellation, always") ?? on
            }
            let antecedent = self.decodeChild(fields[.antecedent], "antecedent", pointer: pointer, path: path, depth: depth)
            let then = self.decodeChild(fields[.then], "then", pointer: pointer, path: path, depth: depth)
            if let antecedent, let then {
                kind = .continuation(ContinuationSpec(antecedent: antecedent, on: on, then: then))
            } else {
                kind = nil
            }
        case .map:
            self.hasMap = true
            var items: JSONTemplate? = DecodeState.defaultItems
            if let value = fields[.items] { items = self.decodeItems(value, at: pointer) }
            var mode = MapSpec.Mode.parallel
            if let value = fields[.mode] {
                mode = self.choice(value, pointer, "mode", MapSpec.Mode.init(rawValue:), "parallel, series") ?? mode
            }
            var maxConcurrency: Int?
            if let value = fields[.maxConcurrency] { maxConcurrency = self.integer(value, pointer, "maxConcurrency", min: 1, max: JobDecoder.maxSafeInteger) }
            let template = self.decodeChild(fields[.template], "template", pointer: pointer, path: path, depth: depth)
            if let items, let template {
                kind = .map(MapSpec(items: items, template: template, mode: mode, maxConcurrency: maxConcurrency))
            } else {
                kind = nil
            }
        case .dynamic:
            if let id { self.dynamicIDs.insert(id) }
            let source = self.decodeChild(fields[.source], "source", pointer: pointer, path: path, depth: depth)
            kind = source.map { .dynamic(source: $0) }
        }
        guard let kind, let id, self.problemCount == problemsBefore else { return nil }
        return Node(id: id, pointer: pointer, input: input, kind: kind)
    }

    /// The required child node in `field`.
    mutating func decodeChild(_ value: JSONValue?, _ field: String, pointer: String, path: () -> String, depth: Int) -> Node? {
        guard let value else {
            self.report(pointer, field, "required")
            return nil
        }
        return self.decodeNode(
            value, pointer: pointer + "/" + field, pathBase: path() + "." + field, index: -1, depth: depth + 1)
    }

    /// The required array of child nodes in `field`.
    mutating func decodeChildren(_ value: JSONValue?, _ field: String, pointer: String, path: () -> String, depth: Int) -> [Node]? {
        guard let value else {
            self.report(pointer, field, "required")
            return nil
        }
        guard case .array(let items) = value else {
            self.report(pointer, field, "must be an array of nodes")
            return nil
        }
        var nodes: [Node] = []
        nodes.reserveCapacity(items.count)
        var failed = false
        if items.isEmpty { return nodes }
        let pathBase = path() + "." + field + "."
        let pointerBase = pointer + "/" + field + "/"
        if items.count >= 16, case .object(let first) = items[0], first["id"] != nil {
            // Explicit ids on a large fan-out: grow the id table once.
            self.explicitIDs.reserveCapacity(self.explicitIDs.count + items.count)
        }
        for (index, item) in items.enumerated() {
            let child = self.decodeNode(
                item, pointer: DecodeState.join(pointerBase, index), pathBase: pathBase, index: index, depth: depth + 1)
            if let child, !failed { nodes.append(child) } else { failed = true }
        }
        return failed ? nil : nodes
    }

    /// A `task` node's fields.
    mutating func decodeTask(_ fields: NodeFields, at pointer: String) -> Node.Kind? {
        var action: (any Action)?
        var actionName = ""
        switch fields[.action] {
        case nil:
            self.report(pointer, "action", "required")
        case .string(let name)?:
            actionName = name
            let actions = self.decoder.actions
            // Graphs mostly repeat one action: remember the last lookup.
            if let last = self.lastAction, last.name == name {
                action = last.action
            } else {
                action = actions.lookup(name)
                if let action { self.lastAction = (name, action) }
            }
            if action == nil {
                self.report(
                    pointer, "action",
                    "unknown action \(TemplateExpression.quoted(name)); known: " + actions.names.joined(separator: ", "))
            }
        default:
            self.report(pointer, "action", "must be a string")
        }

        var params: JSONTemplate?
        let paramsValue = fields[.params] ?? .object(JSONObject())
        if case .object = paramsValue {
            let paramsPointer = pointer + "/params"
            params = self.compileTemplate(paramsValue, at: paramsPointer)
            if let action, params != nil || !DecodeState.exceedsDepth(paramsValue, JobDecoder.maxValueDepth) {
                for problem in action.validate(params: paramsValue, at: paramsPointer) {
                    self.report(pointer: problem.pointer, problem.message)
                }
            }
        } else {
            self.report(pointer, "params", "must be an object")
        }

        var executor = "default"
        if let value = fields[.executor] {
            if case .string(let name) = value {
                executor = name
                let executors = self.decoder.executors
                if name != "immediate", !executors.contains(name) {
                    self.report(
                        pointer, "executor",
                        "unknown executor \(TemplateExpression.quoted(name)); configured: "
                            + executors.sorted().joined(separator: ", "))
                }
            } else {
                self.report(pointer, "executor", "must be a string")
            }
        }

        var retry: RetrySpec?
        if let value = fields[.retry] { retry = self.decodeRetry(value, at: pointer + "/retry", forWebhook: false) }

        var timeoutMs: Int?
        if let value = fields[.timeoutMs] {
            timeoutMs = self.integer(value, pointer, "timeoutMs", min: 1, max: JobDecoder.maxTaskTimeoutMs, note: " (24 hours)")
        }
        guard let params, !actionName.isEmpty else { return nil }
        return .task(TaskSpec(action: actionName, params: params, executor: executor, retry: retry, timeoutMs: timeoutMs))
    }

    /// A map's `items`: an array (possibly with templates inside) or a single `${…}` template.
    mutating func decodeItems(_ value: JSONValue, at pointer: String) -> JSONTemplate? {
        let itemsPointer = pointer + "/items"
        switch value {
        case .array:
            return self.compileTemplate(value, at: itemsPointer)
        case .string:
            guard let template = self.compileTemplate(value, at: itemsPointer) else { return nil }
            if case .template(let parsed) = template.node, parsed.isSingleExpression { return template }
        default:
            break
        }
        self.report(pointer: itemsPointer, "must be an array or a template")
        return nil
    }

    /// A task's (or, with `forWebhook`, a webhook's) `retry` object at `pointer`.
    mutating func decodeRetry(_ value: JSONValue, at pointer: String, forWebhook: Bool) -> RetrySpec? {
        guard case .object(let object) = value else {
            self.report(pointer: pointer, "must be an object")
            return nil
        }
        let before = self.problemCount
        var retry = forWebhook ? WebhookSpec(url: "").retry : RetrySpec()
        let known = forWebhook ? DecodeState.webhookRetryFields : DecodeState.taskRetryFields
        var unknown = false
        for member in object.members {
            let value = member.value
            switch member.key {
            case "maxAttempts":
                retry.maxAttempts = self.integer(value, pointer, "maxAttempts", min: 1, max: 100) ?? retry.maxAttempts
            case "delayMs":
                retry.delayMs = self.integer(value, pointer, "delayMs", min: 0, max: forWebhook ? 3_600_000 : 86_400_000) ?? retry.delayMs
            case "backoff":
                if let number = value.doubleValue, number >= 1, number <= 100 {
                    retry.backoff = number
                } else {
                    self.report(pointer, "backoff", "must be a number from 1 to 100")
                }
            case "maxDelayMs":
                retry.maxDelayMs = self.integer(value, pointer, "maxDelayMs", min: 0, max: 86_400_000) ?? retry.maxDelayMs
            case "jitter":
                retry.jitter = self.boolean(value, pointer, "jitter") ?? retry.jitter
            case "on" where !forWebhook:
                guard case .array(let codes) = value else {
                    self.report(pointer, "on", "must be an array of error codes")
                    break
                }
                var on: [String] = []
                on.reserveCapacity(codes.count)
                for (index, code) in codes.enumerated() {
                    if case .string(let text) = code, !text.isEmpty {
                        on.append(text)
                    } else {
                        self.report(pointer: pointer + "/on/" + String(index), "must be a non-empty string")
                    }
                }
                retry.on = on
            default:
                unknown = true
            }
        }
        if unknown {
            self.reportUnknownFields(object, at: pointer, known: known, isKnown: { known.contains($0) })
        }
        return self.problemCount == before ? retry : nil
    }

    // MARK: Job fields

    /// The job's `labels` (see the file comment for the rules).
    mutating func decodeLabels(_ value: JSONValue) -> [String: String] {
        guard case .object(let object) = value else {
            self.report(pointer: "/labels", "must be an object")
            return [:]
        }
        if object.count > 64 {
            self.report(pointer: "/labels", "must have at most 64 labels")
        }
        var labels: [String: String] = [:]
        labels.reserveCapacity(object.count)
        for member in object.members {
            let key = member.key
            let nameOK = !key.utf8.isEmpty && key.utf8.count <= 63 && key.utf8.allSatisfy { byte in
                TemplateSyntax.isNameByte(byte) || byte == UInt8(ascii: ".")
            }
            if !nameOK {
                self.report(
                    pointer: "/labels/" + JSONValue.escapePointerToken(key),
                    "invalid label name \(TemplateExpression.quoted(key)): use 1 to 63 letters, digits, '_', '.' or '-'")
                continue
            }
            guard case .string(let text) = member.value else {
                self.report(pointer: "/labels/" + key, "must be a string")
                continue
            }
            if !DecodeState.fits(text, 200) {
                self.report(pointer: "/labels/" + key, "must be at most 200 characters")
                continue
            }
            labels[key] = text
        }
        return labels
    }

    /// The job's `webhook` (SPEC §4).
    mutating func decodeWebhook(_ value: JSONValue, at pointer: String) -> WebhookSpec? {
        guard case .object(let object) = value else {
            self.report(pointer: pointer, "must be an object")
            return nil
        }
        let before = self.problemCount
        var spec = WebhookSpec(url: "")
        var sawURL = false
        var unknown = false
        for member in object.members {
            switch member.key {
            case "url", "secret", "events", "headers", "retry": break
            default: unknown = true
            }
        }
        if unknown {
            self.reportUnknownFields(object, at: pointer, known: DecodeState.webhookFields, isKnown: { DecodeState.webhookFields.contains($0) })
        }
        if let url = object["url"] {
            sawURL = true
            if case .string(let text) = url {
                if text.utf8.count > 2048 {
                    self.report(pointer, "url", "must be at most 2048 characters")
                } else if !DecodeState.isHTTPURL(text) {
                    self.report(pointer, "url", "must be an absolute http or https URL with a host")
                }
                spec.url = text
            } else {
                self.report(pointer, "url", "must be a string")
            }
        }
        if !sawURL { self.report(pointer, "url", "required") }

        if let secret = object["secret"] {
            if case .string(let text) = secret {
                if text.hasPrefix("whsec_") {
                    let length = DecodeState.base64DecodedLength(text.utf8.dropFirst(6))
                    if length == nil || length! < 1 || length! > 64 {
                        self.report(pointer, "secret", "a secret starting with \"whsec_\" must continue with base64 that decodes to 1 to 64 bytes")
                    }
                } else if text.isEmpty || !DecodeState.fits(text, 256) {
                    self.report(pointer, "secret", "must be a non-empty string of at most 256 characters")
                }
                spec.secret = text
            } else {
                self.report(pointer, "secret", "must be a string")
            }
        }

        if let events = object["events"] {
            if case .array(let items) = events {
                if items.isEmpty { self.report(pointer, "events", "must not be empty") }
                var patterns: [String] = []
                for (index, item) in items.enumerated() {
                    guard case .string(let text) = item else {
                        self.report(pointer: pointer + "/events/" + String(index), "must be a string")
                        continue
                    }
                    if !DecodeState.isEventPattern(text) {
                        self.report(
                            pointer: pointer + "/events/" + String(index),
                            "unknown event type \(TemplateExpression.quoted(text)); expected one of "
                                + DecodeState.eventTypes.joined(separator: ", ") + ", or a pattern such as \"job.*\"")
                    }
                    patterns.append(text)
                }
                spec.events = patterns
            } else {
                self.report(pointer, "events", "must be an array of event types")
            }
        }

        if let headers = object["headers"] {
            if case .object(let members) = headers {
                var seen: [String: String] = [:]
                for member in members {
                    let name = member.key
                    let headerPointer = { pointer + "/headers/" + JSONValue.escapePointerToken(name) }
                    guard DecodeState.isHeaderName(name) else {
                        self.report(
                            pointer: headerPointer(),
                            "invalid header name \(TemplateExpression.quoted(name)): use letters, digits and !#$%&'*+-.^_`|~")
                        continue
                    }
                    let lower = DecodeState.asciiLowercased(name)
                    if DecodeState.reservedHeaders.contains(lower) {
                        self.report(pointer: headerPointer(), "header \(TemplateExpression.quoted(name)) is set by the server and cannot be overridden")
                        continue
                    }
                    if let first = seen[lower] {
                        self.report(
                            pointer: headerPointer(),
                            "duplicate header \(TemplateExpression.quoted(name)) (header names are case-insensitive; first given as \(TemplateExpression.quoted(first)))")
                        continue
                    }
                    seen[lower] = name
                    guard case .string(let text) = member.value else {
                        self.report(pointer: headerPointer(), "must be a string")
                        continue
                    }
                    if text.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
                        self.report(pointer: headerPointer(), "must not contain CR, LF or NUL")
                        continue
                    }
                    spec.headers[name] = text
                }
            } else {
                self.report(pointer, "headers", "must be an object")
            }
        }

        if let retry = object["retry"] {
            if let decoded = self.decodeRetry(retry, at: pointer + "/retry", forWebhook: true) { spec.retry = decoded }
        }
        return self.problemCount == before ? spec : nil
    }

    /// Whether `text` is an event type of SPEC §3.4 or a `*`-suffixed pattern matching at least one.
    static func isEventPattern(_ text: String) -> Bool {
        if DecodeState.eventTypes.contains(text) { return true }
        guard text.hasSuffix("*") else { return false }
        let prefix = text.dropLast()
        guard !prefix.contains("*") else { return false }
        return DecodeState.eventTypes.contains { $0.hasPrefix(prefix) }
    }

    /// Whether `name` is a non-empty HTTP token (RFC 9110 §5.6.2) of at most 256 bytes: what jobs
    /// may name as a header, and what the outbound client sends.
    public static func isHeaderName(_ name: String) -> Bool {
        guard !name.utf8.isEmpty, name.utf8.count <= 256 else { return false }
        return name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
                UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
                UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
                return true
            default:
                return false
            }
        }
    }

    static func asciiLowercased(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 >= 65 && $0 <= 90 }) else { return text }
        return String(decoding: text.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self)
    }

    /// The number of bytes standard base64 `text` (padding optional) decodes to, or `nil` if it is not base64.
    static func base64DecodedLength(_ text: Substring.UTF8View) -> Int? {
        var symbols = 0
        var padding = 0
        for byte in text {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "+"), UInt8(ascii: "/"):
                if padding > 0 { return nil }
                symbols += 1
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 { return nil }
            default:
                return nil
            }
        }
        if symbols % 4 == 1 { return nil }
        if padding > 0, (symbols + padding) % 4 != 0 { return nil }
        return symbols * 3 / 4
    }

    /// Whether `text` is an absolute `http`/`https` URL with a host (and, if given, a port 1…65535),
    /// without spaces or control characters.
    static func isHTTPURL(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return false }
        var index = 0
        while index < bytes.count, bytes[index] != UInt8(ascii: ":") { index += 1 }
        let scheme = String(decoding: bytes[0..<index], as: UTF8.self)
        let lowerScheme = DecodeState.asciiLowercased(scheme)
        guard lowerScheme == "http" || lowerScheme == "https" else { return false }
        guard index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "/"), bytes[index + 2] == UInt8(ascii: "/") else {
            return false
        }
        let authorityStart = index + 3
        var authorityEnd = authorityStart
        while authorityEnd < bytes.count, bytes[authorityEnd] != UInt8(ascii: "/"), bytes[authorityEnd] != UInt8(ascii: "?"),
            bytes[authorityEnd] != UInt8(ascii: "#")
        {
            authorityEnd += 1
        }
        var hostStart = authorityStart
        if let at = bytes[authorityStart..<authorityEnd].lastIndex(of: UInt8(ascii: "@")) { hostStart = at + 1 }
        var host = bytes[hostStart..<authorityEnd]
        var port: ArraySlice<UInt8>?
        if host.first == UInt8(ascii: "[") {
            guard let close = host.firstIndex(of: UInt8(ascii: "]")), close > host.startIndex + 1 else { return false }
            let after = host[(close + 1)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { return false }
                port = after.dropFirst()
            }
            host = host[host.startIndex...close]
        } else {
            if let colon = host.firstIndex(of: UInt8(ascii: ":")) {
                port = host[(colon + 1)...]
                host = host[..<colon]
            }
            guard !host.isEmpty else { return false }
            for byte in host {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "%"), 0x80...0xFF:
                    continue
                default:
                    return false
                }
            }
        }
        if let port {
            guard !port.isEmpty, port.count <= 5 else { return false }
            var value = 0
            for byte in port {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return false }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            guard value >= 1, value <= 65_535 else { return false }
        }
        return true
    }
}

// MARK: - Suggestions

/// "Did you mean …?" for misspelt field names.
enum FieldSuggestion {
    /// The candidate nearest to `word` within an edit distance of 2 (and less than its length).
    static func suggestion(for word: String, among candidates: [String]) -> String? {
        var best: (name: String, distance: Int)?
        let a = Array(word.utf8)
        guard a.count <= 64 else { return nil }
        for candidate in candidates {
            let b = Array(candidate.utf8)
            let distance = FieldSuggestion.editDistance(a, b)
            if distance <= 2, distance < b.count, distance < (best?.distance ?? Int.max) {
                best = (candidate, distance)
            }
        }
        return best?.name
    }

    /// The optimal-string-alignment distance (Levenshtein plus adjacent transpositions), ASCII case-insensitive.
    static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        func lower(_ byte: UInt8) -> UInt8 { byte >= 65 && byte <= 90 ? byte + 32 : byte }
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        let width = b.count + 1
        var table = [Int](repeating: 0, count: (a.count + 1) * width)
        for j in 0...b.count { table[j] = j }
        for i in 1...a.count {
            table[i * width] = i
            for j in 1...b.count {
                let cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1
                var value = min(table[(i - 1) * width + j] + 1, table[i * width + j - 1] + 1, table[(i - 1) * width + j - 1] + cost)
                if i > 1, j > 1, lower(a[i - 1]) == lower(b[j - 2]), lower(a[i - 2]) == lower(b[j - 1]) {
                    value = min(value, table[(i - 2) * width + j - 2] + 1)
                }
                table[i * width + j] = value
            }
        }
        return table[a.count * width + b.count]
    }
}

// MARK: - Checks shared with the server

extension JobDecoder {
    /// Whether `text` is an absolute `http`/`https` URL with a host, as `webhook.url` must be (the
    /// server applies the same rule to `--webhook-url` and to the `http` action's `url`).
    public static func isHTTPURL(_ text: String) -> Bool { DecodeState.isHTTPURL(text) }

    /// Whether `name` is an HTTP header name (an RFC 9110 token).
    public static func isHeaderName(_ name: String) -> Bool { DecodeState.isHeaderName(name) }

    /// Why `secret` is not a usable webhook secret (nil when it is): `whsec_` followed by base64 of
    /// 1…64 bytes, or any other non-empty text of at most 256 characters (raw key bytes).
    public static func webhookSecretProblem(_ secret: String) -> String? {
        if secret.hasPrefix("whsec_") {
            guard let length = DecodeState.base64DecodedLength(secret.utf8.dropFirst(6)), (1...64).contains(length) else {
                return "a secret starting with \"whsec_\" must continue with base64 that decodes to 1 to 64 bytes"
            }
            return nil
        }
        if secret.isEmpty || !DecodeState.fits(secret, 256) { return "must be a non-empty string of at most 256 characters" }
        return nil
    }
}
