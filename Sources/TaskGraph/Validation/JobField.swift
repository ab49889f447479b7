/// A top-level field of a job document defined by a layer above TaskGraph, as the server defines
/// `webhook` (SPEC §4): the decoder accepts its name, hands it the field's value and keeps what it
/// decodes in `JobSpec.fields`, where that layer reads it back typed.
///
/// Like `Action.validate(params:at:)`, `decode` reports every problem it finds, each at the pointer
/// of the offending value; the decoder reports them among its own (after `labels`, before `graph`),
/// and names the field in unknown-field messages and "did you mean" suggestions.
///
/// ```swift
/// struct UrgencyField: JobField {
///     var name: String { "urgency" }
///
///     func decode(_ value: JSONValue, at pointer: String) throws(ValidationError) -> Int {
///         guard let level = value.intValue, (0...9).contains(level) else {
///             throw ValidationError([ValidationProblem(pointer: pointer, message: "must be an integer from 0 to 9")])
///         }
///         return level
///     }
/// }
///
/// let decoder = JobDecoder(actions: .builtins, executors: ["default"], fields: [UrgencyField()])
/// let urgency = try decoder.decodeJob(json).fields[UrgencyField.self]  // Int?
/// ```
public protocol JobField: Sendable {
    /// What the field decodes to.
    associatedtype Value: Sendable & Equatable

    /// The field's name in the job object; not one of SPEC §1's own fields.
    var name: String { get }

    /// Decodes and validates the field's value (any JSON the job gives, `null` included).
    ///
    /// - Parameters:
    ///   - value: the field's value.
    ///   - pointer: the pointer of `value` (`/webhook`), the base of every problem's pointer.
    /// - Throws: a `ValidationError` with every problem found.
    func decode(_ value: JSONValue, at pointer: String) throws(ValidationError) -> Value
}

/// The decoded values of a job's extra top-level fields, by field type (see `JobField`).
public struct JobFieldValues: Sendable, Equatable {
    private var values: [ObjectIdentifier: any Sendable & Equatable] = [:]

    /// No values.
    public init() {}

    /// The value `field` decoded; `nil` when the job does not have the field.
    public subscript<Field: JobField>(field: Field.Type) -> Field.Value? {
        get { self.values[ObjectIdentifier(field)] as? Field.Value }
        set { self.values[ObjectIdentifier(field)] = newValue }
    }

    /// Whether no field has a value.
    public var isEmpty: Bool { self.values.isEmpty }

    public static func == (lhs: JobFieldValues, rhs: JobFieldValues) -> Bool {
        guard lhs.values.count == rhs.values.count else { return false }
        for (key, value) in lhs.values {
            guard let other = rhs.values[key], Self.isEqual(value, other) else { return false }
        }
        return true
    }

    /// Whether two values of unknown types are of one type and equal.
    private static func isEqual(_ lhs: any Equatable, _ rhs: any Equatable) -> Bool {
        func compare<Value: Equatable>(_ lhs: Value) -> Bool { (rhs as? Value) == lhs }
        return compare(lhs)
    }
}
