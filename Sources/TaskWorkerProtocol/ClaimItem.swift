import TaskGraph

/// One task handed out by a claim (SPEC §6): what `POST /v1/executors/{name}/claim` answers per
/// leased task, in `items` (and a completion's `claimNext` in `claimed`).
///
/// The server writes it with `json`; a worker reads it with `init(json:)`. `params` and `input`
/// are kept as the server sent them, members in their order.
///
/// ```json
/// {"leaseId": "lease_…", "jobId": "…", "taskId": "thumb", "action": "resize",
///  "params": {"width": 320}, "input": {…}, "attempt": 1, "heartbeatTimeoutMs": 30000,
///  "deadline": "2025-01-01T00:10:00.000Z",
///  "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
/// ```
public struct ClaimItem: Sendable, Equatable {
    /// The lease: an unguessable capability for this attempt, sent back with heartbeats and the
    /// completion. Never log it.
    public var leaseId: String
    public var jobId: String
    public var taskId: String
    /// The task's action (`WorkerActionName`).
    public var action: String
    /// The task's params, templates resolved.
    public var params: JSONValue
    /// The job's input.
    public var input: JSONValue
    /// The attempt, counted from 1.
    public var attempt: Int
    /// A lease not heartbeated for this long expires.
    public var heartbeatTimeoutMs: Int
    /// When the attempt times out (RFC 3339, from the task's `timeoutMs`); nil when it has no limit.
    public var deadline: String?
    /// The W3C `traceparent` of the attempt's lease span, when the job is traced (issue #46): a
    /// worker's own spans descend from it (`taskserver worker` passes it to its command as
    /// `TRACEPARENT`, with `TRACESTATE`, the convention OpenTelemetry SDKs read).
    public var traceparent: String?
    public var tracestate: String?

    /// A claim item with every field given.
    public init(
        leaseId: String,
        jobId: String,
        taskId: String,
        action: String,
        params: JSONValue,
        input: JSONValue,
        attempt: Int,
        heartbeatTimeoutMs: Int,
        deadline: String?,
        traceparent: String? = nil,
        tracestate: String? = nil
    ) {
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.leaseId = leaseId
        self.jobId = jobId
        self.taskId = taskId
        self.action = action
        self.params = params
        self.input = input
        self.attempt = attempt
        self.heartbeatTimeoutMs = heartbeatTimeoutMs
        self.deadline = deadline
    }

    /// Reads a claim item; nil when a field a worker needs is missing or of the wrong type.
    /// Missing `params` or `input` read as `null`, a `deadline` that is not a string as none;
    /// unknown members are ignored (a newer server may add some).
    public init?(json: JSONValue) {
        guard let leaseId = json["leaseId"]?.stringValue, let jobId = json["jobId"]?.stringValue,
            let taskId = json["taskId"]?.stringValue, let action = json["action"]?.stringValue,
            let attempt = json["attempt"]?.intValue, let heartbeatTimeoutMs = json["heartbeatTimeoutMs"]?.intValue
        else { return nil }
        self.init(
            leaseId: leaseId,
            jobId: jobId,
            taskId: taskId,
            action: action,
            params: json["params"] ?? .null,
            input: json["input"] ?? .null,
            attempt: attempt,
            heartbeatTimeoutMs: heartbeatTimeoutMs,
            deadline: json["deadline"]?.stringValue,
            traceparent: json["traceparent"]?.stringValue,
            tracestate: json["tracestate"]?.stringValue
        )
    }

    /// The item as the server sends it, members in the order of SPEC §6 (`deadline` only when set).
    public var json: JSONValue {
        var object = JSONObject()
        object["leaseId"] = .string(self.leaseId)
        object["jobId"] = .string(self.jobId)
        object["taskId"] = .string(self.taskId)
        object["action"] = .string(self.action)
        object["params"] = self.params
        object["input"] = self.input
        object["attempt"] = .int(self.attempt)
        object["heartbeatTimeoutMs"] = .int(self.heartbeatTimeoutMs)
        if let deadline = self.deadline { object["deadline"] = .string(deadline) }
        if let traceparent = self.traceparent { object["traceparent"] = .string(traceparent) }
        if let tracestate = self.tracestate { object["tracestate"] = .string(tracestate) }
        return .object(object)
    }
}
