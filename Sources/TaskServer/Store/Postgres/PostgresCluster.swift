import Logging
import Synchronization
import TaskCore
import TaskGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Membership of the servers sharing one PostgreSQL database (SPEC §9), on one connection and one
/// thread of its own per server.
///
/// - **Registry and lease.** Each server has a row of `servers`, named by `--node-name` (the host
///   name by default: a container's), with a fencing token from a sequence. Every `heartbeat` the
///   server renews its lease (`lease_until`, on the database's clock); a server starting under a
///   name takes its predecessor's row over at once (a new token), so a restarted server resumes
///   its own jobs without waiting for a lease to end.
/// - **Fencing.** Every write transaction of the server opens with `taskserver_fence`, which fails
///   once the row is gone or names another token: a server whose jobs were taken over can write
///   nothing more. The server itself stops acting on its jobs (`clusterLostJobs`) when it learns
///   that, and when it has not renewed for `lease - margin` — before any other server may take
///   them — then registers again with a new token and claims what is left unowned.
/// - **Takeover.** Each heartbeat deletes the rows whose lease ended (`FOR UPDATE SKIP LOCKED`:
///   one server deletes each), releases the webhook deliveries they held, and has the service
///   claim the jobs left without a live owner (`claimUnfinished`, `SKIP LOCKED`, so survivors
///   share them).
/// - **Wake-ups.** The connection `LISTEN`s on `taskserver`: a cancellation (`cancel <job>`), a
///   relayed command (`command <id> <job>`), its answer (`answered <id>`), jobs that ended
///   (`ended <job> <job>…`, at most one commit's worth per 20 ms, sent only while other servers
///   are alive: `EndedNotices`),
///   a schedule changed or fired (`schedule <id>`).
///   Each heartbeat also looks for commands and answers a lost notification left behind (a
///   reconnection misses what was sent meanwhile), so a wake-up is never lost, only late.
///
/// Lease 5 s, heartbeat 1 s: a dead server's jobs go on elsewhere 5–6 s after its last renewal
/// (SPEC §9 asks for 10 s), and a server must miss four heartbeats in a row — a database restart
/// of a few seconds does not cost a takeover.
final class PostgresCluster: Cluster {
    struct Options: Sendable {
        var lease: Duration = .seconds(5)
        var heartbeat: Duration = .seconds(1)
        /// A server stops acting on its jobs when it has not renewed for `lease - margin`.
        var margin: Duration = .milliseconds(1500)
    }

    let nodeName: String
    let settings: PostgresSettings
    let options: Options
    let logger: Logger
    /// The fencing token of this server's row (what every write transaction checks).
    let token = Atomic<Int64>(0)
    /// Other servers whose lease has not ended, as of the last heartbeat.
    let peers = Atomic<Int>(0)
    /// Whether this server holds the oldest live registration: it alone runs maintenance
    /// (retention) and fires the schedules, as of the last heartbeat.
    let isLeader = Atomic<Bool>(true)
    /// Set by the writer when a commit was fenced: the next heartbeat registers again.
    let fenced = Atomic<Bool>(false)
    private let delegate = Mutex<(any ClusterDelegate)?>(nil)
    private let scheduleObserver = Mutex<(any ClusterScheduleObserver)?>(nil)
    private let poolsObserver = Mutex<(any ClusterPoolsObserver)?>(nil)
    /// Reads the server-wide feed's new rows (another server's jobs ended: it committed some).
    let feedWake = Mutex<(@Sendable () -> Void)?>(nil)
    /// Waits until the writes queued so far are committed (or refused); false when the store
    /// cannot write now (its connection is away): set by the repository.
    let flushWrites = Mutex<(@Sendable () -> Bool)?>(nil)
    /// Relayed commands waiting for their answers, by id.
    private let waiting = Mutex<[Int64: Promise<JSONValue?>]>([:])
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
    /// known before the first commit.
    init(
        nodeName: String,
        settings: PostgresSettings,
        options: Options,
        connection: PostgresConnection,
        logger: Logger
    ) throws {
        self.nodeName = nodeName
        self.settings = settings
        self.options = options
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
        try self.register(connection, releasingClaims: true)
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

    /// Takes this server's row (a new token); a predecessor under the same name is fenced by it.
    /// At start, the webhook deliveries a predecessor was sending are released (sent again); when
    /// this process registers again, its own dispatcher still sends and marks the ones it holds.
    private func register(_ db: PostgresConnection, releasingClaims: Bool) throws {
        let rows = try db.query(
            """
            INSERT INTO servers (id, token, started_at, heartbeat_at, lease_until)
            SELECT $1, nextval('servers_token'), now_ms, now_ms, now_ms + $2 FROM taskserver_now_ms() AS now_ms
            ON CONFLICT (id) DO UPDATE SET token = excluded.token, started_at = excluded.started_at,
                heartbeat_at = excluded.heartbeat_at, lease_until = excluded.lease_until
            RETURNING token
            """,
            [.text(self.nodeName), .int(self.options.lease.wholeMilliseconds)]
        )
        self.token.store(rows.int(0, 0), ordering: .sequentiallyConsistent)
        if releasingClaims {
            // Deliveries this name's predecessor was sending: sent again (at least once).
            try db.query("UPDATE deliveries SET claimed_by = NULL WHERE claimed_by = $1", [.text(self.nodeName)])
        }
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
    }

    func observeSchedules(_ observer: any ClusterScheduleObserver) {
        self.scheduleObserver.withLock { $0 = observer }
    }

    func observePools(_ observer: any ClusterPoolsObserver) {
        self.poolsObserver.withLock { $0 = observer }
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

    /// A commit was fenced: the thread registers again at once.
    func noteFenced() {
        self.fenced.store(true, ordering: .sequentiallyConsistent)
        self.wake()
    }

    /// `ended <id> <id>…` notifications for these jobs, each within PostgreSQL's 8,000 bytes.
    static func endedPayloads(_ ids: [String]) -> [String] {
        var payloads: [String] = []
        var payload = "ended"
        for id in ids {
            if payload.utf8.count + id.utf8.count + 1 > 7900 {
                payloads.append(payload)
                payload = "ended"
            }
            payload += " " + id
        }
        if payload.count > 5 { payloads.append(payload) }
        return payloads
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(self.wakeWrite, &byte, 1)
    }

    // MARK: - Commands

    func relay(_ command: ClusterCommand, timeout: Duration) -> Future<JSONValue?> {
        let promise = Promise<JSONValue?>()
        self.enqueue { db in
            // A lease command goes to the server that runs the lease's job (none stored: no one
            // holds the lease); a claim to its server.
            let rows = try db.query(
                """
                WITH c AS (
                    INSERT INTO commands (job_id, server, kind, task_id, body, created_at)
                    SELECT target.job_id, $5::text, $2, $3, $4, taskserver_now_ms() FROM (SELECT coalesce($1::text,
                        (SELECT job_id FROM leases WHERE lease_hash = $6::text)) AS job_id) AS target
                    WHERE target.job_id IS NOT NULL OR $5::text IS NOT NULL
                    RETURNING id, job_id, server
                )
                SELECT id, pg_notify('taskserver', 'command ' || id || ' ' || coalesce(job_id, '@' || server)) FROM c
                """,
                [
                    command.jobID.map { .text($0) }, .text(command.kind.rawValue), .text(command.taskID),
                    command.body.map { .bytes(Array($0.jsonString.utf8)) }, command.server.map { .text($0) },
                    command.lease.map { .text($0) },
                ]
            )
            guard rows.count == 1 else {
                promise.succeed(ClusterCommand.leaseNotStored)
                return
            }
            let id = rows.int(0, 0)
            self.waiting.withLock { $0[id] = promise }
            TimerQueue.shared.schedule(after: timeout) {
                if let promise = self.waiting.withLock({ $0.removeValue(forKey: id) }) { promise.trySucceed(nil) }
            }
        } failed: { error in
            promise.fail(error)
        }
        return promise.future
    }

    func answer(_ id: Int64, _ answer: JSONValue) {
        self.enqueue { db in
            try db.query(
                """
                UPDATE commands SET applied_at = taskserver_now_ms(), result = $2 WHERE id = $1 AND applied_at IS NULL
                RETURNING pg_notify('taskserver', 'answered ' || id)
                """,
                [.int(id), .text(answer.jsonString)]
            )
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

    // MARK: - The thread

    /// When the lease was last renewed (monotonic nanoseconds, taken before the renewal was sent).
    private let lastRenewal = Atomic<UInt64>(monotonicNanoseconds())
    /// Set once this server stopped acting on its jobs, until it has registered again.
    private let lostJobs = Atomic(false)

    /// Every quarter second, off the cluster's thread (which may hang in a statement to a
    /// database cut off by the network): a server that has not renewed for `lease - margin`
    /// stops acting on its jobs, before any other server may take them over.
    private func watch() {
        guard self.running.load(ordering: .relaxed) else { return }
        let stale = UInt64((self.options.lease - self.options.margin).wholeMilliseconds) * 1_000_000
        if monotonicNanoseconds() &- self.lastRenewal.load(ordering: .sequentiallyConsistent) > stale,
            !self.lostJobs.exchange(true, ordering: .sequentiallyConsistent)
        {
            self.logger.error(
                "cannot renew this server's lease; it stops acting on its jobs until it can",
                metadata: ["node": "\(self.nodeName)"]
            )
            self.delegate.withLock { $0 }?.clusterLostJobs()
        }
        TimerQueue.shared.schedule(after: .milliseconds(250)) { [weak self] in self?.watch() }
    }

    private func run() {
        self.lastRenewal.store(monotonicNanoseconds(), ordering: .sequentiallyConsistent)
        self.watch()
        var connection: PostgresConnection?
        var nextBeat: UInt64 = 0
        var connectedAt: UInt64 = 0
        var reconnectDelay: Int32 = 100
        let heartbeat = UInt64(self.options.heartbeat.wholeMilliseconds) * 1_000_000
        while self.running.load(ordering: .sequentiallyConsistent) {
            do {
                if connection == nil {
                    // A statement that hangs (a lock, a network cut without a reset) fails in
                    // seconds, not at TCP's timeout, and the thread goes on.
                    let db = try PostgresConnection(self.settings, extra: Self.connectionSettings)
                    try db.execute("SET statement_timeout = 3000; LISTEN taskserver")
                    connection = db
                    connectedAt = monotonicNanoseconds()
                    // What changed while no notification could arrive (also at the start).
                    self.scheduleObserver.withLock { $0 }?.clusterSchedulesChanged(nil)
                    reconnectDelay = 100
                    nextBeat = 0
                }
                let db = connection!
                let pending = self.work.withLock { work in
                    defer { work = [] }
                    return work
                }
                for item in pending { try item(db) }
                let now = monotonicNanoseconds()
                if now >= nextBeat || self.fenced.load(ordering: .relaxed) {
                    // Back after the database was away: the others' leases ran out meanwhile too.
                    // They get a lease's time to reconnect and renew before they count as dead,
                    // so a database restart is not a takeover of everyone by whoever came back first.
                    let reaping = now &- connectedAt >= UInt64(self.options.lease.wholeMilliseconds) * 1_000_000
                    try self.beat(db, reaping: reaping, sentAt: now)
                    nextBeat = now + heartbeat
                }
                try self.dispatch(try db.notifications(read: false), db)
                let left = nextBeat &- min(nextBeat, monotonicNanoseconds())
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
                    }
                    connection = nil
                }
                _ = self.wait(socket: -1, timeoutMilliseconds: reconnectDelay)
                reconnectDelay = min(1000, reconnectDelay * 2)
            }
        }
        if let connection, connection.isUsable {
            _ = try? connection.query(
                "DELETE FROM servers WHERE id = $1 AND token = $2",
                [.text(self.nodeName), .int(self.token.load(ordering: .sequentiallyConsistent))]
            )
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

    /// One heartbeat: renew (or register again), take over the servers whose lease ended, and
    /// look for commands and answers a lost notification left behind. `sentAt` becomes the last
    /// renewal once the lease is renewed or taken again — before the jobs are claimed, so that the
    /// watchdog never takes a claim made under a fresh lease for one made under a stale one.
    private func beat(_ db: PostgresConnection, reaping: Bool, sentAt: UInt64) throws {
        let delegate = self.delegate.withLock { $0 }
        let pools = self.poolsObserver.withLock { $0 }
        let queued = pools?.clusterQueuedCounts() ?? [:]
        let renewed =
            try db.query(
                """
                UPDATE servers SET heartbeat_at = now_ms, lease_until = now_ms + $3, queued = $4
                FROM taskserver_now_ms() AS now_ms WHERE id = $1 AND token = $2
                """,
                [
                    .text(self.nodeName), .int(self.token.load(ordering: .sequentiallyConsistent)),
                    .int(self.options.lease.wholeMilliseconds),
                    queued.isEmpty ? nil : .text(Self.queuedJSON(queued)),
                ]
            ).affected == 1
        if renewed && !self.lostJobs.load(ordering: .sequentiallyConsistent) {
            self.lastRenewal.store(sentAt, ordering: .sequentiallyConsistent)
        }
        if !renewed || self.lostJobs.load(ordering: .sequentiallyConsistent)
            || self.fenced.load(ordering: .sequentiallyConsistent)
        {
            if !self.lostJobs.exchange(true, ordering: .sequentiallyConsistent) {
                self.logger.error(
                    "another server took this server's jobs over; it stops acting on them",
                    metadata: ["node": "\(self.nodeName)"]
                )
                delegate?.clusterLostJobs()
            }
            // What the given-up runs queued before they were given up is sent under the old
            // token (and refused, if the row is gone) before the new token exists: no write of
            // theirs may pass a fence it was not made under.
            // The writer away (the database restarting): not before it is back and has sent them.
            guard self.flushWrites.withLock({ $0 })?() ?? true else { return }
            try self.register(db, releasingClaims: false)
            self.lastRenewal.store(sentAt, ordering: .sequentiallyConsistent)
            self.fenced.store(false, ordering: .sequentiallyConsistent)
            self.lostJobs.store(false, ordering: .sequentiallyConsistent)
            self.logger.notice("registered again", metadata: ["node": "\(self.nodeName)"])
            delegate?.clusterClaimJobs()
        }
        let dead =
            reaping
            ? try db.query(
                """
                DELETE FROM servers WHERE id IN (
                    SELECT id FROM servers WHERE lease_until < taskserver_now_ms() AND id <> $1 FOR UPDATE SKIP LOCKED)
                RETURNING id
                """,
                [.text(self.nodeName)]
            ) : nil
        let deadNames = dead.map { dead in (0..<dead.count).map { dead.text($0, 0) } } ?? []
        if !deadNames.isEmpty {
            self.logger.notice("taking over from servers whose lease ended", metadata: ["nodes": "\(deadNames)"])
            try db.query(
                "UPDATE deliveries SET claimed_by = NULL WHERE claimed_by = ANY($1::text[])",
                [.textArray(deadNames)]
            )
            delegate?.clusterClaimJobs()
        }
        let alive = try db.query(
            """
            SELECT count(*) FILTER (WHERE id <> $1), coalesce(min(token), 0),
                json_object_agg(id, queued::json) FILTER (WHERE id <> $1 AND queued IS NOT NULL)::text
            FROM servers WHERE lease_until >= taskserver_now_ms()
            """,
            [.text(self.nodeName)]
        )
        if let pools {
            pools.clusterPeersQueued(try Self.queuedByPool(alive.row(0).optionalText(2)))
        }
        self.peers.store(Int(alive.int(0, 0)), ordering: .relaxed)
        let leading = alive.int(0, 1) == self.token.load(ordering: .relaxed)
        self.isLeader.store(leading, ordering: .relaxed)
        if leading {
            // The server-wide feed keeps ten times what a server holds (`FeedWindow.capacity`).
            try db.query(
                "DELETE FROM feed WHERE first_position < (SELECT last FROM feed_head) - $1",
                [.int(Int64(FeedWindow.capacity * 10))]
            )
        }
        self.scheduleObserver.withLock { $0 }?.clusterLeadership(leading)
        // Commands for this server's jobs whose notification was lost (older than a second: the
        // notification of a newer one is on its way).
        if let delegate {
            let commands = try db.query(
                """
                SELECT c.id, c.job_id, c.kind, c.task_id, c.body, c.server FROM commands c JOIN jobs j ON j.id = c.job_id
                WHERE c.applied_at IS NULL AND j.owner = $1 AND c.created_at < taskserver_now_ms() - 1000
                """,
                [.text(self.nodeName)]
            )
            for row in 0..<commands.count where delegate.clusterRuns(commands.text(row, 1)) {
                if let command = try Self.command(commands.row(row)) { self.apply(commands.int(row, 0), command) }
            }
        }
        let waitingIDs = self.waiting.withLock { Array($0.keys) }
        if !waitingIDs.isEmpty { try self.collectAnswers(waitingIDs, db) }
        // Answered a minute ago, or claims nobody applied in time (never applied later).
        try db.query(
            """
            DELETE FROM commands WHERE applied_at < taskserver_now_ms() - 60000
                OR (kind = 'claim' AND applied_at IS NULL AND created_at < taskserver_now_ms() - 60000)
            """
        )
    }

    private func dispatch(_ notifications: [(channel: String, payload: String)], _ db: PostgresConnection) throws {
        guard !notifications.isEmpty else { return }
        let delegate = self.delegate.withLock { $0 }
        var answered: [Int64] = []
        for notification in notifications {
            let words = notification.payload.split(separator: " ")
            guard let kind = words.first else { continue }
            switch kind {
            case "cancel" where words.count == 2:
                let id = String(words[1])
                if delegate?.clusterRuns(id) == true { delegate?.clusterCancel(id) }
            case "command" where words.count == 3:
                // For a job (its owner applies it) or for a server (`@name`: a claim).
                let target = words[2]
                let mine =
                    target.hasPrefix("@")
                    ? target.dropFirst() == self.nodeName[...] : delegate?.clusterRuns(String(target)) == true
                guard mine, let id = Int64(words[1]) else { continue }
                // A claim is worth applying only while its server still waits for the answer (the
                // attempts it leased would otherwise wait for a heartbeat timeout).
                let rows = try db.query(
                    """
                    SELECT id, job_id, kind, task_id, body, server FROM commands WHERE id = $1 AND applied_at IS NULL
                        AND (kind <> 'claim' OR created_at >= taskserver_now_ms() - $2)
                    """,
                    [.int(id), .int(Self.claimFreshness.wholeMilliseconds)]
                )
                if rows.count == 1, let command = try Self.command(rows.row(0)) { self.apply(id, command) }
            case "answered" where words.count == 2:
                if let id = Int64(words[1]) { answered.append(id) }
            case "ended":
                delegate?.clusterJobsEnded(words.dropFirst().map(String.init))
                self.feedWake.withLock { $0 }?()
            case "schedule" where words.count == 2:
                self.scheduleObserver.withLock { $0 }?.clusterSchedulesChanged(String(words[1]))
            default:
                continue
            }
        }
        if !answered.isEmpty { try self.collectAnswers(answered, db) }
    }

    /// Completes the waits for these relayed commands that have an answer.
    private func collectAnswers(_ ids: [Int64], _ db: PostgresConnection) throws {
        let rows = try db.query(
            "SELECT id, result FROM commands WHERE id = ANY($1::bigint[]) AND applied_at IS NOT NULL",
            [.intArray(ids)]
        )
        for row in 0..<rows.count {
            guard let promise = self.waiting.withLock({ $0.removeValue(forKey: rows.int(row, 0)) }) else { continue }
            promise.succeed(try rows.row(row).optionalJSON(1))
        }
    }

    /// How long after it was relayed a claim is still applied (the relaying server waits a
    /// little longer for the answer).
    static let claimFreshness: Duration = .seconds(2)

    /// Hands `command` to whoever applies its kind.
    private func apply(_ id: Int64, _ command: ClusterCommand) {
        if command.kind.isPoolCommand {
            self.poolsObserver.withLock { $0 }?.clusterApplyPoolCommand(id, command)
        } else {
            self.delegate.withLock { $0 }?.clusterApply(id, command)
        }
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

    private static func command(_ row: PostgresRow) throws -> ClusterCommand? {
        guard let kind = ClusterCommand.Kind(rawValue: row.text(2)), let taskID = row.optionalText(3) else {
            return nil
        }
        return ClusterCommand(
            jobID: row.optionalText(1),
            kind: kind,
            taskID: taskID,
            body: try row.optionalJSON(4),
            server: row.optionalText(5)
        )
    }
}
