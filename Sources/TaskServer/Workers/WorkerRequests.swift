import NIOHTTP1
import TaskCore
import TaskGraph

// The bodies of the worker protocol (SPEC §6), checked field by field: every problem is reported
// with its JSON pointer in one `422 request.invalid`, as job submissions are.

/// The fields of one body object, checked as they are read.
struct BodyReader {
    let object: JSONObject
    let base: String
    var problems: [ValidationProblem] = []

    /// Starts reading `value` (at `base`): it must be an object with only `allowed` members.
    init(_ value: JSONValue, at base: String = "", allowed: Set<String>) {
        guard case .object(let object) = value else {
            self.object = JSONObject()
            self.base = base
            self.problems = [ValidationProblem(pointer: base, message: "must be an object")]
            return
        }
        self.object = object
        self.base = base
        for key in object.keys where !allowed.contains(key) {
            let known = allowed.sorted().joined(separator: ", ")
            self.problems.append(
                ValidationProblem(
                    pointer: JSONPointer.appending(base, key),
                    message: "unknown field \"\(key.prefix(100))\"; expected one of: \(known)"
                )
            )
        }
    }

    private func pointer(_ key: String) -> String { JSONPointer.appending(self.base, key) }

    mutating func report(_ key: String, _ message: String) {
        self.problems.append(ValidationProblem(pointer: self.pointer(key), message: message))
    }

    mutating func integer(_ key: String, in range: ClosedRange<Int>, default value: Int) -> Int {
        guard let raw = self.object[key] else { return value }
        guard let int = raw.intValue, range.contains(int) else {
            self.report(key, "must be an integer from \(range.lowerBound) to \(range.upperBound)")
            return value
        }
        return int
    }

    mutating func boolean(_ key: String, default value: Bool) -> Bool {
        guard let raw = self.object[key] else { return value }
        guard case .bool(let bool) = raw else {
            self.report(key, "must be a boolean")
            return value
        }
        return bool
    }

    /// A worker id: 1…200 printable ASCII characters without spaces.
    mutating func workerId(_ key: String) -> String {
        guard let raw = self.object[key] else {
            self.report(key, "required")
            return ""
        }
        guard let string = raw.stringValue, !string.isEmpty, string.utf8.count <= 200,
            string.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            self.report(key, "must be 1 to 200 printable ASCII characters without spaces")
            return ""
        }
        return string
    }

    /// A lease id (any string; the hub decides whether it names a lease).
    mutating func leaseId(_ key: String) -> String {
        // Lengths in code points, as openapi.yaml's maxLength counts them.
        guard let string = self.object[key]?.stringValue, !string.isEmpty, string.unicodeScalars.count <= 100 else {
            self.report(key, self.object[key] == nil ? "required" : "must be a lease id from a claim")
            return ""
        }
        return string
    }

    /// An optional list of worker action names, 1…100 of them.
    mutating func actions(_ key: String) -> [String]? {
        guard let raw = self.object[key] else { return nil }
        guard case .array(let items) = raw, (1...100).contains(items.count) else {
            self.report(key, "must be an array of 1 to 100 action names")
            return nil
        }
        var names: [String] = []
        for (index, item) in items.enumerated() {
            if let name = item.stringValue, JobDecoder.isWorkerActionName(name) {
                names.append(name)
            } else {
                self.problems.append(
                    ValidationProblem(
                        pointer: JSONPointer.appending(self.pointer(key), String(index)),
                        message: "must be 1 to 100 characters of A-Z a-z 0-9 _ . : -"
                    )
                )
            }
        }
        return names
    }

    /// Throws the problems found, if any.
    func check(_ what: String) throws(HTTPProblem) {
        guard !self.problems.isEmpty else { return }
        throw HTTPProblem(
            .unprocessableEntity,
            code: "request.invalid",
            detail: self.problems.count == 1
                ? "the \(what) is invalid: \(self.problems[0])"
                : "the \(what) is invalid (\(self.problems.count) problems)",
            errors: Array(self.problems.prefix(100))
        )
    }
}

/// `POST /v1/executors/{name}/claim`, and a completion's `claimNext`.
struct ClaimRequest: Sendable {
    static let maxItems = 100
    static let maxWaitMs = 60_000

    var workerId: String
    var actions: [String]?
    var max: Int
    var waitMs: Int

    /// The claim body.
    init(_ body: JSONValue) throws(HTTPProblem) {
        var reader = BodyReader(body, allowed: ["workerId", "actions", "max", "waitMs"])
        self.workerId = reader.workerId("workerId")
        self.actions = reader.actions("actions")
        self.max = reader.integer("max", in: 1...Self.maxItems, default: 1)
        self.waitMs = reader.integer("waitMs", in: 0...Self.maxWaitMs, default: 0)
        try reader.check("claim")
    }

    /// A `claimNext` member: the worker is the lease's.
    init(next value: JSONValue, at pointer: String, workerId: String, problems: inout [ValidationProblem]) {
        var reader = BodyReader(value, at: pointer, allowed: ["actions", "max", "waitMs"])
        self.workerId = workerId
        self.actions = reader.actions("actions")
        self.max = reader.integer("max", in: 1...Self.maxItems, default: 1)
        self.waitMs = reader.integer("waitMs", in: 0...Self.maxWaitMs, default: 0)
        problems += reader.problems
    }
}

/// A worker's outcome for one lease: `{"result"}` or `{"error", "retryable"?}`.
struct LeaseOutcome: Sendable {
    var leaseId: String
    var outcome: Outcome<JSONValue>
    var retryable: Bool

    static let fields: Set<String> = ["result", "error", "retryable"]

    /// Reads the outcome members of `reader`'s object (and `leaseId` when `withLeaseId`).
    init(_ reader: inout BodyReader, withLeaseId: Bool) {
        self.leaseId = withLeaseId ? reader.leaseId("leaseId") : ""
        let result = reader.object["result"]
        let error = reader.object["error"]
        self.retryable = reader.boolean("retryable", default: true)
        self.outcome = .success(.null)
        if (result == nil) == (error == nil) {
            reader.problems.append(
                ValidationProblem(pointer: reader.base, message: "give exactly one of \"result\" and \"error\"")
            )
            return
        }
        if let result {
            if reader.object["retryable"] != nil { reader.report("retryable", "only goes with \"error\"") }
            self.outcome = .success(result)
            return
        }
        var errorReader = BodyReader(
            error!,
            at: JSONPointer.appending(reader.base, "error"),
            allowed: ["code", "message", "details"]
        )
        if errorReader.object["code"]?.stringValue.map({ !$0.isEmpty && $0.unicodeScalars.count <= 200 }) != true {
            errorReader.report("code", "must be a string of 1 to 200 characters")
        }
        if errorReader.object["message"]?.stringValue == nil { errorReader.report("message", "must be a string") }
        reader.problems += errorReader.problems
        if let taskError = TaskError(json: error!) {
            // A worker names no task: the engine fills `taskId` in.
            self.outcome = .failure(
                TaskError(code: taskError.code, message: taskError.message, details: taskError.details)
            )
        }
    }
}

/// `POST /v1/leases/{leaseId}/complete`.
struct CompleteRequest: Sendable {
    var outcome: LeaseOutcome
    var claimNext: ClaimRequest?

    init(_ body: JSONValue, leaseId: String) throws(HTTPProblem) {
        var reader = BodyReader(body, allowed: LeaseOutcome.fields.union(["claimNext"]))
        self.outcome = LeaseOutcome(&reader, withLeaseId: false)
        self.outcome.leaseId = leaseId
        if let next = reader.object["claimNext"] {
            self.claimNext = ClaimRequest(next: next, at: "/claimNext", workerId: "", problems: &reader.problems)
        }
        try reader.check("completion")
    }
}

/// `POST /v1/leases/complete`.
struct BatchCompleteRequest: Sendable {
    var items: [LeaseOutcome] = []
    var claimNext: ClaimRequest?

    init(_ body: JSONValue) throws(HTTPProblem) {
        var reader = BodyReader(body, allowed: ["items", "claimNext"])
        if case .array(let items)? = reader.object["items"], (1...ClaimRequest.maxItems).contains(items.count) {
            for (index, item) in items.enumerated() {
                var itemReader = BodyReader(
                    item,
                    at: "/items/\(index)",
                    allowed: LeaseOutcome.fields.union(["leaseId"])
                )
                self.items.append(LeaseOutcome(&itemReader, withLeaseId: true))
                reader.problems += itemReader.problems
            }
        } else {
            reader.report("items", reader.object["items"] == nil ? "required" : "must be an array of 1 to 100 outcomes")
        }
        if let next = reader.object["claimNext"] {
            self.claimNext = ClaimRequest(next: next, at: "/claimNext", workerId: "", problems: &reader.problems)
        }
        try reader.check("batch completion")
    }
}

/// `POST /v1/leases/heartbeat`.
struct BatchHeartbeatRequest: Sendable {
    var items: [(leaseId: String, progress: JSONValue?)] = []

    init(_ body: JSONValue) throws(HTTPProblem) {
        var reader = BodyReader(body, allowed: ["items"])
        if case .array(let items)? = reader.object["items"], (1...ClaimRequest.maxItems).contains(items.count) {
            for (index, item) in items.enumerated() {
                var itemReader = BodyReader(item, at: "/items/\(index)", allowed: ["leaseId", "progress"])
                self.items.append((itemReader.leaseId("leaseId"), itemReader.object["progress"]))
                reader.problems += itemReader.problems
            }
        } else {
            reader.report("items", reader.object["items"] == nil ? "required" : "must be an array of 1 to 100 leases")
        }
        try reader.check("batch heartbeat")
    }
}
