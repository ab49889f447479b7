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
