import TaskCore

/// One node of a job graph (SPEC §1.1), validated and with its templates parsed.
///
/// Nodes are values: a graph is a tree of them. The engine gives each node that runs a record
/// (state, attempts, outcome) keyed by its id; map instances and dynamic graphs add records at run time.
public struct Node: Sendable, Equatable {
    /// The node's id: the client's, or one generated from its path (`root.steps.0.then`).
    public var id: String
    /// The JSON pointer of the node in the submitted document (`/graph/steps/0`), for messages.
    public var pointer: String
    /// The `input` template that replaces the node's input when it starts, if any.
    public var input: JSONTemplate?
    /// What the node does.
    public var kind: Kind

    public init(id: String, pointer: String, input: JSONTemplate? = nil, kind: Kind) {
        self.id = id
        self.pointer = pointer
        self.input = input
        self.kind = kind
    }

    /// The node types of SPEC §1.1.
    public indirect enum Kind: Sendable, Equatable {
        case task(TaskSpec)
        case series([Node])
        case parallel(ParallelSpec)
        case continuation(ContinuationSpec)
        case map(MapSpec)
        case dynamic(source: Node)
    }

    /// The `type` name as written in JSON.
    public var typeName: String {
        switch self.kind {
        case .task(let spec): return spec.action == TaskSpec.childJobAction ? "job" : "task"
        case .series: return "series"
        case .parallel: return "parallel"
        case .continuation: return "continuation"
        case .map: return "map"
        case .dynamic: return "dynamic"
        }
    }

    /// The node's direct children, in document order.
    public var children: [Node] {
        switch self.kind {
        case .task: return []
        case .series(let steps): return steps
        case .parallel(let spec): return spec.branches
        case .continuation(let spec): return [spec.antecedent, spec.then]
        case .map(let spec): return [spec.template]
        case .dynamic(let source): return [source]
        }
    }

    /// Whether this subtree has a `job` node (issue #45): its definitions are checked at
    /// submission. (A dynamic node's graph is known only when it runs.)
    public var startsChildJobs: Bool {
        if case .task(let spec) = self.kind { return spec.action == TaskSpec.childJobAction }
        return self.children.contains { $0.startsChildJobs }
    }

    /// `true` for a leaf (`task`) node.
    public var isTask: Bool {
        if case .task = self.kind { return true }
        return false
    }

    /// The number of nodes in this subtree, this one included.
    public var nodeCount: Int {
        var count = 0
        var stack = [self]
        while let node = stack.popLast() {
            count += 1
            stack.append(contentsOf: node.children)
        }
        return count
    }
}

/// A `task` node: one action run on an executor.
public struct TaskSpec: Sendable, Equatable {
    /// The action of a `job` node (issue #45): a task that starts a child job and ends as it ends.
    /// A `task` node may not name it.
    public static let childJobAction = "job"

    public var action: String
    /// The `params` object (templated when the task starts); empty when absent.
    public var params: JSONTemplate
    public var executor: String
    public var retry: RetrySpec?
    /// The attempt's time limit. On an external executor it counts from the claim (SPEC §6).
    public var timeoutMs: Int?
    /// External executors only: a lease not heartbeated for this long expires (SPEC §6).
    public var heartbeatTimeoutMs: Int?
    /// External executors only: an attempt no worker claims for this long fails.
    public var scheduleTimeoutMs: Int?
    /// At most `max` attempts with the same evaluated key run at once (SPEC §8).
    public var concurrency: ConcurrencySpec?

    public init(
        action: String,
        params: JSONTemplate,
        executor: String = "default",
        retry: RetrySpec? = nil,
        timeoutMs: Int? = nil,
        heartbeatTimeoutMs: Int? = nil,
        scheduleTimeoutMs: Int? = nil,
        concurrency: ConcurrencySpec? = nil
    ) {
        self.concurrency = concurrency
        self.action = action
        self.params = params
        self.executor = executor
        self.retry = retry
        self.timeoutMs = timeoutMs
        self.heartbeatTimeoutMs = heartbeatTimeoutMs
        self.scheduleTimeoutMs = scheduleTimeoutMs
    }
}

/// A task's `retry` policy (SPEC §1.2).
public struct RetrySpec: Sendable, Equatable {
    public var maxAttempts: Int
    public var delayMs: Int
    public var backoff: Double
    public var maxDelayMs: Int?
    public var jitter: Bool
    /// Error codes to retry on; an entry ending in `.*` matches a prefix. `nil`: every failure.
    public var on: [String]?

    public init(
        maxAttempts: Int = 1,
        delayMs: Int = 0,
        backoff: Double = 2,
        maxDelayMs: Int? = nil,
        jitter: Bool = false,
        on: [String]? = nil
    ) {
        self.maxAttempts = maxAttempts
        self.delayMs = delayMs
        self.backoff = backoff
        self.maxDelayMs = maxDelayMs
        self.jitter = jitter
        self.on = on
    }

    /// Whether a failure with `code` may be retried under this policy's `on` list.
    public func matches(code: String) -> Bool {
        guard let on else { return true }
        for pattern in on {
            if pattern.hasSuffix(".*") {
                if code.hasPrefix(pattern.dropLast(1)) { return true }
            } else if pattern == "*" || pattern == code {
                return true
            }
        }
        return false
    }
}

/// A `parallel` node.
public struct ParallelSpec: Sendable, Equatable {
    public enum Mode: String, Sendable, Equatable, CaseIterable {
        case all, any, settled
    }

    public var branches: [Node]
    public var mode: Mode
    public var maxConcurrency: Int?
    public var failFast: Bool

    public init(branches: [Node], mode: Mode = .all, maxConcurrency: Int? = nil, failFast: Bool = false) {
        self.branches = branches
        self.mode = mode
        self.maxConcurrency = maxConcurrency
        self.failFast = failFast
    }
}

/// A `continuation` node (Bolts' `continueWith` family).
public struct ContinuationSpec: Sendable, Equatable {
    public enum On: String, Sendable, Equatable, CaseIterable {
        case success, failure, cancellation, always
    }

    public var antecedent: Node
    public var on: On
    public var then: Node

    public init(antecedent: Node, on: On = .success, then: Node) {
        self.antecedent = antecedent
        self.on = on
        self.then = then
    }
}

/// A `map` node: one instance of `template` per item.
public struct MapSpec: Sendable, Equatable {
    public enum Mode: String, Sendable, Equatable, CaseIterable {
        case parallel, series
    }

    /// The `items` template (default `"${input}"`).
    public var items: JSONTemplate
    public var template: Node
    public var mode: Mode
    public var maxConcurrency: Int?

    public init(items: JSONTemplate, template: Node, mode: Mode = .parallel, maxConcurrency: Int? = nil) {
        self.items = items
        self.template = template
        self.mode = mode
        self.maxConcurrency = maxConcurrency
    }
}

/// A submitted job (SPEC §1), validated.
public struct JobSpec: Sendable, Equatable {
    public var name: String?
    public var input: JSONValue
    public var graph: Node
    public var timeoutMs: Int?
    public var labels: [String: String]
    /// When the job starts, if not at once (`runAt` / `delayMs`, SPEC §8).
    public var start: JobStart?
    /// The values of the extra top-level fields the decoder was given (see `JobField`).
    public var fields: JobFieldValues
    /// The total number of nodes in `graph`.
    public var nodeCount: Int
    /// The nesting depth of `graph` (a lone task has depth 1).
    public var depth: Int
    /// 0…9, higher first: the order in which its ready tasks start when they wait (SPEC §8).
    public var priority: Int
    /// At most `max` jobs with the same evaluated key run at once; held for the whole job.
    public var concurrency: ConcurrencySpec?
    /// The named workflow the job was started from, with the version it keeps (issue #45).
    public var definition: DefinitionRef?

    public init(
        name: String? = nil,
        input: JSONValue = .null,
        graph: Node,
        timeoutMs: Int? = nil,
        labels: [String: String] = [:],
        start: JobStart? = nil,
        fields: JobFieldValues = JobFieldValues(),
        nodeCount: Int? = nil,
        depth: Int = 1,
        priority: Int = JobSpec.defaultPriority,
        concurrency: ConcurrencySpec? = nil,
        definition: DefinitionRef? = nil
    ) {
        self.priority = priority
        self.concurrency = concurrency
        self.definition = definition
        self.name = name
        self.input = input
        self.graph = graph
        self.timeoutMs = timeoutMs
        self.labels = labels
        self.start = start
        self.fields = fields
        self.nodeCount = nodeCount ?? graph.nodeCount
        self.depth = depth
    }
}

extension JobSpec {
    /// The priority of a job that names none.
    public static let defaultPriority = WorkerPool.defaultPriority
}

/// A version of a named workflow definition (issue #45): what a job started from a definition
/// keeps in its document, so a restart, a redrive or a takeover runs the graph it started with.
public struct DefinitionRef: Sendable, Hashable {
    /// The definition's name: 1…100 of `[A-Za-z0-9_.-]`, starting with a letter or digit.
    public var name: String
    /// 1, 2, …
    public var version: Int

    public init(name: String, version: Int) {
        self.name = name
        self.version = version
    }

    /// Whether `name` may name a definition.
    public static func isValidName(_ name: some StringProtocol) -> Bool {
        let utf8 = name.utf8
        guard let first = utf8.first, (1...100).contains(utf8.count), Self.isAlphanumeric(first) else { return false }
        return utf8.allSatisfy {
            Self.isAlphanumeric($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-")
        }
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    /// `{"name": …, "version": …}`, as a job document and representation carry it.
    public var json: JSONValue { .object(["name": .string(self.name), "version": .int(self.version)]) }

    /// Reads the object form back; nil when `json` is not one.
    public init?(json: JSONValue) {
        guard case .object(let object) = json, object.count == 2, let name = object["name"]?.stringValue,
            Self.isValidName(name), let version = object["version"]?.intValue, version >= 1
        else { return nil }
        self.init(name: name, version: version)
    }
}

/// A concurrency key (SPEC §8): `{"key": "${input.customer}", "max": 1}` on a task or a job.
public struct ConcurrencySpec: Sendable, Equatable {
    /// The most a request may name.
    public static let maxHolders = 10_000
    /// The longest key, in UTF-8 bytes, once evaluated.
    public static let maxKeyBytes = 255

    /// Evaluated when the task's attempt (or the job) is about to start; it must give a string or
    /// a number.
    public var key: JSONTemplate
    /// How many may hold the key at once (1…`maxHolders`).
    public var max: Int

    public init(key: JSONTemplate, max: Int) {
        self.key = key
        self.max = max
    }
}

/// A job's delayed start: at a time, or a delay after it was submitted.
public enum JobStart: Sendable, Equatable {
    case at(Timestamp)
    /// Milliseconds after the job's `createdAt`.
    case after(Int)

    /// When a job submitted at `createdAt` starts. The same on every decoding of the same
    /// document, so a restart (which decodes the stored document again) keeps the time.
    public func time(createdAt: Timestamp) -> Timestamp {
        switch self {
        case .at(let time): time
        case .after(let milliseconds): Timestamp(milliseconds: createdAt.milliseconds + Int64(milliseconds))
        }
    }
}

extension JobSpec {
    /// When a job of this spec submitted at `createdAt` starts; nil: at once.
    public func runAt(createdAt: Timestamp) -> Timestamp? { self.start?.time(createdAt: createdAt) }
}
