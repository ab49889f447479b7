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
        self.forEachTemplateString(pointer: "") { pointer, string in
            do throws(TemplateError) {
                _ = try Template(parsing: string)
            } catch {
                problems.append((pointer: pointer, message: error.message))
            }
        }
        return problems
    }

    /// Every template expression inside this value, with the JSON pointer (relative to this value) of
    /// the string it appears in; malformed strings are skipped (see ``templateSyntaxProblems()``).
    /// Validation uses this to check, for instance, the task ids that templates refer to.
    public func templateExpressions() -> [(pointer: String, expression: TemplateExpression)] {
        var found: [(pointer: String, expression: TemplateExpression)] = []
        self.forEachTemplateString(pointer: "") { pointer, string in
            guard let template = try? Template(parsing: string) else { return }
            for expression in template.expressions { found.append((pointer: pointer, expression: expression)) }
        }
        return found
    }

    /// Calls `body` with each string inside this value that contains a template opener (`${`), and
    /// its JSON pointer, in document order.
    private func forEachTemplateString(pointer: String, _ body: (String, String) -> Void) {
        switch self {
        case .string(let string):
            if TemplateSyntax.containsOpener(string) { body(pointer, string) }
        case .array(let items):
            for (index, item) in items.enumerated() {
                item.forEachTemplateString(pointer: pointer + "/" + String(index), body)
            }
        case .object(let object):
            for member in object.members {
                member.value.forEachTemplateString(
                    pointer: pointer + "/" + JSONValue.escapePointerToken(member.key),
                    body
                )
            }
        default:
            break
        }
    }

    /// An object key as a JSON pointer token (RFC 6901 §3): `~` → `~0`, `/` → `~1`.
    package static func escapePointerToken(_ key: String) -> String {
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
