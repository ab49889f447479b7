import Logging
import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Owns the jobs this server runs, and is all the API talks to about jobs.
///
/// - **Live jobs** (`LiveJobs`): every `JobRun` this server started (submitted here, or claimed by
///   `recover()`), from before its record is inserted until its end is recorded by the
///   repository. Reads of any other job go to the repository (`StoredJob`).
/// - **Commands** — submit, cancel, cancel a task, complete an `await` task, delete, redrive — act
///   on the live run, and their futures complete once what they changed is durable: "this job's
///   seq N is committed" (`JobRun.waitForDurability`), never a store-wide flush.
/// - **The journal** (`JobJournal`), the engine's observer, turns each job's new events into
///   repository batches; a batch's commit makes its events visible to readers.
/// - **Recovery** (`recover()`) claims the unfinished jobs no live owner holds and resumes them:
///   at start-up, and callable at any time (it skips the jobs already live here).
/// - **Delayed starts** (`DelayedStarts`): a job with `runAt` / `delayMs` due later than a short
///   horizon is inserted *sleeping* and not kept live; the loader takes sleeping jobs from the
///   repository as they come within the horizon, and the service makes them live (`adopt`).
/// - **The cluster** (`JobService+Cluster.swift`, SPEC §9): runs given up, ownerless jobs claimed,
///   commands relayed by other servers applied.
///
/// Time — "now" for records, the waits of `follow` — is the injected `ServerClock`'s.
public final class JobService: Sendable {
    public let engine: Engine
    public let repository: any JobRepository
    let logger: Logger
    /// Whether events are gated on commits (`repository.isDurable`).
    let durable: Bool
    let clock: any ServerClock
    /// A claim of ownerless jobs failed and is tried again (`claimOwnerless`).
    let claimRetrying = Atomic(false)
    let stopped = Atomic(false)
    /// Delayed jobs held until their start, and the loader of sleeping ones.
    let delayed: DelayedStarts
    let live = LiveJobs()
    let journal: JobJournal
    let resumeHooks = Mutex<ResumeHooks?>(nil)
    /// Waits on stored records of unfinished jobs that another server runs, by job id
    /// (`waitRemotely`).
    let remoteWaiters = Mutex<[String: [Int: Promise<Void>]]>([:])
    let remoteWaitNumbers = Atomic(0)
    /// Relayed commands being applied here, so that a notification and a heartbeat's look for
    /// lost ones do not apply one twice.
    let applying = Mutex<Set<Int64>>([])
    /// Traces (issue #46): each new job gets its context (`JobTraceLabel`) here.
    let tracing: ServerTracing?

    /// What a recovery does around resuming the jobs it claimed (set once the server started: a
    /// takeover's): `before`, given their ids, the external pools take up the jobs' stored leases,
    /// so a dead server's leases carry on here; `after`, they forget those whose attempts did not
    /// come back.
    public struct ResumeHooks: Sendable {
        public var before: @Sendable (_ jobs: [String]) -> Future<Void>
        public var after: @Sendable () -> Void

        public init(before: @escaping @Sendable ([String]) -> Future<Void>, after: @escaping @Sendable () -> Void) {
            self.before = before
            self.after = after
        }
    }

    public func setResumeHooks(_ hooks: ResumeHooks) { self.resumeHooks.withLock { $0 = hooks } }

    /// `engine` must have been made with `eventsAwaitDurability` equal to `repository.isDurable`;
    /// the service adds itself as the engine's observer.
    public init(
        engine: Engine,
        repository: any JobRepository,
        planner: WebhookPlanner = WebhookPlanner(),
        dispatcher: WebhookDispatcher? = nil,
        eventFeed: (any EventFeed)? = nil,
        clock: any ServerClock = SystemClock(),
        delayedStarts: DelayedStarts.Options = DelayedStarts.Options(),
        tracing: ServerTracing? = nil,
        logger: Logger
    ) {
        precondition(
            engine.eventsAwaitDurability == repository.isDurable,
            "JobService: the engine must gate events exactly when the repository is durable"
        )
        self.engine = engine
        self.repository = repository
        self.logger = logger
        self.durable = repository.isDurable
        self.clock = clock
        self.tracing = tracing
        self.delayed = DelayedStarts(repository: repository, clock: clock, options: delayedStarts)
        self.journal = JobJournal(
            repository: repository,
            planner: planner,
            dispatcher: dispatcher,
            eventFeed: eventFeed,
            live: self.live
        )
        engine.addObserver(self.journal)
        self.delayed.start { [weak self] stored in self?.adopt(stored) }
        repository.cluster?.start(ClusterLink(self))
    }

    /// Stops starting delayed jobs, and hears no more from the cluster (shutdown).
    public func stop() {
        self.stopped.store(true, ordering: .relaxed)
        self.delayed.stop()
        self.repository.cluster?.stop()
    }

    /// Runs held live until their delayed start.
    public var heldDelayedCount: Int { self.delayed.heldCount }

    // MARK: - Submitting

    public enum Submitted: Sendable {
        case created(JobRun)
        /// The idempotency key named an earlier job, with the same body.
        case existing(any JobView)
        /// The idempotency key was used with another body.
        case mismatch
    }

    /// Records a new job and starts it once its record is durable. (`id`: tests name their jobs.)
    ///
    /// `trace`: the span the job descends from — the request that submitted it, the attempt that
    /// started it (a child job) — when tracing is on; without one the job begins a trace.
    public func submit(
        _ spec: JobSpec,
        document: ByteBuffer,
        idempotency: IdempotencyKey?,
        id: String? = nil,
        trace: SpanContext? = nil
    ) -> Future<Submitted> {
        var spec = spec
        if let tracing = self.tracing { spec.labels[JobSnapshot.traceLabel] = tracing.jobLabel(parent: trace) }
        let run = self.engine.makeRun(id: id ?? JobID.make(), spec: spec)
        let runAt = spec.runAt(createdAt: run.createdAt)
        var record = NewJobRecord(
            id: run.id,
            name: spec.name,
            labels: spec.labels,
            createdAt: run.createdAt,
            document: document,
            idempotency: idempotency,
            runAt: runAt,
            spec: self.durable ? nil : spec
        )
        record.priority = spec.priority
        record.definition = spec.definition
        // Due later than the loader's horizon: it sleeps in the repository, not in memory.
        record.sleeps = runAt.map { !self.delayed.holdsAtSubmission($0) } ?? false
        let sleeps = record.sleeps
        self.live.add(run)
        let inserted = self.repository.insert(record)
        // A repository in memory answers at once: no continuation to allocate.
        if let outcome = inserted.outcome { return self.submitted(run, outcome, runAt: runAt, sleeps: sleeps) }
        let submitted = inserted.continueWithTask(on: .immediate) { inserted in
            self.submitted(run, inserted.outcome!, runAt: runAt, sleeps: sleeps)
        }
        // The answer is bounded, not the insert: one the store commits later still starts its run.
        return DurableWait.bounded(submitted, clock: self.clock)
    }

    /// What became of submitting `run`, once its insert ended with `outcome`.
    private func submitted(
        _ run: JobRun,
        _ outcome: Outcome<InsertOutcome>,
        runAt: Timestamp?,
        sleeps: Bool
    ) -> Future<Submitted> {
        switch outcome {
        case .success(.inserted(let key)):
            run.storeKey.store(key, ordering: .relaxed)
            if run.isAbandoned {
                // Lost to a takeover while its insert was on its way: claimed again as any job
                // this server's name owns and nobody runs.
                self.claimOwnerless()
                return Future(value: .created(run))
            }
            if let runAt {
                // Answered with the run as submitted (`pending`, its `runAt`), kept or not.
                if sleeps { self.live.forget(run) } else { self.delayed.hold(run, at: runAt) }
            } else {
                run.start()
            }
            return Future(value: .created(run))
        case .success(.existing(let id)):
            self.live.forget(run)
            return self.job(id).map { view in
                // The earlier job was deleted in the instant between: nothing to answer with.
                guard let view else { throw StoreError.readFailed }
                return .existing(view)
            }
        case .success(.mismatch):
            self.live.forget(run)
            return Future(value: .mismatch)
        case .failure(let error):
            // Not inserted (the repository refused or failed): nobody will ever read it.
            self.live.forget(run)
            return Future(error: error)
        case .cancelled:
            self.live.forget(run)
            return .cancelled()
        }
    }

    // MARK: - Reading

    /// The job with `id`: the live run, or the stored record; nil when there is none.
    public func job(_ id: String) -> Future<(any JobView)?> {
        if let run = self.liveRun(id) { return Future(value: run) }
        return self.repository.job(id).map { $0 }
    }

    /// How often a wait on a stored record of an unfinished job reads it again (`follow`).
    static let refreshInterval: Duration = .seconds(1)

    /// Waits on a job as `view` shows it until `isDone(view)` or `timeout`, with `wait` (a wait on
    /// one view: `waitForTerminal`, `waitForEvents`); completes with the latest view. A stored
    /// record of an unfinished job — asleep until its delayed start, or (in a cluster) run
    /// elsewhere — does not change under its reader: it is read again every `refreshInterval`,
    /// and once it is live here the wait goes on on the live run.
    public func follow(
        _ view: any JobView,
        timeout: Duration,
        isDone: @escaping @Sendable (any JobView) -> Bool,
        wait: @escaping @Sendable (any JobView, Duration) -> Future<Void>
    ) -> Future<any JobView> {
        if view is JobRun || view.isTerminalAndVisible || isDone(view) || timeout <= .zero {
            return wait(view, timeout).map { view }
        }
        // Jittered (±25%), so that many waits do not read the database in step; in a cluster the
        // end of the job on another server wakes the wait at once (`clusterJobsEnded`).
        let interval = Self.refreshInterval.wholeMilliseconds
        let step = min(timeout, .milliseconds(interval * 3 / 4 + Int64.random(in: 0...(interval / 2))))
        let promise = Promise<Void>()
        let started = self.clock.monotonicNanoseconds()
        self.clock.schedule(after: step) { promise.trySucceed(()) }
        if self.repository.cluster != nil { self.waitRemotely(view.id, promise) }
        return promise.future.flatMap { self.job(view.id) }.flatMap { fresh in
            let waited = min(timeout, .nanoseconds(Int64(self.clock.monotonicNanoseconds() &- started)))
            return self.follow(fresh ?? view, timeout: timeout - waited, isDone: isDone, wait: wait)
        }
    }

    /// The live run of job `id`, if this server runs it.
    public func liveRun(_ id: String) -> JobRun? { self.live.run(id) }

    /// The number of live jobs (running, or finished and not yet recorded).
    public var liveCount: Int { self.live.count }

    /// A page of jobs, newest first. Jobs this server runs are shown as they are now (their
    /// records may be a commit behind), and dropped when that no longer matches the state asked for.
    public func list(_ query: JobQuery) -> Future<JobPage> {
        self.repository.list(query).map { page in
            let live = page.items.map { self.liveRun($0.id) }
            guard live.contains(where: { $0 != nil }) else { return page }
            var items: [JobSnapshot] = []
            items.reserveCapacity(page.items.count)
            for (item, run) in zip(page.items, live) {
                let snapshot = run?.snapshot ?? item
                if let state = query.state, snapshot.state != state { continue }
                items.append(snapshot)
            }
            return JobPage(items: items, next: page.next)
        }
    }

    // MARK: - Commands

    public enum CancelOutcome: Sendable {
        /// The cancellation started (`202`); the job as it is now.
        case cancelling(JobSnapshot)
        /// It was cancelled already (`200`).
        case alreadyCancelled(JobSnapshot)
        case terminal(JobState)
        case notFound
    }

    /// Cancels job `id`; completes once the request is durable.
    public func cancel(_ id: String) -> Future<CancelOutcome> {
        guard let run = self.liveRun(id) else {
            return self.repository.job(id).flatMap { stored -> Future<CancelOutcome> in
                guard let stored else { return Future(value: .notFound) }
                if stored.state.isTerminal {
                    return Future(
                        value: stored.state == .cancelled ? .alreadyCancelled(stored.snapshot) : .terminal(stored.state)
                    )
                }
                if stored.cancelRequested { return Future(value: .alreadyCancelled(stored.snapshot)) }
                // A stored job this server does not run: the request is recorded, and whoever
                // resumes the job carries it out.
                let recorded = self.repository.requestCancel(stored.id)
                guard stored.state == .pending else { return recorded.map { .cancelling(stored.snapshot) } }
                // A sleeping job (delayed, held by no one) is woken by the request, and resumed
                // here by a recovery, which ends it `cancelled` now. Should the loader have taken
                // it in the meantime (without the request), the run it made is cancelled instead.
                return recorded.flatMap { self.recover() }.map { _ in
                    guard let run = self.liveRun(id) else { return .cancelling(stored.snapshot) }
                    run.cancel()
                    return .cancelling(run.snapshot)
                }
            }
        }
        switch run.cancel() {
        case .cancelling:
            let seq = run.lastSeq
            return self.repository.requestCancel(run.id)
                .flatMap { DurableWait.bounded(run.waitForDurability(through: seq), clock: self.clock) }
                .map { .cancelling(run.snapshot) }
        case .alreadyCancelled:
            return Future(value: .alreadyCancelled(run.snapshot))
        case .terminal(let state):
            return Future(value: .terminal(state))
        }
    }

    public enum TaskCommandOutcome: Sendable, Equatable {
        case done(NodeRecord)
        /// `cancelTask` only: the node was cancelled already.
        case alreadyCancelled(NodeRecord)
        case jobNotFound
        case taskNotFound
        /// The node already ended.
        case terminal
        /// Complete only: the node is not an `await` task.
        case notAwait
        /// The node is not running (complete: not waiting yet; cancel: not running any more).
        case notRunning
    }

    /// Cancels one node of job `id` and its subtree; completes once the change is durable.
    public func cancelTask(_ id: String, task taskID: String) -> Future<TaskCommandOutcome> {
        self.command(id, task: taskID, completing: false) { run in run.cancel(node: taskID) }
    }

    /// Completes a running `await` task of job `id`; completes once the outcome is durable.
    public func completeTask(
        _ id: String,
        task taskID: String,
        with outcome: Outcome<JSONValue>
    ) -> Future<
        TaskCommandOutcome
    > {
        self.command(id, task: taskID, completing: true, relayedOutcome: ClusterCommand.TaskOutcome(outcome)) { run in
            run.complete(node: taskID, with: outcome)
        }
    }

    /// A node command on a live run, or the answer a stored record gives (the same checks in the
    /// same order as `JobRun.complete(node:with:)` and `cancel(node:)`).
    private func command(
        _ id: String,
        task taskID: String,
        completing: Bool,
        relayedOutcome: ClusterCommand.TaskOutcome? = nil,
        _ body: @escaping @Sendable (JobRun) -> JobRun.NodeControlResult
    ) -> Future<TaskCommandOutcome> {
        guard let run = self.liveRun(id) else {
            return self.repository.job(id).flatMap { stored -> Future<TaskCommandOutcome> in
                guard let stored else { return Future(value: .jobNotFound) }
                guard let node = stored.node(taskID) else { return Future(value: .taskNotFound) }
                if completing, node.action != "await" { return Future(value: .notAwait) }
                if !completing, node.state == .cancelled { return Future(value: .alreadyCancelled(node)) }
                if node.state.isTerminal { return Future(value: .terminal) }
                // Another server runs the job: the command goes to it through the database, and
                // its answer is this one's.
                guard let cluster = self.repository.cluster, !stored.state.isTerminal,
                    completing ? node.state == .running : true
                else { return Future(value: .notRunning) }
                let command: ClusterCommand =
                    if completing, let relayedOutcome {
                        .complete(job: id, task: taskID, outcome: relayedOutcome)
                    } else {
                        .cancelTask(job: id, task: taskID)
                    }
                return cluster.relay(command).map { answer in
                    guard case .task(let outcome)? = answer else { throw StoreError.ownerUnavailable }
                    return outcome
                }
            }
        }
        switch body(run) {
        case .done:
            // Answered once the change is durable: a restart never forgets an acknowledged one.
            let seq = run.lastSeq
            return DurableWait.bounded(run.waitForDurability(through: seq), clock: self.clock).map {
                run.node(taskID).map(TaskCommandOutcome.done) ?? .taskNotFound
            }
        case .notFound: return Future(value: .taskNotFound)
        case .terminal:
            if let node = run.node(taskID), node.state == .cancelled { return Future(value: .alreadyCancelled(node)) }
            return Future(value: .terminal)
        case .notAwait: return Future(value: .notAwait)
        case .notRunning: return Future(value: .notRunning)
        }
    }

    /// Deletes a finished job with everything recorded about it.
    public func delete(_ id: String) -> Future<DeleteResult> {
        switch self.live.place(id) {
        case .notLive: return self.repository.delete(id)
        case .running: return Future(value: .notTerminal)
        // It ended a moment ago: the delete follows its end into the repository.
        case .ending(let recorded): return recorded.flatMap { self.repository.delete(id) }
        }
    }
}
