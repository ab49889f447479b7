// The engine's interpreter: how each node type of a job graph runs on TaskCore futures (task,
// series, parallel, continuation, map, dynamic), how a job starts and ends, and how cancellation
// and completion reach a running node.
//
// One file of ~870 lines on purpose: each node type's `run…` method calls the others recursively
// and shares the same private bookkeeping (node states, events, the per-instance id suffix), so
// they read as one interpreter. Split by type, every file would need the same helpers widened to
// internal and a reader would hop between six files to follow one series-of-maps.

import Synchronization
import TaskCore

/// Where a node runs: the token that cancels it and the id suffix of its map instance.
struct ExecutionContext: Sendable {
    var token: CancellationToken
    /// `[3]` inside instance 3 of a map (`[3][1]` when maps nest); empty elsewhere.
    var suffix: String
    /// `dyn/` inside the graph spawned by dynamic node `dyn`: `${tasks.x}` there means `dyn/x` first.
    var scopePrefix: String = ""
    /// `true` when the engine itself passes a cancellation of `token` on to the nodes started
    /// under it (`cancelStarted`, from a handler on a node or branch token, or from
    /// `cancelJobSource`), or `token` is never cancelled (the cleanup token), so a node's own
    /// token source need not be linked to `token`. `false`: the node's source is linked.
    var propagates: Bool = false
}

// MARK: - Starting and ending the job

extension JobRun {
    /// Starts the job (once; later calls do nothing). The graph is compiled into TaskCore futures
    /// as it runs: series become success-continuations, parallel nodes `whenAllSettled` with lazy
    /// bounded concurrency, continuations the `continueWith` family, and map and dynamic nodes
    /// expand when they start.
    public func start() {
        self.prepareStart()?.run()
    }

    /// A job marked started (`job.started` appended, `startedAt` stamped), its graph not run yet.
    public struct PreparedStart: Sendable {
        let job: JobRun
        let startedAt: Timestamp
        let waiters: [Promise<Void>]

        /// Runs the graph (and tells the job's observers of its start).
        public func run() { self.job.run(timeoutFrom: self.startedAt, self.waiters) }
    }

    /// The first half of `start()`: marks the job started now and returns what runs its graph;
    /// nil when it was started already. A batch of jobs falling due at one instant (delayed
    /// starts) is marked started together, then run — so each `startedAt` says when its job was
    /// taken for execution, not how long the jobs before it took to run; its tasks start as the
    /// engine gets to them (`task.started`), as they do behind a busy pool.
    public func prepareStart() -> PreparedStart? {
        let (shouldStart, startedAt, waiters): (Bool, Timestamp, [Promise<Void>]) = self.state.withLock { state in
            guard state.jobState == .pending else { return (false, .now(), []) }
            state.jobState = .running
            if let startedAt = state.startedAt { return (true, startedAt, []) }
            let now = Timestamp.now()
            // Cancelled before it started (a delayed job, SPEC §8): it ends `cancelled` without
            // having started — no `job.started`, no `startedAt`.
            if state.cancelRequested { return (true, now, []) }
            state.startedAt = now
            return (true, now, Self.appendEvent(.jobStarted, taskId: nil, data: nil, time: now, in: &state))
        }
        return shouldStart ? PreparedStart(job: self, startedAt: startedAt, waiters: waiters) : nil
    }

    /// Runs a job made from a failed or cancelled one's records (`RestoredJob.redriving`): appends
    /// `job.redriven`, then runs every node without a stored outcome. The job's `timeoutMs` counts
    /// from now.
    public func startRedriven() {
        let (shouldStart, now, waiters): (Bool, Timestamp, [Promise<Void>]) = self.state.withLock { state in
            guard state.jobState == .pending else { return (false, .now(), []) }
            state.jobState = .running
            let now = Timestamp.now()
            // Cancelled before it ever started (a delayed job), and not given a start time by the
            // caller (`JobService` gives the one it stored): it starts now, as a running job has one.
            if state.startedAt == nil { state.startedAt = now }
            var waiters = Self.appendEvent(.jobRedriven, taskId: nil, data: nil, time: now, in: &state)
            // A job cancelled before it ever started starts now: its `job.started` comes with this
            // run, as for any job that runs (#43).
            if !state.events.contains(where: { $0.type == .jobStarted }) {
                // At the start time the redrive stored (the caller's), which the event records.
                let startedAt = state.startedAt ?? now
                waiters += Self.appendEvent(.jobStarted, taskId: nil, data: nil, time: startedAt, in: &state)
            }
            return (true, now, waiters)
        }
        guard shouldStart else { return }
        self.run(timeoutFrom: now, waiters)
    }

    fileprivate func run(timeoutFrom startedAt: Timestamp, _ waiters: [Promise<Void>]) {
        self.publish(waiters)
        // `cancelJobSource` passes the job token's cancellation on to the root.
        let context = ExecutionContext(token: self.jobSource.token, suffix: "", propagates: true)
        if let concurrency = self.spec.concurrency {
            self.runHoldingKey(concurrency, context: context, timeoutFrom: startedAt)
            return
        }
        self.runRoot(context: context, timeoutFrom: startedAt)
    }

    /// A job-level concurrency key (SPEC §8): the job waits for a place under its key (its
    /// `timeoutMs` counting), holding nothing else, then runs its graph and gives the place back
    /// once it has ended. A cancellation or timeout while it waits ends it the usual way (the root,
    /// started under a cancelled token, ends cancelled).
    private func runHoldingKey(
        _ concurrency: ConcurrencySpec,
        context: ExecutionContext,
        timeoutFrom startedAt: Timestamp
    ) {
        let key: String
        do {
            key = try Self.evaluate(concurrency, in: RunScope(run: self, input: self.spec.input, context: context))
        } catch {
            let failure = (error as? FinalError)?.error ?? TaskError.from(error)
            self.state.withLock { $0.startFailure = failure }
            self.cancelJobSource()
            self.runRoot(context: context, timeoutFrom: startedAt)
            return
        }
        let acquired = self.acquireKey(key, max: concurrency.max, holder: self.id, token: context.token)
        if case .success(let permit) = acquired.outcome {
            self.runRoot(context: context, timeoutFrom: startedAt, releasing: permit)
            return
        }
        self.state.withLock { $0.waitingFor = .concurrency }
        self.engine.noteWait(.concurrency)
        if let timeoutMs = self.spec.timeoutMs { self.armTimeout(timeoutMs, startedAt: startedAt) }
        acquired.whenComplete { outcome in
            self.state.withLock { $0.waitingFor = nil }
            self.runRoot(context: context, timeoutFrom: nil, releasing: try? outcome.get())
        }
    }

    /// Runs the graph's root and finishes the job with its outcome; `timeoutFrom` nil: the timeout
    /// is armed already. `permit`: the job's concurrency key, given back once the job has ended.
    private func runRoot(
        context: ExecutionContext,
        timeoutFrom startedAt: Timestamp?,
        releasing permit: (any HeldKey)? = nil
    ) {
        let root = self.execute(self.spec.graph, at: 0, input: self.spec.input, context: context)
        if let outcome = root.outcome {
            // The graph ran to its end inside this call (every node inline): a timeout has nothing
            // left to cancel, so no timer is armed (scheduling and cancelling one was ~2% of a
            // one-task submission).
            self.finishJob(outcome)
            if let permit { self.giveBack(permit) }
            return
        }
        if let timeoutMs = self.spec.timeoutMs, let startedAt { self.armTimeout(timeoutMs, startedAt: startedAt) }
        root.whenComplete { outcome in
            self.finishJob(outcome)
            if let permit { self.giveBack(permit) }
        }
    }

    /// Cancels the job (failed, `job.timeout`) unless it ends within `timeoutMs` of `startedAt`.
    private func armTimeout(_ timeoutMs: Int, startedAt: Timestamp) {
        let elapsed = max(0, Timestamp.now().milliseconds - startedAt.milliseconds)
        let timer = TimerQueue.shared.schedule(after: .milliseconds(max(0, Int64(timeoutMs) - elapsed))) {
            [weak self] in
            self?.timeOut()
        }
        // `finishJob` cancels the timer it finds; a job that ended meanwhile left none to find.
        let ended = self.state.withLock { state -> Bool in
            if state.jobState.isTerminal { return true }
            state.timer = timer
            return false
        }
        if ended { TimerQueue.shared.cancel(timer) }
    }

    private func timeOut() {
        let proceed = self.state.withLock { state -> Bool in
            if state.jobState.isTerminal || state.cancelRequested { return false }
            state.timedOut = true
            return true
        }
        if proceed { self.cancelJobSource() }
    }

    /// Cancels the job's token and the root node started under it (see `cancelStarted`). The
    /// token is checked in `begin` under the lock, so a root that starts meanwhile sees it.
    func cancelJobSource() {
        self.jobSource.cancel()
        self.cancelStarted(under: ObjectIdentifier(self.jobSource.token), parent: nil)
    }

    private func finishJob(_ outcome: Outcome<JSONValue>) {
        let waiters: [Promise<Void>] = self.state.withLock { state in
            guard !state.jobState.isTerminal else { return [] }
            let now = Timestamp.now()
            let type: JobEventType
            if let failure = state.startFailure {
                state.jobState = .failed
                state.error = failure
                type = .jobFailed
            } else if state.cancelRequested {
                state.jobState = .cancelled
                type = .jobCancelled
            } else if state.timedOut {
                state.jobState = .failed
                state.error = TaskError(
                    code: "job.timeout",
                    message: "the job did not finish within \(self.spec.timeoutMs ?? 0) ms"
                )
                type = .jobFailed
            } else {
                switch outcome {
                case .success(let value):
                    state.jobState = .succeeded
                    state.result = value
                    type = .jobSucceeded
                case .failure(let error):
                    state.jobState = .failed
                    state.error = TaskError.from(error)
                    type = .jobFailed
                case .cancelled:
                    state.jobState = .cancelled
                    type = .jobCancelled
                }
            }
            state.finishedAt = now
            if let timer = state.timer { TimerQueue.shared.cancel(timer) }
            state.timer = nil
            // A durable store's terminal waiters wake once the terminal event is committed
            // (`markDurable`): whoever waited for the end then reads a history that has it.
            var waiters = state.gated ? [] : state.terminalWaiters
            if !state.gated { state.terminalWaiters = [] }
            waiters += Self.appendEvent(type, taskId: nil, data: state.error?.json, time: now, in: &state)
            return waiters
        }
        self.publish(waiters)
    }
}

// MARK: - Running nodes

extension JobRun {
    private enum Begin {
        case restored(Outcome<JSONValue>)
        case cancelled
        /// Started: the node's id, its token source, the waiters to wake, and (tasks) the attempts
        /// counted so far, this one included.
        case started(id: String, source: CancellationTokenSource, waiters: [Promise<Void>], attempts: Int)
    }

    /// Unless node `index` already finished before a restart or was cancelled before it started,
    /// marks it running — in one critical section.
    ///
    /// `deferStart`: a task on an external executor stays `pending` while it waits for a worker;
    /// it is counted and made cancellable here, and `markClaimed` turns it `running`.
    /// `continuesLease`: the task's attempt from before a restart is still leased; it is running
    /// again at once, as the attempt it was, without a new count or a second `task.started`.
    private func begin(
        _ index: Int,
        context: ExecutionContext,
        deferStart: Bool = false,
        continuesLease: Bool = false
    ) -> Begin {
        let token = context.token
        // Unlinked when the engine propagates `token`'s cancellation itself (`cancelStarted`):
        // linking costs a handler on the parent token per node, added and removed again.
        let source = context.propagates ? CancellationTokenSource() : CancellationTokenSource(linkedTo: [token])
        return self.state.withLock { state -> Begin in
            let previous = state.records[index].state
            if previous.isTerminal {
                let record = state.records[index]
                if !self.restored.isEmpty, self.restored[record.id] != nil {
                    switch record.state {
                    case .succeeded: return .restored(.success(record.result ?? .null))
                    case .failed:
                        return .restored(.failure(record.error ?? TaskError(code: "task.failed", message: "failed")))
                    default: return .restored(.cancelled)
                    }
                }
                return .cancelled
            }
            if token.isCancellationRequested
                || (!state.cancelledBeforeStart.isEmpty && state.cancelledBeforeStart.contains(index))
            {
                return .cancelled
            }
            if deferStart || continuesLease, previous == .pending {
                if continuesLease {
                    // The attempt from before the restart carries on: running at once, counted once.
                    state.records[index].state = .running
                    state.progress.add(.pending, -1)
                    state.progress.add(.running, 1)
                    state.records[index].attempts = max(1, state.records[index].attempts)
                } else {
                    state.records[index].attempts += 1
                }
                state.nodeSources[index] = RunningSource(source: source, startToken: token)
                return .started(
                    id: state.records[index].id,
                    source: source,
                    waiters: [],
                    attempts: state.records[index].attempts
                )
            }
            let now = Timestamp.now()
            state.records[index].state = .running
            if state.records[index].startedAt == nil { state.records[index].startedAt = now }
            if state.records[index].isTask {
                state.progress.add(previous, -1)
                state.progress.add(.running, 1)
                // The first attempt is counted with the `task.started` event that announces it, so
                // a journal that stores the event stores the attempt too.
                state.records[index].attempts += 1
            }
            state.nodeSources[index] = RunningSource(source: source, startToken: token)
            let id = state.records[index].id
            let waiters = Self.appendEvent(.taskStarted, taskId: id, data: nil, time: now, in: &state)
            return .started(id: id, source: source, waiters: waiters, attempts: state.records[index].attempts)
        }
    }

    /// Runs `node`, whose record is `recordIndex`, with `input` and returns a future of its
    /// outcome; the record is final before the future completes, so a parent never sees a child's
    /// outcome ahead of its record.
    ///
    /// Records are found by index, not id: registration lays a node's children out in document
    /// order (`children(of:)`), which saves hashing an id per node.
    func execute(_ node: Node, at index: Int, input: JSONValue, context: ExecutionContext) -> Future<JSONValue> {
        let id: String
        let source: CancellationTokenSource
        let attempts: Int
        // A task's `task.started` is published with its end when the action finishes inline (one
        // delivery to the observers instead of two); any other node's at once.
        var startWaiters: [Promise<Void>] = []
        var deferStart = false
        var continuesLease = false
        // A task with a concurrency key stays `pending` until its key is granted (`markStarted`):
        // its `task.started` and `startedAt` say when it really started, not when it began to wait.
        if case .task(let task) = node.kind, task.concurrency != nil { deferStart = true }
        if self.engine.hasExternalExecutors, case .task(let task) = node.kind,
            let external = self.engine.externalExecutor(named: task.executor)
        {
            deferStart = true
            // An attempt that was leased when the process stopped, and whose lease the pool kept:
            // the same attempt carries on (SPEC §6), counted once and announced once.
            if !self.restored.isEmpty {
                let recordID = self.state.withLock { $0.records[index].id }
                if self.restored[recordID]?.state == .running {
                    continuesLease = external.continuesLease(jobID: self.id, taskID: recordID)
                }
            }
        }
        switch self.begin(index, context: context, deferStart: deferStart, continuesLease: continuesLease) {
        case .restored(let outcome):
            return Future(outcome: outcome)
        case .cancelled:
            if !self.isTerminal(index) { self.markCancelledBeforeStart(index) }
            return .cancelled()
        case .started(let startedID, let startedSource, let waiters, let startedAttempts):
            if node.isTask {
                startWaiters = waiters
            } else {
                self.publish(waiters)
            }
            id = startedID
            source = startedSource
            attempts = startedAttempts
        }
        let isComposite = !node.isTask
        if isComposite {
            // Children start with unlinked sources: this node's cancellation reaches them here.
            let tokenID = ObjectIdentifier(source.token)
            source.token.register { [weak self] in self?.cancelStarted(under: tokenID, parent: index) }
        }
        let nodeContext = ExecutionContext(
            token: source.token,
            suffix: context.suffix,
            scopePrefix: context.scopePrefix,
            propagates: isComposite
        )
        let nodeInput: JSONValue
        if let template = node.input {
            do {
                nodeInput = try template.render(in: RunScope(run: self, input: input, context: context))
            } catch {
                return Future(outcome: self.markFinished(index, .failure(TaskError.from(error)), waking: startWaiters))
            }
        } else {
            nodeInput = input
        }

        let body: Future<JSONValue>
        switch node.kind {
        case .task(let spec):
            body = self.runTask(spec, index: index, id: id, attempts: attempts, input: nodeInput, context: nodeContext)
        case .series(let steps):
            body = self.runSeries(steps, at: self.children(of: index), input: nodeInput, context: nodeContext)
        case .parallel(let spec):
            let branches = spec.branches
            let indices = self.children(of: index)
            body = self.runBranches(
                parent: index,
                count: branches.count,
                maxConcurrency: spec.maxConcurrency,
                mode: spec.mode,
                failFast: spec.failFast,
                token: nodeContext.token
            ) { branch, token in
                var branchContext = nodeContext
                branchContext.token = token
                return self.execute(branches[branch], at: indices[branch], input: nodeInput, context: branchContext)
            }
        case .continuation(let spec):
            body = self.runContinuation(spec, at: self.children(of: index), input: nodeInput, context: nodeContext)
        case .map(let spec):
            body = self.runMap(spec, index: index, input: nodeInput, context: nodeContext)
        case .dynamic(let sourceNode):
            body = self.runDynamic(
                sourceNode,
                index: index,
                sourceIndex: self.children(of: index)[0],
                id: id,
                input: nodeInput,
                context: nodeContext
            )
        }

        if let outcome = body.outcome {
            // Finished inline (value tasks, restored subtrees): skip the promise, and unless
            // `markFinished` filled in a failure's `taskId`, hand back the body's own future.
            let final = self.markFinished(index, outcome, waking: startWaiters)
            if case .failure = outcome { return Future(outcome: final) }
            return body
        }
        if node.isTask { self.publish(startWaiters) }
        let promise = Promise<JSONValue>()
        body.whenComplete { outcome in
            let final = self.markFinished(index, outcome)
            // The node's token source lives until the node ends (it links the node to its parent).
            withExtendedLifetime(source) {}
            promise.tryComplete(with: final)
        }
        return promise.future
    }

    /// Cancels the running nodes started under the token with identity `token`: children of
    /// `parent`, or the root when `parent` is nil. Runs as that token's cancellation handler, so a
    /// node that starts after it sees the token cancelled in `begin` (checked under the lock).
    /// Sources are cancelled outside the lock, in document order, as linked sources would be.
    func cancelStarted(under token: ObjectIdentifier, parent: Int?) {
        let sources: [CancellationTokenSource] = self.state.withLock { state in
            var found: [CancellationTokenSource] = []
            let candidates = parent.map { state.children[$0] } ?? (state.records.isEmpty ? [] : [0])
            for child in candidates {
                if let running = state.nodeSources[child], ObjectIdentifier(running.startToken) == token {
                    found.append(running.source)
                }
            }
            return found
        }
        for source in sources { source.cancel() }
    }

    /// The record indices of node `index`'s children, in document order.
    func children(of index: Int) -> [Int] {
        self.state.withLock { $0.children[index] }
    }

    private func isTerminal(_ index: Int) -> Bool {
        self.state.withLock { $0.records[index].state.isTerminal }
    }

    // MARK: task

    private func runTask(
        _ spec: TaskSpec,
        index: Int,
        id: String,
        attempts: Int,
        input: JSONValue,
        context: ExecutionContext
    ) -> Future<JSONValue> {
        let external = self.engine.externalExecutor(named: spec.executor)
        let action = external == nil ? self.engine.actions.lookup(spec.action) : nil
        if external == nil, action == nil {
            return Future(error: TaskError(code: "internal", message: "unknown action \(spec.action)"))
        }
        let pool = self.engine.pool(named: spec.executor)
        let previousAttempts = attempts - 1  // `begin` counted the first attempt
        // The first attempt after a restart of one that was in flight resumes its waits.
        var resumedFrom: Timestamp?
        if !self.restored.isEmpty, let stored = self.restored[id], stored.state == .running {
            resumedFrom = stored.startedAt
        }
        let retry = spec.retry
        if (retry?.maxAttempts ?? 1) == 1 {
            // One attempt, already counted by `begin`: no retry machinery.
            return self.runAttempt(
                action,
                spec,
                index: index,
                id: id,
                input: input,
                attempt: attempts,
                pool: pool,
                resumedFrom: resumedFrom,
                context: context
            )
        }
        let resumed = resumedFrom
        let policy = RetryPolicy(
            maxAttempts: retry?.maxAttempts ?? 1,
            initialDelay: .milliseconds(retry?.delayMs ?? 0),
            backoff: retry?.backoff ?? 2,
            maxDelay: retry?.maxDelayMs.map { .milliseconds($0) },
            jitter: retry?.jitter ?? false
        )
        let attempt: @Sendable (Int) -> Future<JSONValue> = { number in
            let attempt = previousAttempts + number
            self.markAttempt(index, attempt: attempt)
            return self.runAttempt(
                action,
                spec,
                index: index,
                id: id,
                input: input,
                attempt: attempt,
                pool: pool,
                resumedFrom: number == 1 ? resumed : nil,
                context: context
            )
        }
        if policy.maxAttempts == 1 { return attempt(1) }
        return Future.retrying(
            policy,
            cancellationToken: context.token,
            shouldRetry: { error in
                !(error is FinalError) && (retry?.matches(code: TaskError.from(error).code) ?? false)
            },
            onRetry: { number, error, delay in
                self.markRetrying(index, attempt: previousAttempts + number, error: TaskError.from(error), delay: delay)
            },
            attempt
        )
    }

    private func runAttempt(
        _ action: (any Action)?,
        _ spec: TaskSpec,
        index: Int,
        id: String,
        input: JSONValue,
        attempt: Int,
        pool: WorkerPool?,
        resumedFrom: Timestamp?,
        context: ExecutionContext
    ) -> Future<JSONValue> {
        let params: JSONValue
        if let constant = spec.params.constantValue {
            params = constant
        } else {
            do {
                params = try spec.params.render(in: RunScope(run: self, input: input, context: context))
            } catch {
                return Future(error: TaskError.from(error))
            }
        }
        let trace = self.engine.attemptTracer?.attemptBegan(
            self,
            taskID: id,
            attempt: attempt,
            executor: spec.executor,
            action: spec.action
        )
        let plan = AttemptPlan(
            action: action,
            spec: spec,
            index: index,
            id: id,
            input: input,
            params: params,
            attempt: attempt,
            pool: pool,
            resumedFrom: resumedFrom,
            context: context,
            trace: trace
        )
        guard let trace else { return self.keyedAttempt(plan) }
        let result = self.keyedAttempt(plan)
        result.whenComplete { outcome in trace.ended(outcome) }
        return result
    }

    /// Starts an attempt, after a wait for its concurrency key if it has one.
    private func keyedAttempt(_ plan: AttemptPlan) -> Future<JSONValue> {
        let (spec, index, input, context) = (plan.spec, plan.index, plan.input, plan.context)
        guard let concurrency = spec.concurrency else { return self.startAttempt(plan) }
        // A concurrency key (SPEC §8): the attempt waits for a place under its key before it asks
        // for a slot, so a waiting attempt holds neither; the place is given back when the attempt
        // ends, so a retry's back-off does not hold it.
        let key: String
        do {
            key = try Self.evaluate(concurrency, in: RunScope(run: self, input: input, context: context))
        } catch {
            return Future(error: error)
        }
        plan.trace?.heldKey(key)
        // A free key (the usual case, one server): no promise, no future, no continuation.
        if self.engine.sharedKeys == nil,
            let permit = self.engine.concurrency.tryAcquire(key: key, max: concurrency.max)
        {
            return self.startHolding(permit, plan)
        }
        let acquired = self.acquireKey(key, max: concurrency.max, holder: self.id + "/" + plan.id, token: context.token)
        if case .success(let permit) = acquired.outcome { return self.startHolding(permit, plan) }
        self.markWaiting(index, for: .concurrency)
        self.engine.noteWait(.concurrency)
        plan.trace?.waitBegan(.concurrency)
        if let trace = plan.trace { acquired.whenComplete { _ in trace.waitEnded(.concurrency) } }
        return acquired.continueOnSuccessWithTask(on: .immediate) { permit in
            self.markWaiting(index, for: nil)
            return self.startHolding(permit, plan)
        }
    }

    /// Starts an attempt that holds its key, and gives the key back when the attempt ends. A
    /// built-in task turns `running` now; a worker task when a worker claims it.
    private func startHolding(_ permit: any HeldKey, _ plan: AttemptPlan) -> Future<JSONValue> {
        if plan.action != nil { self.markStarted(plan.index) }
        // Given back once the attempt's end is recorded (`markRetrying`, `markFinished`): never
        // before, so no other holder's start is recorded before this one's end. (A permit never
        // given back so is released as the run goes away: `HeldKey`s release on deinit.)
        let previous = self.state.withLock { $0.heldKeys.updateValue(permit, forKey: plan.index) }
        if let previous { self.giveBack(previous) }
        return self.startAttempt(plan)
    }

    /// A place under `key` for `holder`: from the keys shared with other engines (a cluster's
    /// servers) if there are any, else from this engine's.
    private func acquireKey(
        _ key: String,
        max: Int,
        holder: String,
        token: CancellationToken?
    ) -> Future<any HeldKey> {
        if let shared = self.engine.sharedKeys {
            return shared.acquire(
                key: key,
                max: max,
                priority: self.spec.priority,
                holder: holder,
                jobID: self.id,
                cancellationToken: token
            )
        }
        return self.engine.concurrency.acquire(
            key: key,
            max: max,
            priority: self.spec.priority,
            cancellationToken: token
        )
        .map { $0 as any HeldKey }
    }

    /// The key `spec` evaluates to in `scope`: a string, or a number as its JSON text. Anything
    /// else fails the node with `concurrency.invalidKey` (not retried: it would evaluate the same).
    static func evaluate(_ spec: ConcurrencySpec, in scope: some TemplateScope) throws -> String {
        let value: JSONValue
        do {
            value = try spec.key.render(in: scope)
        } catch {
            throw FinalError(
                TaskError(
                    code: "concurrency.invalidKey",
                    message: "the concurrency key: \(TaskError.from(error).message)"
                )
            )
        }
        let key: String
        switch value {
        case .string(let text): key = text
        case .int, .double: key = value.jsonString
        default:
            throw FinalError(
                TaskError(
                    code: "concurrency.invalidKey",
                    message: "the concurrency key must evaluate to a string or a number, not \(value.typeName)"
                )
            )
        }
        guard !key.isEmpty, key.utf8.count <= ConcurrencySpec.maxKeyBytes else {
            throw FinalError(
                TaskError(
                    code: "concurrency.invalidKey",
                    message: "the concurrency key must be 1 to \(ConcurrencySpec.maxKeyBytes) bytes once evaluated"
                )
            )
        }
        return key
    }

    /// Starts an attempt whose params are rendered (and key held, if it has one).
    private func startAttempt(_ plan: AttemptPlan) -> Future<JSONValue> {
        if self.isAbandoned {
            return Future(error: TaskError(code: "job.abandoned", message: "another server runs this job now"))
        }
        let (spec, index, id, input, params, attempt, pool, resumedFrom, context) = (
            plan.spec, plan.index, plan.id, plan.input, plan.params, plan.attempt, plan.pool, plan.resumedFrom,
            plan.context
        )
        guard let action = plan.action else {
            return self.runWorkerAttempt(
                spec,
                index: index,
                id: id,
                input: input,
                params: params,
                attempt: attempt,
                context: context,
                trace: plan.trace
            )
        }
        // A task timeout cancels the attempt through its own token and turns the cancellation into
        // a `task.timeout` failure (retryable like any other failure). It counts from the moment
        // the action starts — a wait for a slot or a rate token is not the attempt's time, as an
        // external attempt's limit counts from its claim.
        var attemptSource: CancellationTokenSource?
        let timer: AttemptTimer? = spec.timeoutMs == nil ? nil : AttemptTimer()
        if spec.timeoutMs != nil { attemptSource = CancellationTokenSource(linkedTo: [context.token]) }
        let token = attemptSource?.token ?? context.token
        let attemptSourceRef = attemptSource
        let actionContext = ActionContext(
            input: input,
            params: params,
            cancellationToken: token,
            jobID: self.id,
            taskID: id,
            attempt: attempt,
            pool: pool,
            resumedFrom: resumedFrom,
            completionTarget: (self, index),
            trace: plan.trace
        )
        let result: Future<JSONValue>
        if action.holdsWorkerSlot, let pool {
            let acquired = pool.acquireSlot(priority: self.spec.priority, cancellationToken: token)
            if let outcome = acquired.outcome {
                // A free slot (the usual case): run now, without a continuation and its future.
                switch outcome {
                case .success(let slot):
                    timer?.arm(spec.timeoutMs, cancelling: attemptSourceRef)
                    result = Self.run(action, actionContext, holding: slot)
                case .failure(let error): result = Future(error: error)
                case .cancelled: result = .cancelled()
                }
            } else {
                let reason: WaitReason = pool.waitReason == .rate ? .rate : .slot
                self.markWaiting(index, for: reason)
                self.engine.noteWait(reason)
                plan.trace?.waitBegan(reason)
                if let trace = plan.trace { acquired.whenComplete { _ in trace.waitEnded(reason) } }
                result = acquired.continueOnSuccessWithTask(on: .immediate) { slot in
                    self.markWaiting(index, for: nil)
                    timer?.arm(spec.timeoutMs, cancelling: attemptSourceRef)
                    return Self.run(action, actionContext, holding: slot)
                }
            }
        } else {
            timer?.arm(spec.timeoutMs, cancelling: attemptSourceRef)
            result = action.run(actionContext)
        }
        guard let timeoutMs = spec.timeoutMs, let timer else { return result }
        return result.continueWith(on: .immediate) { finished in
            timer.cancel()
            withExtendedLifetime(attemptSourceRef) {}
            let outcome = finished.outcome!
            if outcome.isCancelled, timer.fired, !context.token.isCancellationRequested {
                throw TaskError(code: "task.timeout", message: "the attempt did not finish within \(timeoutMs) ms")
            }
            return try outcome.get()
        }
    }

    /// Hands one attempt of a task on an external executor to its pool (SPEC §6). The pool owns
    /// the attempt's time limits (`timeoutMs` counts from the claim there); cancellation of the
    /// node or job ends the attempt at once, whatever the worker is doing.
    private func runWorkerAttempt(
        _ spec: TaskSpec,
        index: Int,
        id: String,
        input: JSONValue,
        params: JSONValue,
        attempt: Int,
        context: ExecutionContext,
        trace: (any AttemptTrace)?
    ) -> Future<JSONValue> {
        guard let external = self.engine.externalExecutor(named: spec.executor) else {
            return Future(error: TaskError(code: "internal", message: "unknown executor \(spec.executor)"))
        }
        let promise = Promise<JSONValue>()
        let registration = context.token.register { promise.tryCancel() }
        promise.future.whenComplete { _ in registration.dispose() }
        external.enqueue(
            WorkerTask(
                jobID: self.id,
                taskID: id,
                action: spec.action,
                params: params,
                input: input,
                attempt: attempt,
                heartbeatTimeoutMs: spec.heartbeatTimeoutMs ?? JobDecoder.defaultHeartbeatTimeoutMs,
                timeoutMs: spec.timeoutMs,
                scheduleTimeoutMs: spec.scheduleTimeoutMs,
                cancellationToken: context.token,
                promise: promise,
                run: self,
                index: index,
                trace: trace
            )
        )
        return promise.future
    }

    /// Runs `action`, releasing `slot` when its future completes (at once when it completed inline).
    private static func run(
        _ action: any Action,
        _ context: ActionContext,
        holding slot: WorkerPool.Slot
    ) -> Future<JSONValue> {
        let running = action.run(context)
        if running.isCompleted {
            slot.release()
        } else {
            running.whenComplete { _ in slot.release() }
        }
        return running
    }

    // MARK: series

    private func runSeries(
        _ steps: [Node],
        at indices: [Int],
        input: JSONValue,
        context: ExecutionContext
    ) -> Future<JSONValue> {
        var chain = Future<JSONValue>(value: input)
        for (step, index) in zip(steps, indices) {
            chain = chain.continueOnSuccessWithTask(on: .immediate) { value in
                self.execute(step, at: index, input: value, context: context)
            }
        }
        return chain
    }

    // MARK: parallel (and parallel maps)

    /// Runs `count` branches, at most `maxConcurrency` at once, and combines their outcomes by
    /// `mode`. With `any`, the first success cancels the other branches; with `failFast`, the first
    /// failure does. Either way the node ends once every branch has settled (cancellation acts at
    /// once), so no branch is left running under a finished node.
    func runBranches(
        parent: Int,
        count: Int,
        maxConcurrency: Int?,
        mode: ParallelSpec.Mode,
        failFast: Bool,
        token: CancellationToken,
        _ make: @escaping @Sendable (Int, CancellationToken) -> Future<JSONValue>
    ) -> Future<JSONValue> {
        let branchSource = (mode == .any || failFast) ? CancellationTokenSource(linkedTo: [token]) : nil
        let branchToken = branchSource?.token ?? token
        if let branchSource {
            // The branches start under `branchToken` with unlinked sources (see `ExecutionContext.propagates`).
            let tokenID = ObjectIdentifier(branchSource.token)
            branchSource.token.register { [weak self] in self?.cancelStarted(under: tokenID, parent: parent) }
        }
        let winner = FirstIndex()
        let settled = Future<JSONValue>.whenAllSettled(count: count, maxConcurrency: maxConcurrency ?? max(1, count)) {
            branch in
            let future = make(branch, branchToken)
            if let branchSource {
                future.whenComplete { outcome in
                    switch outcome {
                    case .success where mode == .any:
                        if winner.claim(branch) {
                            branchSource.cancel()
                        }
                    case .failure where failFast:
                        branchSource.cancel()
                    default:
                        break
                    }
                }
            }
            return future
        }
        return settled.continueOnSuccessWith(on: .immediate) { outcomes in
            withExtendedLifetime(branchSource) {}
            switch mode {
            case .settled:
                return .array(outcomes.map(Self.outcomeObject))
            case .any:
                let first = winner.value
                if first >= 0, case .success(let value) = outcomes[first] { return value }
                throw Self.aggregate(outcomes, message: "every branch failed or was cancelled")
            case .all:
                if outcomes.contains(where: { $0.error != nil }) {
                    throw Self.aggregate(outcomes, message: nil)
                }
                if outcomes.contains(where: \.isCancelled) { throw CancellationError() }
                return .array(outcomes.map { $0.value ?? .null })
            }
        }
    }

    static func aggregate(_ outcomes: [Outcome<JSONValue>], message: String?) -> TaskError {
        let errors = outcomes.compactMap { $0.error.map { TaskError.from($0).json } }
        return TaskError(
            code: "aggregate",
            message: message ?? "\(errors.count) of \(outcomes.count) branches failed",
            details: ["errors": .array(errors)]
        )
    }

    /// `{"state":"succeeded","result":…}`, `{"state":"failed","error":…}` or `{"state":"cancelled"}`.
    static func outcomeObject(_ outcome: Outcome<JSONValue>) -> JSONValue {
        switch outcome {
        case .success(let value): return ["state": "succeeded", "result": value]
        case .failure(let error): return ["state": "failed", "error": TaskError.from(error).json]
        case .cancelled: return ["state": "cancelled"]
        }
    }

    // MARK: continuation

    private func runContinuation(
        _ spec: ContinuationSpec,
        at indices: [Int],
        input: JSONValue,
        context: ExecutionContext
    ) -> Future<JSONValue> {
        self.execute(spec.antecedent, at: indices[0], input: input, context: context).continueWithTask(on: .immediate) {
            antecedent in
            let outcome = antecedent.outcome!
            let matches: Bool
            switch (spec.on, outcome) {
            case (.always, _), (.success, .success), (.failure, .failure), (.cancellation, .cancelled): matches = true
            default: matches = false
            }
            guard matches else { return antecedent }
            var thenContext = context
            let thenInput: JSONValue
            if spec.on == .success {
                thenInput = outcome.value ?? .null
            } else {
                thenInput = Self.outcomeObject(outcome)
            }
            if spec.on == .cancellation || spec.on == .always {
                // Cleanup hooks run even while the job is being cancelled (SPEC §1.1).
                // Never cancelled: nothing to pass on, so its nodes need no linked source.
                thenContext.token = self.cleanupToken
                thenContext.propagates = true
            }
            return self.execute(spec.then, at: indices[1], input: thenInput, context: thenContext)
        }
    }

    // MARK: map

    private func runMap(_ spec: MapSpec, index: Int, input: JSONValue, context: ExecutionContext) -> Future<JSONValue> {
        let itemsValue: JSONValue
        do {
            itemsValue = try spec.items.render(in: RunScope(run: self, input: input, context: context))
        } catch {
            return Future(error: TaskError.from(error))
        }
        guard case .array(let items) = itemsValue else {
            return Future(
                error: TaskError(code: "map.items", message: "items must be an array, got \(itemsValue.typeName)")
            )
        }
        let template = spec.template
        let perInstance = template.nodeCount
        let limit = self.engine.limits.maxNodes
        let instances: [Int]? = self.state.withLock { state in
            // Instances already registered (a restart re-runs the map) are not registered twice.
            if items.isEmpty || !state.children[index].isEmpty { return state.children[index] }
            guard state.records.count + items.count * perInstance <= limit else { return nil }
            state.reserve(items.count * perInstance)
            for item in items.indices {
                Self.register(
                    template,
                    suffix: Self.instanceSuffix(context.suffix, item),
                    parent: index,
                    restored: self.restored,
                    in: &state
                )
            }
            return state.children[index]
        }
        guard let instances else {
            return Future(
                error: TaskError(
                    code: "job.nodeLimit",
                    message: "the map would add \(items.count * perInstance) nodes; the job may have at most \(limit)"
                )
            )
        }
        let instanceContext: @Sendable (Int, CancellationToken) -> ExecutionContext = { item, token in
            ExecutionContext(
                token: token,
                suffix: Self.instanceSuffix(context.suffix, item),
                scopePrefix: context.scopePrefix,
                propagates: context.propagates
            )
        }
        switch spec.mode {
        case .parallel:
            return self.runBranches(
                parent: index,
                count: items.count,
                maxConcurrency: spec.maxConcurrency,
                mode: .all,
                failFast: false,
                token: context.token
            ) { item, token in
                self.execute(template, at: instances[item], input: items[item], context: instanceContext(item, token))
            }
        case .series:
            let results = Mutex<[JSONValue]>([])
            var chain = Future<Void>(value: ())
            for item in items.indices {
                chain = chain.continueOnSuccessWithTask(on: .immediate) {
                    self.execute(
                        template,
                        at: instances[item],
                        input: items[item],
                        context: instanceContext(item, context.token)
                    ).map { value in
                        results.withLock { $0.append(value) }
                    }
                }
            }
            return chain.map { .array(results.withLock { $0 }) }
        }
    }

    /// `base` + `[item]`: the id suffix of map instance `item`, written without interpolation
    /// (once per instance when it is registered and once when it runs).
    static func instanceSuffix(_ base: String, _ item: Int) -> String {
        var digits = 1
        var rest = item / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        let baseCount = base.utf8.count
        return String(unsafeUninitializedCapacity: baseCount + digits + 2) { buffer in
            var end = 0
            for byte in base.utf8 {
                buffer[end] = byte
                end += 1
            }
            buffer[end] = UInt8(ascii: "[")
            var value = item
            for position in stride(from: end + digits, to: end, by: -1) {
                buffer[position] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            }
            end += digits + 1
            buffer[end] = UInt8(ascii: "]")
            return end + 1
        }
    }

    // MARK: dynamic

    private func runDynamic(
        _ source: Node,
        index: Int,
        sourceIndex: Int,
        id: String,
        input: JSONValue,
        context: ExecutionContext
    ) -> Future<JSONValue> {
        self.execute(source, at: sourceIndex, input: input, context: context).continueOnSuccessWithTask(on: .immediate)
        { value in
            guard case .object(let object) = value, let graph = object["graph"] else {
                throw TaskError(
                    code: "graph.invalid",
                    message:
                        "a dynamic node's source must return {\"graph\": node, \"input\"?: any}, got \(value.typeName)"
                )
            }
            if let extra = object.keys.first(where: { $0 != "graph" && $0 != "input" }) {
                throw TaskError(
                    code: "graph.invalid",
                    message: "unknown field \"\(extra)\" in the dynamic source's result"
                )
            }
            let (reserved, budget) = self.state.withLock { state in
                state.catchUpIndex()
                return (Set(state.index.keys), self.engine.limits.maxNodes - state.records.count)
            }
            let root: Node
            do {
                root = try self.engine.decoder.decodeGraph(
                    graph,
                    idPrefix: id + "/",
                    pointer: "/graph",
                    maxNodes: budget,
                    reservedIDs: reserved
                )
            } catch let error as ValidationError {
                let problems: [JSONValue] = error.problems.map {
                    ["pointer": .string($0.pointer), "message": .string($0.message)]
                }
                throw TaskError(
                    code: "graph.invalid",
                    message: "the graph returned by \(id)'s source is invalid",
                    details: ["errors": .array(problems)]
                )
            }
            let rootIndex = self.state.withLock { state in
                state.lookup(root.id)
                    ?? Self.register(root, suffix: "", parent: index, restored: self.restored, in: &state)
            }
            var spawned = context
            spawned.suffix = ""
            spawned.scopePrefix = id + "/"
            return self.execute(root, at: rootIndex, input: object["input"] ?? input, context: spawned)
        }
    }
}

// MARK: - Control: cancel and complete

extension JobRun {
    /// The result of `cancel()`.
    public enum CancelResult: Sendable, Equatable {
        /// Cancellation started now.
        case cancelling
        /// The job was already cancelled or being cancelled.
        case alreadyCancelled
        /// The job had already succeeded or failed.
        case terminal(JobState)
    }

    /// Cancels the job: running actions stop at once, nodes not started never start, cleanup
    /// continuations still run, and the job ends `cancelled`.
    @discardableResult
    public func cancel() -> CancelResult {
        let result: CancelResult = self.state.withLock { state in
            if state.jobState.isTerminal {
                return state.jobState == .cancelled ? .alreadyCancelled : .terminal(state.jobState)
            }
            if state.cancelRequested { return .alreadyCancelled }
            state.cancelRequested = true
            return .cancelling
        }
        if result == .cancelling {
            self.cancelJobSource()
            // A job that was never started ends now.
            if self.state.withLock({ $0.jobState == .pending }) { self.start() }
        }
        return result
    }

    /// The result of `cancel(node:)` and `complete(node:with:)`.
    public enum NodeControlResult: Sendable, Equatable {
        case done(NodeRecord)
        case notFound
        /// The node already ended (`task.terminal`).
        case terminal
        /// Complete only: the node is not an `await` task (`task.notAwait`).
        case notAwait
        /// Complete only: the node has not started, or is between attempts (`task.notRunning`).
        case notRunning
    }

    /// Cancels one running or pending node and its subtree; the cancellation then propagates by
    /// the rules of its parents (a cancelled series step ends the series, and so on).
    public func cancel(node id: String) -> NodeControlResult {
        let (result, source): (NodeControlResult, CancellationTokenSource?) = self.state.withLock { state in
            guard let index = state.lookup(id) else { return (.notFound, nil) }
            let record = state.records[index]
            if record.state.isTerminal { return (.terminal, nil) }
            if record.state == .pending, state.nodeSources[index] == nil {
                state.cancelledBeforeStart.insert(index)
                return (.done(record), nil)
            }
            return (.done(record), state.nodeSources[index]?.source)
        }
        source?.cancel()
        if case .done = result, let record = self.node(id) { return .done(record) }
        return result
    }

    /// Completes a running `await` task with a result or an error (first completion wins, like
    /// `TaskCompletionSource.trySetResult`).
    public func complete(node id: String, with outcome: Outcome<JSONValue>) -> NodeControlResult {
        let (result, promise): (NodeControlResult?, Promise<JSONValue>?) = self.state.withLock { state in
            guard let index = state.lookup(id) else { return (.notFound, nil) }
            let record = state.records[index]
            if record.action != "await" { return (.notAwait, nil) }
            if record.state.isTerminal { return (.terminal, nil) }
            guard record.state == .running, let promise = state.awaits[index] else { return (.notRunning, nil) }
            return (nil, promise)
        }
        if let result { return result }
        guard let promise, promise.tryComplete(with: outcome) else { return .terminal }
        return self.node(id).map(NodeControlResult.done) ?? .notFound
    }
}

/// What starts one attempt of a task, its params rendered (`runAttempt` → `startAttempt`).
struct AttemptPlan: Sendable {
    let action: (any Action)?
    let spec: TaskSpec
    let index: Int
    let id: String
    let input: JSONValue
    let params: JSONValue
    let attempt: Int
    let pool: WorkerPool?
    let resumedFrom: Timestamp?
    let context: ExecutionContext
    let trace: (any AttemptTrace)?
}

/// A task attempt's `timeoutMs` timer: armed when the action starts, cancelled when it ends
/// (whichever comes first wins: a timer cancelled before it is armed is never scheduled).
final class AttemptTimer: Sendable {
    private enum Phase {
        case idle
        case armed(TimerQueue.ID)
        case fired
        case cancelled
    }

    private let phase = Mutex(Phase.idle)

    /// Cancels `source` after `timeoutMs` unless `cancel()` came first.
    ///
    /// Scheduled while the phase is locked, so the timer can never fire between being scheduled
    /// and being marked armed (it would find `.idle` and do nothing: a timeout lost). The timer's
    /// work runs on the timer thread after TimerQueue's own lock is released, never inline here.
    func arm(_ timeoutMs: Int?, cancelling source: CancellationTokenSource?) {
        guard let timeoutMs, let source else { return }
        self.phase.withLock { phase in
            guard case .idle = phase else { return }
            phase = .armed(
                TimerQueue.shared.schedule(after: .milliseconds(timeoutMs)) { [self] in
                    let fire = self.phase.withLock { phase -> Bool in
                        guard case .armed = phase else { return false }
                        phase = .fired
                        return true
                    }
                    if fire { source.cancel() }
                }
            )
        }
    }

    func cancel() {
        let id: TimerQueue.ID? = self.phase.withLock { phase in
            defer { if case .fired = phase {} else { phase = .cancelled } }
            if case .armed(let id) = phase { return id }
            return nil
        }
        if let id { TimerQueue.shared.cancel(id) }
    }

    /// Whether the timer expired the attempt.
    var fired: Bool {
        self.phase.withLock { phase in
            if case .fired = phase { return true }
            return false
        }
    }
}

/// The first index claimed by any thread (`-1` until then).
final class FirstIndex: Sendable {
    private let storage = Atomic<Int>(-1)
    /// Claims `index` if no index was claimed yet; returns whether this call did.
    func claim(_ index: Int) -> Bool {
        self.storage.compareExchange(expected: -1, desired: index, ordering: .acquiringAndReleasing).exchanged
    }
    var value: Int { self.storage.load(ordering: .acquiring) }
}
