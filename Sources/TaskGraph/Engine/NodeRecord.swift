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

/// What a task's attempt (or a job holding a concurrency key) waits for before it starts.
public enum WaitReason: String, Sendable, CaseIterable {
    /// A place under its concurrency key.
    case concurrency
    /// A token of its pool's rate limit (a slot is free).
    case rate
    /// A free slot of its pool.
    case slot
}

/// How many of a job's tasks wait, per reason (the job's `tasksWaiting`).
public struct TasksWaiting: Sendable, Equatable {
    public var concurrency = 0
    public var rate = 0
    public var slot = 0

    public init() {}

    public var isEmpty: Bool { self.concurrency == 0 && self.rate == 0 && self.slot == 0 }

    mutating func move(from old: WaitReason?, to new: WaitReason?) {
        if let old { self[old] -= 1 }
        if let new { self[new] += 1 }
    }

    public subscript(reason: WaitReason) -> Int {
        get {
            switch reason {
            case .concurrency: self.concurrency
            case .rate: self.rate
            case .slot: self.slot
            }
        }
        set {
            switch reason {
            case .concurrency: self.concurrency = newValue
            case .rate: self.rate = newValue
            case .slot: self.slot = newValue
            }
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
    /// A task on an external executor: the worker that claimed its latest attempt (SPEC §6).
    public var workerId: String?
    /// A task on an external executor: the `progress` of its worker's latest heartbeat.
    public var progress: JSONValue?
    /// What the task's attempt waits for before it can start, if anything (SPEC §8): its
    /// concurrency key, a token of its pool's rate limit, or a slot. Live only (not stored).
    public var waitingFor: WaitReason?

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
    /// A leaf: a `task`, or a `job` node (a task that runs a child job).
    public var isTask: Bool { self.type == "task" || self.type == "job" }

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
        if let workerId { object["workerId"] = .string(workerId) }
        if let progress { object["progress"] = progress }
        if let waitingFor { object["waitingFor"] = .string(waitingFor.rawValue) }
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

    /// The record as a redrive starts from it: a succeeded node as it is (it does not run again);
    /// any other pending again, with its attempts kept so that the count goes on.
    public var redriven: NodeRecord {
        guard self.state != .succeeded else { return self }
        var record = self
        record.state = .pending
        record.result = nil
        record.error = nil
        record.finishedAt = nil
        return record
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

    public mutating func add(_ state: NodeState, _ delta: Int) {
        switch state {
        case .pending: self.pending += delta
        case .running: self.running += delta
        case .succeeded: self.succeeded += delta
        case .failed: self.failed += delta
        case .cancelled: self.cancelled += delta
        case .skipped: self.skipped += delta
        }
    }

    /// Writes the counts as a JSON object.
    public func write(to json: inout JSONWriter) {
        json.beginObject()
        json.key("total")
        json.int(self.total)
        json.key("pending")
        json.int(self.pending)
        json.key("running")
        json.int(self.running)
        json.key("succeeded")
        json.int(self.succeeded)
        json.key("failed")
        json.int(self.failed)
        json.key("cancelled")
        json.int(self.cancelled)
        json.key("skipped")
        json.int(self.skipped)
        json.endObject()
    }

    /// The counts as compact JSON text.
    public var jsonString: String {
        var json = JSONWriter(capacity: 96)
        self.write(to: &json)
        return String(decoding: json.bytes, as: UTF8.self)
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
    /// When a delayed job starts (or started), if it was delayed (SPEC §8 `runAt` / `delayMs`).
    public var runAt: Timestamp?
    /// 0…9 (SPEC §8).
    public var priority: Int
    /// Set while the job waits for its concurrency key (live only).
    public var waitingFor: WaitReason?
    /// How many of its tasks wait, per reason (live only).
    public var tasksWaiting: TasksWaiting
    /// The definition version it was started from (issue #45).
    public var definition: DefinitionRef?

    /// The labels the server sets on a child job (issue #45): its parent's id (what
    /// `GET /v1/jobs?parent=` lists by) and the parent's node that started it. Shown as
    /// `parentJobId` and `parentTaskId`.
    public static let parentLabel = "parent"
    public static let parentTaskLabel = "parentTask"
    /// The label where the server keeps a traced job's W3C context (issue #46): its span's
    /// `traceparent`, its parent span and its `tracestate` (see the server's `JobTraceLabel`).
    /// Not a label name a client can use (`@`); written as `traceId`, never among `labels`.
    public static let traceLabel = "@trace"

    /// The job's trace id (32 hex digits), if it is traced.
    public var traceId: String? { Self.traceId(self.labels) }

    /// The trace id kept in `labels` (`traceLabel`), if any.
    public static func traceId(_ labels: [String: String]) -> String? {
        guard var value = labels[Self.traceLabel], value.utf8.count >= 35 else { return nil }
        return value.withUTF8 { String(decoding: UnsafeBufferPointer(rebasing: $0[3..<35]), as: UTF8.self) }
    }

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
        lastEventSeq: Int,
        runAt: Timestamp? = nil,
        priority: Int = JobSpec.defaultPriority,
        waitingFor: WaitReason? = nil,
        tasksWaiting: TasksWaiting = TasksWaiting(),
        definition: DefinitionRef? = nil
    ) {
        self.definition = definition
        self.tasksWaiting = tasksWaiting
        self.priority = priority
        self.waitingFor = waitingFor
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
        self.runAt = runAt
    }

    /// Writes the job as its JSON object (SPEC §3.2); `includePayloads: false` omits input and
    /// result (list views).
    ///
    /// Written straight to bytes: this is the body of every `POST /v1/jobs` answer.
    public func write(to json: inout JSONWriter, includePayloads: Bool = true) {
        json.beginObject()
        json.key("id")
        json.string(self.id)
        if let name {
            json.key("name")
            json.string(name)
        }
        json.key("state")
        json.string(self.state.rawValue)
        if includePayloads {
            json.key("input")
            json.value(self.input)
            if let result, self.state == .succeeded {
                json.key("result")
                json.value(result)
            }
        }
        if let error {
            json.key("error")
            json.value(error.json)
        }
        json.key("labels")
        json.beginObject()
        for (key, value) in self.labels.sorted(by: { $0.key < $1.key }) where key.utf8.first != UInt8(ascii: "@") {
            json.escapedKey(key)
            json.string(value)
        }
        json.endObject()
        if let traceId {
            json.key("traceId")
            json.string(traceId)
        }
        if let definition {
            json.key("definition")
            json.beginObject()
            json.key("name")
            json.string(definition.name)
            json.key("version")
            json.int(definition.version)
            json.endObject()
        }
        if let parent = self.labels[Self.parentLabel], let task = self.labels[Self.parentTaskLabel] {
            json.key("parentJobId")
            json.string(parent)
            json.key("parentTaskId")
            json.string(task)
        }
        // Only when set: most jobs keep the default, and their representation stays as it was.
        if self.priority != JobSpec.defaultPriority {
            json.key("priority")
            json.int(self.priority)
        }
        if let waitingFor {
            json.key("waitingFor")
            json.string(waitingFor.rawValue)
        }
        if !self.tasksWaiting.isEmpty {
            json.key("tasksWaiting")
            json.beginObject()
            for reason in WaitReason.allCases where self.tasksWaiting[reason] > 0 {
                json.escapedKey(reason.rawValue)
                json.int(self.tasksWaiting[reason])
            }
            json.endObject()
        }
        json.key("createdAt")
        json.timestamp(self.createdAt)
        if let runAt {
            json.key("runAt")
            json.timestamp(runAt)
        }
        if let startedAt {
            json.key("startedAt")
            json.timestamp(startedAt)
        }
        if let finishedAt {
            json.key("finishedAt")
            json.timestamp(finishedAt)
        }
        json.key("progress")
        self.progress.write(to: &json)
        json.endObject()
    }

    /// The job as compact JSON bytes.
    public func jsonBytes(includePayloads: Bool = true) -> [UInt8] {
        var json = JSONWriter(capacity: 512)
        self.write(to: &json, includePayloads: includePayloads)
        return json.bytes
    }
}
