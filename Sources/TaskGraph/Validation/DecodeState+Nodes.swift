/// The node types of SPEC §1.1, with the fields each accepts.
enum NodeType: CaseIterable {
    case task, series, parallel, continuation, map, dynamic, job

    init?(_ name: String) {
        switch name {
        case "task": self = .task
        case "job": self = .job
        case "series": self = .series
        case "parallel": self = .parallel
        case "continuation": self = .continuation
        case "map": self = .map
        case "dynamic": self = .dynamic
        default: return nil
        }
    }

    static let expected = "task, series, parallel, continuation, map, dynamic, job"

    /// The type-specific fields, in the order they are listed in SPEC §1.1.
    var fields: [String] {
        switch self {
        case .task:
            return [
                "action", "params", "executor", "retry", "timeoutMs", "heartbeatTimeoutMs", "scheduleTimeoutMs",
                "concurrency",
            ]
        case .series: return ["steps"]
        case .parallel: return ["branches", "mode", "maxConcurrency", "failFast"]
        case .continuation: return ["antecedent", "on", "then"]
        case .map: return ["items", "template", "mode", "maxConcurrency"]
        case .dynamic: return ["source"]
        case .job: return ["definition", "version", "retry", "timeoutMs", "concurrency"]
        }
    }

    /// The bit mask of `NodeField`s this type accepts (`type`, `id`, `input` included).
    var allowed: UInt32 {
        let common = NodeField.type.bit | NodeField.id.bit | NodeField.input.bit
        switch self {
        case .task:
            return common | NodeField.action.bit | NodeField.params.bit | NodeField.executor.bit | NodeField.retry.bit
                | NodeField.timeoutMs.bit | NodeField.heartbeatTimeoutMs.bit | NodeField.scheduleTimeoutMs.bit
                | NodeField.concurrency.bit
        case .series: return common | NodeField.steps.bit
        case .parallel:
            return common | NodeField.branches.bit | NodeField.mode.bit | NodeField.maxConcurrency.bit
                | NodeField.failFast.bit
        case .continuation: return common | NodeField.antecedent.bit | NodeField.on.bit | NodeField.then.bit
        case .map:
            return common | NodeField.items.bit | NodeField.template.bit | NodeField.mode.bit
                | NodeField.maxConcurrency.bit
        case .dynamic: return common | NodeField.source.bit
        case .job:
            return common | NodeField.definition.bit | NodeField.version.bit | NodeField.retry.bit
                | NodeField.timeoutMs.bit | NodeField.concurrency.bit
        }
    }
}

/// Every field any node type has.
enum NodeField: UInt32 {
    case type, id, input, action, params, executor, retry, timeoutMs, steps, branches, mode, maxConcurrency,
        failFast, antecedent, on, then, items, template, source, heartbeatTimeoutMs, scheduleTimeoutMs, concurrency,
        definition, version

    var bit: UInt32 { 1 << self.rawValue }

    /// The field named `key`. Dispatches on the length first: this runs for every member of every node.
    init?(key: String) {
        let field: NodeField?
        switch key.utf8.count {
        case 2: field = key == "id" ? .id : key == "on" ? .on : nil
        case 4: field = key == "type" ? .type : key == "mode" ? .mode : key == "then" ? .then : nil
        case 5:
            field =
                key == "input"
                ? .input : key == "steps" ? .steps : key == "retry" ? .retry : key == "items" ? .items : nil
        case 6: field = key == "action" ? .action : key == "params" ? .params : key == "source" ? .source : nil
        case 8:
            field =
                key == "branches"
                ? .branches
                : key == "executor"
                    ? .executor
                    : key == "template"
                        ? .template
                        : key == "failFast" ? .failFast : nil
        case 7: field = key == "version" ? .version : nil
        case 9: field = key == "timeoutMs" ? .timeoutMs : nil
        case 10: field = key == "antecedent" ? .antecedent : key == "definition" ? .definition : nil
        case 11: field = key == "concurrency" ? .concurrency : nil
        case 14: field = key == "maxConcurrency" ? .maxConcurrency : nil
        case 17: field = key == "scheduleTimeoutMs" ? .scheduleTimeoutMs : nil
        case 18: field = key == "heartbeatTimeoutMs" ? .heartbeatTimeoutMs : nil
        default: field = nil
        }
        guard let field else { return nil }
        self = field
    }
}

/// Where a node object's fields are: for each `NodeField`, the index of its member (absent and
/// `null` ones are not recorded, except `input: null`, which is a value). Indices rather than values,
/// so reading the fields retains nothing until a value is used.
struct NodeFields {
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

extension DecodeState {
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
                    pointer,
                    "type",
                    "unknown type " + TemplateExpression.quoted(name) + "; expected one of " + NodeType.expected
                )
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
                    self.report(
                        pointer,
                        "id",
                        "duplicate id \(TemplateExpression.quoted(text)) (first used at \(first))"
                    )
                } else if full == self.rootGeneratedID {
                    let rootPointer = self.rootPointer
                    self.report(
                        pointer,
                        "id",
                        "duplicate id \(TemplateExpression.quoted(text)) (the generated id of the root node at \(rootPointer), which has no id)"
                    )
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
                self.report(
                    pointer: pointer,
                    "the generated id \(TemplateExpression.quoted(generated)) is already used in the job"
                )
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
        case .job:
            kind = self.decodeJob(fields, at: pointer)
        case .series:
            let steps = self.decodeChildren(fields[.steps], "steps", pointer: pointer, path: path, depth: depth)
            kind = steps.map { .series($0) }
        case .parallel:
            var mode = ParallelSpec.Mode.all
            if let value = fields[.mode] {
                mode =
                    self.choice(value, pointer, "mode", ParallelSpec.Mode.init(rawValue:), "all, any, settled") ?? mode
            }
            var maxConcurrency: Int?
            if let value = fields[.maxConcurrency] {
                maxConcurrency = self.integer(value, pointer, "maxConcurrency", min: 1, max: JobDecoder.maxSafeInteger)
            }
            var failFast = false
            if let value = fields[.failFast] { failFast = self.boolean(value, pointer, "failFast") ?? false }
            let branches = self.decodeChildren(
                fields[.branches],
                "branches",
                pointer: pointer,
                path: path,
                depth: depth
            )
            kind = branches.map {
                .parallel(ParallelSpec(branches: $0, mode: mode, maxConcurrency: maxConcurrency, failFast: failFast))
            }
        case .continuation:
            var on = ContinuationSpec.On.success
            if let value = fields[.on] {
                on =
                    self.choice(
                        value,
                        pointer,
                        "on",
                        ContinuationSpec.On.init(rawValue:),
                        "success, failure, cancellation, always"
                    ) ?? on
            }
            let antecedent = self.decodeChild(
                fields[.antecedent],
                "antecedent",
                pointer: pointer,
                path: path,
                depth: depth
            )
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
            if let value = fields[.maxConcurrency] {
                maxConcurrency = self.integer(value, pointer, "maxConcurrency", min: 1, max: JobDecoder.maxSafeInteger)
            }
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
    mutating func decodeChild(
        _ value: JSONValue?,
        _ field: String,
        pointer: String,
        path: () -> String,
        depth: Int
    ) -> Node? {
        guard let value else {
            self.report(pointer, field, "required")
            return nil
        }
        return self.decodeNode(
            value,
            pointer: pointer + "/" + field,
            pathBase: path() + "." + field,
            index: -1,
            depth: depth + 1
        )
    }

    /// The required array of child nodes in `field`.
    mutating func decodeChildren(
        _ value: JSONValue?,
        _ field: String,
        pointer: String,
        path: () -> String,
        depth: Int
    ) -> [Node]? {
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
                item,
                pointer: DecodeState.join(pointerBase, index),
                pathBase: pathBase,
                index: index,
                depth: depth + 1
            )
            if let child, !failed { nodes.append(child) } else { failed = true }
        }
        return failed ? nil : nodes
    }

    /// A `task` node's fields.
    mutating func decodeTask(_ fields: NodeFields, at pointer: String) -> Node.Kind? {
        // The executor's kind first: it decides which actions the task may name (SPEC §6). Its own
        // problems are reported after `params`, in the order SPEC §1.1 lists the fields.
        var executor = "default"
        var executorProblem: String?
        var isExternal = false
        if let value = fields[.executor] {
            if case .string(let name) = value {
                executor = name
                let decoder = self.decoder
                if decoder.externalExecutors.contains(name) {
                    isExternal = true
                } else if name != "immediate", !decoder.executors.contains(name) {
                    executorProblem =
                        "unknown executor \(TemplateExpression.quoted(name)); configured: "
                        + decoder.executors.union(decoder.externalExecutors).sorted().joined(separator: ", ")
                }
            } else {
                executorProblem = "must be a string"
            }
        }

        var action: (any Action)?
        var actionName = ""
        switch fields[.action] {
        case nil:
            self.report(pointer, "action", "required")
        case .string(let name)? where isExternal:
            actionName = name
            if self.decoder.actions.lookup(name) != nil {
                self.report(
                    pointer,
                    "action",
                    "\(TemplateExpression.quoted(name)) is a built-in action; tasks on the external executor "
                        + "\(TemplateExpression.quoted(executor)) run worker actions (run built-ins on an in-process executor)"
                )
            } else if !JobDecoder.isWorkerActionName(name) {
                self.report(pointer, "action", "must be 1 to 100 characters of A-Z a-z 0-9 _ . : -")
            }
        case .string(let name)? where name == TaskSpec.childJobAction:
            self.report(pointer, "action", "starts a child job: write {\"type\": \"job\", \"definition\": …}")
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
                let external = self.decoder.externalExecutors.sorted()
                self.report(
                    pointer,
                    "action",
                    "unknown action \(TemplateExpression.quoted(name)); known: "
                        + actions.names.filter { $0 != TaskSpec.childJobAction }.joined(separator: ", ")
                        + (external.isEmpty
                            ? ""
                            : "; worker actions run on an external executor (" + external.joined(separator: ", ") + ")")
                )
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

        if let executorProblem { self.report(pointer, "executor", executorProblem) }

        var retry: RetrySpec?
        if let value = fields[.retry] { retry = self.decodeRetry(value, at: pointer + "/retry", rules: .task) }

        let timeoutMs = self.decodeTimeout(fields, at: pointer)
        var heartbeatTimeoutMs: Int?
        var scheduleTimeoutMs: Int?
        for (field, range) in [
            (NodeField.heartbeatTimeoutMs, JobDecoder.heartbeatTimeoutRange),
            (.scheduleTimeoutMs, 1...JobDecoder.maxTaskTimeoutMs),
        ] {
            guard let value = fields[field] else { continue }
            let name = field == .heartbeatTimeoutMs ? "heartbeatTimeoutMs" : "scheduleTimeoutMs"
            guard isExternal else {
                self.report(pointer, name, "applies only to tasks on an external executor (SPEC §6)")
                continue
            }
            let int = self.integer(value, pointer, name, min: range.lowerBound, max: range.upperBound)
            if field == .heartbeatTimeoutMs { heartbeatTimeoutMs = int } else { scheduleTimeoutMs = int }
        }
        var concurrency: ConcurrencySpec?
        if let value = fields[.concurrency] {
            concurrency = self.decodeConcurrency(value, at: pointer + "/concurrency")
        }
        guard let params, !actionName.isEmpty else { return nil }
        return .task(
            TaskSpec(
                action: actionName,
                params: params,
                executor: executor,
                retry: retry,
                timeoutMs: timeoutMs,
                heartbeatTimeoutMs: heartbeatTimeoutMs,
                scheduleTimeoutMs: scheduleTimeoutMs,
                concurrency: concurrency
            )
        )
    }

    /// A task's (or job node's) `timeoutMs`: 1 ms to 24 hours.
    mutating func decodeTimeout(_ fields: NodeFields, at pointer: String) -> Int? {
        guard let value = fields[.timeoutMs] else { return nil }
        return self.integer(value, pointer, "timeoutMs", min: 1, max: JobDecoder.maxTaskTimeoutMs, note: " (24 hours)")
    }

    /// A `job` node's fields (issue #45): the definition (and version) the child job starts; its
    /// `input` is the node's. It runs as a task of the `job` action, which the server provides,
    /// on no executor (it holds no slot while the child runs), with the task's retry, timeout and
    /// concurrency key.
    mutating func decodeJob(_ fields: NodeFields, at pointer: String) -> Node.Kind? {
        var params = JSONObject()
        switch fields[.definition] {
        case nil:
            self.report(pointer, "definition", "required")
        case .string(let name)? where DefinitionRef.isValidName(name):
            params["definition"] = .string(name)
        default:
            self.report(
                pointer,
                "definition",
                "must be the name of a definition: 1 to 100 of A-Z a-z 0-9 _ . -, starting with a letter or digit"
            )
        }
        if let value = fields[.version] {
            if let version = self.integer(value, pointer, "version", min: 1, max: JobDecoder.maxSafeInteger) {
                params["version"] = .int(version)
            }
        }
        if self.decoder.actions.lookup(TaskSpec.childJobAction) == nil {
            self.report(pointer, "type", "child jobs are not available here")
        }
        var retry: RetrySpec?
        if let value = fields[.retry] { retry = self.decodeRetry(value, at: pointer + "/retry", rules: .task) }
        let timeoutMs = self.decodeTimeout(fields, at: pointer)
        var concurrency: ConcurrencySpec?
        if let value = fields[.concurrency] {
            concurrency = self.decodeConcurrency(value, at: pointer + "/concurrency")
        }
        guard params["definition"] != nil, let template = try? JSONTemplate(.object(params)) else { return nil }
        return .task(
            TaskSpec(
                action: TaskSpec.childJobAction,
                params: template,
                executor: "immediate",
                retry: retry,
                timeoutMs: timeoutMs,
                concurrency: concurrency
            )
        )
    }

    /// A `concurrency` object (SPEC §8) at `pointer`: `key`, a string that may be a template, and
    /// `max`, 1…`ConcurrencySpec.maxHolders`. Whether the key evaluates to a string or a number is
    /// known only when it is evaluated; a node whose key does not fails then.
    mutating func decodeConcurrency(_ value: JSONValue, at pointer: String) -> ConcurrencySpec? {
        guard case .object(let object) = value else {
            self.report(pointer: pointer, "must be an object with key and max")
            return nil
        }
        self.reportUnknownFields(object, at: pointer, known: ["key", "max"], isKnown: { $0 == "key" || $0 == "max" })
        var key: JSONTemplate?
        switch object["key"] {
        case nil, .null?: self.report(pointer, "key", "required")
        case .string(let text)?:
            if text.isEmpty || !DecodeState.fits(text, ConcurrencySpec.maxKeyBytes) {
                self.report(pointer, "key", "must be 1 to \(ConcurrencySpec.maxKeyBytes) characters")
            } else {
                key = self.compileTemplate(.string(text), at: pointer + "/key")
            }
        default: self.report(pointer, "key", "must be a string (a template such as ${input.customer} may be used)")
        }
        var max: Int?
        if let value = object["max"], !value.isNull {
            max = self.integer(value, pointer, "max", min: 1, max: ConcurrencySpec.maxHolders)
        } else {
            self.report(pointer, "max", "required")
        }
        guard let key, let max else { return nil }
        return ConcurrencySpec(key: key, max: max)
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
}
