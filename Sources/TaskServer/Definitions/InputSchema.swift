import TaskGraph

/// The input schema of a workflow definition (issue #45): a subset of JSON Schema, enough to
/// catch a wrong input at the door — before a job is stored — with one pointer per problem.
///
/// Keywords: `type` (a name or an array of names: `string`, `number`, `integer`, `boolean`,
/// `object`, `array`, `null`), `properties`, `required`, `additionalProperties` (a boolean or a
/// schema), `enum`, `const`, `items`, `minimum`, `maximum`, `exclusiveMinimum`,
/// `exclusiveMaximum`, `minLength`, `maxLength` (in Unicode characters), `minItems`, `maxItems`,
/// and the annotations `title`, `description`, `default`, `examples`, `$schema`, `$comment` (kept,
/// never checked). Any other keyword is refused when the definition is stored: a schema that
/// silently ignored `pattern` or `oneOf` would let through what its author meant to stop.
indirect enum InputSchema: Sendable, Equatable {
    /// `true` / `{}`: anything; `false`: nothing.
    case any(Bool)
    case rules(Rules)

    struct Rules: Sendable, Equatable {
        var types: [Kind]?
        var properties: [(key: String, value: InputSchema)] = []
        var required: [String] = []
        var additionalProperties: InputSchema?
        var allowed: [JSONValue]?
        var minimum: Double?
        var maximum: Double?
        var exclusiveMinimum: Double?
        var exclusiveMaximum: Double?
        var minLength: Int?
        var maxLength: Int?
        var minItems: Int?
        var maxItems: Int?
        var items: InputSchema?

        static func == (lhs: Rules, rhs: Rules) -> Bool {
            lhs.types == rhs.types && lhs.properties.map(\.key) == rhs.properties.map(\.key)
                && lhs.properties.map(\.value) == rhs.properties.map(\.value) && lhs.required == rhs.required
                && lhs.additionalProperties == rhs.additionalProperties && lhs.allowed == rhs.allowed
                && lhs.minimum == rhs.minimum && lhs.maximum == rhs.maximum
                && lhs.exclusiveMinimum == rhs.exclusiveMinimum && lhs.exclusiveMaximum == rhs.exclusiveMaximum
                && lhs.minLength == rhs.minLength && lhs.maxLength == rhs.maxLength && lhs.minItems == rhs.minItems
                && lhs.maxItems == rhs.maxItems && lhs.items == rhs.items
        }
    }

    enum Kind: String, Sendable, CaseIterable {
        case string, number, integer, boolean, object, array, null

        func matches(_ value: JSONValue) -> Bool {
            switch (self, value) {
            case (.string, .string), (.boolean, .bool), (.object, .object), (.array, .array), (.null, .null):
                return true
            case (.number, .int), (.number, .double), (.integer, .int): return true
            case (.integer, .double(let number)): return number.rounded() == number && number.isFinite
            default: return false
            }
        }
    }

    /// The deepest nesting of schemas (`properties` / `items` / `additionalProperties`) allowed.
    static let maxDepth = 32
    /// The most problems one check reports (the rest are counted in the last one).
    static let maxProblems = 50

    static let annotations: Set<String> = ["title", "description", "default", "examples", "$schema", "$comment"]
    static let keywords: Set<String> = [
        "type", "properties", "required", "additionalProperties", "enum", "const", "items", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
    ]

    // MARK: - Reading a schema

    /// Reads the schema `json` at `pointer`, adding a problem for each thing wrong with it.
    static func parse(_ json: JSONValue, at pointer: String, problems: inout [ValidationProblem]) -> InputSchema {
        self.parse(json, at: pointer, depth: 1, problems: &problems)
    }

    private static func parse(
        _ json: JSONValue,
        at pointer: String,
        depth: Int,
        problems: inout [ValidationProblem]
    ) -> InputSchema {
        func report(_ key: String?, _ message: String) {
            let at = key.map { JSONPointer.appending(pointer, $0) } ?? pointer
            problems.append(ValidationProblem(pointer: at, message: message))
        }
        if case .bool(let allowed) = json { return .any(allowed) }
        guard case .object(let object) = json else {
            report(nil, "must be a schema: an object (or true / false)")
            return .any(true)
        }
        if depth > Self.maxDepth {
            report(nil, "schemas nest at most \(Self.maxDepth) deep")
            return .any(true)
        }
        var rules = Rules()
        for member in object.members where !Self.keywords.contains(member.key) && !Self.annotations.contains(member.key)
        {
            report(
                member.key,
                "unknown or unsupported keyword \"\(member.key.prefix(100))\"; supported: "
                    + Self.keywords.sorted().joined(separator: ", ")
            )
        }
        switch object["type"] {
        case nil: break
        case .string(let name)?:
            if let kind = Kind(rawValue: name) { rules.types = [kind] } else { report("type", Self.typeMessage) }
        case .array(let names)?:
            let kinds = names.compactMap { $0.stringValue.flatMap(Kind.init(rawValue:)) }
            if kinds.count == names.count, !kinds.isEmpty, Set(kinds).count == kinds.count {
                rules.types = kinds
            } else {
                report("type", Self.typeMessage + " (an array: distinct names, at least one)")
            }
        default: report("type", Self.typeMessage)
        }
        if let value = object["properties"] {
            if case .object(let properties) = value {
                for property in properties.members {
                    let at = JSONPointer.appending(JSONPointer.appending(pointer, "properties"), property.key)
                    let schema = Self.parse(property.value, at: at, depth: depth + 1, problems: &problems)
                    rules.properties.append((property.key, schema))
                }
            } else {
                report("properties", "must be an object of schemas, by property name")
            }
        }
        if let value = object["required"] {
            let names = value.arrayValue?.compactMap(\.stringValue)
            if let names, names.count == value.arrayValue?.count, Set(names).count == names.count {
                rules.required = names
            } else {
                report("required", "must be an array of distinct property names")
            }
        }
        if let value = object["additionalProperties"] {
            let at = JSONPointer.appending(pointer, "additionalProperties")
            rules.additionalProperties = Self.parse(value, at: at, depth: depth + 1, problems: &problems)
        }
        if let value = object["items"] {
            let at = JSONPointer.appending(pointer, "items")
            rules.items = Self.parse(value, at: at, depth: depth + 1, problems: &problems)
        }
        if let value = object["enum"] {
            if case .array(let values) = value, !values.isEmpty {
                rules.allowed = values
            } else {
                report("enum", "must be a non-empty array of values")
            }
        }
        if let value = object["const"] {
            if rules.allowed != nil { report("const", "give enum or const, not both") } else { rules.allowed = [value] }
        }
        func number(_ key: String) -> Double? {
            guard let value = object[key] else { return nil }
            guard let number = value.doubleValue, number.isFinite else {
                report(key, "must be a number")
                return nil
            }
            return number
        }
        rules.minimum = number("minimum")
        rules.maximum = number("maximum")
        rules.exclusiveMinimum = number("exclusiveMinimum")
        rules.exclusiveMaximum = number("exclusiveMaximum")
        func count(_ key: String) -> Int? {
            guard let value = object[key] else { return nil }
            guard let count = value.intValue, count >= 0 else {
                report(key, "must be a non-negative integer")
                return nil
            }
            return count
        }
        rules.minLength = count("minLength")
        rules.maxLength = count("maxLength")
        rules.minItems = count("minItems")
        rules.maxItems = count("maxItems")
        return .rules(rules)
    }

    private static let typeMessage =
        "must be one of: " + Kind.allCases.map(\.rawValue).joined(separator: ", ") + ", or an array of them"

    // MARK: - Checking a value

    /// Every way `value` (at `pointer`) breaks the schema, at most `maxProblems`.
    func problems(_ value: JSONValue, at pointer: String) -> [ValidationProblem] {
        var problems: [ValidationProblem] = []
        self.check(value, at: pointer, into: &problems)
        if problems.count > Self.maxProblems {
            let more = problems.count - Self.maxProblems + 1
            problems.removeLast(more)
            problems.append(ValidationProblem(pointer: pointer, message: "and \(more) more problems"))
        }
        return problems
    }

    private func check(_ value: JSONValue, at pointer: String, into problems: inout [ValidationProblem]) {
        // Past the bound, stop looking: the answer lists the first ones.
        guard problems.count <= Self.maxProblems else { return }
        func report(_ message: String) { problems.append(ValidationProblem(pointer: pointer, message: message)) }
        let rules: Rules
        switch self {
        case .any(true): return
        case .any(false):
            report("is not allowed here")
            return
        case .rules(let given): rules = given
        }
        if let types = rules.types, !types.contains(where: { $0.matches(value) }) {
            report("must be " + types.map { Self.article($0) }.joined(separator: " or ") + ", not \(value.typeName)")
            return
        }
        if let allowed = rules.allowed, !allowed.contains(where: { Self.equal($0, value) }) {
            let shown = allowed.prefix(10).map(\.jsonString).joined(separator: ", ")
            report(
                allowed.count == 1 ? "must be \(shown)" : "must be one of: \(shown)\(allowed.count > 10 ? ", …" : "")"
            )
        }
        switch value {
        case .int, .double:
            let number = value.doubleValue!
            if let minimum = rules.minimum, number < minimum { report("must be at least \(Self.show(minimum))") }
            if let maximum = rules.maximum, number > maximum { report("must be at most \(Self.show(maximum))") }
            if let bound = rules.exclusiveMinimum, number <= bound { report("must be more than \(Self.show(bound))") }
            if let bound = rules.exclusiveMaximum, number >= bound { report("must be less than \(Self.show(bound))") }
        case .string(let text):
            if rules.minLength != nil || rules.maxLength != nil {
                let length = text.unicodeScalars.count
                if let minimum = rules.minLength, length < minimum {
                    report("must be at least \(minimum) characters long")
                }
                if let maximum = rules.maxLength, length > maximum {
                    report("must be at most \(maximum) characters long")
                }
            }
        case .array(let items):
            if let minimum = rules.minItems, items.count < minimum { report("must have at least \(minimum) items") }
            if let maximum = rules.maxItems, items.count > maximum { report("must have at most \(maximum) items") }
            if let schema = rules.items {
                for (index, item) in items.enumerated() {
                    schema.check(item, at: pointer + "/\(index)", into: &problems)
                }
            }
        case .object(let object):
            for name in rules.required where object[name] == nil {
                problems.append(ValidationProblem(pointer: JSONPointer.appending(pointer, name), message: "required"))
            }
            for member in object.members {
                let at = JSONPointer.appending(pointer, member.key)
                if let schema = rules.properties.first(where: { $0.key == member.key })?.value {
                    schema.check(member.value, at: at, into: &problems)
                } else if case .any(false) = rules.additionalProperties {
                    let known = rules.properties.map(\.key).joined(separator: ", ")
                    problems.append(
                        ValidationProblem(
                            pointer: at,
                            message: "unknown field \"\(member.key.prefix(100))\""
                                + (known.isEmpty ? "" : "; expected one of: \(known)")
                        )
                    )
                } else if let schema = rules.additionalProperties {
                    schema.check(member.value, at: at, into: &problems)
                }
            }
        default: break
        }
    }

    /// JSON Schema's equality: numbers by value (1 equals 1.0), objects regardless of key order.
    private static func equal(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.int, .double), (.double, .int): return a.doubleValue == b.doubleValue
        case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy { Self.equal($0, $1) }
        case (.object(let x), .object(let y)):
            return x.count == y.count
                && x.members.allSatisfy { member in y[member.key].map { Self.equal(member.value, $0) } ?? false }
        default: return a == b
        }
    }

    private static func article(_ kind: Kind) -> String {
        switch kind {
        case .string: "a string"
        case .number: "a number"
        case .integer: "an integer"
        case .boolean: "a boolean"
        case .object: "an object"
        case .array: "an array"
        case .null: "null"
        }
    }

    private static func show(_ number: Double) -> String {
        number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }
}
