import Logging
import Synchronization
import TaskCore
import TaskGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A server's part in the cluster of servers sharing one PostgreSQL database (SPEC §9), on one
/// connection and one thread of its own.
///
/// - **The lease** is `NodeLease`'s: this class feeds it what happens (time, each renewal's
///   outcome, a refused commit, the connection) and carries out what it answers — stop acting on
///   the jobs, flush then register again, claim the ownerless jobs. The statements are
///   `PostgresMembership`'s; every duration is `ClusterTiming`'s.
/// - **Fencing.** Every write transaction of the server opens with `taskserver_fence`, which fails
///   once the row is gone or names another token (`token`): a server whose jobs were taken over
///   can write nothing more.
/// - **Takeover.** Each heartbeat deletes the rows whose lease ended (one server deletes each),
///   releases the webhook deliveries they held, and has the service claim the jobs left without a
///   live owner (`SKIP LOCKED`, so survivors share them).
/// - **Wake-ups.** The connection `LISTEN`s on `taskserver_channel()` (`taskserver`; in another
///   schema than `public`, `taskserver_<schema>`: clusters in one database's schemas do not hear
///   each other); each payload is parsed once into a
///   `ClusterNotice`. Each heartbeat also looks for commands and answers a lost notification left
///   behind (a reconnection misses what was sent meanwhile), so a wake-up is never lost, only late.
/// - **The leader** (the oldest live registration) does the chores that need one server:
///   `leaderChores`, and firing the schedules (`ClusterScheduleObserver`).
///
/// With the standard timing a dead server's jobs go on elsewhere 5–6 s after its last renewal
/// (SPEC §9 asks for 10 s), and a server must miss three heartbeats in a row before it stops — a
/// database restart of a few seconds does not cost a takeover.
final class PostgresCluster: Cluster {
    let nodeName: String
    let settings: PostgresSettings
    let timing: ClusterTiming
    let statements: PostgresMembership
    let logger: Logger
    /// Monotonic time for the lease and the watchdog's timer (the lease itself is on the
    /// database's clock: `taskserver_now_ms()`).
    let clock: any ServerClock
    /// The fencing token of this server's row (what every write transaction checks).
    let token = Atomic<Int64>(0)
    /// Set while this server registers again (`token` is about to change).
    let registering = Atomic(false)
    /// Other servers whose lease has not ended, as of the last heartbeat.
    let peers = Atomic<Int>(0)
    /// Whether this server holds the oldest live registration: it alone does the leader's chores
    /// (retention among them) and fires the schedules, as of the last heartbeat.
    let isLeader = Atomic<Bool>(true)
    /// The lease's state machine; its actions are carried out after the lock.
    private let lease: Mutex<NodeLease>
    private let delegate = Mutex<(any ClusterDelegate)?>(nil)
    private let scheduleObserver = Mutex<(any ClusterScheduleObserver)?>(nil)
    private let poolsObserver = Mutex<(any ClusterPoolsObserver)?>(nil)
    private let serverCountObserver = Mutex<(@Sendable (Int) -> Void)?>(nil)
    private let executorsPublisher = Mutex<(@Sendable () -> String?)?>(nil)
    /// The other live servers' executors, as their rows published them at the last heartbeat.
    private let peerExecutorItems = Mutex<[String: [JSONObject]]>([:])
    /// Told of a concurrency key's slot given back while a server waited for one.
    let keyFreed = Mutex<(@Sendable (String) -> Void)?>(nil)
    /// Reads the server-wide feed's new rows (another server's jobs ended: it committed some).
    let feedWake = Mutex<(@Sendable () -> Void)?>(nil)
    /// Told of finished jobs redriven or deleted through any server (nil: any may have been — the
    /// connection was lost, and notifications with it): a kept copy of their record is stale.
    let jobsChanged = Mutex<(@Sendable ([String]?) -> Void)?>(nil)
    /// Waits until the writes queued so far are committed (or refused); false when the store
    /// cannot write now (its connection is away): set by the repository.
    let flushWrites = Mutex<(@Sendable () -> Bool)?>(nil)
    /// Pools whose `announceQueued` waits for the thread.
    private let announcing = Mutex<Set<String>>([])
    /// Relayed commands waiting for their answers, by id.
    private let waiting = Mutex<[Int64: Promise<ClusterAnswer?>]>([:])
    /// Work for the cluster's connection (relays, answers), run by its thread.
    private let work = Mutex<[@Sendable (PostgresConnection) throws -> Void]>([])
    private let running = Atomic(true)
    private let started = Atomic(false)
    private let thread = WorkerPool(name: "pg-cluster", size: 1)
    private let stopped = Promise<Void>()
    /// A pipe whose read end the thread polls beside the connection: a write wakes it.
    private let wakeRead: Int32
    private let wakeWrite: Int32

    /// Registers this server with `connection` (the repository's first), so that its token is
    /// known before the first commit. At start, the webhook deliveries a predecessor under this
    /// name was sending are released (sent again: at least once).
    init(
        nodeName: String,
        settings: PostgresSettings,
        timing: ClusterTiming,
        clock: any ServerClock = SystemClock(),
        connection: PostgresConnection,
        logger: Logger
    ) throws {
        self.nodeName = nodeName
        self.settings = settings
        self.timing = try timing.validated()
        self.statements = PostgresMembership(nodeName: nodeName, timing: timing)
        self.clock = clock
        self.logger = logger
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            throw PostgresError(
                message: "cannot make a pipe: \(String(cString: strerror(errno)))",
                connectionLost: false
            )
        }
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        self.wakeRead = fds[0]
        self.wakeWrite = fds[1]
        if let holder = try self.statements.liveHolderHere(connection) {
            throw NodeNameInUse(name: nodeName, pid: holder.pid)
        }
        let registeredAt = clock.monotonicNanoseconds()
        self.token.store(try self.statements.register(connection), ordering: .sequentiallyConsistent)
        try self.statements.releaseDeliveries(of: [nodeName], connection)
        self.peers.store(try self.statements.alive(connection).peers, ordering: .relaxed)
        self.lease = Mutex(NodeLease(timing: self.timing, registeredAt: registeredAt))
    }

    /// libpq settings of the cluster's connection: TCP keep-alives and a send timeout, so that a
    /// database cut off by the network is noticed within seconds.
    static let connectionSettings = [
        ("keepalives", "1"), ("keepalives_idle", "2"), ("keepalives_interval", "1"), ("keepalives_count", "2"),
        ("tcp_user_timeout", "3000"),
    ]

    deinit {
        Glibc.close(self.wakeRead)
        Glibc.close(self.wakeWrite)
    }

    func start(_ delegate: any ClusterDelegate) {
        self.delegate.withLock { $0 = delegate }
        guard !self.started.exchange(true, ordering: .sequentiallyConsistent) else { return }
        self.thread.execute { self.run() }
    }

    func stop() {
        self.delegate.withLock { $0 = nil }
        self.scheduleObserver.withLock { $0 = nil }
        self.poolsObserver.withLock { $0 = nil }
        self.serverCountObserver.withLock { $0 = nil }
    }

    func observeSchedules(_ observer: any ClusterScheduleObserver) {
        self.scheduleObserver.withLock { $0 = observer }
    }

    func observePools(_ observer: any ClusterPoolsObserver) {
        self.poolsObserver.withLock { $0 = observer }
    }

    func publishExecutors(_ body: @escaping @Sendable () -> String?) {
        self.executorsPublisher.withLock { $0 = body }
    }

    func peerExecutors() -> [String: [JSONObject]] { self.peerExecutorItems.withLock { $0 } }

    func observeServerCount(_ body: @escaping @Sendable (Int) -> Void) {
        self.serverCountObserver.withLock { $0 = body }
        body(self.peers.load(ordering: .relaxed) + 1)
    }

    /// Ends the membership: the thread stops and the row is deleted, so that the other servers
    /// claim at once whatever this one leaves unfinished (nothing, after a graceful shutdown).
    func leave() -> Future<Void> {
        self.stop()
        self.running.store(false, ordering: .sequentiallyConsistent)
        // Never started (a repository without a job service: tests, tools): no thread to stop.
        if !self.started.exchange(true, ordering: .sequentiallyConsistent) {
            self.thread.shutdown()
            return Future(value: ())
        }
        self.wake()
        return self.stopped.future.map { self.thread.shutdown() }
    }

    /// A commit was refused by the fence: the server stops acting and registers again at once.
    func noteFenced() {
        let actions = self.lease.withLock { $0.commitFenced() }
        self.carryOut(actions, db: nil)
        self.wake()
    }

    /// Whether a refused commit waits for the next registration (tests).
    var isFenced: Bool { self.lease.withLock { $0.fenced } }

    /// Whether this server acts on its jobs now.
    var isActing: Bool { self.lease.withLock { $0.isActing } }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(self.wakeWrite, &byte, 1)
    }

    // MARK: - Commands

    func relay(_ command: ClusterCommand) -> Future<ClusterAnswer?> {
        let promise = Promise<ClusterAnswer?>()
        // A worker's call (a claim, a lease command) is answered soon and retried; a client's
        // command for a job waits past a takeover of its server.
        let timeout = command.isPoolCommand ? self.timing.poolCommandTimeout : self.timing.relayTimeout
        self.enqueue { db in
            let id: Int64
            switch try self.statements.insert(command, db) {
            case .sent(let sent): id = sent
            case .leaseEnded: return promise.succeed(.lease(.gone(pool: nil, workerId: nil)))
            case .leaseNotStored: return promise.succeed(.lease(.notFound))
            }
            self.waiting.withLock { $0[id] = promise }
            self.clock.schedule(after: timeout) {
                if let promise = self.waiting.withLock({ $0.removeValue(forKey: id) }) { promise.trySucceed(nil) }
            }
        } failed: { error in
            promise.fail(error)
        }
        return promise.future
    }

    func announceQueued(pool: String) {
        // One announcement of a pool at a time waits for the thread: a burst of attempts queued
        // meanwhile is one notification, with their count as it is sent.
        guard self.peers.load(ordering: .relaxed) > 0, self.announcing.withLock({ $0.insert(pool).inserted }) else {
            return
        }
        self.enqueue { db in
            self.announcing.withLock { _ = $0.remove(pool) }
            let count = self.poolsObserver.withLock { $0 }?.clusterQueuedCounts()[pool] ?? 0
            guard count > 0 else { return }
            try self.statements.notify(.queued(server: self.nodeName, count: count, pool: pool), db)
        } failed: { _ in
            self.announcing.withLock { _ = $0.remove(pool) }
        }
    }

    func answer(_ id: Int64, _ answer: ClusterAnswer) {
        self.enqueue { db in
            try self.statements.answer(id, answer, db)
        } failed: { error in
            self.logger.warning("cannot record the answer to a relayed command", metadata: ["error": "\(error)"])
        }
    }

    /// Runs `body` on the cluster's connection (`failed` when it throws or there is none).
    private func enqueue(
        _ body: @escaping @Sendable (PostgresConnection) throws -> Void,
        failed: @escaping @Sendable (any Error) -> Void
    ) {
        self.work.withLock {
            $0.append { db in
                do { try body(db) } catch {
                    failed(error)
                    if let error = error as? PostgresError, error.connectionLost { throw error }
                }
            }
        }
        self.wake()
    }

    // MARK: - The lease

    /// Every `watchInterval`, off the cluster's thread (which may hang in a statement to a
    /// database cut off by the network): a lease not renewed for `staleStop` stops the server
    /// acting on its jobs, before any other server may take them over.
    private func watch() {
        guard self.running.load(ordering: .relaxed) else { return }
        self.tick()
        self.clock.schedule(after: self.timing.watchInterval) { [weak self] in self?.watch() }
    }

    /// Tells the lease the time (the watchdog, and the thread before it acts on a notification:
    /// after a stall of the process, nothing is served from runs the lease gives up).
    private func tick() {
        let now = self.clock.monotonicNanoseconds()
        let actions = self.lease.withLock { $0.tick(now: now) }
        self.carryOut(actions, db: nil)
    }

    /// Carries out the lease's actions: `stopActing` and `claimOwnerless` anywhere; `flush` and
    /// `register` need the cluster's connection (`db`), so only the thread carries them out.
    private func carryOut(_ actions: [NodeLease.Action], db: PostgresConnection?) {
        var pending = actions[...]
        while let action = pending.popFirst() {
            switch action {
            case .stopActing(let reason):
                let message: Logger.Message =
                    switch reason {
                    case .stale: "cannot renew this server's lease; it stops acting on its jobs until it can"
                    case .takenOver: "another server took this server's jobs over; it stops acting on them"
                    case .fenced: "a commit was refused by the fence; this server stops acting on its jobs"
                    }
                self.logger.error(message, metadata: ["node": "\(self.nodeName)"])
                self.delegate.withLock { $0 }?.clusterLostJobs()
            case .flush:
                guard db != nil else { continue }
                // What the given-up runs queued before they were given up is sent under the old
                // token (and refused, if the row is gone) before the new token exists. The writer
                // away (the database restarting): not before it is back and has sent them.
                let done = self.flushWrites.withLock({ $0 })?() ?? true
                pending += self.lease.withLock { $0.flushFinished(done: done) }
            case .register:
                guard let db else { continue }
                let sentAt = self.clock.monotonicNanoseconds()
                // From before the new token is in the database until it is known here, a commit
                // refused under the old one is this registration's doing, not a takeover's.
                self.registering.store(true, ordering: .sequentiallyConsistent)
                defer { self.registering.store(false, ordering: .sequentiallyConsistent) }
                do {
                    self.token.store(try self.statements.register(db), ordering: .sequentiallyConsistent)
                } catch {
                    self.logger.warning("cannot register again yet", metadata: ["error": "\(error)"])
                    continue
                }
                self.logger.notice("registered again", metadata: ["node": "\(self.nodeName)"])
                pending += self.lease.withLock { $0.registered(sentAt: sentAt) }
            case .claimOwnerless:
                self.delegate.withLock { $0 }?.clusterClaimJobs()
            }
        }
    }

    // MARK: - The thread

    private func run() {
        self.watch()
        var connection: PostgresConnection?
        var nextBeat: UInt64 = 0
        var reconnectDelay: Int32 = 100
        let heartbeat = self.timing.heartbeat.clampedNanoseconds
        while self.running.load(ordering: .sequentiallyConsistent) {
            do {
                if connection == nil {
                    // A statement that hangs (a lock, a network cut without a reset) fails in
                    // seconds, not at TCP's timeout, and the thread goes on.
                    let db = try PostgresConnection(self.settings, extra: Self.connectionSettings)
                    let channel = try db.query("SELECT taskserver_channel()").text(0, 0)
                        .split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"")
                    try db.execute("SET statement_timeout = 3000; LISTEN \"\(channel)\"")
                    connection = db
                    let now = self.clock.monotonicNanoseconds()
                    self.lease.withLock { $0.connected(now: now) }
                    // What changed while no notification could arrive (also at the start).
                    self.scheduleObserver.withLock { $0 }?.clusterSchedulesChanged(nil)
                    self.jobsChanged.withLock { $0 }?(nil)
                    reconnectDelay = 100
                    nextBeat = 0
                }
                let db = connection!
                let pending = self.work.withLock { work in
                    defer { work = [] }
                    return work
                }
                for item in pending { try item(db) }
                let now = self.clock.monotonicNanoseconds()
                if now >= nextBeat || self.isFenced {
                    try self.beat(db, sentAt: now)
                    nextBeat = now + heartbeat
                }
                try self.dispatch(try db.notifications(read: false), db)
                let left = nextBeat &- min(nextBeat, self.clock.monotonicNanoseconds())
                let timeout = Int32(min(heartbeat, left) / 1_000_000)
                if self.wait(socket: db.socket, timeoutMilliseconds: max(1, timeout)) {
                    try self.dispatch(try db.notifications(read: true), db)
                }
            } catch {
                if let error = error as? PostgresError, !error.connectionLost, connection?.isUsable == true {
                    self.logger.warning("cluster heartbeat failed", metadata: ["error": "\(error)"])
                } else {
                    if connection != nil {
                        self.logger.warning("lost the cluster connection", metadata: ["error": "\(error)"])
                        self.lease.withLock { $0.disconnected() }
                    }
                    connection = nil
                }
                _ = self.wait(socket: -1, timeoutMilliseconds: reconnectDelay)
                reconnectDelay = min(1000, reconnectDelay * 2)
            }
        }
        if let connection, connection.isUsable {
            _ = try? self.statements.leave(token: self.token.load(ordering: .sequentiallyConsistent), connection)
        }
        self.stopped.succeed(())
    }

    /// Waits until the socket is readable (true), the pipe is written to, or the time is up.
    private func wait(socket: Int32, timeoutMilliseconds: Int32) -> Bool {
        var descriptors = [
            pollfd(fd: self.wakeRead, events: Int16(POLLIN), revents: 0),
            pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
        ]
        let ready = poll(&descriptors, socket >= 0 ? 2 : 1, timeoutMilliseconds)
        if ready > 0, descriptors[0].revents != 0 {
            var buffer = [UInt8](repeating: 0, count: 64)
            while read(self.wakeRead, &buffer, buffer.count) > 0 {}
        }
        return ready > 0 && socket >= 0 && descriptors[1].revents != 0
    }

    /// One heartbeat: renew (or flush and register again, as the lease says), take over the
    /// servers whose lease ended, learn who leads, do the leader's chores, and look for commands
    /// and answers a lost notification left behind. `sentAt` is when the renewal was sent: the
    /// lease counts from then, never from its answer.
    private func beat(_ db: PostgresConnection, sentAt: UInt64) throws {
        let pools = self.poolsObserver.withLock { $0 }
        let queued = pools?.clusterQueuedCounts() ?? [:]
        let renewed = try self.statements.renew(
            token: self.token.load(ordering: .sequentiallyConsistent),
            queued: queued.isEmpty ? nil : Self.queuedJSON(queued),
            executors: self.executorsPublisher.withLock { $0 }?(),
            db
        )
        self.carryOut(self.lease.withLock { $0.renewal(renewed: renewed, sentAt: sentAt) }, db: db)
        guard self.isActing else { return }
        if self.lease.withLock({ $0.mayReap(at: sentAt) }) {
            let dead = try self.statements.reapExpired(db)
            if !dead.isEmpty {
                self.logger.notice("taking over from servers whose lease ended", metadata: ["nodes": "\(dead)"])
                try self.statements.releaseDeliveries(of: dead, db)
                self.carryOut(self.lease.withLock { $0.reaped(dead.count) }, db: db)
            }
        }
        let alive = try self.statements.alive(db)
        pools?.clusterPeersQueued(try Self.queuedByPool(alive.queued))
        self.peerExecutorItems.withLock { $0 = Self.executorsByServer(alive.executors) }
        self.peers.store(alive.peers, ordering: .relaxed)
        self.serverCountObserver.withLock { $0 }?(alive.peers + 1)
        let leading = alive.leaderToken == self.token.load(ordering: .relaxed)
        self.isLeader.store(leading, ordering: .relaxed)
        if leading {
            for chore in self.leaderChores { try chore(db) }
        }
        self.scheduleObserver.withLock { $0 }?.clusterLeadership(leading)
        if let delegate = self.delegate.withLock({ $0 }) {
            for (id, job, command) in try self.statements.lostCommands(db) where delegate.clusterRuns(job) {
                self.apply(id, command)
            }
        }
        let waitingIDs = self.waiting.withLock { Array($0.keys) }
        if !waitingIDs.isEmpty { try self.collectAnswers(waitingIDs, db) }
    }

    /// What the leader does at each heartbeat, for the whole cluster (retention of finished jobs
    /// is the writer's, which asks `isLeader`; firing the schedules is the scheduler's).
    private var leaderChores: [(PostgresConnection) throws -> Void] {
        [
            // The server-wide feed keeps ten times what a server holds (`FeedWindow.capacity`).
            { db in try self.statements.trimFeed(keeping: FeedWindow.capacity * 10, db) },
            { db in try self.statements.deleteOldCommands(db) },
            { db in try self.statements.sweepKeySlots(db) },
        ]
    }

    private func dispatch(_ notifications: [(channel: String, payload: String)], _ db: PostgresConnection) throws {
        guard !notifications.isEmpty else { return }
        // After a stall of this process, the lease may be stale: it stops acting before anything
        // is served from runs it gives up (a relayed claim among these notifications).
        self.tick()
        let delegate = self.delegate.withLock { $0 }
        var answered: [Int64] = []
        for notification in notifications {
            guard let notice = ClusterNotice(payload: notification.payload) else { continue }
            switch notice {
            case .cancel(let id):
                if delegate?.clusterRuns(id) == true { delegate?.clusterCancel(id) }
            case .command(let id, let target):
                let mine =
                    switch target {
                    case .server(let name): name == self.nodeName
                    case .job(let job): delegate?.clusterRuns(job) == true
                    }
                // A claim is worth applying only while its server still waits for the answer (the
                // attempts it leased would otherwise wait for a heartbeat timeout).
                if mine, let command = try self.statements.command(id, db) { self.apply(id, command) }
            case .answered(let id):
                answered.append(id)
            case .ended(let jobs):
                delegate?.clusterJobsEnded(jobs)
                self.feedWake.withLock { $0 }?()
            case .changed(let jobs):
                self.jobsChanged.withLock { $0 }?(jobs)
                delegate?.clusterJobsEnded(jobs)
            case .schedule(let id):
                self.scheduleObserver.withLock { $0 }?.clusterSchedulesChanged(id)
            case .freed(let key):
                self.keyFreed.withLock { $0 }?(key)
            case .left(let server):
                // Its unfinished jobs (left waiting for a worker, an approval, a key) go on here or
                // on another survivor: claimed with `SKIP LOCKED`, so the survivors share them.
                if server != self.nodeName, self.isActing { self.carryOut([.claimOwnerless], db: db) }
            case .queued(let server, let count, let pool):
                // Its own announcements come back to this server too.
                if server != self.nodeName {
                    self.poolsObserver.withLock { $0 }?.clusterPeerQueued(server: server, pool: pool, count: count)
                }
            }
        }
        if !answered.isEmpty { try self.collectAnswers(answered, db) }
    }

    /// Completes the waits for these relayed commands that have an answer.
    private func collectAnswers(_ ids: [Int64], _ db: PostgresConnection) throws {
        for (id, answer) in try self.statements.answers(ids, db) {
            self.waiting.withLock { $0.removeValue(forKey: id) }?.succeed(answer)
        }
    }

    /// Hands `command` to whoever applies its kind (nothing while this server does not act).
    private func apply(_ id: Int64, _ command: ClusterCommand) {
        guard self.isActing else { return }
        if command.isPoolCommand {
            self.poolsObserver.withLock { $0 }?.clusterApplyPoolCommand(id, command)
        } else {
            self.delegate.withLock { $0 }?.clusterApply(id, command)
        }
    }

    /// Other servers' published executors (`{"server": [item, …]}`) by server; what does not
    /// parse is left out (a view, not a rule).
    static func executorsByServer(_ text: String?) -> [String: [JSONObject]] {
        guard let text, case .object(let servers)? = try? JSONParser.parse(text, limits: StoredRecords.limits) else {
            return [:]
        }
        var result: [String: [JSONObject]] = [:]
        for (server, items) in servers {
            guard case .array(let list) = items else { continue }
            result[server] = list.compactMap { item in
                if case .object(let object) = item { return object }
                return nil
            }
        }
        return result
    }

    /// This server's queued counts as its row publishes them: `{"pool": count, …}`.
    static func queuedJSON(_ queued: [String: Int]) -> String {
        JSONValue.object(JSONObject(queued.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })).jsonString
    }

    /// Other servers' published queued counts (`{"server": {"pool": count}}`) by pool and server.
    static func queuedByPool(_ text: String?) throws -> [String: [String: Int]] {
        guard let text, case .object(let servers) = try JSONParser.parse(text, limits: StoredRecords.limits) else {
            return [:]
        }
        var byPool: [String: [String: Int]] = [:]
        for (server, counts) in servers {
            guard case .object(let counts) = counts else { continue }
            for (pool, count) in counts {
                if let count = count.intValue, count > 0 { byPool[pool, default: [:]][server] = count }
            }
        }
        return byPool
    }
}

/// Another server process on this host runs under this server's name with a live lease.
struct NodeNameInUse: Error, CustomStringConvertible {
    let name: String
    let pid: Int32

    var description: String {
        "another server on this host (pid \(self.pid)) runs as node \"\(self.name)\" on this database; "
            + "give each server its own --node-name (the default is the host name)"
    }
}
