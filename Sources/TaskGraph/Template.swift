// Templates (SPEC §1.3): `${expr}` inside strings of `params` and a node's `input`.
//
// Grammar (hand-written parser over UTF-8 bytes, no regular expressions):
//
//     template   := ( literal | "$${" | "${" ws* expression ws* "}" )*
//     expression := "input" path
//                 | "job" [ field("input" | "id" | "name") ] path
//                 | "tasks" taskID [ field("result" | "error" | "state") ] path
//     taskID     := "." ( name-char | "/" | "[" digit+ "]" )+      e.g. tasks.step-1, tasks.delete[3], tasks.dyn/step
//                 | "[" quoted "]"                                e.g. tasks["root.steps.0"]
//     field      := "." name | "[" quoted "]"
//     path       := ( "." name | "[" digit+ "]" | "[" quoted "]" )*
//     name       := ( ASCII letter | digit | "_" | "-" )+
//     quoted     := '"' … '"' | "'" … "'"        (escapes: \" \' \\)
//
// `$${` is the two literal characters `${`, after which parsing continues normally (so `$${input}` renders
// as the text `${input}`). A `$` not followed by `{` is literal. Unknown roots and unknown `job`/`tasks`
// fields are syntax errors, so typos are reported when the job is submitted, not when the node runs.

// MARK: - Errors

/// A template failure: a syntax error (found when a job is validated) or an unresolvable expression
/// (found when a node starts; the node fails with this code and message).
public struct TemplateError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The code of a malformed template (unterminated `${`, empty or garbled expression, unknown root).
    public static let syntaxCode = "template.syntax"
    /// The code of an expression that does not resolve against the node's scope (SPEC §1.3).
    public static let unresolvedCode = "template.unresolved"

    /// `template.syntax` or `template.unresolved`.
    public var code: String
    /// A human-readable message that names the offending expression.
    public var message: String

    /// Creates an error with the given code and message.
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    /// A `template.syntax` error.
    public static func syntax(_ message: String) -> TemplateError {
        TemplateError(code: TemplateError.syntaxCode, message: message)
    }

    /// A `template.unresolved` error.
    public static func unresolved(_ message: String) -> TemplateError {
        TemplateError(code: TemplateError.unresolvedCode, message: message)
    }

    /// `code: message`.
    public var description: String { "\(self.code): \(self.message)" }
}

// MARK: - Scope

/// What templates can refer to while a node starts.
public protocol TemplateScope {
    /// The node's input (`${input…}`).
    var input: JSONValue { get }

    /// The job, as `{"id": …, "name": …, "input": …}` (`name` is `null` for an unnamed job).
    var job: JSONValue { get }

    /// The outcome object of a node that has completed: `{"state":"succeeded","result":…}`,
    /// `{"state":"failed","error":…}`, `{"state":"cancelled"}` or `{"state":"skipped"}`;
    /// `nil` when no node has this id or it has not completed yet.
    func task(_ id: String) -> JSONValue?
}

// MARK: - Expressions

/// One `${…}` expression: a root followed by a path of keys and indices.
public struct TemplateExpression: Sendable, Equatable, CustomStringConvertible {
    /// Where the path starts.
    public enum Root: Sendable, Equatable {
        /// The node's input.
        case input
        /// The job object (`{"id", "name", "input"}`).
        case job
        /// The outcome object of the node with this id; the path starts after the id.
        case tasks(id: String)
    }

    /// One step of a path.
    public enum PathSegment: Sendable, Equatable {
        /// An object member: `.name`, `["odd key"]` or `['odd key']`.
        case key(String)
        /// An array element: `[0]`.
        case index(Int)
    }

    /// Where the path starts.
    public var root: Root
    /// The steps after the root (for `.tasks`, after the task id).
    public var path: [PathSegment]
    /// The text between `${` and `}`, trimmed of surrounding whitespace; used in messages.
    public var source: String

    /// Creates an expression; `source` is only used in messages.
    public init(root: Root, path: [PathSegment], source: String) {
        self.root = root
        self.path = path
        self.source = source
    }

    /// For `tasks.<id>…` and `tasks["<id>"]…`, the id; otherwise `nil`.
    public var referencedTaskID: String? {
        if case .tasks(let id) = self.root { return id }
        return nil
    }

    /// `${source}`, as the expression appears in a template.
    public var description: String { "${" + self.source + "}" }

    /// The value this expression denotes in `scope`.
    ///
    /// - Throws: `template.unresolved` when a key is missing, an index is out of range, a step meets
    ///   the wrong type, or the referenced task is unknown or has not completed.
    public func evaluate(in scope: some TemplateScope) throws(TemplateError) -> JSONValue {
        var current: JSONValue
        switch self.root {
        case .input:
            current = scope.input
        case .job:
            current = scope.job
        case .tasks(let id):
            guard let outcome = scope.task(id) else {
                throw self.unresolved("task \(TemplateExpression.quoted(id)) is unknown or has not completed yet")
            }
            current = outcome
        }
        for position in self.path.indices {
            switch self.path[position] {
            case .key(let key):
                guard case .object(let object) = current else {
                    var hint = ""
                    if case .array = current, let index = Int(key), index >= 0 {
                        hint = " (use [\(index)] to index an array)"
                    }
                    throw self.unresolved(
                        "cannot read key \(TemplateExpression.quoted(key)) of \(self.describePath(upTo: position)), "
                            + "which is \(TemplateExpression.article(current))\(hint)"
                    )
                }
                guard let next = object[key] else { throw self.missingKey(key, at: position, in: object) }
                current = next
            case .index(let index):
                guard case .array(let items) = current else {
                    throw self.unresolved(
                        "cannot read index \(index) of \(self.describePath(upTo: position)), "
                            + "which is \(TemplateExpression.article(current))"
                    )
                }
                guard index < items.count else {
                    let noun = items.count == 1 ? "item" : "items"
                    throw self.unresolved("index \(index) out of range (array has \(items.count) \(noun))")
                }
                current = items[index]
            }
        }
        return current
    }

    private func unresolved(_ detail: String) -> TemplateError {
        .unresolved("cannot resolve \(self.description): \(detail)")
    }

    private func missingKey(_ key: String, at position: Int, in object: JSONObject) -> TemplateError {
        if position == 0, case .tasks(let id) = self.root, key == "result" || key == "error" {
            // `tasks.x.result` of a task that failed (or `.error` of one that succeeded) deserves a plain answer.
            let state = object["state"]?.stringValue ?? "unknown"
            return self.unresolved("task \(TemplateExpression.quoted(id)) has no \(key) (its state is \(state))")
        }
        return self.unresolved(
            "key \(TemplateExpression.quoted(key)) not found in \(self.describePath(upTo: position))"
        )
    }

    /// The canonical spelling of the root and the first `count` path segments, e.g. `input.items[0]`.
    func describePath(upTo count: Int) -> String {
        var text: String
        switch self.root {
        case .input: text = "input"
        case .job: text = "job"
        case .tasks(let id):
            text = TemplateSyntax.isPlainTaskID(id) ? "tasks." + id : "tasks[" + TemplateExpression.quoted(id) + "]"
        }
        for segment in self.path.prefix(count) {
            switch segment {
            case .key(let key):
                if TemplateSyntax.isName(key) { text += "." + key } else { text += "[" + TemplateExpression.quoted(key) + "]" }
            case .index(let index):
                text += "[\(index)]"
            }
        }
        return text
    }

    /// `"text"` with `"` and `\` escaped, as written in a bracket key.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for character in text.unicodeScalars {
            if character == "\"" || character == "\\" { out.unicodeScalars.append("\\") }
            out.unicodeScalars.append(character)
        }
        out += "\""
        return out
    }

    /// "an object", "an array", "a string", "a number", "a boolean" or "null".
    static func article(_ value: JSONValue) -> String {
        switch value {
        case .null: return "null"
        case .object: return "an object"
        case .array: return "an array"
        default: return "a " + value.typeName
        }
    }
}

// MARK: - Templates

/// A parsed template string (SPEC §1.3).
///
/// Parse once with ``init(parsing:)`` and render many times with ``render(in:)``, or render a JSON value
/// directly with ``JSONValue/renderingTemplates(in:)`` (which parses on the fly, and only strings that
/// contain `${`).
public struct Template: Sendable, Equatable {
    enum Piece: Sendable, Equatable {
        case literal(String)
        case expression(TemplateExpression)
    }

    enum Form: Sendable, Equatable {
        /// No expressions: renders to this text (the source with `$${` turned into `${`).
        case literal(String)
        /// Exactly one expression and nothing else: renders to the expression's value, any type.
        case single(TemplateExpression)
        /// Text and expressions: renders to a string; `capacity` estimates its UTF-8 length.
        case interpolated([Piece], capacity: Int)
    }

    let form: Form

    /// Parses `source`.
    ///
    /// - Throws: `template.syntax` for an unterminated `${`, an empty or garbled expression, an unknown
    ///   root (anything but `input`, `job`, `tasks`) or an unknown `job`/`tasks` field.
    public init(parsing source: String) throws(TemplateError) {
        var copy = source
        let result = copy.withUTF8 { bytes in
            Result { () throws(TemplateError) -> Form in
                var parser = TemplateSyntax(bytes: bytes)
                return try parser.parseTemplate()
            }
        }
        self.form = try result.get()
    }

    /// Whether the template has no expressions; it then renders to its text (the source, with any
    /// `$${` escape turned into `${`).
    public var isLiteral: Bool {
        if case .literal = self.form { return true }
        return false
    }

    /// Whether the template is exactly one `${expr}`, so that it renders to the value itself (any type).
    public var isSingleExpression: Bool {
        if case .single = self.form { return true }
        return false
    }

    /// The expressions, in order of appearance.
    public var expressions: [TemplateExpression] {
        switch self.form {
        case .literal: return []
        case .single(let expression): return [expression]
        case .interpolated(let pieces, _):
            return pieces.compactMap { piece in
                if case .expression(let expression) = piece { return expression }
                return nil
            }
        }
    }

    /// The template's value in `scope`: the expression's value for a single-expression template,
    /// otherwise a string with every expression interpolated (strings as they are, other values as
    /// compact JSON).
    ///
    /// - Throws: `template.unresolved` naming the first expression that does not resolve.
    public func render(in scope: some TemplateScope) throws(TemplateError) -> JSONValue {
        switch self.form {
        case .literal(let text):
            return .string(text)
        case .single(let expression):
            return try expression.evaluate(in: scope)
        case .interpolated(let pieces, let capacity):
            // One byte buffer sized up front: cheaper than growing a String piece by piece, and
            // non-string values are written as JSON straight into it.
            var bytes: [UInt8] = []
            bytes.reserveCapacity(capacity)
            for piece in pieces {
                switch piece {
                case .literal(let literal):
                    bytes.append(contentsOf: literal.utf8)
                case .expression(let expression):
                    switch try expression.evaluate(in: scope) {
                    case .string(let string): bytes.append(contentsOf: string.utf8)
                    case let other: other.write(into: &bytes)
                    }
                }
            }
            return .string(String(decoding: bytes, as: UTF8.self))
        }
    }
}

// MARK: - Pre-parsed JSON templates

/// A JSON value whose template strings are parsed once, to be rendered many times (e.g. a node's
/// `params`, compiled when the job is accepted and rendered each time the node starts).
///
/// Subtrees without templates are kept as they are and returned without copying.
public struct JSONTemplate: Sendable, Equatable {
    indirect enum Node: Sendable, Equatable {
        case constant(JSONValue)
        case template(Template)
        case array([Node])
        case object(keys: [String], values: [Node])
    }

    let node: Node

    /// The value itself when it contains no templates (rendering it returns it unchanged).
    public var constantValue: JSONValue? {
        if case .constant(let value) = self.node { return value }
        return nil
    }

    /// Parses every string in `value` that contains `${` (object keys are not templated).
    ///
    /// - Throws: the first `template.syntax` error; use ``JSONValue/templateSyntaxProblems()`` to get all
    ///   of them with their locations.
    public init(_ value: JSONValue) throws(TemplateError) {
        self.node = try JSONTemplate.compile(value)
    }

    private static func compile(_ value: JSONValue) throws(TemplateError) -> Node {
        guard value.containsTemplates else { return .constant(value) }
        switch value {
        case .string(let string):
            let template = try Template(parsing: string)
            if case .literal(let text) = template.form { return .constant(.string(text)) }
            return .template(template)
        case .array(let items):
            var nodes: [Node] = []
            nodes.reserveCapacity(items.count)
            for item in items { nodes.append(try JSONTemplate.compile(item)) }
            // Only `$${` escapes below: the rendered value never changes, so keep it rendered.
            if let constants = JSONTemplate.constants(nodes) { return .constant(.array(constants)) }
            return .array(nodes)
        case .object(let object):
            var keys: [String] = []
            var values: [Node] = []
            keys.reserveCapacity(object.count)
            values.reserveCapacity(object.count)
            for member in object.members {
                keys.append(member.key)
                values.append(try JSONTemplate.compile(member.value))
            }
            if let constants = JSONTemplate.constants(values) {
                return .constant(.object(JSONObject(zip(keys, constants).map { (key: $0, value: $1) })))
            }
            return .object(keys: keys, values: values)
        default:
            return .constant(value)
        }
    }

    /// The values of `nodes` when every one is a constant; otherwise `nil`.
    private static func constants(_ nodes: [Node]) -> [JSONValue]? {
        var values: [JSONValue] = []
        values.reserveCapacity(nodes.count)
        for node in nodes {
            guard case .constant(let value) = node else { return nil }
            values.append(value)
        }
        return values
    }

    /// Whether rendering always gives the same value (no expressions anywhere).
    public var isConstant: Bool {
        if case .constant = self.node { return true }
        return false
    }

    /// Every expression, in document order.
    public var expressions: [TemplateExpression] {
        var out: [TemplateExpression] = []
        JSONTemplate.collect(self.node, into: &out)
        return out
    }

    private static func collect(_ node: Node, into out: inout [TemplateExpression]) {
        switch node {
        case .constant: break
        case .template(let template): out.append(contentsOf: template.expressions)
        case .array(let nodes): for node in nodes { JSONTemplate.collect(node, into: &out) }
        case .object(_, let values): for node in values { JSONTemplate.collect(node, into: &out) }
        }
    }

    /// The value with every template rendered in `scope`.
    ///
    /// - Throws: `template.unresolved` for the first expression (in document order) that does not resolve.
    public func render(in scope: some TemplateScope) throws(TemplateError) -> JSONValue {
        try JSONTemplate.render(self.node, in: scope)
    }

    private static func render(_ node: Node, in scope: some TemplateScope) throws(TemplateError) -> JSONValue {
        switch node {
        case .constant(let value):
            return value
        case .template(let template):
            return try template.render(in: scope)
        case .array(let nodes):
            var items: [JSONValue] = []
            items.reserveCapacity(nodes.count)
            for node in nodes { items.append(try JSONTemplate.render(node, in: scope)) }
            return .array(items)
        case .object(let keys, let values):
            var members: [JSONObject.Member] = []
            members.reserveCapacity(keys.count)
            for index in keys.indices {
                members.append((key: keys[index], value: try JSONTemplate.render(values[index], in: scope)))
            }
            return .object(JSONObject(members))
        }
    }
}

// MARK: - JSON values

extension JSONValue {
    /// Renders every string inside this value (recursively through arrays and object values; keys are
    /// not templated) against `scope`.
    ///
    /// Strings without `${` are returned as they are, and containers in which nothing changes are not
    /// copied, so rendering a value without templates costs one scan of its strings.
    ///
    /// - Throws: `template.syntax` for a malformed template (validation normally rejects those first),
    ///   `template.unresolved` for the first expression (in document order) that does not resolve.
    public func renderingTemplates(in scope: some TemplateScope) throws(TemplateError) -> JSONValue {
        try self.renderedIfChanged(in: scope) ?? self
    }

    /// The rendered value, or `nil` when rendering leaves this value unchanged.
    private func renderedIfChanged(in scope: some TemplateScope) throws(TemplateError) -> JSONValue? {
        switch self {
        case .string(let string):
            guard TemplateSyntax.containsOpener(string) else { return nil }
            return try Template(parsing: string).render(in: scope)
        case .array(let items):
            var rendered: [JSONValue]? = nil
            for index in items.indices {
                if let value = try items[index].renderedIfChanged(in: scope) {
                    if rendered == nil { rendered = items }
                    rendered?[index] = value
                }
            }
            return rendered.map { .array($0) }
        case .object(let object):
            var rendered: [JSONObject.Member]? = nil
            let members = object.members
            for index in members.indices {
                if let value = try members[index].value.renderedIfChanged(in: scope) {
                    if rendered == nil { rendered = members }
                    rendered?[index].value = value
                }
            }
            return rendered.map { .object(JSONObject($0)) }
        default:
            return nil
        }
    }

    /// Whether any string inside this value (not counting object keys) contains `${` — that is, whether
    /// rendering might change it. (A `$${` escape counts: rendering turns it into `${`.)
    public var containsTemplates: Bool {
        switch self {
        case .string(let string): return TemplateSyntax.containsOpener(string)
        case .array(let items): return items.contains { $0.containsTemplates }
        case .object(let object): return object.members.contains { $0.value.containsTemplates }
        default: return false
        }
    }

    /// Checks the syntax of every template string inside this value.
    ///
    /// - Returns: one entry per malformed string, in document order: its JSON pointer relative to this
    ///   value (RFC 6901: `""` for the value itself, `~` and `/` in keys escaped as `~0` and `~1`) and
    ///   the syntax error message.
    public func templateSyntaxProblems() -> [(pointer: String, message: String)] {
        var problems: [(pointer: String, message: String)] = []
        self.collectSyntaxProblems(pointer: "", into: &problems)
        return problems
    }

    private func collectSyntaxProblems(pointer: String, into problems: inout [(pointer: String, message: String)]) {
        switch self {
        case .string(let string):
            guard TemplateSyntax.containsOpener(string) else { return }
            do {
                _ = try Template(parsing: string)
            } catch {
                problems.append((pointer: pointer, message: error.message))
            }
        case .array(let items):
            for (index, item) in items.enumerated() {
                item.collectSyntaxProblems(pointer: pointer + "/" + String(index), into: &problems)
            }
        case .object(let object):
            for member in object.members {
                member.value.collectSyntaxProblems(
                    pointer: pointer + "/" + JSONValue.escapePointerToken(member.key), into: &problems)
            }
        default:
            break
        }
    }

    /// Every template expression inside this value, with the JSON pointer (relative to this value) of
    /// the string it appears in; malformed strings are skipped (see ``templateSyntaxProblems()``).
    /// Validation uses this to check, for instance, the task ids that templates refer to.
    public func templateExpressions() -> [(pointer: String, expression: TemplateExpression)] {
        var found: [(pointer: String, expression: TemplateExpression)] = []
        self.collectExpressions(pointer: "", into: &found)
        return found
    }

    private func collectExpressions(
        pointer: String, into found: inout [(pointer: String, expression: TemplateExpression)]
    ) {
        switch self {
        case .string(let string):
            guard TemplateSyntax.containsOpener(string), let template = try? Template(parsing: string) else { return }
            for expression in template.expressions { found.append((pointer: pointer, expression: expression)) }
        case .array(let items):
            for (index, item) in items.enumerated() {
                item.collectExpressions(pointer: pointer + "/" + String(index), into: &found)
            }
        case .object(let object):
            for member in object.members {
                member.value.collectExpressions(
                    pointer: pointer + "/" + JSONValue.escapePointerToken(member.key), into: &found)
            }
        default:
            break
        }
    }

    /// An object key as a JSON pointer token (RFC 6901 §3): `~` → `~0`, `/` → `~1`.
    static func escapePointerToken(_ key: String) -> String {
        guard key.utf8.contains(where: { $0 == UInt8(ascii: "~") || $0 == UInt8(ascii: "/") }) else { return key }
        var out = ""
        for scalar in key.unicodeScalars {
            switch scalar {
            case "~": out += "~0"
            case "/": out += "~1"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

// MARK: - Parser

/// The template parser: a cursor over the UTF-8 bytes of one template string.
struct TemplateSyntax {
    private static let dollar = UInt8(ascii: "$")
    private static let openBrace = UInt8(ascii: "{")
    private static let closeBrace = UInt8(ascii: "}")
    private static let dot = UInt8(ascii: ".")
    private static let openBracket = UInt8(ascii: "[")
    private static let closeBracket = UInt8(ascii: "]")
    private static let doubleQuote = UInt8(ascii: "\"")
    private static let singleQuote = UInt8(ascii: "'")
    private static let backslash = UInt8(ascii: "\\")
    private static let slash = UInt8(ascii: "/")
    private static let minus = UInt8(ascii: "-")

    /// Longest expression text quoted in a syntax error message.
    private static let maxQuotedLength = 80

    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    /// Where the `${` of the expression being parsed starts.
    private var expressionStart = 0

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    // MARK: Character classes

    static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
    }

    /// Whether `text` can be written as a `.name` path segment.
    static func isName(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy(TemplateSyntax.isNameByte)
    }

    /// Whether `id` can be written as `tasks.<id>` (rather than `tasks["<id>"]`).
    static func isPlainTaskID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard let first = bytes.first, isNameByte(first) else { return false }
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if isNameByte(byte) || byte == slash {
                index += 1
            } else if byte == openBracket {
                var end = index + 1
                while end < bytes.count, isDigit(bytes[end]) { end += 1 }
                guard end > index + 1, end < bytes.count, bytes[end] == closeBracket else { return false }
                index = end + 1
            } else {
                return false
            }
        }
        return true
    }

    /// Whether `text` contains `${` (a UTF-8 scan; no allocation).
    static func containsOpener(_ text: String) -> Bool {
        if let found = text.utf8.withContiguousStorageIfAvailable({ TemplateSyntax.containsOpener(bytes: $0) }) {
            return found
        }
        var previousWasDollar = false
        for byte in text.utf8 {
            if previousWasDollar && byte == openBrace { return true }
            previousWasDollar = byte == dollar
        }
        return false
    }

    private static func containsOpener(bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard bytes.count >= 2, let base = bytes.baseAddress else { return false }
        let count = bytes.count
        var index = 0
        // Eight bytes at a time: skip words that hold no `$` (SWAR zero-byte test on word ^ "$$$$$$$$").
        let raw = UnsafeRawPointer(base)
        while index + 8 <= count {
            let word = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ 0x2424_2424_2424_2424
            if (word &- 0x0101_0101_0101_0101) & ~word & 0x8080_8080_8080_8080 != 0 { break }
            index += 8
        }
        let last = count - 1
        while index < last {
            if base[index] == dollar && base[index + 1] == openBrace { return true }
            index += 1
        }
        return false
    }

    // MARK: Template

    mutating func parseTemplate() throws(TemplateError) -> Template.Form {
        var pieces: [Template.Piece] = []
        var literal = ""
        var literalStart = 0
        let count = self.bytes.count
        while self.position < count {
            guard self.bytes[self.position] == TemplateSyntax.dollar else {
                self.position += 1
                continue
            }
            let next = self.position + 1 < count ? self.bytes[self.position + 1] : 0
            if next == TemplateSyntax.openBrace {
                if self.position == 0 {
                    // The common case `${expr}` with nothing around it: no piece list needed.
                    let expression = try self.parseExpression()
                    if self.position == count { return .single(expression) }
                    pieces.append(.expression(expression))
                    literalStart = self.position
                    continue
                }
                literal += self.text(literalStart..<self.position)
                if !literal.isEmpty {
                    pieces.append(.literal(literal))
                    literal = ""
                }
                pieces.append(.expression(try self.parseExpression()))
                literalStart = self.position
            } else if next == TemplateSyntax.dollar, self.position + 2 < count,
                self.bytes[self.position + 2] == TemplateSyntax.openBrace
            {
                // `$${` → `${`: drop the first `$`, keep `${` as the start of the next literal run.
                literal += self.text(literalStart..<self.position)
                literalStart = self.position + 1
                self.position += 3
            } else {
                self.position += 1
            }
        }
        literal += self.text(literalStart..<count)
        if !literal.isEmpty { pieces.append(.literal(literal)) }

        if pieces.count == 1, case .expression(let expression) = pieces[0] { return .single(expression) }
        if pieces.isEmpty { return .literal("") }
        if pieces.count == 1, case .literal(let text) = pieces[0] { return .literal(text) }
        var capacity = 0
        for piece in pieces {
            switch piece {
            case .literal(let text): capacity += text.utf8.count
            case .expression: capacity += 16
            }
        }
        return .interpolated(pieces, capacity: capacity)
    }

    // MARK: Expression

    /// Parses `${ … }` starting at the `$`; leaves the cursor after the `}`.
    private mutating func parseExpression() throws(TemplateError) -> TemplateExpression {
        self.expressionStart = self.position
        self.position += 2
        self.skipWhitespace()
        guard let first = self.peek() else { throw self.unterminated() }
        if first == TemplateSyntax.closeBrace { throw self.invalid("the expression is empty") }
        let sourceStart = self.position

        let rootName = self.readName()
        var path: [TemplateExpression.PathSegment] = []
        let root: TemplateExpression.Root
        switch rootName {
        case "input":
            root = .input
        case "job":
            root = .job
            if let field = try self.parseField() {
                guard field == "input" || field == "id" || field == "name" else {
                    throw self.invalid(
                        "unknown job field \(TemplateExpression.quoted(field)) (expected input, id or name)")
                }
                path.reserveCapacity(4)
                path.append(.key(field))
            }
        case "tasks":
            root = .tasks(id: try self.parseTaskID())
            if let field = try self.parseField() {
                guard field == "result" || field == "error" || field == "state" else {
                    throw self.invalid(
                        "unknown task field \(TemplateExpression.quoted(field)) (expected result, error or state)")
                }
                path.reserveCapacity(4)
                path.append(.key(field))
            }
        case "":
            throw self.invalid("expected input, job or tasks, found \(self.describeCurrent())")
        default:
            throw self.invalid("unknown root \(TemplateExpression.quoted(rootName)) (expected input, job or tasks)")
        }
        try self.parsePath(into: &path)
        let sourceEnd = self.position

        self.skipWhitespace()
        guard let closing = self.peek() else { throw self.unterminated() }
        guard closing == TemplateSyntax.closeBrace else {
            throw self.invalid("unexpected \(self.describeCurrent()) (expected '.', '[' or '}')")
        }
        self.position += 1
        return TemplateExpression(root: root, path: path, source: self.text(sourceStart..<sourceEnd))
    }

    /// After `job` or `tasks.<id>`: an optional `.name` or `["name"]` field; `nil` when there is none.
    private mutating func parseField() throws(TemplateError) -> String? {
        guard let byte = self.peek() else { return nil }
        if byte == TemplateSyntax.dot {
            self.position += 1
            let name = self.readName()
            if name.isEmpty { throw self.invalid("expected a name after '.', found \(self.describeCurrent())") }
            return name
        }
        if byte == TemplateSyntax.openBracket, let quote = self.peek(offset: 1),
            quote == TemplateSyntax.doubleQuote || quote == TemplateSyntax.singleQuote
        {
            self.position += 1
            let name = try self.parseQuoted()
            try self.expectCloseBracket()
            return name
        }
        return nil
    }

    /// `.step-1`, `.delete[3]`, `.dyn/step` or `["my.id"]`, after `tasks`.
    private mutating func parseTaskID() throws(TemplateError) -> String {
        guard let byte = self.peek() else { throw self.unterminated() }
        if byte == TemplateSyntax.dot {
            self.position += 1
            let start = self.position
            guard let first = self.peek(), TemplateSyntax.isNameByte(first) else {
                throw self.invalid("expected a task id after 'tasks.', found \(self.describeCurrent())")
            }
            while let next = self.peek() {
                if TemplateSyntax.isNameByte(next) || next == TemplateSyntax.slash {
                    self.position += 1
                } else if next == TemplateSyntax.openBracket {
                    // `[digits]` belongs to the id (map instances: `delete[3]`); an outcome object has no indices.
                    var end = self.position + 1
                    while end < self.bytes.count, TemplateSyntax.isDigit(self.bytes[end]) { end += 1 }
                    guard end > self.position + 1, end < self.bytes.count,
                        self.bytes[end] == TemplateSyntax.closeBracket
                    else { break }
                    self.position = end + 1
                } else {
                    break
                }
            }
            return self.text(start..<self.position)
        }
        if byte == TemplateSyntax.openBracket {
            self.position += 1
            guard let quote = self.peek() else { throw self.unterminated() }
            guard quote == TemplateSyntax.doubleQuote || quote == TemplateSyntax.singleQuote else {
                throw self.invalid("expected a quoted task id after 'tasks[', found \(self.describeCurrent())")
            }
            let id = try self.parseQuoted()
            if id.isEmpty { throw self.invalid("the task id is empty") }
            try self.expectCloseBracket()
            return id
        }
        throw self.invalid("expected a task id after 'tasks' (tasks.<id> or tasks[\"<id>\"]), found \(self.describeCurrent())")
    }

    /// `.name`, `[0]`, `["key"]`, `['key']`, repeated; stops before anything else.
    private mutating func parsePath(into path: inout [TemplateExpression.PathSegment]) throws(TemplateError) {
        while let byte = self.peek() {
            guard byte == TemplateSyntax.dot || byte == TemplateSyntax.openBracket else { return }
            // Paths are short; reserving once avoids growing the array one segment at a time.
            if path.capacity < 4 { path.reserveCapacity(4) }
            if byte == TemplateSyntax.dot {
                self.position += 1
                let name = self.readName()
                if name.isEmpty { throw self.invalid("expected a name after '.', found \(self.describeCurrent())") }
                path.append(.key(name))
            } else if byte == TemplateSyntax.openBracket {
                self.position += 1
                guard let next = self.peek() else { throw self.unterminated() }
                if next == TemplateSyntax.doubleQuote || next == TemplateSyntax.singleQuote {
                    path.append(.key(try self.parseQuoted()))
                } else if TemplateSyntax.isDigit(next) {
                    path.append(.index(try self.parseIndex()))
                } else if next == TemplateSyntax.minus {
                    throw self.invalid("an array index must be a non-negative integer")
                } else {
                    throw self.invalid("expected an index or a quoted key after '[', found \(self.describeCurrent())")
                }
                try self.expectCloseBracket()
            }
        }
    }

    private mutating func parseIndex() throws(TemplateError) -> Int {
        let start = self.position
        var value = 0
        while let byte = self.peek(), TemplateSyntax.isDigit(byte) {
            if self.position - start >= 18 { throw self.invalid("the array index is too large") }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
            self.position += 1
        }
        return value
    }

    /// A quoted key starting at the quote; leaves the cursor after the closing quote.
    private mutating func parseQuoted() throws(TemplateError) -> String {
        let quote = self.bytes[self.position]
        self.position += 1
        let start = self.position
        var unescaped: [UInt8]? = nil
        while true {
            guard let byte = self.peek() else {
                throw self.unterminated(detail: "missing closing \(quote == TemplateSyntax.doubleQuote ? "'\"'" : "\"'\"") of a quoted key")
            }
            if byte == quote {
                let key = unescaped.map { String(decoding: $0, as: UTF8.self) } ?? self.text(start..<self.position)
                self.position += 1
                return key
            }
            if byte == TemplateSyntax.backslash {
                if unescaped == nil { unescaped = Array(self.bytes[start..<self.position]) }
                guard let escaped = self.peek(offset: 1) else {
                    self.position += 1
                    throw self.unterminated(detail: "missing closing \(quote == TemplateSyntax.doubleQuote ? "'\"'" : "\"'\"") of a quoted key")
                }
                guard escaped == TemplateSyntax.doubleQuote || escaped == TemplateSyntax.singleQuote
                    || escaped == TemplateSyntax.backslash
                else {
                    self.position += 1
                    throw self.invalid(
                        "unsupported escape '\\\(self.describeCurrent(quotes: false))' in a quoted key (use \\\", \\' or \\\\)")
                }
                unescaped?.append(escaped)
                self.position += 2
            } else {
                unescaped?.append(byte)
                self.position += 1
            }
        }
    }

    private mutating func expectCloseBracket() throws(TemplateError) {
        guard let byte = self.peek() else { throw self.unterminated() }
        guard byte == TemplateSyntax.closeBracket else {
            throw self.invalid("expected ']', found \(self.describeCurrent())")
        }
        self.position += 1
    }

    // MARK: Cursor helpers

    private func peek(offset: Int = 0) -> UInt8? {
        let index = self.position + offset
        return index < self.bytes.count ? self.bytes[index] : nil
    }

    private mutating func skipWhitespace() {
        while let byte = self.peek(), TemplateSyntax.isWhitespace(byte) { self.position += 1 }
    }

    private mutating func readName() -> String {
        let start = self.position
        while let byte = self.peek(), TemplateSyntax.isNameByte(byte) { self.position += 1 }
        return self.text(start..<self.position)
    }

    private func text(_ range: Range<Int>) -> String {
        guard !range.isEmpty else { return "" }
        return String(decoding: UnsafeBufferPointer(rebasing: self.bytes[range]), as: UTF8.self)
    }

    /// The character at the cursor, e.g. `'x'` (or `end of expression` at `}`).
    private func describeCurrent(quotes: Bool = true) -> String {
        guard let byte = self.peek() else { return "the end of the string" }
        if byte == TemplateSyntax.closeBrace && quotes { return "'}'" }
        var end = self.position + 1
        while end < self.bytes.count, self.bytes[end] & 0xC0 == 0x80 { end += 1 }
        let character = self.text(self.position..<end)
        return quotes ? "'" + character + "'" : character
    }

    // MARK: Errors

    /// The expression as written, from `${` through the next `}` at or after the cursor (or the end),
    /// shortened when long.
    private func quotedExpression(throughClosingBrace: Bool) -> String {
        var end = self.bytes.count
        if throughClosingBrace {
            var index = min(self.position, self.bytes.count)
            while index < self.bytes.count {
                if self.bytes[index] == TemplateSyntax.closeBrace {
                    end = index + 1
                    break
                }
                index += 1
            }
        }
        guard end - self.expressionStart > TemplateSyntax.maxQuotedLength else {
            return self.text(self.expressionStart..<end)
        }
        var cut = self.expressionStart + TemplateSyntax.maxQuotedLength
        while cut > self.expressionStart, self.bytes[cut] & 0xC0 == 0x80 { cut -= 1 }
        return self.text(self.expressionStart..<cut) + "…"
    }

    private func invalid(_ detail: String) -> TemplateError {
        // Whatever was expected, running out of text means the `${` was never closed.
        if self.position >= self.bytes.count { return self.unterminated() }
        return .syntax("invalid template expression \(self.quotedExpression(throughClosingBrace: true)): \(detail)")
    }

    private func unterminated(detail: String = "missing closing '}'") -> TemplateError {
        .syntax("unterminated template expression \(self.quotedExpression(throughClosingBrace: false)): \(detail)")
    }
}
