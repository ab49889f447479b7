import Synchronization
import TaskCore

/// A kind of work a `task` node can do (SPEC §1.2): `value`, `fail`, `delay`, `await`, `http`, …
///
/// An action validates its `params` statically when a job is submitted (only what is knowable
/// before templates are rendered), and runs with the rendered params when the task starts.
public protocol Action: Sendable {
    /// The name used in `"action": …`.
    var name: String { get }

    /// Whether an attempt holds one slot of its executor while it runs (SPEC §2). Actions that do
    /// work hold one (`value`, `fail`, `http`); pure waits (`delay`, `await`) hold none.
    var holdsWorkerSlot: Bool { get }

    /// Checks `params` as submitted (templates not yet rendered; a string containing `${` may
    /// stand for any value). `pointer` is the pointer of the `params` object.
    func validate(params: JSONValue, at pointer: String) -> [ValidationProblem]

    /// Runs one attempt with the rendered params. The future fails with a `TaskError` (any other
    /// error becomes `task.failed`), or is cancelled when `context.cancellationToken` fires.
    func run(_ context: ActionContext) -> Future<JSONValue>
}

/// What an action attempt gets to work with.
public struct ActionContext: Sendable {
    /// The task's input.
    public var input: JSONValue
    /// The rendered `params` object (`{}` when the node has none).
    public var params: JSONValue
    /// Fires when the attempt must stop (job or node cancelled, task timeout).
    public var cancellationToken: CancellationToken
    public var jobID: String
    public var taskID: String
    /// The attempt number, from 1.
    public var attempt: Int
    /// The worker pool the task runs on (its `executor`).
    public var pool: WorkerPool?
    /// When this attempt resumes one that was in flight before a restart: the time it began.
    /// Waits (`delay`, `await` timeouts) count their time from it, so a timer resumes with its
    /// remaining time rather than starting over.
    public var resumedFrom: Timestamp?
    /// Where `acceptCompletion` registers an `await`-like action's promise: the run and the node's
    /// record index (not a closure, which would cost an allocation per task). Nil outside the
    /// engine, where nothing can complete the task.
    let completionTarget: (run: JobRun, index: Int)?
    /// The attempt's trace (issue #46), when the job is traced: an action that calls out sends its
    /// `traceparent` on.
    public var trace: (any AttemptTrace)?

    public init(
        input: JSONValue,
        params: JSONValue,
        cancellationToken: CancellationToken,
        jobID: String,
        taskID: String,
        attempt: Int,
        pool: WorkerPool?,
        resumedFrom: Timestamp? = nil
    ) {
        self.init(
            input: input,
            params: params,
            cancellationToken: cancellationToken,
            jobID: jobID,
            taskID: taskID,
            attempt: attempt,
            pool: pool,
            resumedFrom: resumedFrom,
            completionTarget: nil
        )
    }

    /// The engine's context: completions go to `completionTarget`.
    init(
        input: JSONValue,
        params: JSONValue,
        cancellationToken: CancellationToken,
        jobID: String,
        taskID: String,
        attempt: Int,
        pool: WorkerPool?,
        resumedFrom: Timestamp?,
        completionTarget: (run: JobRun, index: Int)?,
        trace: (any AttemptTrace)? = nil
    ) {
        self.input = input
        self.params = params
        self.cancellationToken = cancellationToken
        self.jobID = jobID
        self.taskID = taskID
        self.attempt = attempt
        self.pool = pool
        self.resumedFrom = resumedFrom
        self.completionTarget = completionTarget
        self.trace = trace
    }

    /// `milliseconds` less the time already waited before a restart (see `resumedFrom`).
    public func remaining(_ milliseconds: Int) -> Int {
        guard let resumedFrom else { return milliseconds }
        let waited = Timestamp.now().milliseconds - resumedFrom.milliseconds
        return Int(max(0, Int64(milliseconds) - max(0, waited)))
    }

    /// Makes `promise` the target of `POST …/tasks/{id}/complete` for this task while it runs.
    public func acceptCompletion(_ promise: Promise<JSONValue>) {
        guard let (run, index) = self.completionTarget else { return }
        run.state.withLock { $0.awaits[index] = promise }
    }
}

extension Action {
    public var holdsWorkerSlot: Bool { true }
    public func validate(params: JSONValue, at pointer: String) -> [ValidationProblem] { [] }
}

/// The actions a server knows, by name.
public struct ActionRegistry: Sendable {
    private var actions: [String: any Action] = [:]
    /// The same actions as a list, for `lookup`: a registry holds a handful, and comparing a few
    /// names costs less than hashing one (a task looks its action up every time it runs).
    private var list: [(name: String, action: any Action)] = []

    /// An empty registry.
    public init() {}

    /// A registry with the given actions.
    public init(_ actions: [any Action]) {
        for action in actions { self.register(action) }
    }

    /// The built-in actions that need nothing outside TaskGraph: `value`, `fail`, `delay`, `await`.
    public static var builtins: ActionRegistry {
        ActionRegistry([ValueAction(), FailAction(), DelayAction(), AwaitAction()])
    }

    /// Adds (or replaces) an action.
    public mutating func register(_ action: any Action) {
        let name = action.name
        self.actions[name] = action
        if let index = self.list.firstIndex(where: { $0.name == name }) {
            self.list[index].action = action
        } else {
            self.list.append((name: name, action: action))
        }
    }

    public subscript(name: String) -> (any Action)? { self.actions[name] }

    /// `self[name]` by a scan of the names (see `list`).
    func lookup(_ name: String) -> (any Action)? {
        if self.list.count > 16 { return self.actions[name] }
        for entry in self.list where entry.name == name { return entry.action }
        return nil
    }

    /// Every registered name, sorted.
    public var names: [String] { self.actions.keys.sorted() }
}
