import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Child jobs (issue #45): a `job` node starts a job of a named definition and ends as it ends.
///
/// A `job` node is a task of the `job` action (`TaskSpec.childJobAction`), so retries, timeouts,
/// concurrency keys, `map` and continuations work on it as on any task. Each attempt's child has
/// an id made from the parent's id, the node's id and the attempt (`JobID.child`), and an
/// idempotency key made the same way, so an attempt that runs again — resumed after a restart or
/// a takeover, on this server or another — finds the child it started instead of starting a
/// second one. The attempt then waits for the child's end: its result, its error (the node fails
/// with the child's error code, `details.jobId` naming the child), or its cancellation.
///
/// - **Cancel**: the parent cancelled (or the node, or its timeout) cancels the child; its
///   cleanup continuations run. A run given up to another server (`JobRun.abandon`) leaves it be:
///   the server that takes the parent over waits for the same child.
/// - **Retry and redrive**: a retry of the node (its `retry` policy) starts a new child; the first
///   attempt after the parent's redrive redrives the failed or cancelled child of the attempt
///   before instead (its succeeded nodes keep their outcomes).
/// - **Bounds**: a chain of parents at most `maxDepth` long; children per job are bounded by the
///   graph's nodes (`--max-nodes`) times their attempts: one child per attempt of a `job` node.
///
/// The child carries the labels `parent` (the parent's id, which `GET /v1/jobs?parent=` lists
/// by) and `parentTask`; its representation shows them as `parentJobId` and `parentTaskId`.
/// Clients may not set these labels themselves (`Application.decodeJob`).
final class ChildJobs: Sendable {
    /// The longest chain of parents a child may have: a job 16 levels below the job a client
    /// started is the deepest.
    static let maxDepth = 16
    /// How long one wait for the child's end lasts before it is taken up again (a bound of
    /// `follow`'s; the attempt itself waits as long as the child runs).
    static let waitStep: Duration = .seconds(30)

    private struct Services {
        weak var jobs: JobService?
        weak var definitions: Definitions?
    }

    private let services = Mutex(Services())

    init() {}

    /// Connects the action to the server's jobs and definitions (made after the engine that
    /// holds the action). Held weakly: the engine's registry outlives nothing.
    func attach(jobs: JobService, definitions: Definitions) {
        self.services.withLock {
            $0.jobs = jobs
            $0.definitions = definitions
        }
    }

    /// The action a server registers under `TaskSpec.childJobAction`.
    var action: any Action { ChildJobAction(children: self) }

    /// One attempt of a `job` node.
    func run(_ context: ActionContext) -> Future<JSONValue> {
        let (jobs, definitions) = self.services.withLock { ($0.jobs, $0.definitions) }
        guard let jobs, let definitions else {
            return Future(
                error: FinalError(TaskError(code: "job.unavailable", message: "child jobs are not available"))
            )
        }
        guard let name = context.params["definition"]?.stringValue else {
            return Future(
                error: FinalError(TaskError(code: "job.invalid", message: "the job node names no definition"))
            )
        }
        let version = context.params["version"]?.intValue
        // The run this attempt belongs to: the action runs inside it, so it is live here.
        let parent = jobs.liveRun(context.jobID)
        let found = self.existingChild(context, parent: parent, jobs: jobs)
        let child = found.flatMap { existing -> Future<any JobView> in
            if let existing { return Future(value: existing) }
            return self.depth(of: parent?.spec.labels ?? [:], jobs: jobs).flatMap { depth in
                guard depth < Self.maxDepth else {
                    throw FinalError(
                        TaskError(
                            code: "job.tooDeep",
                            message:
                                "a child job may have at most \(Self.maxDepth) jobs above it; this one would have \(depth + 1)"
                        )
                    )
                }
                return self.start(context, definition: name, version: version, jobs: jobs, definitions: definitions)
            }
        }
        return child.flatMap { view in self.wait(for: view, context, parent: parent, jobs: jobs) }
    }

    // MARK: - Finding or starting the child

    /// The child this attempt is to wait for, if it has one already; nil: a new child starts.
    ///
    /// - Its own: started before a restart or a takeover (the attempt resumed keeps its number).
    /// - Resumed after a restart, the attempt counts anew (`attempt` + 1): the child of the attempt
    ///   that was in flight is this one's, whatever its state — its end may not have been recorded.
    /// - The latest earlier child that is still running (a redrive reopened it), or succeeded (the
    ///   node's end was lost with a crash: nothing retries after a child that succeeded).
    /// - A failed or cancelled one: on the first attempt after the parent's redrive it is redriven
    ///   now; one that this redrive reopened already and that ended again is this attempt's; any
    ///   other is the failure a retry follows — a new child starts.
    private func existingChild(_ context: ActionContext, parent: JobRun?, jobs: JobService) -> Future<(any JobView)?> {
        let own = JobID.child(of: context.jobID, task: context.taskID, attempt: context.attempt)
        let inFlight = JobID.child(of: context.jobID, task: context.taskID, attempt: context.attempt - 1)
        return jobs.job(own).flatMap { view -> Future<(any JobView)?> in
            if let view { return Future(value: view) }
            return self.latestEarlier(context, before: context.attempt - 1, jobs: jobs).flatMap { earlier in
                guard let earlier else { return Future(value: nil) }
                if context.resumedFrom != nil, earlier.id == inFlight { return Future(value: earlier) }
                let snapshot = earlier.snapshot
                if !snapshot.state.isTerminal || snapshot.state == .succeeded { return Future(value: earlier) }
                guard let redriven = parent?.lastRedrivenAt?.milliseconds else { return Future(value: nil) }
                let reopened = earlier.events(after: 0, limit: .max).last { $0.type == .jobRedriven }
                if let reopened, reopened.time.milliseconds >= redriven { return Future(value: earlier) }
                guard let finished = snapshot.finishedAt, finished.milliseconds <= redriven else {
                    return Future(value: nil)
                }
                return jobs.redrive(earlier.id).flatMap { outcome -> Future<(any JobView)?> in
                    switch outcome {
                    case .redriven: return jobs.job(earlier.id)
                    case .notRedrivable, .notFound: return Future(value: nil)
                    }
                }
            }
        }
    }

    /// The child of the latest attempt before `attempt + 1` that has one (attempts without a
    /// child — failed before they started one — are skipped).
    private func latestEarlier(
        _ context: ActionContext,
        before attempt: Int,
        jobs: JobService
    ) -> Future<(any JobView)?> {
        guard attempt >= 1 else { return Future(value: nil) }
        let id = JobID.child(of: context.jobID, task: context.taskID, attempt: attempt)
        return jobs.job(id).flatMap { view in
            if let view { return Future(value: view) }
            return self.latestEarlier(context, before: attempt - 1, jobs: jobs)
        }
    }

    /// How many jobs are above a job with `labels`, following `parent` labels (at most `maxDepth`;
    /// a parent deleted since ends the count).
    private func depth(of labels: [String: String], jobs: JobService, counted: Int = 0) -> Future<Int> {
        guard counted < Self.maxDepth, let parent = labels[JobSnapshot.parentLabel] else {
            return Future(value: counted)
        }
        return jobs.job(parent).flatMap { view in
            guard let view else { return Future(value: counted + 1) }
            return self.depth(of: view.snapshot.labels, jobs: jobs, counted: counted + 1)
        }
    }

    /// Starts this attempt's child: the definition resolved now (the latest version unless the
    /// node pins one), the node's input, the parent's labels.
    private func start(
        _ context: ActionContext,
        definition: String,
        version: Int?,
        jobs: JobService,
        definitions: Definitions
    ) -> Future<any JobView> {
        let id = JobID.child(of: context.jobID, task: context.taskID, attempt: context.attempt)
        var request = JSONObject()
        request["definition"] = .string(definition)
        if let version { request["version"] = .int(version) }
        request["input"] = context.input
        request["labels"] = [
            JobSnapshot.parentLabel: .string(context.jobID), JobSnapshot.parentTaskLabel: .string(context.taskID),
        ]
        let key = "taskserver-child \(id)"
        let idempotency = IdempotencyKey(key: key, bodyHash: fnv1a64(key.utf8))
        return definitions.job(.object(request)).continueWithTask(on: .immediate) { resolved -> Future<any JobView> in
            switch resolved.outcome! {
            case .success(let (spec, document)):
                // The child's span descends from the attempt that starts it (issue #46).
                let trace = context.trace.flatMap {
                    SpanContext(traceparent: $0.traceparent, tracestate: $0.tracestate)
                }
                return jobs.submit(
                    spec,
                    document: ByteBuffer(bytes: document),
                    idempotency: idempotency,
                    id: id,
                    trace: trace
                )
                .map { submitted -> any JobView in
                    switch submitted {
                    case .created(let run): return run
                    case .existing(let view): return view
                    case .mismatch:
                        throw TaskError(code: "job.startFailed", message: "the child's id is taken by another job")
                    }
                }
            case .failure(let problem as HTTPProblem):
                // The definition does not start with this input (unknown, retired, the schema
                // refuses it): a retry would not either.
                throw FinalError(TaskError(code: problem.code, message: problem.detail))
            case .failure(let error):
                throw TaskError(code: "job.startFailed", message: "the child job did not start: \(error)")
            case .cancelled:
                return .cancelled()
            }
        }
    }

    // MARK: - Waiting for the child

    /// Waits for the child's end and answers as it ended. The attempt's cancellation cancels the
    /// child — unless the parent's run was given up to another server, which waits for it.
    private func wait(
        for child: any JobView,
        _ context: ActionContext,
        parent: JobRun?,
        jobs: JobService
    ) -> Future<JSONValue> {
        let promise = Promise<JSONValue>()
        let id = child.id
        let registration = context.cancellationToken.register {
            if parent?.isAbandoned != true { _ = jobs.cancel(id) }
            promise.tryCancel()
        }
        self.follow(child, jobs: jobs, until: promise)
        return promise.future.continueWith(on: .immediate) { done in
            registration.dispose()
            return try done.outcome!.get()
        }
    }

    private func follow(_ view: any JobView, jobs: JobService, until promise: Promise<JSONValue>) {
        if promise.future.isCompleted { return }
        if view.isTerminalAndVisible {
            let snapshot = view.snapshot
            switch snapshot.state {
            case .succeeded:
                promise.trySucceed(snapshot.result ?? .null)
            case .failed:
                let error = snapshot.error ?? TaskError(code: "task.failed", message: "the job failed")
                var details = JSONObject()
                details["jobId"] = .string(snapshot.id)
                details["error"] = error.json
                promise.tryFail(
                    TaskError(
                        code: error.code,
                        message: "child job \(snapshot.id) failed: \(error.message)",
                        details: .object(details)
                    )
                )
            case .cancelled, .pending, .running:
                promise.tryCancel()
            }
            return
        }
        jobs.follow(
            view,
            timeout: Self.waitStep,
            isDone: { $0.isTerminalAndVisible },
            wait: { job, timeout in job.waitForTerminal(timeout: timeout) }
        ).whenComplete { outcome in
            switch outcome {
            case .success(let latest): self.follow(latest, jobs: jobs, until: promise)
            case .failure, .cancelled:
                // A read that failed (the store away a moment): tried again after a step.
                TimerQueue.shared.schedule(after: .seconds(1)) {
                    jobs.job(view.id).whenComplete { read in
                        if case .success(let fresh?) = read {
                            self.follow(fresh, jobs: jobs, until: promise)
                        } else {
                            self.follow(view, jobs: jobs, until: promise)
                        }
                    }
                }
            }
        }
    }
}

/// The `job` action: `ChildJobs.run`. It holds no slot while the child runs.
struct ChildJobAction: Action {
    let children: ChildJobs
    var name: String { TaskSpec.childJobAction }
    var holdsWorkerSlot: Bool { false }
    func run(_ context: ActionContext) -> Future<JSONValue> { self.children.run(context) }
}
