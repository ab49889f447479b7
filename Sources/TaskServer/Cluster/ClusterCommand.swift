import TaskCore
import TaskGraph

/// A command one server relays to another through the database (SPEC §9): for a job the other
/// runs, for a lease of such a job, or for the other server itself (a claim of its queued
/// attempts). Stored as a `commands` row (`Row`, the one codec: `row` and `init?(row:)`), applied
/// by its target, answered with a `ClusterAnswer`.
///
/// Claims are relayed to the server that runs the job rather than taken from the database with
/// `SKIP LOCKED` by whichever server a worker reaches: the attempt is a live part of its job's
/// run — its `task.started` event, its lease timers (heartbeat expiry, `timeoutMs`), the outcome
/// that lets the graph go on — and all of that stays with the one server that runs the job, as
/// the lease does. A row lock would hand the attempt out, but its run would still have to be told,
/// and its timers armed, on the owner.
public enum ClusterCommand: Sendable, Equatable {
    /// Cancel task `task` of job `job` and its subtree (its owner applies it).
    case cancelTask(job: String, task: String)
    /// Complete the running `await` task `task` of job `job`.
    case complete(job: String, task: String, outcome: TaskOutcome)
    /// Lease up to `leases.count` queued attempts of `pool` on `server` for `workerId`, each under
    /// one of `leases` (hashes of lease ids the relaying server made: the ids never leave it).
    case claim(server: String, pool: String, workerId: String, actions: [String]?, leases: [String])
    /// For the lease whose id hashes to `lease`: a heartbeat.
    case leaseHeartbeat(lease: String, progress: JSONValue?)
    /// For lease `lease`: the worker's outcome.
    case leaseComplete(lease: String, outcome: TaskOutcome, retryable: Bool)
    /// For lease `lease`: its claim's answer never reached the worker; give the attempt back.
    case leaseRelease(lease: String)

    /// A task's outcome as a command carries it.
    public enum TaskOutcome: Sendable, Equatable {
        case result(JSONValue)
        case error(TaskError)

        init(_ outcome: Outcome<JSONValue>) {
            switch outcome {
            case .success(let value): self = .result(value)
            case .failure(let error as TaskError): self = .error(error)
            case .failure, .cancelled: self = .error(TaskError(code: "task.failed", message: "failed"))
            }
        }

        var outcome: Outcome<JSONValue> {
            switch self {
            case .result(let value): .success(value)
            case .error(let error): .failure(error)
            }
        }

        var json: JSONValue {
            switch self {
            case .result(let value): ["result": value]
            case .error(let error): ["error": error.json]
            }
        }

        init?(json: JSONValue?) {
            if let result = json?["result"] {
                self = .result(result)
            } else if let error = json?["error"].flatMap(TaskError.init(json:)) {
                self = .error(error)
            } else {
                return nil
            }
        }
    }

    /// Whether the external pools apply it (the job service applies the others).
    var isPoolCommand: Bool {
        switch self {
        case .cancelTask, .complete: false
        case .claim, .leaseHeartbeat, .leaseComplete, .leaseRelease: true
        }
    }

    /// The job whose owner applies it; nil for a claim (its server applies it) and a lease command
    /// (the stored lease names the job: `leaseHash`).
    var jobID: String? {
        switch self {
        case .cancelTask(let job, _), .complete(let job, _, _): job
        default: nil
        }
    }

    /// The hash of the lease a lease command is for (never the lease id).
    var leaseHash: String? {
        switch self {
        case .leaseHeartbeat(let lease, _), .leaseComplete(let lease, _, _), .leaseRelease(let lease): lease
        default: nil
        }
    }

    /// A command as its `commands` row holds it: `kind`, `task_id`, `body`, `server` (`job_id` is
    /// the routing: a lease command's comes from the stored lease).
    struct Row: Sendable, Equatable {
        var kind: String
        var taskID: String
        var body: JSONValue?
        var server: String?
        var jobID: String?
    }

    var row: Row {
        switch self {
        case .cancelTask(let job, let task):
            return Row(kind: "cancel-task", taskID: task, jobID: job)
        case .complete(let job, let task, let outcome):
            return Row(kind: "complete", taskID: task, body: outcome.json, jobID: job)
        case .claim(let server, let pool, let workerId, let actions, let leases):
            var body: JSONObject = [
                "pool": .string(pool), "workerId": .string(workerId), "leases": .array(leases.map { .string($0) }),
            ]
            if let actions { body["actions"] = .array(actions.map { .string($0) }) }
            return Row(kind: "claim", taskID: pool, body: .object(body), server: server)
        case .leaseHeartbeat(let lease, let progress):
            var body: JSONObject = ["lease": .string(lease)]
            if let progress { body["progress"] = progress }
            return Row(kind: "lease-heartbeat", taskID: "", body: .object(body))
        case .leaseComplete(let lease, let outcome, let retryable):
            return Row(
                kind: "lease-complete",
                taskID: "",
                body: ["lease": .string(lease), "outcome": outcome.json, "retryable": .bool(retryable)]
            )
        case .leaseRelease(let lease):
            return Row(kind: "lease-release", taskID: "", body: ["lease": .string(lease)])
        }
    }

    /// The command a row holds; nil for one this server cannot read (a newer server's kind, or
    /// a body without what its kind needs).
    init?(row: Row) {
        let body = row.body
        switch row.kind {
        case "cancel-task":
            guard let job = row.jobID else { return nil }
            self = .cancelTask(job: job, task: row.taskID)
        case "complete":
            guard let job = row.jobID, let outcome = TaskOutcome(json: body) else { return nil }
            self = .complete(job: job, task: row.taskID, outcome: outcome)
        case "claim":
            guard let server = row.server, let pool = body?["pool"]?.stringValue,
                let workerId = body?["workerId"]?.stringValue,
                let leases = body?["leases"]?.arrayValue?.compactMap(\.stringValue)
            else { return nil }
            let actions = body?["actions"]?.arrayValue?.compactMap(\.stringValue)
            self = .claim(server: server, pool: pool, workerId: workerId, actions: actions, leases: leases)
        case "lease-heartbeat":
            guard let lease = body?["lease"]?.stringValue else { return nil }
            self = .leaseHeartbeat(lease: lease, progress: body?["progress"])
        case "lease-complete":
            guard let lease = body?["lease"]?.stringValue, let outcome = TaskOutcome(json: body?["outcome"]) else {
                return nil
            }
            self = .leaseComplete(lease: lease, outcome: outcome, retryable: body?["retryable"]?.boolValue ?? true)
        case "lease-release":
            guard let lease = body?["lease"]?.stringValue else { return nil }
            self = .leaseRelease(lease: lease)
        default:
            return nil
        }
    }
}

/// The answer to a relayed `ClusterCommand`, as its target recorded it (`commands.result`; the
/// one codec: `json` and `init?(json:)`).
public enum ClusterAnswer: Sendable, Equatable {
    /// To `cancelTask` and `complete`: what the job's server answered.
    case task(JobService.TaskCommandOutcome)
    /// To `claim`: the claim items leased (their `leaseId`s filled in by the relaying server).
    case claimed([JSONValue])
    /// To a lease command.
    case lease(LeaseAnswer)
    /// The target could not record the outcome (its run was given up to another server meanwhile):
    /// the caller retries.
    case unavailable

    public enum LeaseAnswer: Sendable, Equatable {
        /// Heartbeated: whether the job or node was cancelled.
        case alive(cancelRequested: Bool)
        /// Completed and durable: the task's node, and where a `claimNext` claims.
        case completed(node: JSONValue, pool: String, workerId: String)
        /// The lease ended (`409 lease.gone`); where a `claimNext` claims, when known.
        case gone(pool: String?, workerId: String?)
        /// No such lease (never issued, or its job deleted).
        case notFound
        /// Given back.
        case released
    }

    var json: JSONValue {
        switch self {
        case .task(let outcome):
            switch outcome {
            case .done(let node): return ["outcome": "done", "node": Self.json(node)]
            case .alreadyCancelled(let node): return ["outcome": "alreadyCancelled", "node": Self.json(node)]
            case .jobNotFound: return ["outcome": "jobNotFound"]
            case .taskNotFound: return ["outcome": "taskNotFound"]
            case .terminal: return ["outcome": "terminal"]
            case .notAwait: return ["outcome": "notAwait"]
            case .notRunning: return ["outcome": "notRunning"]
            }
        case .claimed(let items):
            return ["items": .array(items)]
        case .lease(.alive(let cancelRequested)):
            return ["outcome": "ok", "cancelRequested": .bool(cancelRequested)]
        case .lease(.completed(let node, let pool, let workerId)):
            // "done" as a job command's, told apart by where to claim next (the form servers of the
            // previous version send and read).
            return ["outcome": "done", "node": node, "pool": .string(pool), "workerId": .string(workerId)]
        case .lease(.gone(let pool, let workerId)):
            var answer: JSONObject = ["outcome": "gone"]
            if let pool { answer["pool"] = .string(pool) }
            if let workerId { answer["workerId"] = .string(workerId) }
            return .object(answer)
        case .lease(.notFound):
            return ["outcome": "notFound"]
        case .lease(.released):
            return ["outcome": "released"]
        case .unavailable:
            return ["outcome": "unavailable"]
        }
    }

    init?(json: JSONValue) {
        guard let outcome = json["outcome"]?.stringValue else {
            guard let items = json["items"]?.arrayValue else { return nil }
            self = .claimed(items)
            return
        }
        let node = json["node"].flatMap { try? StoredRecords.decodeNodes(.array([$0])).first }
        switch outcome {
        case "done":
            if let pool = json["pool"]?.stringValue, let workerId = json["workerId"]?.stringValue {
                self = .lease(.completed(node: json["node"] ?? .null, pool: pool, workerId: workerId))
                return
            }
            guard let node else { return nil }
            self = .task(.done(node))
        case "alreadyCancelled":
            guard let node else { return nil }
            self = .task(.alreadyCancelled(node))
        case "jobNotFound": self = .task(.jobNotFound)
        case "taskNotFound": self = .task(.taskNotFound)
        case "terminal": self = .task(.terminal)
        case "notAwait": self = .task(.notAwait)
        case "notRunning": self = .task(.notRunning)
        case "ok": self = .lease(.alive(cancelRequested: json["cancelRequested"]?.boolValue ?? false))
        case "gone": self = .lease(.gone(pool: json["pool"]?.stringValue, workerId: json["workerId"]?.stringValue))
        case "notFound", "leaseNotStored": self = .lease(.notFound)
        case "released": self = .lease(.released)
        case "unavailable": self = .unavailable
        default: return nil
        }
    }

    private static func json(_ node: NodeRecord) -> JSONValue {
        (try? JSONParser.parse(StoredRecords.encodeNodes([node]), limits: StoredRecords.limits))?.arrayValue?.first
            ?? .null
    }
}
