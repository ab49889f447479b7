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
                if TemplateSyntax.isName(key) {
                    text += "." + key
                } else {
                    text += "[" + TemplateExpression.quoted(key) + "]"
                }
            case .index(let index):
                text += "[\(index)]"
            }
        }
        return text
    }

    /// `"text"` with `"` and `\` escaped, as written in a bracket key.
    package static func quoted(_ text: String) -> String {
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
