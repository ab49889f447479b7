/// A template value that refers to tasks, checked once every id is known.
struct Reference {
    /// The pointer of the templated value (`/graph/steps/1/params`).
    var pointer: String
    var value: JSONValue
    var template: JSONTemplate
}

/// The mutable state of one decoding run.
struct DecodeState: ProblemReporter {
    static let jobFields = [
        "name", "input", "graph", "timeoutMs", "labels", "runAt", "delayMs", "priority", "concurrency",
        "definition",
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

    init(decoder: JobDecoder, idPrefix: String, reservedIDs: Set<String>, lenientReferences: Bool, rootPointer: String)
    {
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

    /// Counts `count` problems found elsewhere past the cap, without rendering them.
    mutating func countUnreported(_ count: Int) {
        self.problemCount += count
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
                ValidationProblem(pointer: summaryPointer, message: "… and \(more) more problem\(more == 1 ? "" : "s")")
            )
        }
        return ValidationError(problems)
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
                        "refers to unknown task " + TemplateExpression.quoted(id)
                    )
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
}
