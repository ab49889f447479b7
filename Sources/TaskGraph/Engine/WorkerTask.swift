import TaskCore

/// A pool whose workers live in other processes (SPEC §6): the engine hands it each attempt of a
/// task on that executor, and the pool hands the attempt to a worker that claims it.
///
/// The engine hands an attempt over exactly as it hands a built-in to an in-process pool: the task
/// stays `pending` until a worker claims it (`WorkerTask.markClaimed`), and the attempt ends when
/// its future completes — by the worker's outcome (`finish`), by cancellation (the job or the node
/// was cancelled), or by whatever failure the pool decides (an expired lease, a schedule timeout).
public protocol ExternalExecutor: Sendable {
    /// The executor's name, as tasks write it in `executor`.
    var name: String { get }
    /// Queues one attempt. Called on the thread that made the task ready; return quickly.
    func enqueue(_ task: WorkerTask)
    /// Whether the attempt of task `taskID` of job `jobID` that was in flight when the process
    /// stopped is still leased to a worker (the pool restored its lease): the resumed job then
    /// continues that attempt rather than counting a new one. Asked before such a task is queued.
    func continuesLease(jobID: String, taskID: String) -> Bool
}

extension ExternalExecutor {
    public func continuesLease(jobID: String, taskID: String) -> Bool { false }
}

/// One attempt of a task on an external executor, as its pool sees it.
public struct WorkerTask: Sendable {
    public let jobID: String
    public let taskID: String
    /// The worker action (any name matching `^[A-Za-z0-9_.:-]{1,100}$`).
    public let action: String
    /// The rendered `params` object.
    public let params: JSONValue
    public let input: JSONValue
    /// The attempt number, from 1.
    public let attempt: Int
    public let heartbeatTimeoutMs: Int
    /// The attempt's time limit from its claim, if the task sets `timeoutMs`.
    public let timeoutMs: Int?
    /// How long the attempt may wait for a claim, if the task sets `scheduleTimeoutMs`.
    public let scheduleTimeoutMs: Int?
    /// Fires when the job or the node is cancelled; the attempt's future is then cancelled too.
    public let cancellationToken: CancellationToken
    /// The attempt's outcome; completes once.
    public var future: Future<JSONValue> { self.promise.future }

    let promise: Promise<JSONValue>
    let run: JobRun
    let index: Int
    /// The attempt's trace (issue #46), when its job is traced: claims carry its `traceparent`.
    public let trace: (any AttemptTrace)?

    /// Records that `workerId` claimed the attempt: the node turns `running` on its first claim
    /// (with its `task.started` event). Returns `false` when the attempt had already ended.
    @discardableResult
    public func markClaimed(by workerId: String) -> Bool {
        // A run given up to another server (SPEC §9) hands nothing out: its job runs elsewhere.
        if self.run.isAbandoned { return false }
        let claimed = self.run.markClaimed(self.index, workerId: workerId)
        if claimed { self.trace?.claimed(by: workerId) }
        return claimed
    }

    /// The run this attempt belongs to, as an identity: attempts that share it share one wait for
    /// durability (`waitUntilDurable` after the last of them finished covers them all).
    public var runIdentity: ObjectIdentifier { ObjectIdentifier(self.run) }

    /// Whether the attempt's run was given up (`JobRun.abandon`): whatever it does from now on is
    /// not recorded.
    public var isAbandoned: Bool { self.run.isAbandoned }

    /// Completes once what the attempt's run has appended so far is durable — after `finish`, the
    /// outcome; fails with `JobAbandoned` when the run was given up first (the outcome is then not
    /// recorded: the job's next run decides). The run this attempt belongs to, never another run
    /// of the same job id.
    public func waitUntilDurable() -> Future<Void> {
        self.run.waitForDurability(through: self.run.lastSeq)
    }

    /// Keeps a worker's latest `progress` on the node (shown with the node, never journalled).
    public func setProgress(_ progress: JSONValue) {
        self.run.setProgress(self.index, progress)
    }

    /// Ends the attempt with `outcome` unless it already ended; returns whether this call did.
    /// A failure with `retryable: false` is not retried, whatever the task's `retry` says.
    @discardableResult
    public func finish(_ outcome: Outcome<JSONValue>, retryable: Bool = true) -> Bool {
        if case .failure(let error) = outcome, !retryable {
            return self.promise.tryFail(FinalError(TaskError.from(error)))
        }
        return self.promise.tryComplete(with: outcome)
    }

    /// The job's priority, 0…9 (SPEC §8): the pool hands higher ones out first.
    public var priority: Int { self.run.spec.priority }

    /// The task's node record now.
    public var node: NodeRecord? { self.run.node(self.taskID) }

    /// Whether the job or node was cancelled (the worker is told through its heartbeat).
    public var isCancelled: Bool { self.cancellationToken.isCancellationRequested }
}

/// A task failure that the task's `retry` policy must not retry (a worker's `retryable: false`).
public struct FinalError: Error, Sendable {
    public let error: TaskError
    public init(_ error: TaskError) { self.error = error }
}
