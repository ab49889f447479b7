/// The type of a job event (SPEC §3.4).
public enum JobEventType: String, Sendable, CaseIterable, Codable {
    case jobCreated = "job.created"
    case jobStarted = "job.started"
    case jobSucceeded = "job.succeeded"
    case jobFailed = "job.failed"
    case jobCancelled = "job.cancelled"
    /// A failed or cancelled job runs again (`POST /v1/jobs/{id}/redrive`): its history goes on
    /// after its terminal event, to a new one.
    case jobRedriven = "job.redriven"
    case taskStarted = "task.started"
    case taskSucceeded = "task.succeeded"
    case taskFailed = "task.failed"
    case taskCancelled = "task.cancelled"
    case taskSkipped = "task.skipped"
    case taskRetrying = "task.retrying"

    /// `true` for `job.*` events.
    public var isJobEvent: Bool {
        switch self {
        case .jobCreated, .jobStarted, .jobSucceeded, .jobFailed, .jobCancelled, .jobRedriven: true
        default: false
        }
    }

    /// `true` for the events that end a job (`job.succeeded`, `job.failed`, `job.cancelled`).
    public var isTerminal: Bool {
        switch self {
        case .jobSucceeded, .jobFailed, .jobCancelled: true
        default: false
        }
    }
}

/// One entry of a job's ordered, gap-free history.
public struct JobEvent: Sendable, Equatable {
    /// The event's place in the job's history, from 1, without gaps.
    public var seq: Int
    public var type: JobEventType
    public var time: Timestamp
    /// The node the event is about (task events).
    public var taskId: String?
    /// Extra facts: the error of a failure, the attempt and delay of a retry.
    public var data: JSONValue?

    public init(seq: Int, type: JobEventType, time: Timestamp, taskId: String? = nil, data: JSONValue? = nil) {
        self.seq = seq
        self.type = type
        self.time = time
        self.taskId = taskId
        self.data = data
    }

    /// The event as its JSON object (`{"seq", "type", "time", "taskId"?, "data"?}`).
    public var json: JSONValue {
        var object = JSONObject()
        object["seq"] = .int(self.seq)
        object["type"] = .string(self.type.rawValue)
        object["time"] = .string(self.time.rfc3339)
        if let taskId { object["taskId"] = .string(taskId) }
        if let data { object["data"] = data }
        return .object(object)
    }
}
