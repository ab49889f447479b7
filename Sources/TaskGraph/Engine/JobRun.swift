import Synchronization
import TaskCore

/// One job being run: the single owner of the job's state.
///
/// Every change — a node starting or finishing, a retry, the job ending — happens under the run's
/// lock together with the event that announces it, so a reader never sees a finished node without
/// its event, and the job turns terminal in the same step as its root node. Observers and waiters
/// are told after the lock is released, in `seq` order.
public final class JobRun: Sendable {
    public let id: String
    public let spec: JobSpec
    /// When the job was submitted.
    public let createdAt: Timestamp
    let engine: Engine
    let observers: [any JobObserver]
    let state: Mutex<State>
    /// Cancelled by `cancel()` and the job timeout (which then call `cancelStarted` for the root:
    /// nothing else cancels it, so it needs no handler); every node's token descends from it.
    let jobSource = CancellationTokenSource()
    /// The token of cleanup continuations (`on: cancellation|always`): job cancellation does not
    /// reach it, so `finally` work runs to its end (SPEC §1.1). Nothing cancels it.
    var cleanupToken: CancellationToken { CancellationToken.none }
    /// The job as templates see it (`${job…}`); built when a template asks.
    var jobObject: JSONValue {
        ["id": .string(self.id), "name": self.spec.name.map(JSONValue.string) ?? .null, "input": self.spec.input]
    }
    /// The stored node records by id of a job resumed after a restart (empty otherwise); never
    /// changes after `init`, so it is read without the lock.
    let restored: [String: NodeRecord]
    /// The key a durable store gave the job's record (its row), 0 until it has one. Set by the
    /// store once, before the job starts, and read by it alone (SQLite: `jobs.position`), so
    /// the store's journal needs no lookup by id for each batch of events.
    public let storeKey = Atomic<Int64>(0)
    /// Set once the server lost the job to another server (`abandon()`).
    private let abandoned = Atomic<Bool>(false)

    struct State {
        var jobState: JobState = .pending
        var result: JSONValue?
        var error: TaskError?
        var createdAt: Timestamp
        var startedAt: Timestamp?
        var finishedAt: Timestamp?
        var records: [NodeRecord] = []
        var children: [[Int]] = []
        /// Record index by id, for `records[..<indexedCount]`: filled in lazily by `lookup(_:)`,
        /// so running a node costs no hashing of its id unless something asks for a node by id.
        var index: [String: Int] = [:]
        var indexedCount = 0
        var progress = JobProgress()
        var events: [JobEvent] = []
        /// The JSON of `events` by index, encoded by the first reader that asked (`encodedEvents`).
        var eventJSON: [[UInt8]?] = []
        var dispatchedCount = 0
        var isDispatching = false
        var eventWaiters: [Promise<Void>] = []
        /// The seq of the latest event readers may see: with a durable store (`Engine.eventsAwaitDurability`)
        /// the latest one the store committed (`markDurable`), so no reader ever sees an event a
        /// crash could take back; otherwise unused (every event is visible when appended).
        var durableSeq = 0
        var gated = false
        var terminalWaiters: [Promise<Void>] = []
        /// Waiters of `waitForDurability(through:)`, with the seq each waits for.
        var durabilityWaiters: [(seq: Int, promise: Promise<Void>)] = []
        var awaits: [Int: Promise<JSONValue>] = [:]
        /// The token source of each running node, by record index (nil when not running).
        var nodeSources: [RunningSource?] = []
        var cancelledBeforeStart: Set<Int> = []
        var cancelRequested = false
        var timedOut = false
        var timer: TimerQueue.ID?
        /// A failure decided before the graph ran (a job-level concurrency key that does not
        /// evaluate): the job ends with it once its root, cancelled, has ended.
        var startFailure: TaskError?
        /// Set while the job waits for its job-level concurrency key.
        var waitingFor: WaitReason?
        /// How many tasks wait, per `WaitReason` (raw value order), for the job's representation.
        var tasksWaiting = TasksWaiting()
        /// The concurrency key each running attempt holds, by record index: given back once the
        /// attempt's end is recorded (`markRetrying`, `markFinished`), so that no other holder's
        /// start is ever recorded before this one's end.
        var heldKeys: [Int: any HeldKey] = [:]

        /// How many of `events` readers may see.
        var visibleCount: Int {
            guard self.gated, let first = self.events.first else { return self.events.count }
            return max(0, min(self.events.count, self.durableSeq - first.seq + 1))
        }

        /// The record index of node `id`.
        mutating func lookup(_ id: String) -> Int? {
            // A handful of records (most jobs): a scan beats building, and later freeing, a dictionary.
            if self.records.count <= 8 { return self.records.firstIndex { $0.id == id } }
            self.catchUpIndex()
            return self.index[id]
        }

        /// Indexes the records added since the last lookup.
        mutating func catchUpIndex() {
            guard self.indexedCount < self.records.count else { return }
            self.index.reserveCapacity(self.records.count)
            for index in self.indexedCount..<self.records.count { self.index[self.records[index].id] = index }
            self.indexedCount = self.records.count
        }

        /// Makes room for `count` more records.
        mutating func reserve(_ count: Int) {
            self.records.reserveCapacity(self.records.count + count)
            self.children.reserveCapacity(self.children.count + count)
            self.nodeSources.reserveCapacity(self.nodeSources.count + count)
        }
    }

    init(engine: Engine, id: String, spec: JobSpec, createdAt: Timestamp, restored: RestoredJob?) {
        self.engine = engine
        self.id = id
        self.spec = spec
        self.createdAt = createdAt
        self.observers = engine.observers
        self.restored = restored?.nodes ?? [:]
        var state = State(createdAt: createdAt)
        state.gated = engine.eventsAwaitDurability
        if let restored {
            state.events = restored.events
            state.durableSeq = restored.events.last?.seq ?? 0
            state.dispatchedCount = restored.events.count
            state.startedAt = restored.startedAt
            state.cancelRequested = restored.cancelRequested
        }
        if let finished = restored?.finished {
            Self.restore(finished, in: &state)
        }
        self.state = Mutex(state)
        self.state.withLock { state in
            if restored?.finished == nil {
                state.reserve(spec.nodeCount)
                // Two events per node, and the job's created, started and terminal events.
                state.events.reserveCapacity(state.events.count + 2 * spec.nodeCount + 3)
                Self.register(spec.graph, suffix: "", parent: nil, restored: self.restored, in: &state)
            }
            if state.events.isEmpty {
                Self.appendEvent(.jobCreated, taskId: nil, data: nil, time: createdAt, in: &state)
            }
        }
        if restored?.cancelRequested == true { self.jobSource.cancel() }
    }

    // MARK: - Reading

    /// The job's state now.
    /// The job's trace id, if the server traces it (issue #46).
    public var traceId: String? { JobSnapshot.traceId(self.spec.labels) }

    public var snapshot: JobSnapshot {
        self.state.withLock { state in self.snapshot(state) }
    }

    func snapshot(_ state: State) -> JobSnapshot {
        JobSnapshot(
            id: self.id,
            name: self.spec.name,
            // Cancelled before it started (`prepareStart`), it is on its way to `cancelled` and
            // never ran: until it gets there it reads `pending`, not `running` without a start.
            state: state.jobState == .running && state.startedAt == nil ? .pending : state.jobState,
            input: self.spec.input,
            result: state.result,
            error: state.error,
            labels: self.spec.labels,
            createdAt: state.createdAt,
            startedAt: state.startedAt,
            finishedAt: state.finishedAt,
            progress: state.progress,
            lastEventSeq: state.events.last?.seq ?? 0,
            runAt: self.spec.runAt(createdAt: self.createdAt),
            priority: self.spec.priority,
            waitingFor: state.waitingFor,
            tasksWaiting: state.tasksWaiting,
            definition: self.spec.definition
        )
    }

    /// Every node record, in registration order (document order, then map and dynamic expansions).
    public var nodes: [NodeRecord] {
        self.state.withLock { $0.records }
    }

    /// The record of node `id`, if the job has one.
    public func node(_ id: String) -> NodeRecord? {
        self.state.withLock { state in state.lookup(id).map { state.records[$0] } }
    }

    /// The record of node `id` with its place in `nodes` (registration order).
    public func indexedNode(_ id: String) -> (ordinal: Int, record: NodeRecord)? {
        self.state.withLock { state in state.lookup(id).map { ($0, state.records[$0]) } }
    }

    /// The job's state, without building a snapshot.
    public var jobState: JobState { self.state.withLock { $0.jobState } }

    /// Whether a cancellation of the whole job has been requested.
    public var isCancelRequested: Bool { self.state.withLock { $0.cancelRequested } }

    /// When the job was last redriven: its latest `job.redriven` event, committed or not.
    public var lastRedrivenAt: Timestamp? {
        self.state.withLock { state in state.events.last { $0.type == .jobRedriven }?.time }
    }

    /// The events with `seq > after`, at most `limit` of them — only those committed, with a
    /// durable store (see `State.durableSeq`).
    public func events(after: Int, limit: Int = .max) -> [JobEvent] {
        self.state.withLock { state in
            guard let first = state.events.first else { return [] }
            let start = max(0, after - first.seq + 1)
            let visible = state.visibleCount
            guard start < visible else { return [] }
            let end = min(visible, start + max(0, limit))
            return Array(state.events[start..<end])
        }
    }

    /// `events(after:limit:)`, each with its JSON (`JobEvent.json`) encoded once and shared: the
    /// first reader of an event encodes it (outside the lock) and every later reader gets the same
    /// bytes, so a job followed by a thousand streams costs one encoding per event, not a thousand.
    public func encodedEvents(after: Int, limit: Int) -> [(event: JobEvent, json: [UInt8])] {
        let (start, events, cached): (Int, ArraySlice<JobEvent>, [[UInt8]?]) = self.state.withLock { state in
            guard let first = state.events.first else { return (0, [], []) }
            let start = max(0, after - first.seq + 1)
            let end = min(state.visibleCount, start + max(0, limit))
            guard start < end else { return (0, [], []) }
            let known = state.eventJSON.count
            let cached = start < known ? Array(state.eventJSON[start..<min(end, known)]) : []
            return (start, state.events[start..<end], cached)
        }
        var encoded: [(event: JobEvent, json: [UInt8])] = []
        encoded.reserveCapacity(events.count)
        var fresh: [(index: Int, json: [UInt8])] = []
        for (offset, event) in events.enumerated() {
            if offset < cached.count, let json = cached[offset] {
                encoded.append((event, json))
            } else {
                let json = event.json.jsonBytes
                encoded.append((event, json))
                fresh.append((start + offset, json))
            }
        }
        if !fresh.isEmpty {
            self.state.withLock { state in
                if state.eventJSON.count < fresh[fresh.count - 1].index + 1 {
                    state.eventJSON.append(
                        contentsOf: repeatElement(nil, count: fresh[fresh.count - 1].index + 1 - state.eventJSON.count)
                    )
                }
                for (index, json) in fresh { state.eventJSON[index] = json }
            }
        }
        return encoded
    }

    /// The seq of the latest event readers may see (0 before any).
    public var lastVisibleSeq: Int {
        self.state.withLock { state in state.visibleCount > 0 ? state.events[state.visibleCount - 1].seq : 0 }
    }

    /// The job as it is now, every node record and every event appended so far (committed or
    /// not), read together: what a store records when the job ends.
    public var record: (snapshot: JobSnapshot, nodes: [NodeRecord], events: [JobEvent]) {
        self.state.withLock { state in (self.snapshot(state), state.records, state.events) }
    }

    /// The seq of the latest event appended, committed or not (0 before any).
    public var lastSeq: Int { self.state.withLock { $0.events.last?.seq ?? 0 } }

    /// A future that completes once the events through `seq` are committed by the store
    /// (`markDurable`) — at once without a durable store. A request that changed the job (a
    /// cancellation, a completion) is answered after it, so a restart never forgets what a client
    /// was told.
    public func waitForDurability(through seq: Int) -> Future<Void> {
        if self.isAbandoned { return Future(error: JobAbandoned()) }
        let promise: Promise<Void>? = self.state.withLock { state in
            guard state.gated, seq > state.durableSeq else { return nil }
            let promise = Promise<Void>()
            // Kept in seq order, so that `markDurable` takes a prefix instead of scanning every
            // waiter at each commit (hundreds wait at once on a job whose tasks complete in
            // batches). Waiters come in nearly that order: the place is found from the end.
            var index = state.durabilityWaiters.endIndex
            while index > 0, state.durabilityWaiters[index - 1].seq > seq { index -= 1 }
            state.durabilityWaiters.insert((seq, promise), at: index)
            return promise
        }
        return promise?.future ?? Future(value: ())
    }

    /// Whether the server gave the job up (`abandon()`).
    public var isAbandoned: Bool { self.abandoned.load(ordering: .relaxed) }

    /// Gives the job up: another server runs it now (a cluster's takeover, SPEC §9). No action of
    /// it starts from now on (an attempt fails at once, so the graph drains without running
    /// anything), running ones are cancelled, and waits for durability fail with `JobAbandoned`;
    /// whoever journals the job's events drops those that follow.
    public func abandon() {
        guard !self.abandoned.exchange(true, ordering: .sequentiallyConsistent) else { return }
        let waiters = self.state.withLock { state in
            defer { state.durabilityWaiters = [] }
            return state.durabilityWaiters.map(\.promise)
        }
        for waiter in waiters { waiter.fail(JobAbandoned()) }
        // Keys stay with their holders for the server that takes the job over: an attempt given up
        // here may still run (a worker's), so its slot frees only once its job is taken (SPEC §9).
        let held = self.state.withLock { state in
            defer { state.heldKeys = [:] }
            return state.heldKeys.values
        }
        for key in held { key.forget() }
        // The job's token and the nodes started under it: a running node's own token is not the
        // job's child (see `cancelStarted`), and an external attempt left running would stay
        // leased here — its worker's outcome applied to a run whose events are no longer recorded.
        self.cancelJobSource()
    }

    /// Gives a held key back — unless the job was given up (`abandon()`): then its end here is not
    /// recorded, and the key stays with its holder for the server that takes the job over. A
    /// shared place goes back once what the run recorded so far (its holder's end) is durable; a
    /// run given up before that forgets it instead (its end was never recorded).
    func giveBack(_ held: any HeldKey) {
        if self.isAbandoned {
            held.forget()
        } else if !held.releasesOnceDurable {
            held.release()
        } else {
            self.waitForDurability(through: self.lastSeq).whenComplete { outcome in
                if case .success = outcome { held.release() } else { held.forget() }
            }
        }
    }

    /// Whether the job ended and readers can see its every event (its terminal event included).
    public var isTerminalAndVisible: Bool {
        self.state.withLock { $0.jobState.isTerminal && $0.visibleCount == $0.events.count }
    }

    /// A future that completes when an event with `seq > after` is visible, or after `timeout`
    /// (whichever first). It holds no thread while it waits.
    public func waitForEvents(after: Int, timeout: Duration) -> Future<Void> {
        let promise = Promise<Void>()
        let ready = self.state.withLock { state in
            if state.visibleCount > 0, state.events[state.visibleCount - 1].seq > after { return true }
            state.eventWaiters.append(promise)
            return false
        }
        if ready { return Future(value: ()) }
        Self.expire(promise, after: timeout)
        return promise.future
    }

    /// A future that completes when the job is terminal — with a durable store, once its terminal
    /// event is committed, so what the waiter reads next has it — or after `timeout`.
    public func waitForTerminal(timeout: Duration) -> Future<Void> {
        let promise = Promise<Void>()
        let ready = self.state.withLock { state in
            if state.jobState.isTerminal, state.visibleCount == state.events.count { return true }
            state.terminalWaiters.append(promise)
            return false
        }
        if ready { return Future(value: ()) }
        Self.expire(promise, after: timeout)
        return promise.future
    }

    /// Waiters of `waitForEvents` now (tests: however many streams follow a job, it holds one).
    var eventWaiterCount: Int { self.state.withLock { $0.eventWaiters.count } }

    private static func expire(_ promise: Promise<Void>, after timeout: Duration) {
        let timer = TimerQueue.shared.schedule(after: timeout) { promise.trySucceed(()) }
        promise.future.whenComplete { _ in TimerQueue.shared.cancel(timer) }
    }

    /// Lays out a finished job's stored records as they were; it never runs (`start` finds it
    /// terminal).
    private static func restore(_ finished: FinishedJob, in state: inout State) {
        state.jobState = finished.state
        state.result = finished.result
        state.error = finished.error
        state.finishedAt = finished.finishedAt
        state.records = finished.records
        state.children = Array(repeating: [], count: finished.records.count)
        state.nodeSources = Array(repeating: nil, count: finished.records.count)
        for (index, record) in finished.records.enumerated() {
            state.index[record.id] = index
            if let parent = record.parent, let parentIndex = state.index[parent] {
                state.children[parentIndex].append(index)
            }
            if record.isTask {
                state.progress.total += 1
                state.progress.add(record.state, 1)
            }
        }
        state.indexedCount = finished.records.count
    }

    // MARK: - Registration

    /// Adds records for `node`'s subtree, ids suffixed with `suffix` (map instances), and returns
    /// the index of `node`'s record. Iterative: graphs can be deep and wide.
    @discardableResult
    static func register(
        _ node: Node,
        suffix: String,
        parent: Int?,
        restored: [String: NodeRecord],
        in state: inout State
    ) -> Int {
        let first = state.records.count
        if node.isTask {
            // A lone task (the usual map template): no stack to allocate.
            self.registerOne(
                node,
                id: suffix.isEmpty ? node.id : node.id + suffix,
                parent: parent,
                restored: restored,
                in: &state
            )
            return first
        }
        var stack: [(Node, Int?)] = [(node, parent)]
        while let (current, parentIndex) = stack.popLast() {
            let index = self.registerOne(
                current,
                id: suffix.isEmpty ? current.id : current.id + suffix,
                parent: parentIndex,
                restored: restored,
                in: &state
            )
            // Push children in reverse so they are registered in document order. A map's template
            // is not a node of its own: its instances are registered when the map starts.
            if case .map = current.kind { continue }
            for child in current.children.reversed() { stack.append((child, index)) }
        }
        return first
    }

    /// Adds the record of `node` alone, with id `id`, and returns its index.
    @discardableResult
    private static func registerOne(
        _ node: Node,
        id: String,
        parent parentIndex: Int?,
        restored: [String: NodeRecord],
        in state: inout State
    ) -> Int {
        let index = state.records.count
        var record: NodeRecord
        if case .task(let task) = node.kind {
            record = NodeRecord(
                id: id,
                type: node.typeName,
                action: task.action,
                executor: task.executor,
                parent: parentIndex.map { state.records[$0].id }
            )
        } else {
            record = NodeRecord(id: id, type: node.typeName, parent: parentIndex.map { state.records[$0].id })
        }
        if !restored.isEmpty, let stored = restored[id] {
            record.attempts = stored.attempts
            if stored.state.isTerminal {
                record.state = stored.state
                record.result = stored.result
                record.error = stored.error
                record.startedAt = stored.startedAt
                record.finishedAt = stored.finishedAt
            } else {
                record.startedAt = stored.startedAt
            }
        }
        if node.isTask {
            state.progress.total += 1
            state.progress.add(record.state, 1)
        }
        state.records.append(record)
        state.children.append([])
        state.nodeSources.append(nil)
        if let parentIndex { state.children[parentIndex].append(index) }
        return index
    }

    // MARK: - Events

    @discardableResult
    static func appendEvent(
        _ type: JobEventType,
        taskId: String?,
        data: JSONValue?,
        time: Timestamp,
        in state: inout State
    ) -> [Promise<Void>] {
        let seq = (state.events.last?.seq ?? 0) + 1
        state.events.append(JobEvent(seq: seq, type: type, time: time, taskId: taskId, data: data))
        // Readers of a durable store's job wait for the commit (`markDurable`).
        if state.eventWaiters.isEmpty || state.gated { return [] }
        defer { state.eventWaiters = [] }
        return state.eventWaiters
    }

    /// The store committed the events up to `seq`: readers may now see them (wakes the waiters).
    public func markDurable(through seq: Int) {
        let waiters: [Promise<Void>]? = self.state.withLock { state in
            guard seq > state.durableSeq else { return nil }
            state.durableSeq = seq
            var waiters = state.eventWaiters
            state.eventWaiters = []
            if state.jobState.isTerminal, state.visibleCount == state.events.count, !state.terminalWaiters.isEmpty {
                waiters += state.terminalWaiters
                state.terminalWaiters = []
            }
            let durable = state.durableSeq
            let ready = state.durabilityWaiters.prefix { $0.seq <= durable }
            if !ready.isEmpty {
                waiters += ready.map(\.promise)
                state.durabilityWaiters.removeFirst(ready.count)
            }
            return waiters
        }
        guard let waiters else { return }
        for waiter in waiters { waiter.trySucceed(()) }
    }

    /// Tells observers, then waiters, about new events. One thread at a time delivers to the
    /// observers, in `seq` order; a thread that finds another delivering leaves its events to it.
    func publish(_ waiters: [Promise<Void>]) {
        defer { for waiter in waiters { waiter.trySucceed(()) } }
        guard !self.observers.isEmpty else { return }
        // Become the deliverer and take the first batch in one critical section.
        var batch: ArraySlice<JobEvent>? = self.state.withLock { state in
            if state.isDispatching || state.dispatchedCount == state.events.count { return nil }
            state.isDispatching = true
            defer { state.dispatchedCount = state.events.count }
            return state.events[state.dispatchedCount..<state.events.count]
        }
        while let current = batch {
            for observer in self.observers { observer.job(self, appended: current) }
            batch = self.state.withLock { state in
                if state.dispatchedCount == state.events.count {
                    state.isDispatching = false
                    return nil
                }
                defer { state.dispatchedCount = state.events.count }
                return state.events[state.dispatchedCount..<state.events.count]
            }
        }
    }

    // MARK: - Node state changes

    /// Notes what task `index`'s attempt waits for (nil: nothing any more). Not an event and not
    /// stored: readers see it in the node while the job is live.
    func markWaiting(_ index: Int, for reason: WaitReason?) {
        self.state.withLock { state in
            guard reason == nil || !state.records[index].state.isTerminal else { return }
            state.tasksWaiting.move(from: state.records[index].waitingFor, to: reason)
            state.records[index].waitingFor = reason
        }
    }

    /// Records the start of attempt `attempt` of a task.
    func markAttempt(_ index: Int, attempt: Int) {
        self.state.withLock { state in state.records[index].attempts = attempt }
    }

    /// A worker claimed an attempt of task `index` (SPEC §6): the node turns `running` with its
    /// `task.started` event on the first claim; later claims (retries) only name the worker.
    /// Returns `false` when the node already ended.
    func markClaimed(_ index: Int, workerId: String) -> Bool {
        self.markStarted(index, workerId: workerId)
    }

    /// Turns task `index`, whose start was deferred (`begin(deferStart:)`), `running` with its
    /// `task.started` event — a worker's claim, or a concurrency key granted. Later calls (retries)
    /// only name the worker. Returns `false` when the node already ended.
    @discardableResult
    func markStarted(_ index: Int, workerId: String? = nil) -> Bool {
        let (claimed, waiters): (Bool, [Promise<Void>]) = self.state.withLock { state in
            let previous = state.records[index].state
            if previous.isTerminal { return (false, []) }
            if let workerId { state.records[index].workerId = workerId }
            guard previous == .pending else { return (true, []) }
            let now = Timestamp.now()
            state.records[index].state = .running
            if state.records[index].startedAt == nil { state.records[index].startedAt = now }
            state.progress.add(.pending, -1)
            state.progress.add(.running, 1)
            let waiters = Self.appendEvent(
                .taskStarted,
                taskId: state.records[index].id,
                data: workerId.map { ["workerId": .string($0)] },
                time: now,
                in: &state
            )
            return (true, waiters)
        }
        self.publish(waiters)
        return claimed
    }

    /// Keeps a worker's latest `progress` on task `index` while it runs.
    func setProgress(_ index: Int, _ progress: JSONValue) {
        self.state.withLock { state in
            if !state.records[index].state.isTerminal { state.records[index].progress = progress }
        }
    }

    /// Records a failed attempt that will be retried, with a `task.retrying` event.
    func markRetrying(_ index: Int, attempt: Int, error: TaskError, delay: Duration) {
        let (waiters, held): ([Promise<Void>], (any HeldKey)?) = self.state.withLock { state in
            let data: JSONValue = [
                "attempt": .int(attempt), "error": error.json, "delayMs": .int(Int(delay.wholeMilliseconds)),
            ]
            let waiters = Self.appendEvent(
                .taskRetrying,
                taskId: state.records[index].id,
                data: data,
                time: .now(),
                in: &state
            )
            return (waiters, state.heldKeys.isEmpty ? nil : state.heldKeys.removeValue(forKey: index))
        }
        self.publish(waiters)
        if let held { self.giveBack(held) }
    }

    /// Ends node `index` with `outcome` and emits its event; pending nodes below it become skipped.
    /// Returns the outcome with a failure's `taskId` filled in.
    /// `earlier`: waiters of an earlier event not yet published, woken with this one.
    @discardableResult
    func markFinished(
        _ index: Int,
        _ outcome: Outcome<JSONValue>,
        waking earlier: [Promise<Void>] = []
    ) -> Outcome<JSONValue> {
        var final = outcome
        var held: (any HeldKey)?
        let waiters: [Promise<Void>] = self.state.withLock { state in
            if !state.heldKeys.isEmpty { held = state.heldKeys.removeValue(forKey: index) }
            let now = Timestamp.now()
            let id = state.records[index].id
            let newState: NodeState
            var data: JSONValue?
            switch outcome {
            case .success(let value):
                newState = .succeeded
                state.records[index].result = value
            case .failure(let error):
                var taskError = TaskError.from(error)
                if taskError.taskId == nil { taskError.taskId = id }
                final = .failure(taskError)
                newState = .failed
                state.records[index].error = taskError
                data = taskError.json
            case .cancelled:
                newState = .cancelled
            }
            Self.setTerminal(index, newState, now, in: &state)
            if !state.awaits.isEmpty { state.awaits[index] = nil }
            state.nodeSources[index] = nil
            var waiters = Self.appendEvent(Self.eventType(for: newState), taskId: id, data: data, time: now, in: &state)
            if !earlier.isEmpty { waiters = earlier + waiters }
            if !state.children[index].isEmpty {
                waiters += Self.skipPendingDescendants(of: index, now: now, in: &state)
            }
            return waiters
        }
        self.publish(waiters)
        if let held { self.giveBack(held) }
        return final
    }

    /// Marks a node that never started as cancelled (the cancellation reached it first).
    func markCancelledBeforeStart(_ index: Int) {
        let waiters: [Promise<Void>] = self.state.withLock { state in
            let now = Timestamp.now()
            Self.setTerminal(index, .cancelled, now, in: &state)
            var waiters = Self.appendEvent(
                .taskCancelled,
                taskId: state.records[index].id,
                data: nil,
                time: now,
                in: &state
            )
            if !state.children[index].isEmpty {
                waiters += Self.skipPendingDescendants(of: index, now: now, in: &state)
            }
            return waiters
        }
        self.publish(waiters)
    }

    static func eventType(for state: NodeState) -> JobEventType {
        switch state {
        case .succeeded: return .taskSucceeded
        case .failed: return .taskFailed
        case .cancelled: return .taskCancelled
        case .skipped: return .taskSkipped
        case .pending, .running: return .taskStarted
        }
    }

    private static func setTerminal(_ index: Int, _ newState: NodeState, _ now: Timestamp, in state: inout State) {
        let previous = state.records[index].state
        state.records[index].state = newState
        state.records[index].finishedAt = now
        if let waited = state.records[index].waitingFor {
            state.tasksWaiting.move(from: waited, to: nil)
            state.records[index].waitingFor = nil
        }
        if state.records[index].isTask {
            state.progress.add(previous, -1)
            state.progress.add(newState, 1)
        }
    }

    /// Every node under `index` that is still pending never needed to run: it becomes skipped.
    private static func skipPendingDescendants(of index: Int, now: Timestamp, in state: inout State) -> [Promise<Void>]
    {
        var waiters: [Promise<Void>] = []
        var stack = state.children[index]
        while let child = stack.popLast() {
            switch state.records[child].state {
            case .pending where state.nodeSources[child] == nil:
                setTerminal(child, .skipped, now, in: &state)
                let toWake = appendEvent(
                    .taskSkipped,
                    taskId: state.records[child].id,
                    data: nil,
                    time: now,
                    in: &state
                )
                if !toWake.isEmpty { waiters += toWake }
                stack.append(contentsOf: state.children[child])
            case .running:
                // A running descendant (e.g. a cancelled branch still unwinding) finishes on its own;
                // its own pending children are its business.
                break
            default:
                break
            }
        }
        return waiters
    }
}

/// The token source of a running node and the token it was started under (its parent's, a
/// branch token, the job's or the cleanup token), which `cancelStarted` matches.
struct RunningSource: Sendable {
    let source: CancellationTokenSource
    let startToken: CancellationToken
}

// MARK: - Templates

/// What templates of a node see: its input, the job, and the job's finished nodes.
struct RunScope: TemplateScope {
    let run: JobRun
    let input: JSONValue
    let context: ExecutionContext

    var job: JSONValue { self.run.jobObject }

    /// `tasks.<id>` resolves to the nearest node of that name: in the same map instance
    /// (`id[3]`) and the same dynamic graph (`dyn/id`) first, then anywhere in the job.
    func task(_ id: String) -> JSONValue? {
        let prefix = self.context.scopePrefix
        let suffix = self.context.suffix
        return self.run.state.withLock { state in
            for candidate in [prefix + id + suffix, prefix + id, id + suffix, id] {
                if let index = state.lookup(candidate) { return state.records[index].outcomeObject }
            }
            return nil
        }
    }
}

/// The job was given up: another server runs it now (`JobRun.abandon()`).
public struct JobAbandoned: Error, Sendable {
    public init() {}
}
