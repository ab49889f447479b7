import NIOCore
import Synchronization
import TaskCore
import TaskGraph
import TaskWorkerProtocol

/// The server-side half of external pools (SPEC §6): each pool's ready queue and waiting claims,
/// and the lease table — one owner of all of it, under one lock.
///
/// - A ready attempt goes straight to the oldest waiting claim that accepts its action (sync
///   match: no polling interval on either side), or joins its pool's `ReadyQueue`.
/// - A claim takes queued attempts in the queue's order; with nothing queued it waits (bounded: at
///   most `maxWaitingClaims` per pool; the next one is refused, `ExternalPoolsError.tooManyClaims`).
/// - Leases live in the `LeaseTable`, a state machine whose actions (arm a timer, end an attempt,
///   forget a stored lease) the owner carries out after releasing its lock.
/// - With a durable repository every lease is written (as a hash of its id) before its claim is
///   answered, so after a restart the worker can still heartbeat and complete it.
///
/// Time — deadlines, timers, when a worker was last seen — comes from the injected `ServerClock`.
public final class ExternalPools: Sendable {
    /// Claims that may wait on one pool at once.
    public static let maxWaitingClaims = 1000
    /// Ended leases remembered for `409 lease.gone` answers.
    static let maxRememberedLeases = 100_000
    /// Workers remembered per pool for `GET /v1/executors/{name}/workers`.
    static let maxWorkersPerPool = 10_000

    /// The pool names, sorted.
    public let names: [String]
    /// The index of each pool's state in `State.pools`.
    private let poolIndex: [String: Int]
    private let state: Mutex<State>
    private let journalSlot = Mutex<(any LeaseJournal)?>(nil)
    /// Told the pool's name when an attempt is queued in an empty queue with no claim waiting
    /// here for it (`PoolRelay`: the cluster hears of it at once).
    private let queuedForNobody = Mutex<(@Sendable (String) -> Void)?>(nil)
    let clock: any ServerClock

    struct Waiter {
        let id: UInt64
        let workerId: String
        let actions: [String]?
        /// How many attempts it asked for (a waiter handed an attempt here gets one; one relayed
        /// to another server, up to this many).
        let max: Int
        let promise: Promise<[Claimed]>
    }

    struct WorkerSeen {
        var lastSeen: Timestamp
        var leases: Int
    }

    struct PoolState {
        var queue = PriorityReadyQueue()
        var waiters = CircularBuffer<Waiter>()
        /// The waiters' `waitMs` timers by waiter id (an entry exists while its waiter waits; the
        /// timer is set once armed): found without a scan of `waiters`.
        var waitTimers: [UInt64: ClockTimer?] = [:]
        var leased = 0
        var workers: [String: WorkerSeen] = [:]
        var claimed = 0
        var expired = 0
    }

    struct State {
        /// By `poolIndex`.
        var pools: [PoolState] = []
        var leases = LeaseTable(maxRemembered: ExternalPools.maxRememberedLeases)
        var nextWaiterID: UInt64 = 0
        var draining = false
    }

    /// A lease handed to a worker: what a claim answers with.
    struct Claimed {
        let leaseID: String
        let item: Item

        enum Item {
            /// An attempt of a job this server runs.
            case local(WorkerTask, deadline: Timestamp?)
            /// A claim item another server leased for this claim (`PoolRelay`), its `leaseId` set.
            case relayed(JSONValue)
        }

        /// The claim item (SPEC §6), as the worker gets it.
        var json: JSONValue {
            guard case .local(let task, let deadline) = self.item else {
                guard case .relayed(.object(var object)) = self.item else { return .null }
                object["leaseId"] = .string(self.leaseID)
                return .object(object)
            }
            return ClaimItem(
                leaseId: self.leaseID,
                jobId: task.jobID,
                taskId: task.taskID,
                action: task.action,
                params: task.params,
                input: task.input,
                attempt: task.attempt,
                heartbeatTimeoutMs: task.heartbeatTimeoutMs,
                deadline: deadline?.rfc3339,
                traceparent: (task.trace as? TracedAttempt)?.workerTraceparent ?? task.trace?.traceparent,
                tracestate: task.trace?.tracestate
            ).json
        }
    }

    public init(pools names: some Sequence<String>, clock: any ServerClock = SystemClock()) {
        let sorted = Set(names).sorted()
        self.names = sorted
        self.poolIndex = Dictionary(uniqueKeysWithValues: sorted.enumerated().map { ($0.element, $0.offset) })
        var state = State()
        state.pools = Array(repeating: PoolState(), count: sorted.count)
        self.state = Mutex(state)
        self.clock = clock
    }

    /// The engine's view of each pool.
    public var executors: [any ExternalExecutor] { self.names.map { ExternalPool(name: $0, pools: self) } }

    public func isPool(_ name: String) -> Bool { self.names.contains(name) }

    /// Where leases are made durable (the repository); none: leases live in memory only.
    public func attach(journal: any LeaseJournal) { self.journalSlot.withLock { $0 = journal } }

    /// Calls `body` with a pool's name whenever its queue, empty, gets an attempt no claim waiting
    /// here takes: only then may claims waiting on other servers not know of work here.
    func onQueuedForNobody(_ body: @escaping @Sendable (String) -> Void) {
        self.queuedForNobody.withLock { $0 = body }
    }

    private var journal: (any LeaseJournal)? { self.journalSlot.withLock { $0 } }

    // MARK: - Carrying out the lease table's actions

    /// Carries out `actions` (outside the lock); returns what their `finish` returned.
    @discardableResult
    private func run(_ actions: LeaseTable.Actions) -> Bool? {
        if let timer = actions.cancel.0 { self.clock.cancel(timer) }
        if let timer = actions.cancel.1 { self.clock.cancel(timer) }
        if let (key, delay) = actions.checkExpiry {
            self.arm(key, .expiry, after: delay) { [weak self] in self?.expiryDue(key) }
        }
        if let (key, delay, timeoutMs) = actions.limitAttempt {
            self.arm(key, .attempt, after: delay) { [weak self] in
                self?.end(
                    key,
                    with: TaskError(code: "task.timeout", message: "the attempt did not finish within \(timeoutMs) ms")
                )
            }
        }
        var finished: Bool?
        if let (attempt, outcome, retryable) = actions.finish {
            finished = attempt.task.finish(outcome, retryable: retryable)
        }
        if let (hash, task) = actions.forget, !task.isAbandoned { self.journal?.removeLeases([hash]) }
        return finished
    }

    private func arm(
        _ key: String,
        _ kind: LeaseTable.Timer,
        after delay: Duration,
        _ work: @escaping @Sendable () -> Void
    ) {
        let timer = self.clock.schedule(after: delay, work)
        if !self.state.withLock({ $0.leases.armed(timer, kind, for: key) }) { self.clock.cancel(timer) }
    }

    // MARK: - Queueing (the engine's side)

    func enqueue(_ task: WorkerTask, pool name: String) {
        guard let pool = self.poolIndex[name] else { return }
        let attempt = ReadyAttempt(task: task, pool: pool)
        enum Placed {
            case queued(first: Bool)
            case resumed(workerId: String, LeaseTable.Actions)
            case handedOff(Waiter, ClockTimer?, Claimed, StoredLease?, LeaseTable.Actions)
        }
        let now = self.clock.monotonicNanoseconds()
        let placed: Placed = self.state.withLock { state in
            if let stored = state.leases.takeRestored(jobID: task.jobID, taskID: task.taskID) {
                // The attempt was leased before the restart: the lease carries on under its old id.
                let actions = self.startLease(
                    attempt,
                    key: "#" + stored.hash,
                    workerId: stored.workerId,
                    storedHash: stored.hash,
                    now: now,
                    in: &state
                )
                return .resumed(workerId: stored.workerId, actions)
            }
            if let index = state.pools[pool].waiters.firstIndex(where: { $0.actions?.contains(task.action) ?? true }) {
                let waiter = state.pools[pool].waiters.remove(at: index)
                let timer = state.pools[pool].waitTimers.removeValue(forKey: waiter.id) ?? nil
                let (claimed, stored, actions) = self.lease(attempt, workerId: waiter.workerId, now: now, in: &state)
                return .handedOff(waiter, timer, claimed, stored, actions)
            }
            let first = state.pools[pool].queue.count == 0
            state.pools[pool].queue.push(attempt)
            return .queued(first: first)
        }
        task.future.whenComplete { [weak self] _ in self?.attemptEnded(attempt) }
        switch placed {
        case .queued(let first):
            if first { self.queuedForNobody.withLock { $0 }?(name) }
            if let scheduleTimeoutMs = task.scheduleTimeoutMs {
                let timer = self.clock.schedule(after: .milliseconds(scheduleTimeoutMs)) { [weak self] in
                    self?.scheduleTimedOut(attempt, after: scheduleTimeoutMs)
                }
                let stillQueued = self.state.withLock { _ -> Bool in
                    guard attempt.isQueued else { return false }
                    attempt.scheduleTimer = timer
                    return true
                }
                if !stillQueued { self.clock.cancel(timer) }
            }
        case .resumed(let workerId, let actions):
            self.run(actions)
            task.markClaimed(by: workerId)
        case .handedOff(let waiter, let timer, let claimed, let stored, let actions):
            if let timer { self.clock.cancel(timer) }
            self.run(actions)
            self.deliver([claimed], stored: stored.map { [$0] } ?? [], to: waiter.promise)
        }
    }

    /// The answer of a claim never reached its worker (the connection closed first): its leases
    /// end without consuming their attempts, which go back to their pools as the same attempts — to
    /// a waiting claim, or the queue. (A late call with one of the lease ids is told `lease.gone`.)
    /// Returns the keys that name no live lease here (a relayed claim's: its owner gives them back).
    /// `keys`: lease ids, or `#` and a hash.
    @discardableResult
    func giveBack(_ keys: [String]) -> [String] {
        let now = self.clock.monotonicNanoseconds()
        var ended: [LeaseTable.Actions] = []
        var handedOff: [(Waiter, ClockTimer?, Claimed, StoredLease?, LeaseTable.Actions)] = []
        var unknown: [String] = []
        var firstQueued: [String] = []
        self.state.withLock { state in
            for id in keys {
                guard let (lease, actions) = self.endLease(id, cancelled: false, in: &state) else {
                    unknown.append(id)
                    continue
                }
                ended.append(actions)
                let attempt = lease.attempt
                state.pools[attempt.pool].claimed -= 1
                attempt.place = .queued
                let pool = attempt.pool
                let action = attempt.task.action
                if let index = state.pools[pool].waiters.firstIndex(where: { $0.actions?.contains(action) ?? true }) {
                    let waiter = state.pools[pool].waiters.remove(at: index)
                    let timer = state.pools[pool].waitTimers.removeValue(forKey: waiter.id) ?? nil
                    let (claimed, stored, actions) = self.lease(
                        attempt,
                        workerId: waiter.workerId,
                        now: now,
                        in: &state
                    )
                    handedOff.append((waiter, timer, claimed, stored, actions))
                } else {
                    if state.pools[pool].queue.count == 0 { firstQueued.append(self.names[pool]) }
                    state.pools[pool].queue.push(attempt)
                }
            }
        }
        if !firstQueued.isEmpty, let announce = self.queuedForNobody.withLock({ $0 }) {
            for pool in firstQueued { announce(pool) }
        }
        for actions in ended { self.run(actions) }
        for (waiter, timer, claimed, stored, actions) in handedOff {
            if let timer { self.clock.cancel(timer) }
            self.run(actions)
            self.deliver([claimed], stored: stored.map { [$0] } ?? [], to: waiter.promise)
        }
        return unknown
    }

    /// Marks the handed-out attempts claimed, makes their leases durable, then answers `promise`.
    private func deliver(_ claimed: [Claimed], stored: [StoredLease], to promise: Promise<[Claimed]>) {
        var live: [Claimed] = []
        live.reserveCapacity(claimed.count)
        var handedOutTasks = Set<String>()
        for item in claimed {
            let workerId = self.state.withLock { $0.leases.live[item.leaseID]?.workerId }
            // A lease that ended meanwhile (its job was cancelled, or given up to another server)
            // is not handed out.
            guard case .local(let task, _) = item.item else { continue }
            if let workerId, task.markClaimed(by: workerId) {
                live.append(item)
                handedOutTasks.insert(LeaseTable.restoreKey(task.jobID, task.taskID))
            }
        }
        let stored = stored.filter { handedOutTasks.contains(LeaseTable.restoreKey($0.jobID, $0.taskID)) }
        guard !stored.isEmpty, let journal = self.journal else {
            promise.succeed(live)
            return
        }
        let handedOut = live
        journal.recordLeases(stored).whenComplete { outcome in
            switch outcome {
            case .success: promise.succeed(handedOut)
            case .failure(let error): promise.fail(error)
            case .cancelled: promise.cancel()
            }
        }
    }

    /// Creates a lease on `attempt` for `workerId` (under the lock): under a new lease id, or —
    /// for a claim relayed by another server — under `peerHash`, the hash of the id that server
    /// made (the id itself never leaves it).
    private func lease(
        _ attempt: ReadyAttempt,
        workerId: String,
        now: UInt64,
        peerHash: String? = nil,
        in state: inout State
    ) -> (Claimed, StoredLease?, LeaseTable.Actions) {
        let id = peerHash.map { "#" + $0 } ?? LeaseID.make()
        let durable = self.journalSlot.withLock { $0 != nil }
        let hash = peerHash ?? (durable ? LeaseID.hash(id) : nil)
        let actions = self.startLease(attempt, key: id, workerId: workerId, storedHash: hash, now: now, in: &state)
        let task = attempt.task
        let wall = self.clock.now()
        let deadline = task.timeoutMs.map { Timestamp(milliseconds: wall.milliseconds + Int64($0)) }
        let stored = hash.map {
            StoredLease(
                hash: $0,
                jobID: task.jobID,
                taskID: task.taskID,
                executor: self.names[attempt.pool],
                workerId: workerId,
                attempt: task.attempt,
                heartbeatTimeoutMs: task.heartbeatTimeoutMs,
                claimedAt: wall
            )
        }
        return (Claimed(leaseID: id, item: .local(task, deadline: deadline)), stored, actions)
    }

    private func startLease(
        _ attempt: ReadyAttempt,
        key: String,
        workerId: String,
        storedHash: String?,
        now: UInt64,
        in state: inout State
    ) -> LeaseTable.Actions {
        let actions = state.leases.start(attempt, key: key, workerId: workerId, storedHash: storedHash, now: now)
        state.pools[attempt.pool].leased += 1
        state.pools[attempt.pool].claimed += 1
        self.noteWorker(workerId, pool: attempt.pool, leases: 1, in: &state)
        return actions
    }

    // MARK: - Claims (the workers' side)

    /// Up to `max` attempts of pool `name` (with an action in `actions`, when given), waiting up to
    /// `waitMs` for the first. Throws `tooManyClaims` when the pool already has its fill of waiting
    /// claims.
    func claim(
        pool name: String,
        workerId: String,
        actions: [String]?,
        max: Int,
        waitMs: Int,
        withdrawnBy withdrawal: CancellationToken = .none
    ) throws(ExternalPoolsError) -> Future<[Claimed]> {
        guard let pool = self.poolIndex[name] else { return Future(value: []) }
        let promise = Promise<[Claimed]>()
        let now = self.clock.monotonicNanoseconds()
        let (taken, stored, leaseActions, waiterID): ([Claimed], [StoredLease], [LeaseTable.Actions], UInt64?) =
            try self.state.withLock {
                state throws(ExternalPoolsError) in
                self.noteWorker(workerId, pool: pool, leases: 0, in: &state)
                let picked = state.pools[pool].queue.pop(
                    max: max,
                    accepting: actions.map { actions in { actions.contains($0.task.action) } }
                )
                if picked.isEmpty {
                    if waitMs == 0 || state.draining { return ([], [], [], nil) }
                    if state.pools[pool].waiters.count >= Self.maxWaitingClaims {
                        throw .tooManyClaims(pool: name, limit: Self.maxWaitingClaims)
                    }
                    state.nextWaiterID += 1
                    let id = state.nextWaiterID
                    state.pools[pool].waiters.append(
                        Waiter(id: id, workerId: workerId, actions: actions, max: max, promise: promise)
                    )
                    state.pools[pool].waitTimers[id] = .some(nil)
                    return ([], [], [], id)
                }
                let (taken, stored, leaseActions) = self.lease(picked, workerId: workerId, now: now, in: &state)
                return (taken, stored, leaseActions, nil)
            }
        if let waiterID {
            let timer = self.clock.schedule(after: .milliseconds(waitMs)) { [weak self] in
                self?.expireWaiter(waiterID, pool: pool)
            }
            let answered = self.state.withLock { state -> Bool in
                guard state.pools[pool].waitTimers[waiterID] != nil else { return true }
                state.pools[pool].waitTimers[waiterID] = timer
                return false
            }
            if answered {
                self.clock.cancel(timer)
            } else if withdrawal !== CancellationToken.none {
                // The client went away: its claim stops waiting, so no task is leased to nobody.
                let registration = withdrawal.register { [weak self] in self?.expireWaiter(waiterID, pool: pool) }
                promise.future.whenComplete { _ in registration.dispose() }
            }
            return promise.future
        }
        for actions in leaseActions { self.run(actions) }
        if taken.isEmpty { return Future(value: []) }
        self.deliver(taken, stored: stored, to: promise)
        return promise.future
    }

    /// Leases `picked` (just taken from their queue) for `workerId`, under `peerHashes` when given
    /// (one per attempt, in order).
    private func lease(
        _ picked: [ReadyAttempt],
        workerId: String,
        now: UInt64,
        peerHashes: [String]? = nil,
        in state: inout State
    ) -> ([Claimed], [StoredLease], [LeaseTable.Actions]) {
        var taken: [Claimed] = []
        var stored: [StoredLease] = []
        var leaseActions: [LeaseTable.Actions] = []
        leaseActions.reserveCapacity(picked.count)
        for (index, attempt) in picked.enumerated() {
            var (claimed, record, actions) = self.lease(
                attempt,
                workerId: workerId,
                now: now,
                peerHash: peerHashes?[index],
                in: &state
            )
            // Its schedule timeout ends with its wait.
            actions.cancel.0 = attempt.scheduleTimer
            taken.append(claimed)
            leaseActions.append(actions)
            if let record { stored.append(record) }
        }
        return (taken, stored, leaseActions)
    }

    // MARK: - Claims relayed between servers (SPEC §9, `PoolRelay`)

    /// Up to `peerHashes.count` queued attempts of pool `name`, leased for a claim another server
    /// relayed: each under one of the hashes that server made of the lease ids it will hand out
    /// (in order), stored before the answer. Never waits: the claim waits on its own server.
    func claimForPeer(
        pool name: String,
        workerId: String,
        actions: [String]?,
        peerHashes: [String]
    )
        -> Future<[Claimed]>
    {
        guard let pool = self.poolIndex[name], !peerHashes.isEmpty else { return Future(value: []) }
        let now = self.clock.monotonicNanoseconds()
        let (taken, stored, leaseActions) = self.state.withLock { state in
            self.noteWorker(workerId, pool: pool, leases: 0, in: &state)
            let picked = state.pools[pool].queue.pop(
                max: peerHashes.count,
                accepting: actions.map { actions in { actions.contains($0.task.action) } }
            )
            return self.lease(picked, workerId: workerId, now: now, peerHashes: peerHashes, in: &state)
        }
        for actions in leaseActions { self.run(actions) }
        if taken.isEmpty { return Future(value: []) }
        let promise = Promise<[Claimed]>()
        self.deliver(taken, stored: stored, to: promise)
        return promise.future
    }

    /// The number of queued attempts of each pool that has any (what a server tells the others).
    func queuedCounts() -> [String: Int] {
        self.state.withLock { state in
            var counts: [String: Int] = [:]
            for (index, pool) in state.pools.enumerated() where pool.queue.count > 0 {
                counts[self.names[index]] = pool.queue.count
            }
            return counts
        }
    }

    /// Whether claims wait on pool `name`.
    func hasWaitingClaims(_ name: String) -> Bool {
        guard let pool = self.poolIndex[name] else { return false }
        return self.state.withLock { !$0.pools[pool].waiters.isEmpty }
    }

    /// The names of the pools with waiting claims.
    func poolsWithWaitingClaims() -> [String] {
        self.state.withLock { state in
            state.pools.indices.filter { !state.pools[$0].waiters.isEmpty }.map { self.names[$0] }
        }
    }

    /// A waiting claim taken out of its pool's line to be answered from another server's queue.
    struct WithdrawnClaim: Sendable {
        fileprivate let waiter: Waiter
        fileprivate let pool: Int
        var workerId: String { self.waiter.workerId }
        var actions: [String]? { self.waiter.actions }
        var max: Int { self.waiter.max }
    }

    /// Takes the oldest waiting claim on pool `name` out of its line (nil: none waits). Its wait
    /// timer stays: when it fires meanwhile, `answerWithdrawn` with nothing answers `[]`.
    func withdrawWaiter(pool name: String) -> WithdrawnClaim? {
        guard let pool = self.poolIndex[name] else { return nil }
        return self.state.withLock { state in
            state.pools[pool].waiters.popFirst().map { WithdrawnClaim(waiter: $0, pool: pool) }
        }
    }

    /// Answers a withdrawn claim with what another server leased for it; with nothing, it goes
    /// back to the head of its line — unless its wait ended meanwhile (then it is answered `[]`).
    func answerWithdrawn(_ claim: WithdrawnClaim, with items: [Claimed]) {
        let waiter = claim.waiter
        let pool = claim.pool
        let (waiting, timer): (Bool, ClockTimer?) = self.state.withLock { state in
            guard let timer = state.pools[pool].waitTimers[waiter.id] else { return (false, nil) }
            if items.isEmpty && !state.draining {
                state.pools[pool].waiters.prepend(waiter)
                return (true, nil)
            }
            state.pools[pool].waitTimers[waiter.id] = nil
            return (false, timer)
        }
        if waiting { return }
        if let timer { self.clock.cancel(timer) }
        waiter.promise.succeed(items)
    }

    private func expireWaiter(_ id: UInt64, pool: Int) {
        let found: (Waiter, ClockTimer?)? = self.state.withLock { state in
            guard let timer = state.pools[pool].waitTimers.removeValue(forKey: id),
                let index = state.pools[pool].waiters.firstIndex(where: { $0.id == id })
            else { return nil }
            return (state.pools[pool].waiters.remove(at: index), timer)
        }
        guard let (waiter, timer) = found else { return }
        if let timer { self.clock.cancel(timer) }
        waiter.promise.succeed([])
    }

    /// Answers every waiting claim with nothing, and every later claim at once (SIGTERM).
    public func drain() {
        let (waiters, timers): ([Waiter], [ClockTimer]) = self.state.withLock { state in
            state.draining = true
            var all: [Waiter] = []
            var timers: [ClockTimer] = []
            for pool in state.pools.indices {
                all += Array(state.pools[pool].waiters)
                timers += state.pools[pool].waitTimers.values.compactMap { $0 }
                state.pools[pool].waiters.removeAll()
                state.pools[pool].waitTimers.removeAll()
            }
            return (all, timers)
        }
        for timer in timers { self.clock.cancel(timer) }
        for waiter in waiters { waiter.promise.succeed([]) }
    }

    // MARK: - Leases

    /// The key of lease `id` in the table (an id or, after a restart, `#` and its hash).
    private func locate(_ id: String) -> (key: String, found: LeaseTable.Found) {
        let (found, hashKeys) = self.state.withLock { ($0.leases.find(id), $0.leases.hasHashKeys) }
        if found == .live || !hashKeys { return (id, found) }
        // Maybe a lease from before a restart, leased for another server's claim, or carried on
        // after a takeover (which wins over its end under its id here): known by its hash only.
        let key = "#" + LeaseID.hash(id)
        let byHash = self.state.withLock { $0.leases.find(key) }
        if byHash == .live || (found == .unknown && byHash != .unknown) { return (key, byHash) }
        return (id, found)
    }

    enum HeartbeatResult: Equatable {
        case ok(cancelRequested: Bool)
        case gone
        case notFound
    }

    /// Pushes lease `id`'s deadline back by its heartbeat timeout and keeps `progress` on the node.
    func heartbeat(_ id: String, progress: JSONValue?) -> HeartbeatResult {
        guard LeaseID.isPlausible(id) else { return .notFound }
        let (key, found) = self.locate(id)
        return self.heartbeat(key: key, found: found, progress: progress)
    }

    /// `heartbeat` of the lease whose id hashes to `hash` (relayed by another server).
    func heartbeat(leaseHash hash: String, progress: JSONValue?) -> HeartbeatResult {
        let (key, found) = self.locate(hash: hash)
        return self.heartbeat(key: key, found: found, progress: progress)
    }

    private func heartbeat(key: String, found: LeaseTable.Found, progress: JSONValue?) -> HeartbeatResult {
        switch found {
        case .unknown: return .notFound
        case .gone: return .gone
        case .cancelled: return .ok(cancelRequested: true)
        case .live: break
        }
        let now = self.clock.monotonicNanoseconds()
        let task: WorkerTask? = self.state.withLock { state in
            guard let lease = state.leases.heartbeat(key, now: now) else { return nil }
            self.noteWorker(lease.workerId, pool: lease.attempt.pool, leases: 0, in: &state)
            return lease.attempt.task
        }
        guard let task else {  // it ended meanwhile
            return self.heartbeat(key: key, found: self.state.withLock { $0.leases.find(key) }, progress: progress)
        }
        if let progress { task.setProgress(progress) }
        return .ok(cancelRequested: task.isCancelled)
    }

    enum CompleteResult {
        /// Completed (lease `key`); `pool` and `workerId` say where a `claimNext` claims. The
        /// answer waits for `durable(task, lease: key)`.
        case done(WorkerTask, key: String, pool: String, workerId: String)
        case gone(pool: String?, workerId: String?)
        case notFound
    }

    /// Ends lease `id`'s attempt with the worker's outcome (first outcome wins).
    func complete(_ id: String, with outcome: Outcome<JSONValue>, retryable: Bool) -> CompleteResult {
        guard LeaseID.isPlausible(id) else { return .notFound }
        let (key, found) = self.locate(id)
        return self.complete(key: key, found: found, with: outcome, retryable: retryable)
    }

    /// `complete` of the lease whose id hashes to `hash` (relayed by another server).
    func complete(leaseHash hash: String, with outcome: Outcome<JSONValue>, retryable: Bool) -> CompleteResult {
        let (key, found) = self.locate(hash: hash)
        return self.complete(key: key, found: found, with: outcome, retryable: retryable)
    }

    /// The key of the lease whose id hashes to `hash`, and what the table knows of it.
    private func locate(hash: String) -> (key: String, found: LeaseTable.Found) {
        self.state.withLock { state in
            // A lease taken up by hash (carried on after a takeover) wins over an ended one that
            // was made here under its id.
            if state.leases.find("#" + hash) == .live { return ("#" + hash, .live) }
            let key = state.leases.key(forHash: hash)
            return (key, state.leases.find(key))
        }
    }

    /// `giveBack` of the leases whose ids hash to `hashes` (relayed by another server).
    func giveBack(leaseHashes hashes: [String]) {
        self.giveBack(self.state.withLock { state in hashes.map { state.leases.key(forHash: $0) } })
    }

    private func complete(
        key: String,
        found: LeaseTable.Found,
        with outcome: Outcome<JSONValue>,
        retryable: Bool
    ) -> CompleteResult {
        guard case .live = found else { return found == .unknown ? .notFound : .gone(pool: nil, workerId: nil) }
        let ended = self.state.withLock { state in
            self.endLease(key, cancelled: false, finishing: (outcome, retryable), in: &state)
        }
        guard let (lease, actions) = ended else { return .gone(pool: nil, workerId: nil) }
        let pool = self.names[lease.attempt.pool]
        guard self.run(actions) == true else { return .gone(pool: pool, workerId: lease.workerId) }
        return .done(lease.attempt.task, key: key, pool: pool, workerId: lease.workerId)
    }

    /// Ends live lease `key` in the table and updates the pool's counts (under the lock).
    private func endLease(
        _ key: String,
        cancelled: Bool,
        finishing: (outcome: Outcome<JSONValue>, retryable: Bool)? = nil,
        in state: inout State
    ) -> (LeaseTable.Lease, LeaseTable.Actions)? {
        guard let (lease, actions) = state.leases.end(key, cancelled: cancelled, finishing: finishing) else {
            return nil
        }
        state.pools[lease.attempt.pool].leased -= 1
        self.noteWorker(lease.workerId, pool: lease.attempt.pool, leases: -1, in: &state)
        return (lease, actions)
    }

    /// The heartbeat timer of lease `key` fired: it expires unless a heartbeat moved its deadline.
    private func expiryDue(_ key: String) {
        let now = self.clock.monotonicNanoseconds()
        let actions: LeaseTable.Actions = self.state.withLock { state in
            let (expired, actions) = state.leases.expiryDue(key, now: now)
            if let expired {
                state.pools[expired.attempt.pool].expired += 1
                state.pools[expired.attempt.pool].leased -= 1
                self.noteWorker(expired.workerId, pool: expired.attempt.pool, leases: -1, in: &state)
            }
            return actions
        }
        self.run(actions)
    }

    /// Ends lease `key`'s attempt with `error` (its `timeoutMs` passed).
    private func end(_ key: String, with error: TaskError) {
        let ended = self.state.withLock { state in
            self.endLease(key, cancelled: false, finishing: (.failure(error), true), in: &state)
        }
        if let (_, actions) = ended { self.run(actions) }
    }

    private func scheduleTimedOut(_ attempt: ReadyAttempt, after milliseconds: Int) {
        let timedOut = self.state.withLock { state -> Bool in
            guard attempt.isQueued else { return false }
            attempt.place = .ended
            state.pools[attempt.pool].queue.remove(attempt)
            return true
        }
        if timedOut {
            attempt.task.finish(
                .failure(
                    TaskError(
                        code: "task.scheduleTimeout",
                        message: "no worker claimed the task within \(milliseconds) ms"
                    )
                )
            )
        }
    }

    /// The attempt's future completed, whoever completed it: a queued attempt leaves the queue and
    /// a live lease ends (cancelled with its job or node).
    private func attemptEnded(_ attempt: ReadyAttempt) {
        let actions: LeaseTable.Actions? = self.state.withLock { state in
            switch attempt.place {
            case .queued:
                attempt.place = .ended
                state.pools[attempt.pool].queue.remove(attempt)
                var actions = LeaseTable.Actions()
                actions.cancel.0 = attempt.scheduleTimer
                return actions
            case .leased(let key) where attempt.task.isAbandoned:
                // Given up to another server: the lease moves with its job (`LeaseTable.drop`).
                guard let (workerId, actions) = state.leases.drop(key) else { return nil }
                state.pools[attempt.pool].leased -= 1
                self.noteWorker(workerId, pool: attempt.pool, leases: -1, in: &state)
                return actions
            case .leased(let key):
                return self.endLease(key, cancelled: attempt.task.isCancelled, in: &state)?.1
            case .ended:
                return nil
            }
        }
        if let actions { self.run(actions) }
    }

    /// Records that `workerId` was seen (its live leases changed by `delta`). The registry holds
    /// at most `maxWorkersPerPool` workers: when it is full, idle workers not seen for 10 minutes
    /// go first, then the least recently seen quarter of the idle ones. A worker holding a lease is
    /// never evicted, and always registered (past the bound if it must: there are no more of them
    /// than live leases).
    private func noteWorker(_ workerId: String, pool: Int, leases delta: Int, in state: inout State) {
        let now = self.clock.now()
        if state.pools[pool].workers[workerId] == nil, state.pools[pool].workers.count >= Self.maxWorkersPerPool {
            let cutoff = now.milliseconds - 600_000
            state.pools[pool].workers = state.pools[pool].workers.filter {
                $0.value.leases > 0 || $0.value.lastSeen.milliseconds >= cutoff
            }
            if state.pools[pool].workers.count >= Self.maxWorkersPerPool {
                let idle = state.pools[pool].workers.filter { $0.value.leases == 0 }
                    .sorted { $0.value.lastSeen.milliseconds < $1.value.lastSeen.milliseconds }
                for (id, _) in idle.prefix(Swift.max(1, idle.count / 4)) { state.pools[pool].workers[id] = nil }
            }
            // Still full of workers holding leases: an idle newcomer goes untracked.
            if state.pools[pool].workers.count >= Self.maxWorkersPerPool, delta <= 0 { return }
        }
        state.pools[pool].workers[workerId, default: WorkerSeen(lastSeen: now, leases: 0)].lastSeen = now
        state.pools[pool].workers[workerId]!.leases = Swift.max(0, state.pools[pool].workers[workerId]!.leases + delta)
    }

    /// Completes once `task`'s outcome, just finished under lease `key`, is durable; fails
    /// `ownerUnavailable` when its run was given up first. The outcome is then not recorded, and
    /// the lease is not remembered as ended: the worker retries, and the job's next run — which
    /// takes the lease up — answers.
    func durable(_ task: WorkerTask, lease key: String) -> Future<Void> {
        self.durable([(task, key)])[0]
    }

    /// `durable` of each of `done` (attempts just finished under their leases), with one wait per
    /// run: the entries of one run share a future. A batch of completions mostly ends attempts of
    /// one job, and a wait started after the last of them covers them all (SPEC §6 promises each
    /// answer its outcome durable, and an answer after the job's latest seq is durable keeps it) —
    /// one waiter and one bound's timer per job instead of one per item (issue #44, lever 1).
    func durable(_ done: [(task: WorkerTask, key: String)]) -> [Future<Void>] {
        var keys: [ObjectIdentifier: [String]] = [:]
        for (task, key) in done { keys[task.runIdentity, default: []].append(key) }
        var shared: [ObjectIdentifier: Future<Void>] = [:]
        return done.map { task, _ in
            let run = task.runIdentity
            if let future = shared[run] { return future }
            let runKeys = keys[run] ?? []
            let future = DurableWait.bounded(task.waitUntilDurable(), clock: self.clock).continueWith(on: .immediate) {
                waited in
                switch waited.outcome! {
                case .success: return
                case .failure(is JobAbandoned):
                    self.state.withLock { state in for key in runKeys { state.leases.forgetEnded(key) } }
                    throw StoreError.ownerUnavailable
                case .failure(let error): throw error
                case .cancelled: throw CancellationError()
                }
            }
            shared[run] = future
            return future
        }
    }

    // MARK: - Restart

    /// Leases stored before a restart: each carries on when its attempt is queued again by the
    /// resumed job (call before the jobs are resumed).
    public func restore(_ leases: [StoredLease]) {
        self.state.withLock { state in state.leases.restore(leases.filter { self.poolIndex[$0.executor] != nil }) }
    }

    /// Forgets stored leases whose attempts did not come back (their jobs ended or were deleted).
    public func finishRestoring() {
        let stale = self.state.withLock { $0.leases.finishRestoring() }
        if !stale.isEmpty { self.journal?.removeLeases(stale) }
    }

    /// Whether a lease stored before the restart waits for this task's attempt to come back.
    func holdsRestoredLease(jobID: String, taskID: String) -> Bool {
        self.state.withLock { $0.leases.holdsRestoredLease(jobID: jobID, taskID: taskID) }
    }

    // MARK: - Reading

    public struct PoolStatistics: Sendable {
        public var queued: Int
        public var leased: Int
        public var waitingClaims: Int
        /// Workers seen in the last 60 seconds.
        public var workers: Int
        public var claimed: Int
        public var expired: Int
        /// `queued` by priority, index 0…9.
        public var queuedByPriority: [Int]
    }

    public func statistics(_ name: String) -> PoolStatistics? {
        let cutoff = self.clock.now().milliseconds - 60_000
        guard let index = self.poolIndex[name] else { return nil }
        return self.state.withLock { state in
            let pool = state.pools[index]
            return PoolStatistics(
                queued: pool.queue.count,
                leased: pool.leased,
                waitingClaims: pool.waiters.count,
                workers: pool.workers.values.count { $0.lastSeen.milliseconds >= cutoff },
                claimed: pool.claimed,
                expired: pool.expired,
                queuedByPriority: pool.queue.countsByPriority
            )
        }
    }

    /// Workers of pool `name` seen in the last 10 minutes, most recent first.
    public func workers(_ name: String) -> [(workerId: String, lastSeen: Timestamp, leases: Int)]? {
        let cutoff = self.clock.now().milliseconds - 600_000
        guard let index = self.poolIndex[name] else { return nil }
        return self.state.withLock { state in
            state.pools[index].workers.filter { $0.value.lastSeen.milliseconds >= cutoff || $0.value.leases > 0 }
                .map { (workerId: $0.key, lastSeen: $0.value.lastSeen, leases: $0.value.leases) }
                .sorted { ($0.lastSeen.milliseconds, $1.workerId) > ($1.lastSeen.milliseconds, $0.workerId) }
        }
    }
}

/// Why the external pools refused a request, in its own terms (the HTTP layer maps it to a problem).
enum ExternalPoolsError: Error, Equatable {
    /// `limit` claims already wait on `pool`.
    case tooManyClaims(pool: String, limit: Int)
}

/// One external pool as the engine sees it.
struct ExternalPool: ExternalExecutor {
    let name: String
    let pools: ExternalPools

    func enqueue(_ task: WorkerTask) { self.pools.enqueue(task, pool: self.name) }

    func continuesLease(jobID: String, taskID: String) -> Bool {
        self.pools.holdsRestoredLease(jobID: jobID, taskID: taskID)
    }
}
