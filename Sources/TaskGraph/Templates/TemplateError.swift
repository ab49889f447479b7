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
