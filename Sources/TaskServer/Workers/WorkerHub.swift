import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore
import TaskGraph

/// The external worker pools of one server (SPEC §6): each pool's FIFO queue of ready attempts,
/// its waiting claims, and every live lease — one owner of all of it, under one lock.
///
/// - A ready attempt goes straight to the oldest waiting claim that accepts its action (sync
///   match: no polling interval on either side), or joins its pool's queue.
/// - A claim takes queued attempts in FIFO order; with nothing queued it waits (bounded: at most
///   `maxWaitingClaims` per pool; the next one is refused with 429).
/// - A lease is one claimed attempt with a heartbeat deadline. It ends exactly once: completed by
///   its worker, expired (`task.heartbeatTimeout`, then the task's `retry` decides), timed out
///   (`timeoutMs` from the claim), or cancelled with its job or node. Ended leases are remembered
///   (the last `maxRememberedLeases`) so that a late call is told `409 lease.gone`, not `404`.
/// - With a durable store every lease is written (as a hash of its id) before its claim is
///   answered, so after a restart the worker can still heartbeat and complete it.
///
/// Attempts are completed (and their nodes' events published) outside the lock.
public final class WorkerHub: Sendable {
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

    public init(pools names: some Sequence<String>) {
        let sorted = Set(names).sorted()
        self.names = sorted
        self.poolIndex = Dictionary(uniqueKeysWithValues: sorted.enumerated().map { ($0.element, $0.offset) })
        var state = State()
        state.pools = Array(repeating: PoolState(), count: sorted.count)
        self.state = Mutex(state)
    }

    /// The engine's view of each pool.
    public var executors: [any ExternalExecutor] { self.names.map { ExternalPool(name: $0, hub: self) } }

    public func isPool(_ name: String) -> Bool { self.names.contains(name) }

    /// Where leases are made durable (the store); none: leases live in memory only.
    public func attach(journal: any LeaseJournal) { self.journalSlot.withLock { $0 = journal } }

    private var journal: (any LeaseJournal)? { self.journalSlot.withLock { $0 } }

    // MARK: - State

    /// An attempt handed to the hub, with where it is now. Its mutable fields are only read and
    /// written under `WorkerHub.state`'s lock (the invariant behind `@unchecked Sendable`).
    final class Work: @unchecked Sendable {
        enum Place {
            case queued
            case leased(String)
            case ended
        }

        let task: WorkerTask
        /// The index of the pool in `State.pools`.
        let pool: Int
        var place = Place.queued
        var scheduleTimer: TimerQueue.ID?

        init(task: WorkerTask, pool: Int) {
            self.task = task
            self.pool = pool
        }
    }

    struct Lease {
        let work: Work
        var workerId: String
        /// When the lease expires unless heartbeated (monotonic nanoseconds).
        var deadline: UInt64
        let heartbeat: UInt64
        /// The hash the store keeps; nil in memory-only servers.
        let storedHash: String?
        var expiryTimer: TimerQueue.ID?
        var attemptTimer: TimerQueue.ID?
    }

    struct Waiter {
        let id: UInt64
        let workerId: String
        let actions: [String]?
        let promise: Promise<[Claimed]>
    }

    struct WorkerSeen {
        var lastSeen: Timestamp
        var leases: Int
    }

    struct PoolState {
        var queue = CircularBuffer<Work>()
        /// Live attempts in `queue` (ended ones are dropped when reached).
        var queued = 0
        var waiters = CircularBuffer<Waiter>()
        /// The waiters' `waitMs` timers by waiter id (an entry exists while its waiter waits; the
        /// timer is set once scheduled): found without a scan of `waiters`.
        var waitTimers: [UInt64: TimerQueue.ID?] = [:]
        var leased = 0
        var workers: [String: WorkerSeen] = [:]
        var claimed = 0
        var expired = 0
    }

    struct State {
        /// By `poolIndex`.
        var pools: [PoolState] = []
        /// Live leases by id — or, for a lease restored after a restart, by `#` and its hash.
        var leases: [String: Lease] = [:]
        /// Ended leases (same keys): `true` when the attempt was cancelled.
        var ended: [String: Bool] = [:]
        var endedOrder = CircularBuffer<String>()
        /// Leases stored before a restart, by job and task, until their attempts come back.
        var restored: [String: StoredLease] = [:]
        var hasRestoredLeases = false
        var nextWaiterID: UInt64 = 0
        var draining = false
    }

    /// A lease handed to a worker: what a claim answers with.
    struct Claimed {
        let leaseID: String
        let task: WorkerTask
        let deadline: Timestamp?
    }

    // MARK: - Queueing (the engine's side)

    func enqueue(_ task: WorkerTask, pool name: String) {
        guard let pool = self.poolIndex[name] else { return }
        let work = Work(task: task, pool: pool)
        enum Placed {
            case queued
            case resumed(workerId: String)
            case handedOff(Waiter, TimerQueue.ID?, Claimed, StoredLease?)
        }
        let placed: Placed = self.state.withLock { state in
            if !state.restored.isEmpty,
                let stored = state.restored.removeValue(forKey: Self.restoreKey(task.jobID, task.taskID))
            {
                // The attempt was leased before the restart: the lease carries on under its old id.
                let key = "#" + stored.hash
                self.startLease(work, key: key, workerId: stored.workerId, storedHash: stored.hash, in: &state)
                return .resumed(workerId: stored.workerId)
            }
            if let index = state.pools[pool].waiters.firstIndex(where: { $0.actions?.contains(task.action) ?? true }) {
                let waiter = state.pools[pool].waiters.remove(at: index)
                let timer = state.pools[pool].waitTimers.removeValue(forKey: waiter.id) ?? nil
                let (claimed, stored) = self.lease(work, workerId: waiter.workerId, in: &state)
                return .handedOff(waiter, timer, claimed, stored)
            }
            state.pools[pool].queue.append(work)
            state.pools[pool].queued += 1
            return .queued
        }
        task.future.whenComplete { [weak self] _ in self?.attemptEnded(work) }
        switch placed {
        case .queued:
            if let scheduleTimeoutMs = task.scheduleTimeoutMs {
                let timer = TimerQueue.shared.schedule(after: .milliseconds(scheduleTimeoutMs)) { [weak self] in
                    self?.scheduleTimedOut(work, after: scheduleTimeoutMs)
                }
                let stillQueued = self.state.withLock { _ -> Bool in
                    guard case .queued = work.place else { return false }
                    work.scheduleTimer = timer
                    return true
                }
                if !stillQueued { TimerQueue.shared.cancel(timer) }
            }
        case .resumed(let workerId):
            task.markClaimed(by: workerId)
        case .handedOff(let waiter, let timer, let claimed, let stored):
            if let timer { TimerQueue.shared.cancel(timer) }
            self.deliver([claimed], stored: stored.map { [$0] } ?? [], to: waiter.promise)
        }
    }

    /// Marks the handed-out attempts claimed, makes their leases durable, then answers `promise`.
    private func deliver(_ claimed: [Claimed], stored: [StoredLease], to promise: Promise<[Claimed]>) {
        var live: [Claimed] = []
        live.reserveCapacity(claimed.count)
        for item in claimed {
            let workerId = self.state.withLock { $0.leases[item.leaseID]?.workerId }
            // A lease that ended meanwhile (its job was cancelled) is not handed out.
            if let workerId, item.task.markClaimed(by: workerId) { live.append(item) }
        }
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

    /// Creates a lease on `work` for `workerId` (under the lock).
    private func lease(_ work: Work, workerId: String, in state: inout State) -> (Claimed, StoredLease?) {
        let id = LeaseID.make()
        let durable = self.journalSlot.withLock { $0 != nil }
        let hash = durable ? LeaseID.hash(id) : nil
        self.startLease(work, key: id, workerId: workerId, storedHash: hash, in: &state)
        let task = work.task
        let deadline = task.timeoutMs.map { Timestamp(milliseconds: Timestamp.now().milliseconds + Int64($0)) }
        let stored = hash.map {
            StoredLease(
                hash: $0,
                jobID: task.jobID,
                taskID: task.taskID,
                executor: self.names[work.pool],
                workerId: workerId,
                attempt: task.attempt,
                heartbeatTimeoutMs: task.heartbeatTimeoutMs,
                claimedAt: .now()
            )
        }
        return (Claimed(leaseID: id, task: task, deadline: deadline), stored)
    }

    private func startLease(_ work: Work, key: String, workerId: String, storedHash: String?, in state: inout State) {
        let task = work.task
        let heartbeat = UInt64(task.heartbeatTimeoutMs) * 1_000_000
        var lease = Lease(
            work: work,
            workerId: workerId,
            deadline: monotonicNanoseconds() &+ heartbeat,
            heartbeat: heartbeat,
            storedHash: storedHash
        )
        lease.expiryTimer = TimerQueue.shared.schedule(after: .milliseconds(task.heartbeatTimeoutMs)) { [weak self] in
            self?.checkExpiry(key)
        }
        if let timeoutMs = task.timeoutMs {
            lease.attemptTimer = TimerQueue.shared.schedule(after: .milliseconds(timeoutMs)) { [weak self] in
                self?.end(
                    key,
                    with: TaskError(code: "task.timeout", message: "the attempt did not finish within \(timeoutMs) ms")
                )
            }
        }
        state.leases[key] = lease
        work.place = .leased(key)
        state.pools[work.pool].leased += 1
        state.pools[work.pool].claimed += 1
        self.noteWorker(workerId, pool: work.pool, leases: 1, in: &state)
    }

    // MARK: - Claims (the workers' side)

    /// Up to `max` attempts of pool `name` (with an action in `actions`, when given), waiting up to
    /// `waitMs` for the first. Throws 429 when the pool already has its fill of waiting claims.
    func claim(
        pool name: String,
        workerId: String,
        actions: [String]?,
        max: Int,
        waitMs: Int,
        withdrawnBy withdrawal: CancellationToken = .none
    ) throws(HTTPProblem) -> Future<[Claimed]> {
        guard let pool = self.poolIndex[name] else { return Future(value: []) }
        let promise = Promise<[Claimed]>()
        let (taken, stored, waiterID): ([Claimed], [StoredLease], UInt64?) = try self.state.withLock {
            state throws(HTTPProblem) in
            self.noteWorker(workerId, pool: pool, leases: 0, in: &state)
            var picked: [Work] = []
            if let actions {
                // By offset: CircularBuffer's indices do not survive a removal.
                var offset = 0
                while picked.count < max, offset < state.pools[pool].queue.count {
                    let index = state.pools[pool].queue.index(state.pools[pool].queue.startIndex, offsetBy: offset)
                    let work = state.pools[pool].queue[index]
                    if case .queued = work.place, !actions.contains(work.task.action) {
                        offset += 1
                        continue
                    }
                    state.pools[pool].queue.remove(at: index)
                    if case .queued = work.place { picked.append(work) }
                }
            } else {
                while picked.count < max, let work = state.pools[pool].queue.popFirst() {
                    if case .queued = work.place { picked.append(work) }
                }
            }
            state.pools[pool].queued -= picked.count
            if picked.isEmpty {
                if waitMs == 0 || state.draining { return ([], [], nil) }
                if state.pools[pool].waiters.count >= Self.maxWaitingClaims {
                    var headers = HTTPHeaders()
                    headers.add(name: "retry-after", value: "1")
                    throw HTTPProblem(
                        .tooManyRequests,
                        code: "executor.tooManyClaims",
                        detail:
                            "\(Self.maxWaitingClaims) claims already wait on executor \(name); retry later or claim more tasks per request",
                        headers: headers
                    )
                }
                state.nextWaiterID += 1
                let id = state.nextWaiterID
                state.pools[pool].waiters.append(Waiter(id: id, workerId: workerId, actions: actions, promise: promise))
                state.pools[pool].waitTimers[id] = .some(nil)
                return ([], [], id)
            }
            var taken: [Claimed] = []
            var stored: [StoredLease] = []
            for work in picked {
                if let timer = work.scheduleTimer { TimerQueue.shared.cancel(timer) }
                let (claimed, record) = self.lease(work, workerId: workerId, in: &state)
                taken.append(claimed)
                if let record { stored.append(record) }
            }
            return (taken, stored, nil)
        }
        if let waiterID {
            let timer = TimerQueue.shared.schedule(after: .milliseconds(waitMs)) { [weak self] in
                self?.expireWaiter(waiterID, pool: pool)
            }
            let answered = self.state.withLock { state -> Bool in
                guard state.pools[pool].waitTimers[waiterID] != nil else { return true }
                state.pools[pool].waitTimers[waiterID] = timer
                return false
            }
            if answered {
                TimerQueue.shared.cancel(timer)
            } else if withdrawal !== CancellationToken.none {
                // The client went away: its claim stops waiting, so no task is leased to nobody.
                let registration = withdrawal.register { [weak self] in self?.expireWaiter(waiterID, pool: pool) }
                promise.future.whenComplete { _ in registration.dispose() }
            }
            return promise.future
        }
        if taken.isEmpty { return Future(value: []) }
        self.deliver(taken, stored: stored, to: promise)
        return promise.future
    }

    private func expireWaiter(_ id: UInt64, pool: Int) {
        let found: (Waiter, TimerQueue.ID?)? = self.state.withLock { state in
            guard let timer = state.pools[pool].waitTimers.removeValue(forKey: id),
                let index = state.pools[pool].waiters.firstIndex(where: { $0.id == id })
            else { return nil }
            return (state.pools[pool].waiters.remove(at: index), timer)
        }
        guard let (waiter, timer) = found else { return }
        if let timer { TimerQueue.shared.cancel(timer) }
        waiter.promise.succeed([])
    }

    /// Answers every waiting claim with nothing, and every later claim at once (SIGTERM).
    public func drain() {
        let (waiters, timers): ([Waiter], [TimerQueue.ID]) = self.state.withLock { state in
            state.draining = true
            var all: [Waiter] = []
            var timers: [TimerQueue.ID] = []
            for pool in state.pools.indices {
                all += Array(state.pools[pool].waiters)
                timers += state.pools[pool].waitTimers.values.compactMap { $0 }
                state.pools[pool].waiters.removeAll()
                state.pools[pool].waitTimers.removeAll()
            }
            return (all, timers)
        }
        for timer in timers { TimerQueue.shared.cancel(timer) }
        for waiter in waiters { waiter.promise.succeed([]) }
    }

    // MARK: - Leases

    enum LeaseState: Equatable {
        case live
        case cancelled
        case gone
        case unknown
    }

    /// The key of lease `id` in `state.leases`/`state.ended` (an id or, after a restart, a hash).
    private func find(_ id: String, in state: State) -> (key: String, state: LeaseState) {
        if state.leases[id] != nil { return (id, .live) }
        if let cancelled = state.ended[id] { return (id, cancelled ? .cancelled : .gone) }
        return (id, .unknown)
    }

    private func locate(_ id: String) -> (key: String, state: LeaseState) {
        let found = self.state.withLock { state -> (key: String, state: LeaseState)? in
            let found = self.find(id, in: state)
            return found.state == .unknown && state.hasRestoredLeases ? nil : found
        }
        if let found { return found }
        // Maybe a lease from before a restart, known by its hash only.
        let key = "#" + LeaseID.hash(id)
        return self.state.withLock { state in
            let found = self.find(key, in: state)
            return found.state == .unknown ? (id, .unknown) : found
        }
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
        switch found {
        case .unknown: return .notFound
        case .gone: return .gone
        case .cancelled: return .ok(cancelRequested: true)
        case .live: break
        }
        let task: WorkerTask? = self.state.withLock { state in
            guard var lease = state.leases[key] else { return nil }
            lease.deadline = monotonicNanoseconds() &+ lease.heartbeat
            state.leases[key] = lease
            self.noteWorker(lease.workerId, pool: lease.work.pool, leases: 0, in: &state)
            return lease.work.task
        }
        guard let task else { return self.heartbeat(id, progress: progress) }  // it ended meanwhile
        if let progress { task.setProgress(progress) }
        return .ok(cancelRequested: task.isCancelled)
    }

    enum CompleteResult {
        /// Completed; `pool` and `workerId` say where a `claimNext` claims.
        case done(WorkerTask, pool: String, workerId: String)
        case gone(pool: String?, workerId: String?)
        case notFound
    }

    /// Ends lease `id`'s attempt with the worker's outcome (first outcome wins).
    func complete(_ id: String, with outcome: Outcome<JSONValue>, retryable: Bool) -> CompleteResult {
        guard LeaseID.isPlausible(id) else { return .notFound }
        let (key, found) = self.locate(id)
        guard case .live = found else { return found == .unknown ? .notFound : .gone(pool: nil, workerId: nil) }
        let ended: (Lease, String?)? = self.state.withLock { state in self.endLease(key, cancelled: false, in: &state) }
        guard let (lease, storedHash) = ended else { return .gone(pool: nil, workerId: nil) }
        let pool = self.names[lease.work.pool]
        // The outcome first, then the lease row: the journal writes in order, so a crash between
        // the two leaves the outcome, never a lease-less running task that silently runs again.
        let finished = lease.work.task.finish(outcome, retryable: retryable)
        if let storedHash { self.journal?.removeLeases([storedHash]) }
        guard finished else { return .gone(pool: pool, workerId: lease.workerId) }
        return .done(lease.work.task, pool: pool, workerId: lease.workerId)
    }

    /// Removes live lease `key` (under the lock): remembered as ended, timers cancelled, counts
    /// updated. Returns the lease and the hash to delete from the store.
    private func endLease(_ key: String, cancelled: Bool, in state: inout State) -> (Lease, String?)? {
        guard let lease = state.leases.removeValue(forKey: key) else { return nil }
        lease.work.place = .ended
        if let timer = lease.expiryTimer { TimerQueue.shared.cancel(timer) }
        if let timer = lease.attemptTimer { TimerQueue.shared.cancel(timer) }
        state.pools[lease.work.pool].leased -= 1
        self.noteWorker(lease.workerId, pool: lease.work.pool, leases: -1, in: &state)
        state.ended[key] = cancelled
        state.endedOrder.append(key)
        if state.endedOrder.count > Self.maxRememberedLeases, let oldest = state.endedOrder.popFirst() {
            state.ended[oldest] = nil
        }
        return (lease, lease.storedHash)
    }

    /// The heartbeat timer of lease `key` fired: it expires unless a heartbeat moved its deadline.
    private func checkExpiry(_ key: String) {
        let expired: (Lease, String?)? = self.state.withLock { state in
            guard var lease = state.leases[key] else { return nil }
            let now = monotonicNanoseconds()
            if lease.deadline > now {
                let remaining = Duration.nanoseconds(Int64(lease.deadline - now))
                lease.expiryTimer = TimerQueue.shared.schedule(after: remaining) { [weak self] in
                    self?.checkExpiry(key)
                }
                state.leases[key] = lease
                return nil
            }
            state.pools[lease.work.pool].expired += 1
            return self.endLease(key, cancelled: false, in: &state)
        }
        guard let (lease, storedHash) = expired else { return }
        defer { if let storedHash { self.journal?.removeLeases([storedHash]) } }
        let milliseconds = lease.heartbeat / 1_000_000
        lease.work.task.finish(
            .failure(
                TaskError(
                    code: "task.heartbeatTimeout",
                    message: "worker \(lease.workerId) sent no heartbeat within \(milliseconds) ms",
                    details: ["workerId": .string(lease.workerId), "heartbeatTimeoutMs": .int(Int(milliseconds))]
                )
            )
        )
    }

    /// Ends lease `key`'s attempt with `error` (its `timeoutMs` passed).
    private func end(_ key: String, with error: TaskError) {
        let ended = self.state.withLock { state in self.endLease(key, cancelled: false, in: &state) }
        guard let (lease, storedHash) = ended else { return }
        lease.work.task.finish(.failure(error))
        if let storedHash { self.journal?.removeLeases([storedHash]) }
    }

    private func scheduleTimedOut(_ work: Work, after milliseconds: Int) {
        let timedOut = self.state.withLock { state -> Bool in
            guard case .queued = work.place else { return false }
            work.place = .ended
            state.pools[work.pool].queued -= 1
            return true
        }
        if timedOut {
            work.task.finish(
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
    private func attemptEnded(_ work: Work) {
        let storedHash: String? = self.state.withLock { state in
            switch work.place {
            case .queued:
                work.place = .ended
                state.pools[work.pool].queued -= 1
                if let timer = work.scheduleTimer { TimerQueue.shared.cancel(timer) }
                self.compactQueue(work.pool, in: &state)
                return nil
            case .leased(let key):
                return self.endLease(key, cancelled: work.task.isCancelled, in: &state)?.1
            case .ended:
                return nil
            }
        }
        if let storedHash { self.journal?.removeLeases([storedHash]) }
    }

    /// Drops ended attempts from a queue where they outnumber the live ones.
    private func compactQueue(_ pool: Int, in state: inout State) {
        let queue = state.pools[pool].queue
        guard queue.count > 1024, queue.count > 2 * state.pools[pool].queued else { return }
        state.pools[pool].queue = CircularBuffer(
            queue.filter {
                if case .queued = $0.place { return true }
                return false
            }
        )
    }

    private func noteWorker(_ workerId: String, pool: Int, leases delta: Int, in state: inout State) {
        let now = Timestamp.now()
        if state.pools[pool].workers[workerId] == nil, state.pools[pool].workers.count >= Self.maxWorkersPerPool {
            let cutoff = now.milliseconds - 600_000
            state.pools[pool].workers = state.pools[pool].workers.filter {
                $0.value.leases > 0 || $0.value.lastSeen.milliseconds >= cutoff
            }
            // Still full of live workers: this one goes untracked (its leases still work).
            if state.pools[pool].workers.count >= Self.maxWorkersPerPool { return }
        }
        state.pools[pool].workers[workerId, default: WorkerSeen(lastSeen: now, leases: 0)].lastSeen = now
        state.pools[pool].workers[workerId]!.leases = max(0, state.pools[pool].workers[workerId]!.leases + delta)
    }

    // MARK: - Restart

    /// Leases stored before a restart: each carries on when its attempt is queued again by the
    /// resumed job (call before the jobs are resumed).
    public func restore(_ leases: [StoredLease]) {
        self.state.withLock { state in
            for lease in leases where self.poolIndex[lease.executor] != nil {
                state.restored[Self.restoreKey(lease.jobID, lease.taskID)] = lease
                state.hasRestoredLeases = true
            }
        }
    }

    /// Forgets stored leases whose attempts did not come back (their jobs ended or were deleted).
    public func finishRestoring() {
        let stale: [String] = self.state.withLock { state in
            defer { state.restored = [:] }
            return state.restored.values.map(\.hash)
        }
        if !stale.isEmpty { self.journal?.removeLeases(stale) }
    }

    private static func restoreKey(_ jobID: String, _ taskID: String) -> String { jobID + "\u{0}" + taskID }

    /// Whether a lease stored before the restart waits for this task's attempt to come back.
    func holdsRestoredLease(jobID: String, taskID: String) -> Bool {
        self.state.withLock { state in
            !state.restored.isEmpty && state.restored[Self.restoreKey(jobID, taskID)] != nil
        }
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
    }

    public func statistics(_ name: String) -> PoolStatistics? {
        let cutoff = Timestamp.now().milliseconds - 60_000
        guard let index = self.poolIndex[name] else { return nil }
        return self.state.withLock { state in
            let pool = state.pools[index]
            return PoolStatistics(
                queued: pool.queued,
                leased: pool.leased,
                waitingClaims: pool.waiters.count,
                workers: pool.workers.values.count { $0.lastSeen.milliseconds >= cutoff },
                claimed: pool.claimed,
                expired: pool.expired
            )
        }
    }

    /// Workers of pool `name` seen in the last 10 minutes, most recent first.
    public func workers(_ name: String) -> [(workerId: String, lastSeen: Timestamp, leases: Int)]? {
        let cutoff = Timestamp.now().milliseconds - 600_000
        guard let index = self.poolIndex[name] else { return nil }
        return self.state.withLock { state in
            state.pools[index].workers.filter { $0.value.lastSeen.milliseconds >= cutoff || $0.value.leases > 0 }
                .map { (workerId: $0.key, lastSeen: $0.value.lastSeen, leases: $0.value.leases) }
                .sorted { ($0.lastSeen.milliseconds, $1.workerId) > ($1.lastSeen.milliseconds, $0.workerId) }
        }
    }
}

/// One external pool as the engine sees it.
struct ExternalPool: ExternalExecutor {
    let name: String
    let hub: WorkerHub

    func enqueue(_ task: WorkerTask) { self.hub.enqueue(task, pool: self.name) }

    func continuesLease(jobID: String, taskID: String) -> Bool {
        self.hub.holdsRestoredLease(jobID: jobID, taskID: taskID)
    }
}
