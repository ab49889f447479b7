// Templates (SPEC §1.3): `${expr}` inside strings of `params` and a node's `input`. The grammar
// is at the top of TemplateSyntax.swift, the parser.

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
