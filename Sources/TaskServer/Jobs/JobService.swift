import Logging
import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Owns the jobs this server runs, and is all the API talks to about jobs.
///
/// - **Live jobs**: every `JobRun` this server started (submitted here, or claimed by
///   `recover()`), from before its record is inserted until its end is recorded by the
///   repository. Reads of any other job go to the repository (`StoredJob`).
/// - **Commands** — submit, cancel, cancel a task, complete an `await` task — act on the live run,
///   and their futures complete once what they changed is durable: "this job's seq N is
///   committed" (`JobRun.waitForDurability`), never a store-wide flush.
/// - **The journal**: the service is the engine's `JobObserver` that turns each job's new events
///   into a `JournalBatch` of values (node records as the events say, the end, the webhook
///   deliveries the planner makes) for the repository; the batch's commit makes the events
///   visible to readers (`markDurable`) and hands the deliveries to the dispatcher.
/// - **Recovery** (`recover()`) claims the unfinished jobs no live owner holds and resumes them:
///   at start-up, and callable at any time (it skips the jobs already live here).
/// - **Delayed starts** (`DelayedStarts`): a job with `runAt` / `delayMs` due later than a short
///   horizon is inserted *sleeping* and not kept live; the loader takes sleeping jobs from the
///   repository as they come within the horizon, and the service makes them live (`adopt`).
public final class JobService: JobObserver, Sendable {
    public let engine: Engine
    public let repository: any JobRepository
    let planner: WebhookPlanner
    let dispatcher: WebhookDispatcher?
    /// Where committed `job.*` events go for server-wide readers.
    let eventFeed: (any EventFeed)?
    /// The server-wide feed is the repository's (`JobRepository.eventFeed`): its entries go with
    /// the commits (`JournalBatch.feedJob`), not through `EventFeed.publish`.
    private let feedKeptByRepository: Bool
    let logger: Logger
    /// Whether events are gated on commits (`repository.isDurable`).
    let durable: Bool
    let clock: any ServerClock
    /// A claim of ownerless jobs failed and is tried again (`claimOwnerless`).
    private let claimRetrying = Atomic(false)
    private let stopped = Atomic(false)
    /// Delayed jobs held until their start, and the loader of sleeping ones.
    let delayed: DelayedStarts
    /// The live runs, in shards by id: every submission adds one and every end removes one, from
    /// both event loops and the pools' threads, and one lock for all of them was contended.
    private let live: [Shard] = (0..<16).map { _ in Shard() }

    private final class Shard: Sendable {
        let runs = Mutex<[JobIDKey: JobRun]>([:])
    }
    /// Commands (delete, redrive) waiting for a finished job's end to be recorded, by job id;
    /// `waitingForEnds` counts them, so that a job's end looks at them only when there are any.
    private let endWaiters = Mutex<[String: [Promise<Void>]]>([:])
    private let waitingForEnds = Atomic<Int>(0)
    /// The jobs that left the live set while a recovery was in flight. A recovery's claim reads
    /// the jobs this server owns and does not run; one that ended here while the claim was on its
    /// way may have been read before its end was committed, and must not run again from that
    /// record. `recovering` counts the recoveries in flight (changed under this lock), so that an
    /// end looks only when there are any; the set is emptied when the last one ends.
    private let leftWhileRecovering = Mutex<Set<String>>([])
    private let recovering = Atomic<Int>(0)
    private let resumeHooks = Mutex<ResumeHooks?>(nil)

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

    /// The shard of `key` (its random bytes pick it).
    private func shard(_ key: JobIDKey) -> Shard {
        switch key {
        case .inline(_, _, let random, _): self.live[Int(truncatingIfNeeded: random >> 8) & 15]
        case .other(let id): self.live[id.utf8.count & 15]
        }
    }

    /// Runs `body` on the live runs of the shard of `id`.
    private func withLive<R>(_ id: String, _ body: (inout [JobIDKey: JobRun], JobIDKey) -> R) -> R {
        let key = JobIDKey(id)
        return self.shard(key).runs.withLock { body(&$0, key) }
    }

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
        logger: Logger
    ) {
        precondition(
            engine.eventsAwaitDurability == repository.isDurable,
            "JobService: the engine must gate events exactly when the repository is durable"
        )
        self.engine = engine
        self.repository = repository
        self.planner = planner
        self.dispatcher = dispatcher
        self.eventFeed = eventFeed
        self.feedKeptByRepository = repository.eventFeed != nil
        self.logger = logger
        self.durable = repository.isDurable
        self.clock = clock
        self.delayed = DelayedStarts(repository: repository, clock: clock, options: delayedStarts)
        engine.addObserver(self)
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
    public func submit(
        _ spec: JobSpec,
        document: ByteBuffer,
        idempotency: IdempotencyKey?,
        id: String? = nil
    ) -> Future<Submitted> {
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
        // Due later than the loader's horizon: it sleeps in the repository, not in memory.
        record.sleeps = runAt.map { !self.delayed.holdsAtSubmission($0) } ?? false
        let sleeps = record.sleeps
        // Live before it is inserted: a reader that learns the id early finds the run, never a
        // record a commit behind it.
        self.withLive(run.id) { live, key in live[key] = run }
        let inserted = self.repository.insert(record)
        // A repository in memory answers at once: no continuation to allocate.
        if let outcome = inserted.outcome { return self.submitted(run, outcome, runAt: runAt, sleeps: sleeps) }
        return inserted.continueWithTask(on: .immediate) { inserted in
            self.submitted(run, inserted.outcome!, runAt: runAt, sleeps: sleeps)
        }
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
                if sleeps { self.forget(run) } else { self.delayed.hold(run, at: runAt) }
            } else {
                run.start()
            }
            return Future(value: .created(run))
        case .success(.existing(let id)):
            self.forget(run)
            return self.job(id).map { view in
                // The earlier job was deleted in the instant between: nothing to answer with.
                guard let view else { throw StoreError.readFailed }
                return .existing(view)
            }
        case .success(.mismatch):
            self.forget(run)
            return Future(value: .mismatch)
        case .failure(let error):
            // Not inserted (the repository refused or failed): nobody will ever read it.
            self.forget(run)
            return Future(error: error)
        case .cancelled:
            self.forget(run)
            return .cancelled()
        }
    }

    /// Makes `run` (built from the record with `key`) live, unless its job is live already.
    private func addLive(_ run: JobRun, key storeKey: JobKey) -> Bool {
        run.storeKey.store(storeKey, ordering: .relaxed)
        return self.withLive(run.id) { live, key -> Bool in
            guard live[key] == nil else { return false }
            live[key] = run
            return true
        }
    }

    private func forget(_ run: JobRun) {
        self.withLive(run.id) { live, key in
            if live[key] === run { live[key] = nil }
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
        let started = ContinuousClock.now
        TimerQueue.shared.schedule(after: step) { promise.trySucceed(()) }
        if self.repository.cluster != nil {
            let number = self.remoteWaitNumbers.wrappingAdd(1, ordering: .relaxed).newValue
            self.remoteWaiters.withLock { $0[view.id, default: [:]][number] = promise }
            promise.future.whenComplete { _ in
                self.remoteWaiters.withLock { waiters in
                    waiters[view.id]?[number] = nil
                    if waiters[view.id]?.isEmpty == true { waiters[view.id] = nil }
                }
            }
        }
        return promise.future.flatMap { self.job(view.id) }.flatMap { fresh in
            let waited = min(timeout, ContinuousClock.now - started)
            return self.follow(fresh ?? view, timeout: timeout - waited, isDone: isDone, wait: wait)
        }
    }

    /// Waits on stored records of unfinished jobs that another server runs, by job id.
    private let remoteWaiters = Mutex<[String: [Int: Promise<Void>]]>([:])
    private let remoteWaitNumbers = Atomic(0)

    /// The live run of job `id`, if this server runs it.
    public func liveRun(_ id: String) -> JobRun? { self.withLive(id) { live, key in live[key] } }

    /// The number of live jobs (running, or finished and not yet recorded).
    public var liveCount: Int { self.live.reduce(0) { count, shard in count + shard.runs.withLock { $0.count } } }

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
                .flatMap { run.waitForDurability(through: seq) }
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
            return run.waitForDurability(through: seq).map {
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

    /// Where job `id` is: not live here, live and not finished (its state), or finished a moment
    /// ago (the future completes once its end is recorded and the repository has the record).
    private enum LiveOrEnding {
        case no
        case running(JobState)
        case ending(Future<Void>)
    }

    private func liveOrEnding(_ id: String) -> LiveOrEnding {
        self.withLive(id) { live, key in
            guard let run = live[key] else { return .no }
            let state = run.jobState
            guard state.isTerminal else { return .running(state) }
            // Registered under the shard's lock: `ended` removes the run under it before it takes
            // the waiters, so this waiter cannot be missed.
            let promise = Promise<Void>()
            self.endWaiters.withLock { $0[id, default: []].append(promise) }
            self.waitingForEnds.add(1, ordering: .sequentiallyConsistent)
            return .ending(promise.future)
        }
    }

    /// Deletes a finished job with everything recorded about it.
    public func delete(_ id: String) -> Future<DeleteResult> {
        switch self.liveOrEnding(id) {
        case .no: return self.repository.delete(id)
        case .running: return Future(value: .notTerminal)
        // It ended a moment ago: the delete follows its end into the repository.
        case .ending(let recorded): return recorded.flatMap { self.repository.delete(id) }
        }
    }

    // MARK: - Redrive

    public enum RedriveOutcome: Sendable {
        /// The job runs again (`202`); the job as it is now.
        case redriven(JobSnapshot)
        /// Not failed or cancelled (`409 job.notRedrivable`): its state.
        case notRedrivable(JobState)
        case notFound
    }

    /// Runs a failed or cancelled job again from where it stopped (SPEC §8): its succeeded nodes
    /// keep their outcomes; failed, cancelled and skipped ones run again, their attempts counting
    /// on. The same path as recovery — the repository hands over the job's records (`reopen`, as
    /// `claimUnfinished` does) and the run resumes from them — plus a `job.redriven` event.
    /// Completes once that event is durable.
    public func redrive(_ id: String) -> Future<RedriveOutcome> {
        switch self.liveOrEnding(id) {
        case .no: return self.redriveStored(id)
        case .running(let state): return Future(value: .notRedrivable(state))
        case .ending(let recorded): return recorded.flatMap { self.redriveStored(id) }
        }
    }

    private func redriveStored(_ id: String) -> Future<RedriveOutcome> {
        // A job cancelled before it ever started starts now (stored so, for every reader).
        let now = Timestamp.now()
        return self.repository.reopen(id, startingAt: now).flatMap { stored -> Future<RedriveOutcome> in
            guard let stored else {
                // Not there, or not failed or cancelled (any more): say which.
                return self.job(id).map { job in job.map { .notRedrivable($0.snapshot.state) } ?? .notFound }
            }
            let run: JobRun
            do {
                let spec = try stored.spec ?? self.engine.decoder.decodeJob(stored.document ?? .null)
                run = self.engine.makeRun(
                    id: stored.id,
                    spec: spec,
                    createdAt: stored.createdAt,
                    restored: .redriving(nodes: stored.nodes, events: stored.events, startedAt: stored.startedAt ?? now)
                )
            } catch {
                // Its document was accepted once: this is a stored record gone bad. It stays
                // unfinished, for a recovery to report again.
                self.logger.error(
                    "cannot redrive a stored job",
                    metadata: ["job.id": "\(id)", "error": "\(error)"]
                )
                return Future(value: .notRedrivable(stored.state))
            }
            let added = self.addLive(run, key: stored.key)
            guard added else { return Future(value: .notRedrivable(.running)) }
            run.startRedriven()
            // Answered once `job.redriven` (and whatever followed it so far) is committed.
            return run.waitForDurability(through: run.lastSeq).map { .redriven(run.snapshot) }
        }
    }

    // MARK: - Recovery

    /// Claims the unfinished jobs that no live owner holds and resumes them (nodes with a stored
    /// outcome keep it and do not run again); returns how many. Safe to call at any time.
    @discardableResult
    public func recover() -> Future<Int> {
        self.leftWhileRecovering.withLock { _ in _ = self.recovering.add(1, ordering: .sequentiallyConsistent) }
        let live = self.live.reduce(into: Set<String>()) { ids, shard in
            shard.runs.withLock { runs in ids.formUnion(runs.values.lazy.map { $0.id }) }
        }
        let hooks = self.resumeHooks.withLock { $0 }
        let claimed = self.repository.claimUnfinished(excluding: live).flatMap { stored -> Future<[StoredJob]> in
            guard let hooks, !stored.isEmpty else { return Future(value: stored) }
            // Without its leases (the database away a moment): its attempts are queued anew.
            return hooks.before(stored.map(\.id)).continueWith(on: .immediate) { _ in stored }
        }.map { stored in
            var resumed: [JobRun] = []
            for job in stored {
                do {
                    let spec = try job.spec ?? self.engine.decoder.decodeJob(job.document ?? .null)
                    let run = self.engine.makeRun(
                        id: job.id,
                        spec: spec,
                        createdAt: job.createdAt,
                        restored: RestoredJob(
                            nodes: Dictionary(job.nodes.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last }),
                            events: job.events,
                            startedAt: job.startedAt,
                            cancelRequested: job.cancelRequested
                        )
                    )
                    let added = self.leftWhileRecovering.withLock { left in
                        !left.contains(job.id) && self.addLive(run, key: job.key)
                    }
                    if added { resumed.append(run) }
                } catch {
                    self.logger.error(
                        "cannot resume a stored job; it stays as it was",
                        metadata: ["job.id": "\(job.id)", "error": "\(error)"]
                    )
                }
            }
            for run in resumed {
                // A delayed job taken before the restart and not started yet waits for its time
                // (one with a cancellation to carry out ends now).
                if let runAt = run.spec.runAt(createdAt: run.createdAt), run.snapshot.startedAt == nil,
                    !run.isCancelRequested
                {
                    self.delayed.hold(run, at: runAt)
                } else {
                    run.start()
                }
            }
            if !stored.isEmpty { hooks?.after() }
            return resumed.count
        }
        claimed.whenComplete { _ in
            self.leftWhileRecovering.withLock { left in
                if self.recovering.subtract(1, ordering: .sequentiallyConsistent).newValue == 0 { left = [] }
            }
        }
        return claimed
    }

    /// Makes a sleeping job the loader took live (nil when it is live already or cannot be
    /// built; the latter is logged and the job left as it is).
    private func adopt(_ stored: StoredJob) -> JobRun? {
        do {
            let spec = try stored.spec ?? self.engine.decoder.decodeJob(stored.document ?? .null)
            let run = self.engine.makeRun(
                id: stored.id,
                spec: spec,
                createdAt: stored.createdAt,
                restored: RestoredJob(nodes: [:], events: [], startedAt: nil, cancelRequested: stored.cancelRequested)
            )
            let added = self.addLive(run, key: stored.key)
            return added ? run : nil
        } catch {
            self.logger.error(
                "cannot start a delayed job; it stays as it was",
                metadata: ["job.id": "\(stored.id)", "error": "\(error)"]
            )
            return nil
        }
    }

    // MARK: - The cluster (SPEC §9)

    /// Relayed commands being applied here, so that a notification and a heartbeat's look for
    /// lost ones do not apply one twice.
    private let applying = Mutex<Set<Int64>>([])

    /// Stops acting on every job this server runs: another server runs them from now on. Their
    /// runs are dropped (reads go to the database) and drain without running anything.
    /// Claims the jobs without a live owner (a server died, or this one registered again), and
    /// tries again every second while the store cannot answer (the database is away).
    func claimOwnerless() {
        self.recover().whenComplete { [weak self] outcome in
            guard let self, outcome.value == nil, !self.stopped.load(ordering: .relaxed) else { return }
            guard !self.claimRetrying.exchange(true, ordering: .relaxed) else { return }
            self.logger.warning("cannot claim the jobs without an owner yet; trying again in a second")
            _ = self.clock.schedule(after: .seconds(1)) { [weak self] in
                self?.claimRetrying.store(false, ordering: .relaxed)
                self?.claimOwnerless()
            }
        }
    }

    func abandonAll() {
        var abandoned: [JobRun] = []
        for shard in self.live {
            shard.runs.withLock { runs in
                abandoned += runs.values
                runs = [:]
            }
        }
        for run in abandoned { run.abandon() }
        if !abandoned.isEmpty {
            self.logger.warning("gave up the jobs of a lost lease", metadata: ["count": "\(abandoned.count)"])
        }
    }

    func applyRelayed(_ id: Int64, _ command: ClusterCommand) {
        guard let cluster = self.repository.cluster, !command.isPoolCommand else { return }
        // A notification and a heartbeat's look for lost commands may both bring it.
        guard self.applying.withLock({ $0.insert(id).inserted }) else { return }
        let applied: Future<TaskCommandOutcome>
        switch command {
        case .cancelTask(let job, let task):
            applied = self.cancelTask(job, task: task)
        case .complete(let job, let task, let outcome):
            applied = self.completeTask(job, task: task, with: outcome.outcome)
        case .claim, .leaseHeartbeat, .leaseComplete, .leaseRelease:
            // The external pools' (`PoolRelay`): the cluster hands them there.
            self.applying.withLock { _ = $0.remove(id) }
            return
        }
        applied.whenComplete { outcome in
            self.applying.withLock { _ = $0.remove(id) }
            // Not answered when it failed here (the job was lost meanwhile): the server that
            // takes the job over applies it.
            if case .success(let result) = outcome { cluster.answer(id, .task(result)) }
        }
    }

    /// Wakes the waits on the records of these jobs (they ended on another server).
    func wakeRemoteWaits(_ ids: [String]) {
        let woken = self.remoteWaiters.withLock { waiters in
            ids.flatMap { waiters.removeValue(forKey: $0).map { Array($0.values) } ?? [] }
        }
        for promise in woken { promise.trySucceed(()) }
    }

    // MARK: - The journal (JobObserver)

    public func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        // Given up to another server: what it does from now on is not this server's to record.
        if run.isAbandoned { return }
        let deliveries = self.planner.plan(run, events: events)
        let ends = events.last?.type.isTerminal == true
        // Most batches hold task events only.
        let feed = events.contains(where: \.type.isJobEvent) ? self.eventFeed : nil
        guard self.durable else {
            // A repository that keeps nothing across restarts is told only of the job's end and of
            // the deliveries it keeps; it commits as it is told.
            var ended: EndedJob?
            if ends || !deliveries.isEmpty {
                var batch = self.batch(run, events)
                batch.deliveries = deliveries
                ended = batch.ended
                self.repository.append(batch)
            }
            feed?.publish(jobID: run.id, events: events, job: ended?.snapshot ?? run.snapshot)
            if !deliveries.isEmpty { self.dispatcher?.wake() }
            if ends { self.ended(run) }
            return
        }
        var batch = self.batch(run, events)
        batch.deliveries = deliveries
        // A feed the repository keeps gets the job as these events leave it, in their commit;
        // one in process is told once they are committed.
        let keptByRepository = feed != nil && self.feedKeptByRepository
        if keptByRepository { batch.feedJob = batch.ended?.snapshot ?? run.snapshot }
        let published = keptByRepository ? nil : feed
        let lastSeq = batch.lastSeq
        let dispatcher = deliveries.isEmpty ? nil : self.dispatcher
        let jobEvents = published == nil ? [] : batch.events
        let endedSnapshot = batch.ended?.snapshot
        batch.committed = { committed in
            if committed {
                run.markDurable(through: lastSeq)
                // Server-wide readers, and deliveries, get only what is stored.
                if let published {
                    published.publish(jobID: run.id, events: jobEvents, job: endedSnapshot ?? run.snapshot)
                }
                dispatcher?.wake()
            }
            if ends { self.ended(run) }
        }
        self.repository.append(batch)
    }

    /// The journal batch of `events`: the job's start, its end with its whole record, or — for a
    /// durable repository — the node rows the events change.
    private func batch(_ run: JobRun, _ events: ArraySlice<JobEvent>) -> JournalBatch {
        // A repository that keeps nothing across restarts keeps a job's events with its end.
        var batch = JournalBatch(
            id: run.id,
            key: run.storeKey.load(ordering: .relaxed),
            events: self.durable ? Array(events) : []
        )
        for event in events where event.type == .jobStarted { batch.startedAt = event.time }
        if events.last?.type.isTerminal == true {
            let record = run.record
            batch.ended = EndedJob(snapshot: record.snapshot, nodes: record.nodes, events: record.events)
        } else if self.durable {
            batch.nodes = Self.changedNodes(run, events)
        }
        return batch
    }

    /// The node rows `events` change: one per node, in the order of their first event, each saying
    /// what its last event says — even when the node has moved on since (its outcome is written with
    /// the event that announces it, in a later batch).
    static func changedNodes(_ run: JobRun, _ events: ArraySlice<JobEvent>) -> [(ordinal: Int, record: NodeRecord)] {
        var order: [String] = []
        var last: [String: JobEventType] = [:]
        for event in events {
            switch event.type {
            case .taskStarted, .taskRetrying, .taskSucceeded, .taskFailed, .taskCancelled, .taskSkipped:
                guard let taskId = event.taskId else { continue }
                if last.updateValue(event.type, forKey: taskId) == nil { order.append(taskId) }
            default:
                break
            }
        }
        var rows: [(ordinal: Int, record: NodeRecord)] = []
        rows.reserveCapacity(order.count)
        for taskId in order {
            guard let type = last[taskId], let (ordinal, record) = run.indexedNode(taskId) else { continue }
            var row = record
            if type == .taskStarted || type == .taskRetrying {
                row.state = .running
                row.result = nil
                row.error = nil
                row.finishedAt = nil
            } else if !record.state.isTerminal {
                continue
            }
            rows.append((ordinal, row))
        }
        return rows
    }

    /// `run`'s end is recorded (or lost with a failed commit): reads find its record from now on.
    private func ended(_ run: JobRun) {
        if self.recovering.load(ordering: .sequentiallyConsistent) > 0 {
            // Noted and removed together, so that a recovery either finds the run live or noted.
            self.leftWhileRecovering.withLock { left in
                left.insert(run.id)
                self.forget(run)
            }
        } else {
            self.forget(run)
        }
        // A delete that found the run live registered before the run left (both under its
        // shard's lock), so it is counted by now.
        guard self.waitingForEnds.load(ordering: .sequentiallyConsistent) > 0 else { return }
        let waiters = self.endWaiters.withLock { $0.removeValue(forKey: run.id) ?? [] }
        if waiters.isEmpty { return }
        self.waitingForEnds.subtract(waiters.count, ordering: .sequentiallyConsistent)
        for waiter in waiters { waiter.succeed(()) }
    }
}

/// The job service as its cluster's delegate, held weakly: the cluster lives in the repository,
/// which the service holds.
final class ClusterLink: ClusterDelegate {
    private weak let service: JobService?

    init(_ service: JobService) { self.service = service }

    func clusterLostJobs() { self.service?.abandonAll() }
    func clusterClaimJobs() { self.service?.claimOwnerless() }
    func clusterRuns(_ id: String) -> Bool { self.service?.liveRun(id) != nil }
    func clusterCancel(_ id: String) { _ = self.service?.liveRun(id)?.cancel() }
    func clusterApply(_ id: Int64, _ command: ClusterCommand) { self.service?.applyRelayed(id, command) }
    func clusterJobsEnded(_ ids: [String]) { self.service?.wakeRemoteWaits(ids) }
}
