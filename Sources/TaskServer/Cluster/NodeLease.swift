import TaskCore

/// This server's lease among the servers sharing one database (SPEC §9), as a pure state machine:
/// it is told what happened — time passed, a renewal's outcome, a (re)connection, a refused
/// commit, a flush, a registration — and answers with what the server must do. It reads no clock
/// and runs no statement (`PostgresCluster` does both, on `ServerClock`'s monotonic time), so its
/// rules are tested by hand-moved time (`NodeLeaseTests`).
///
/// The rules:
/// - **Acting** while the lease is fresh. Not renewed for `staleStop` (the watchdog's `tick`) —
///   or a renewal that finds the row gone or under another token, or a commit refused by the
///   fence — it **stops acting** on its jobs at once, and only once: every run is given up,
///   before any other server may take them (`staleStop + watchInterval < lease`).
/// - **Stopped**, it registers again (a new token) only after **flushing** what the given-up runs
///   queued: those writes go out under the old token and are refused if the row is gone, never
///   under a token they were not made under. A flush that cannot finish (the database away)
///   leaves it stopped; the next beat tries again.
/// - **Registered** again, it acts and **claims the ownerless jobs** — its own given-up ones first
///   among them.
/// - **Reaping** (deleting the rows of servers whose lease ended) waits `reconnectGrace` after each
///   (re)connection: after an outage every server gets a lease's time to renew, so a database
///   restart is not a takeover of everyone by whoever came back first.
struct NodeLease: Sendable {
    enum Phase: Equatable, Sendable {
        case acting
        /// Runs given up; must flush, then register again.
        case stopped(StopReason)
    }

    enum StopReason: Equatable, Sendable {
        /// Not renewed for `staleStop`.
        case stale
        /// A renewal found the row gone or taken under another token: another server took over.
        case takenOver
        /// A commit was refused by the fence.
        case fenced
    }

    enum Action: Equatable, Sendable {
        /// Give up every run at once (another server may run them soon).
        case stopActing(StopReason)
        /// Send what is queued (the given-up runs' writes, under the old token), then report
        /// `flushed`.
        case flush
        /// Register again: a new token for this server's row; then report `registered`.
        case register
        /// Claim the unfinished jobs no live server owns.
        case claimOwnerless
    }

    let timing: ClusterTiming
    private(set) var phase: Phase = .acting
    /// When the last renewal that counts was sent (monotonic nanoseconds).
    private(set) var lastRenewal: UInt64
    /// When the connection was (re)made; nil while there is none.
    private(set) var connectedAt: UInt64?
    /// A commit was refused by the fence since the last registration.
    private(set) var fenced = false
    /// Whether a flush finished since the runs were given up (registration waits for it).
    private var flushed = false

    /// Registered at `now` (the first registration happens before the machine exists).
    init(timing: ClusterTiming, registeredAt now: UInt64) {
        self.timing = timing
        self.lastRenewal = now
    }

    var isActing: Bool { self.phase == .acting }

    /// Whether the lease has ended by `now` if nothing renews it: others may take the jobs over.
    func isExpired(at now: UInt64) -> Bool {
        now &- self.lastRenewal >= self.timing.lease.clampedNanoseconds
    }

    /// Time passed (the watchdog, every `watchInterval`, off the thread that renews).
    mutating func tick(now: UInt64) -> [Action] {
        guard self.isActing, now &- self.lastRenewal > self.timing.staleStop.clampedNanoseconds else { return [] }
        return self.stop(.stale)
    }

    /// The connection to the database was made (again) at `now`.
    mutating func connected(now: UInt64) { self.connectedAt = now }

    /// The connection was lost.
    mutating func disconnected() { self.connectedAt = nil }

    /// A commit was refused by the fence: the next beat registers again.
    mutating func commitFenced() -> [Action] {
        self.fenced = true
        return self.isActing ? self.stop(.fenced) : []
    }

    /// Whether a beat at `now` may reap other servers' rows.
    func mayReap(at now: UInt64) -> Bool {
        guard let connectedAt = self.connectedAt else { return false }
        return now &- connectedAt >= self.timing.reconnectGrace.clampedNanoseconds
    }

    /// A renewal sent at `sentAt` found this server's row under its token (`renewed`) or not.
    mutating func renewal(renewed: Bool, sentAt: UInt64) -> [Action] {
        if renewed, self.isActing, !self.fenced {
            self.lastRenewal = max(self.lastRenewal, sentAt)
            return []
        }
        var actions: [Action] = []
        if self.isActing { actions = self.stop(renewed ? .fenced : .takenOver) }
        actions.append(self.flushed ? .register : .flush)
        return actions
    }

    /// The flush asked for finished (`done`), or could not (the database away: stay stopped).
    mutating func flushFinished(done: Bool) -> [Action] {
        guard !self.isActing, done else { return [] }
        self.flushed = true
        return [.register]
    }

    /// Registered again with a renewal sent at `sentAt`: acting from now on.
    mutating func registered(sentAt: UInt64) -> [Action] {
        self.lastRenewal = max(self.lastRenewal, sentAt)
        self.fenced = false
        self.flushed = false
        guard !self.isActing else { return [] }
        self.phase = .acting
        return [.claimOwnerless]
    }

    /// Servers whose lease ended were reaped: their jobs wait for an owner.
    func reaped(_ count: Int) -> [Action] { count > 0 ? [.claimOwnerless] : [] }

    private mutating func stop(_ reason: StopReason) -> [Action] {
        self.phase = .stopped(reason)
        self.flushed = false
        return [.stopActing(reason)]
    }
}
