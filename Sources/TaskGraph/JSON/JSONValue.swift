/// A JSON value whose objects keep the order of their keys.
///
/// Numbers that are integers in the source text and fit in `Int` stay exact (`.int`); every other
/// number is a `Double`. Objects are ordered lists of members, so a document round-trips with its
/// keys in the order the client wrote them.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)
}

/// An ordered JSON object. Keys are unique (the parser rejects duplicates).
///
/// Lookup is a linear scan: the objects of a job graph are small (a handful of keys), where a scan
/// beats hashing; large objects built by clients are only passed through, never searched.
public struct JSONObject: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    public typealias Member = (key: String, value: JSONValue)

    public private(set) var members: [Member]

    public init() { self.members = [] }

    public init(_ members: [Member]) { self.members = members }

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.members = elements.map { (key: $0.0, value: $0.1) }
    }

    public var count: Int { self.members.count }
    public var isEmpty: Bool { self.members.isEmpty }
    public var keys: [String] { self.members.map(\.key) }

    public subscript(key: String) -> JSONValue? {
        get {
            for member in self.members where member.key == key { return member.value }
            return nil
        }
        set {
            if let index = self.members.firstIndex(where: { $0.key == key }) {
                if let newValue { self.members[index].value = newValue } else { self.members.remove(at: index) }
            } else if let newValue {
                self.members.append((key: key, value: newValue))
            }
        }
    }

    public func makeIterator() -> IndexingIterator<[Member]> { self.members.makeIterator() }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.members.count == rhs.members.count else { return false }
        for (a, b) in zip(lhs.members, rhs.members) where a.key != b.key || a.value != b.value { return false }
        return true
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.members.count)
        for member in self.members {
            hasher.combine(member.key)
            hasher.combine(member.value)
        }
    }
}

// MARK: - Accessors

extension JSONValue {
    public var isNull: Bool { if case .null = self { return true } else { return false } }

    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }

    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }

    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }

    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }

    /// The value as an exact integer: an `.int`, or a `.double` with no fractional part in `Int` range.
    public var intValue: Int? {
        switch self {
        case .int(let i): return i
        case .double(let d):
            // Compared through `Int(d)` rather than `rounded()`, which calls libm and fails to link
            // in a program that imports neither Foundation nor Glibc.
            guard d >= -9.2e18, d <= 9.2e18, Double(Int(d)) == d else { return nil }
            return Int(d)
        default: return nil
        }
    }

    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// The JSON type name used in validation messages ("object", "array", "string", "number", …).
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

// MARK: - Literals

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(elements.map { (key: $0.0, value: $0.1) }))
    }
}

// MARK: - Equality

extension JSONValue {
    /// Numbers compare by value, so `1` and `1.0` are equal, as JSON readers expect.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.int(let a), .int(let b)): return a == b
        case (.double(let a), .double(let b)): return a == b
        case (.int(let a), .double(let b)), (.double(let b), .int(let a)): return Double(a) == b
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)): return a == b
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let b): hasher.combine(b)
        case .int(let i): hasher.combine(Double(i))
        case .double(let d): hasher.combine(d)
        case .string(let s): hasher.combine(s)
        case .array(let a): hasher.combine(a)
        case .object(let o): hasher.combine(o)
        }
    }
}
