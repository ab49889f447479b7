import NIOCore
import TaskCore
import TaskGraph

/// Every live lease of a server's external pools, as a state machine: each call changes the table
/// and returns what must happen because of it (`Actions`: arm a timer, end an attempt, forget a
/// stored lease), which the external pools carries out after releasing its lock. So no timer is armed,
/// no job is told, and no store is written while the lock is held (the shape of async-http-client's
/// connection pool).
///
/// A lease is one claimed attempt with a heartbeat deadline. It ends exactly once: completed by
/// its worker, expired (`task.heartbeatTimeout`, then the task's `retry` decides), timed out
/// (`timeoutMs` from the claim), or cancelled with its job or node. Ended leases are remembered
/// (the last `maxRemembered`) so that a late call is told `409 lease.gone`, not `404`.
///
/// Keys are lease ids, or — for a lease restored after a restart, or leased for a claim another
/// server relayed (SPEC §9), whose id only its worker (and that server) knows — `#` and the id's hash.
struct LeaseTable: Sendable {
    struct Lease: Sendable {
        let attempt: ReadyAttempt
        var workerId: String
        /// When the lease expires unless heartbeated (monotonic nanoseconds).
        var deadline: UInt64
        /// The heartbeat timeout, in nanoseconds.
        let heartbeat: UInt64
        /// The hash the store keeps; nil in memory-only servers.
        let storedHash: String?
        /// The timers armed for it.
        var expiryTimer: ClockTimer?
        var attemptTimer: ClockTimer?
    }

    /// What a change of the table asks of its owner — at most one of each, carried out in the
    /// order of the fields (a value: a lease's start or end allocates nothing for it).
    struct Actions {
        /// Cancel these timers.
        var cancel: (ClockTimer?, ClockTimer?) = (nil, nil)
        /// Arm a timer that calls `expiryDue(key, …)` after a delay.
        var checkExpiry: (key: String, after: Duration)?
        /// Arm the attempt's time limit: after the delay, end it with `task.timeout`.
        var limitAttempt: (key: String, after: Duration, timeoutMs: Int)?
        /// End the attempt with this outcome (its job decides what follows: a retry, or the end).
        var finish: (attempt: ReadyAttempt, outcome: Outcome<JSONValue>, retryable: Bool)?
        /// Delete the stored lease with this hash, unless the attempt's run was given up by then
        /// (its job's next run takes the lease up).
        var forget: (hash: String, task: WorkerTask)?
    }

    /// Which timer of a lease was armed.
    enum Timer {
        case expiry
        case attempt
    }

    enum Found: Equatable {
        case live
        /// Ended because its job or node was cancelled.
        case cancelled
        /// Ended otherwise.
        case gone
        case unknown
    }

    let maxRemembered: Int
    private(set) var live: [String: Lease] = [:]
    /// Ended leases: `true` when the attempt was cancelled.
    private var ended: [String: Bool] = [:]
    private var endedOrder = CircularBuffer<String>()
    /// Leases stored before a restart, by job and task, until their attempts come back.
    private(set) var restored: [String: StoredLease] = [:]
    /// The keys of stored leases made under their ids, by hash (and back), while live or
    /// remembered as ended: another server relays a worker's call for one by its hash (SPEC §9).
    private var keyByHash: [String: String] = [:]
    private var hashByKey: [String: String] = [:]
    /// Whether any key was ever `#` and a hash (restored, or leased for another server's claim):
    /// only then may an unknown lease id be one of them.
    private(set) var hasHashKeys = false

    init(maxRemembered: Int) {
        self.maxRemembered = maxRemembered
    }

    /// The key of the lease whose id hashes to `hash`: its id, when it was made here under it;
    /// otherwise `#` and the hash.
    func key(forHash hash: String) -> String { self.keyByHash[hash] ?? "#" + hash }

    func find(_ key: String) -> Found {
        if self.live[key] != nil { return .live }
        if let cancelled = self.ended[key] { return cancelled ? .cancelled : .gone }
        return .unknown
    }

    // MARK: - Starting and keeping

    /// Leases `attempt` to `workerId` under `key`.
    mutating func start(
        _ attempt: ReadyAttempt,
        key: String,
        workerId: String,
        storedHash: String?,
        now: UInt64
    ) -> Actions {
        let task = attempt.task
        let heartbeat = UInt64(task.heartbeatTimeoutMs) * 1_000_000
        if key.hasPrefix("#") {
            self.hasHashKeys = true
        } else if let storedHash {
            self.keyByHash[storedHash] = key
            self.hashByKey[key] = storedHash
        }
        self.live[key] = Lease(
            attempt: attempt,
            workerId: workerId,
            deadline: now &+ heartbeat,
            heartbeat: heartbeat,
            storedHash: storedHash
        )
        attempt.place = .leased(key)
        var actions = Actions()
        actions.checkExpiry = (key, .milliseconds(task.heartbeatTimeoutMs))
        if let timeoutMs = task.timeoutMs { actions.limitAttempt = (key, .milliseconds(timeoutMs), timeoutMs) }
        return actions
    }

    /// Records a timer armed for lease `key`; `false` when the lease ended meanwhile (the owner
    /// then cancels the timer).
    mutating func armed(_ timer: ClockTimer, _ kind: Timer, for key: String) -> Bool {
        guard self.live[key] != nil else { return false }
        switch kind {
        case .expiry: self.live[key]!.expiryTimer = timer
        case .attempt: self.live[key]!.attemptTimer = timer
        }
        return true
    }

    /// Pushes lease `key`'s deadline back by its heartbeat timeout; returns the lease (nil: not live).
    mutating func heartbeat(_ key: String, now: UInt64) -> Lease? {
        guard self.live[key] != nil else { return nil }
        self.live[key]!.deadline = now &+ self.live[key]!.heartbeat
        return self.live[key]
    }

    /// The heartbeat check of lease `key` fired: re-armed for the rest of a moved deadline, or the
    /// lease ends and its attempt fails with `task.heartbeatTimeout`.
    mutating func expiryDue(_ key: String, now: UInt64) -> (expired: Lease?, actions: Actions) {
        guard let lease = self.live[key] else { return (nil, Actions()) }
        if lease.deadline > now {
            var actions = Actions()
            actions.checkExpiry = (key, .nanoseconds(Int64(lease.deadline - now)))
            return (nil, actions)
        }
        let milliseconds = lease.heartbeat / 1_000_000
        let error = TaskError(
            code: "task.heartbeatTimeout",
            message: "worker \(lease.workerId) sent no heartbeat within \(milliseconds) ms",
            details: ["workerId": .string(lease.workerId), "heartbeatTimeoutMs": .int(Int(milliseconds))]
        )
        let (ended, actions) = self.end(key, cancelled: false, finishing: (.failure(error), true))!
        return (ended, actions)
    }

    // MARK: - Ending

    /// Ends live lease `key`: remembered as ended, its timers cancelled, then — with `finishing` —
    /// its attempt ended with that outcome, then its stored row forgotten (in that order: a crash
    /// between the two leaves the outcome, never a lease-less running task that silently runs
    /// again). Returns the lease, or nil when it is not live.
    mutating func end(
        _ key: String,
        cancelled: Bool,
        finishing: (outcome: Outcome<JSONValue>, retryable: Bool)? = nil
    ) -> (Lease, Actions)? {
        guard let lease = self.live.removeValue(forKey: key) else { return nil }
        lease.attempt.place = .ended
        self.ended[key] = cancelled
        self.endedOrder.append(key)
        if self.endedOrder.count > self.maxRemembered, let oldest = self.endedOrder.popFirst() {
            self.ended[oldest] = nil
            if let hash = self.hashByKey.removeValue(forKey: oldest) { self.keyByHash[hash] = nil }
        }
        var actions = Actions()
        actions.cancel = (lease.expiryTimer, lease.attemptTimer)
        if let finishing { actions.finish = (lease.attempt, finishing.outcome, finishing.retryable) }
        actions.forget = lease.storedHash.map { ($0, lease.attempt.task) }
        return (lease, actions)
    }

    /// Forgets that lease `key` ended: the outcome that ended it was lost with its run, given up
    /// to another server; a late call must reach the lease where the job runs next, not `gone`.
    mutating func forgetEnded(_ key: String) {
        guard self.ended.removeValue(forKey: key) != nil else { return }
        if let hash = self.hashByKey.removeValue(forKey: key) { self.keyByHash[hash] = nil }
    }

    /// Drops live lease `key` whose attempt's run was given up to another server (SPEC §9): not
    /// remembered as ended, and its stored row kept — the job's next run, here or elsewhere, takes
    /// the lease up, and the worker's calls reach it there. Returns the timers to cancel.
    mutating func drop(_ key: String) -> (workerId: String, Actions)? {
        guard let lease = self.live.removeValue(forKey: key) else { return nil }
        lease.attempt.place = .ended
        if let hash = self.hashByKey.removeValue(forKey: key) { self.keyByHash[hash] = nil }
        var actions = Actions()
        actions.cancel = (lease.expiryTimer, lease.attemptTimer)
        return (lease.workerId, actions)
    }

    // MARK: - Restart

    static func restoreKey(_ jobID: String, _ taskID: String) -> String { jobID + "\u{0}" + taskID }

    /// Leases stored before a restart (of pools that still exist).
    mutating func restore(_ leases: some Sequence<StoredLease>) {
        for lease in leases {
            self.restored[Self.restoreKey(lease.jobID, lease.taskID)] = lease
            self.hasHashKeys = true
        }
    }

    /// Whether a stored lease waits for this task's attempt.
    func holdsRestoredLease(jobID: String, taskID: String) -> Bool {
        !self.restored.isEmpty && self.restored[Self.restoreKey(jobID, taskID)] != nil
    }

    /// The stored lease of this task's attempt, taken (the attempt came back).
    mutating func takeRestored(jobID: String, taskID: String) -> StoredLease? {
        if self.restored.isEmpty { return nil }
        return self.restored.removeValue(forKey: Self.restoreKey(jobID, taskID))
    }

    /// The stored leases whose attempts did not come back, forgotten: their hashes, to delete.
    mutating func finishRestoring() -> [String] {
        defer { self.restored = [:] }
        return self.restored.values.map(\.hash)
    }
}
