/// The state of a node (SPEC §3): pending, running, then exactly one terminal state.
public enum NodeState: String, Sendable, CaseIterable {
    case pending, running, succeeded, failed, cancelled, skipped

    public var isTerminal: Bool {
        switch self {
        case .pending, .running: return false
        case .succeeded, .failed, .cancelled, .skipped: return true
        }
    }
}

/// The state of a job.
public enum JobState: String, Sendable, CaseIterable {
    case pending, running, succeeded, failed, cancelled

    public var isTerminal: Bool {
        switch self {
        case .pending, .running: return false
        case .succeeded, .failed, .cancelled: return true
        }
    }
}

/// Everything the engine knows about one node of a job.
public struct NodeRecord: Sendable, Equatable {
    public var id: String
    /// The node type (`task`, `series`, …).
    public var type: String
    public var action: String?
    public var executor: String?
    public var state: NodeState
    public var attempts: Int
    public var result: JSONValue?
    public var error: TaskError?
    public var startedAt: Timestamp?
    public var finishedAt: Timestamp?
    /// The id of the enclosing node (nil for the root).
    public var parent: String?

    public init(
        id: String,
        type: String,
        action: String? = nil,
        executor: String? = nil,
        state: NodeState = .pending,
        attempts: Int = 0,
        result: JSONValue? = nil,
        error: TaskError? = nil,
        startedAt: Timestamp? = nil,
        finishedAt: Timestamp? = nil,
        parent: String? = nil
    ) {
        self.id = id
        self.type = type
        self.action = action
        self.executor = executor
        self.state = state
        self.attempts = attempts
        self.result = result
        self.error = error
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.parent = parent
    }

    /// `true` for leaf (`task`) nodes, the ones `progress` counts.
    public var isTask: Bool { self.type == "task" }

    /// The node as its JSON object (SPEC §3.3).
    public var json: JSONValue {
        var object = JSONObject()
        object["id"] = .string(self.id)
        object["type"] = .string(self.type)
        if let action { object["action"] = .string(action) }
        if let executor { object["executor"] = .string(executor) }
        object["state"] = .string(self.state.rawValue)
        object["attempts"] = .int(self.attempts)
        if let result, self.state == .succeeded { object["result"] = result }
        if let error { object["error"] = error.json }
        if let startedAt { object["startedAt"] = .string(startedAt.rfc3339) }
        if let finishedAt { object["finishedAt"] = .string(finishedAt.rfc3339) }
        if let parent { object["parent"] = .string(parent) }
        return .object(object)
    }

    /// The outcome object templates see as `tasks.<id>` (nil while the node has not finished).
    var outcomeObject: JSONValue? {
        switch self.state {
        case .pending, .running: return nil
        case .succeeded: return ["state": "succeeded", "result": self.result ?? .null]
        case .failed: return ["state": "failed", "error": self.error?.json ?? .null]
        case .cancelled: return ["state": "cancelled"]
        case .skipped: return ["state": "skipped"]
        }
    }
}

/// Counts of a job's task (leaf) nodes by state (SPEC §3.2 `progress`).
public struct JobProgress: Sendable, Equatable {
    public var total = 0
    public var pending = 0
    public var running = 0
    public var succeeded = 0
    public var failed = 0
    public var cancelled = 0
    public var skipped = 0

    public init() {}

    mutating func add(_ state: NodeState, _ delta: Int) {
        switch state {
        case .pending: self.pending += delta
        case .running: self.running += delta
        case .succeeded: self.succeeded += delta
        case .failed: self.failed += delta
        case .cancelled: self.cancelled += delta
        case .skipped: self.skipped += delta
        }
    }

    public var json: JSONValue {
        [
            "total": .int(self.total), "pending": .int(self.pending), "running": .int(self.running),
            "succeeded": .int(self.succeeded), "failed": .int(self.failed), "cancelled": .int(self.cancelled),
            "skipped": .int(self.skipped),
        ]
    }
}

/// A job's externally visible state at one moment (SPEC §3.2).
public struct JobSnapshot: Sendable, Equatable {
    public var id: String
    public var name: String?
    public var state: JobState
    public var input: JSONValue
    public var result: JSONValue?
    public var error: TaskError?
    public var labels: [String: String]
    public var createdAt: Timestamp
    public var startedAt: Timestamp?
    public var finishedAt: Timestamp?
    public var progress: JobProgress
    /// The seq of the job's latest event.
    public var lastEventSeq: Int

    public init(
        id: String,
        name: String? = nil,
        state: JobState,
        input: JSONValue,
        result: JSONValue? = nil,
        error: TaskError? = nil,
        labels: [String: String],
        createdAt: Timestamp,
        startedAt: Timestamp? = nil,
        finishedAt: Timestamp? = nil,
        progress: JobProgress,
        lastEventSeq: Int
    ) {
        self.id = id
        self.name = name
        self.state = state
        self.input = input
        self.result = result
        self.error = error
        self.labels = labels
        self.createdAt = createdAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.progress = progress
        self.lastEventSeq = lastEventSeq
    }

    /// The job as its JSON object; `includePayloads: false` omits input and result (list views).
    public func json(includePayloads: Bool = true) -> JSONValue {
        var object = JSONObject()
        object["id"] = .string(self.id)
        if let name { object["name"] = .string(name) }
        object["state"] = .string(self.state.rawValue)
        if includePayloads {
            object["input"] = self.input
            if let result, self.state == .succeeded { object["result"] = result }
        }
        if let error { object["error"] = error.json }
        var labels = JSONObject()
        for key in self.labels.keys.sorted() { labels[key] = .string(self.labels[key]!) }
        object["labels"] = .object(labels)
        object["createdAt"] = .string(self.createdAt.rfc3339)
        if let startedAt { object["startedAt"] = .string(startedAt.rfc3339) }
        if let finishedAt { object["finishedAt"] = .string(finishedAt.rfc3339) }
        object["progress"] = self.progress.json
        return .object(object)
    }
}
