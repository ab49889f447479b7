import NIOHTTP1
import TaskCore
import TaskGraph
import TaskWorkerProtocol

// The bodies of the worker protocol (SPEC §6), checked field by field: every problem is reported
// with its JSON pointer in one `422 request.invalid`, as job submissions are.

extension BodyReader {
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
    var completion: CompletionBody

    static let fields = CompletionBody.Form.lease.fields

    /// Reads the outcome members of `reader`'s object (and `leaseId` when `withLeaseId`).
    init(_ reader: inout BodyReader, withLeaseId: Bool) {
        self.leaseId = withLeaseId ? reader.leaseId("leaseId") : ""
        self.completion = CompletionBody(reading: &reader, form: .lease)
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

/// What a worker's completion of a lease did, on this server or on the one that holds the lease.
enum LeaseCompletion: Sendable {
    /// Recorded and durable: the task's node, and where a `claimNext` claims.
    case done(node: JSONValue, pool: String, workerId: String)
    case gone(pool: String?, workerId: String?)
    case notFound
}
