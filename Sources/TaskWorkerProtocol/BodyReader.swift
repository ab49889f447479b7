import TaskGraph

/// The fields of one body object of the worker protocol (SPEC §6) or of a task completion, checked
/// as they are read: every problem is kept with its JSON pointer, for one `422` that lists them
/// all (the server turns them into its problem; a client may show them).
package struct BodyReader {
    /// How an unknown field's problem is worded.
    package enum UnknownFieldWording: Sendable {
        /// `unknown field "extra"; expected one of: a, b` (the name cut at 100 characters).
        case listingExpected
        /// `unknown field "extra"`, the name whole: what an `await` task's completion answers.
        case plain
    }

    package let object: JSONObject
    package let base: String
    /// Whether the value read is an object (otherwise `object` is empty and a problem says so).
    package let isObject: Bool
    package var problems: [ValidationProblem] = []

    /// Starts reading `value` (at `base`): it must be an object with only `allowed` members.
    package init(
        _ value: JSONValue,
        at base: String = "",
        allowed: Set<String>,
        wording: UnknownFieldWording = .listingExpected
    ) {
        self.base = base
        guard case .object(let object) = value else {
            self.object = JSONObject()
            self.isObject = false
            self.problems = [ValidationProblem(pointer: base, message: "must be an object")]
            return
        }
        self.object = object
        self.isObject = true
        for key in object.keys where !allowed.contains(key) {
            let message: String
            switch wording {
            case .listingExpected:
                let known = allowed.sorted().joined(separator: ", ")
                message = "unknown field \"\(key.prefix(100))\"; expected one of: \(known)"
            case .plain:
                message = "unknown field \"\(key)\""
            }
            self.problems.append(ValidationProblem(pointer: JSONPointer.appending(base, key), message: message))
        }
    }

    package func pointer(_ key: String) -> String { JSONPointer.appending(self.base, key) }

    package mutating func report(_ key: String, _ message: String) {
        self.problems.append(ValidationProblem(pointer: self.pointer(key), message: message))
    }

    package mutating func integer(_ key: String, in range: ClosedRange<Int>, default value: Int) -> Int {
        guard let raw = self.object[key] else { return value }
        guard let int = raw.intValue, range.contains(int) else {
            self.report(key, "must be an integer from \(range.lowerBound) to \(range.upperBound)")
            return value
        }
        return int
    }

    package mutating func boolean(_ key: String, default value: Bool) -> Bool {
        guard let raw = self.object[key] else { return value }
        guard case .bool(let bool) = raw else {
            self.report(key, "must be a boolean")
            return value
        }
        return bool
    }

    /// A worker id (`WorkerID.isValid`).
    package mutating func workerId(_ key: String) -> String {
        guard let raw = self.object[key] else {
            self.report(key, "required")
            return ""
        }
        guard let string = raw.stringValue, WorkerID.isValid(string) else {
            self.report(key, WorkerID.requirement)
            return ""
        }
        return string
    }

    /// A lease id (any string; the server decides whether it names a lease).
    package mutating func leaseId(_ key: String) -> String {
        // Lengths in code points, as openapi.yaml's maxLength counts them.
        guard let string = self.object[key]?.stringValue, !string.isEmpty, string.unicodeScalars.count <= 100 else {
            self.report(key, self.object[key] == nil ? "required" : "must be a lease id from a claim")
            return ""
        }
        return string
    }

    /// An optional list of worker action names (`WorkerActionName.isValid`), 1…100 of them.
    package mutating func actions(_ key: String) -> [String]? {
        guard let raw = self.object[key] else { return nil }
        guard case .array(let items) = raw, (1...100).contains(items.count) else {
            self.report(key, "must be an array of 1 to 100 action names")
            return nil
        }
        var names: [String] = []
        for (index, item) in items.enumerated() {
            if let name = item.stringValue, WorkerActionName.isValid(name) {
                names.append(name)
            } else {
                self.problems.append(
                    ValidationProblem(
                        pointer: JSONPointer.appending(self.pointer(key), index),
                        message: WorkerActionName.requirement
                    )
                )
            }
        }
        return names
    }
}
