import Logging
import NIOCore
import Synchronization
import TaskCore
import TaskGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The PostgreSQL repository (`--database postgres://…`): every promise of the SQLite store, in
/// the database users already run.
///
/// **Writes** go through one writer connection on a one-thread pool, with group commit as in the
/// SQLite store (`GroupCommit.swift`): everything queued is committed in one transaction, so a
/// `201` still promises a committed row and one commit (one WAL flush) serves every request that
/// arrived meanwhile. Rows of a commit are written with one statement per table — arrays bound as
/// parameters and `unnest`ed — so a commit costs a handful of round trips however many jobs it
/// carries; statements are prepared once per connection.
///
/// **Reads** run on a small pool, each thread with a connection of its own; the records of
/// recently finished jobs are cached, so they answer even while the database is away.
///
/// **When the database goes away** (restarted, the network down): the writer marks the store
/// unavailable (`isAvailable`, which `/readyz` reports), answers new jobs and other writes at once
/// with `StoreError.unavailable` (a `503 store.unavailable` with `Retry-After`), keeps the journal
/// of running jobs — nobody could send it again — and reconnects with backoff; once connected it
/// commits what it kept, and the jobs go on. A commit whose answer was lost with the connection is
/// sent again: every journal statement is idempotent (`ON CONFLICT DO NOTHING`, upserts).
public final class PostgresJobRepository: JobRepository {
    public struct Options: Sendable {
        /// Records of finished jobs kept in memory for fast reads.
        public var cachedFinishedJobs = 10_000
        /// Queued writes past which new jobs are refused (503 `store.busy`) rather than queued.
        public var maxQueuedWrites = 200_000
        /// Finished jobs older than this are deleted in the background (`--retention`).
        public var retention: Duration?
        /// Told how long each transaction took, after it ends (metrics); must be quick.
        public var onCommit: @Sendable (_ nanoseconds: UInt64) -> Void = { _ in }
        /// The time retention and reconnection count by, and their timers.
        public var clock: any ServerClock = SystemClock()
        /// Reader connections (and threads).
        public var readers = 3
        /// This server's name among the servers sharing the database (`--node-name`): unique
        /// per server, and the same across its restarts (it resumes its own jobs at once).
        public var nodeName = PostgresJobRepository.defaultNodeName
        /// The cluster's lease, heartbeat and waits (tests shorten them).
        var cluster = ClusterTiming.standard
        /// Called (on the writer's thread) when the database, reached again, lost commits this
        /// server saw acknowledged: the process exits (70) by default; the store stays away.
        public var onRewound: @Sendable () -> Void = { exit(70) }
        public init() {}
    }

    /// The host name (a container's is unique, and stable across its restarts).
    public static var defaultNodeName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "taskserver" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "taskserver" : name
    }

    let settings: PostgresSettings
    /// This server among the servers sharing the database: its row, lease and wake-ups.
    let membership: PostgresCluster
    /// The cluster's concurrency keys (SPEC §8, §9).
    let keySlots: PostgresKeySlots
    /// This server's name (`servers.id`; the owner of its jobs, the holder of its claims).
    var serverID: String { self.membership.nodeName }
    let logger: Logger
    let options: Options
    let writerPool = WorkerPool(name: "pg-writer", size: 1)
    let readerPool: WorkerPool
    /// Completes the futures of committed writes, in commit order (one thread).
    let completionPool = WorkerPool(name: "pg-completions", size: 1)
    /// The writer's connection: used on the writer thread only; nil while the database is away.
    let writer: WriterConnection
    let readers = Mutex<[PostgresConnection]>([])
    let cache = Mutex(FinishedJobCache())
    let queue = Mutex(StoreWriteQueue())
    let retentionTimer = Mutex<ClockTimer?>(nil)
    /// False from a lost connection until the writer has reconnected, and from a refused commit
    /// until one is stored.
    let available = Atomic(true)
    /// A commit was refused (`commitRefused`) and none stored since.
    let refusing = Atomic(false)
    /// Positions of jobs deleted by this process: late journal entries of theirs are dropped
    /// (used on the writer thread only; the lock is never contended).
    let deleted = Mutex(Set<Int64>())
    /// Jobs that ended whose `ended` notification waits for the next window (`noteEnded`).
    let endedNotices = Mutex(EndedNotices())
    /// Reconnection attempts since the connection was lost (for the backoff).
    let reconnectAttempts = Atomic(0)
    /// The highest job position this process saw committed (the writer's thread writes it): a
    /// database reached again whose `jobs_position` is behind it lost commits (`reconnect`).
    let highestPosition = Atomic<Int64>(0)
    /// The server-wide feed every server of the database shares.
    let feed: PostgresEventFeed

    // @unchecked Sendable: `connection` is read and replaced on the writer thread only (the
    // repository's one-thread writer pool), or in `init` before the pool sees the repository.
    final class WriterConnection: @unchecked Sendable {
        var connection: PostgresConnection?
        init(_ connection: PostgresConnection) { self.connection = connection }
    }

    /// Connects, migrates the schema and reads what the store holds; throws a `PostgresError`
    /// (or `PostgresSchemaError`) naming what failed, never the password.
    public init(settings: PostgresSettings, options: Options = Options(), logger: Logger) throws {
        self.settings = settings
        self.options = options
        self.logger = logger
        self.readerPool = WorkerPool(name: "pg-readers", size: max(1, options.readers))
        let connection = try PostgresConnection(settings)
        guard connection.serverVersion >= 120_000 else {
            throw PostgresError(
                message:
                    "the database runs PostgreSQL \(connection.serverVersion / 10000); TaskServer needs 12 or newer",
                connectionLost: false
            )
        }
        try PostgresSchema.migrate(connection)
        try PostgresSchema.verify(connection)
        // From here on the writer's connection (registration first).
        try connection.endIdleTransactions()
        self.membership = try PostgresCluster(
            nodeName: options.nodeName,
            settings: settings,
            timing: options.cluster,
            connection: connection,
            logger: logger
        )
        let membership = self.membership
        self.keySlots = PostgresKeySlots(
            settings: settings,
            nodeName: options.nodeName,
            token: { membership.token.load(ordering: .sequentiallyConsistent) },
            clock: options.clock,
            logger: logger
        )
        let count = Int(try connection.query("SELECT count(*) FROM jobs").int(0, 0))
        let newest = try PostgresEventFeed.newest(connection)
        self.feed = PostgresEventFeed(last: newest.last, rows: newest.rows)
        self.writer = WriterConnection(connection)
        self.cache.withLock { $0.count = count }
        if let retention = options.retention { self.scheduleRetention(retention) }
        self.feed.attach { [weak self] after, limit in
            guard let self else { return Future(value: []) }
            return self.read { db in try PostgresEventFeed.rows(db, after: after, limit: limit) }
        }
        let feed = self.feed
        self.membership.feedWake.withLock { $0 = { feed.fellBehind() } }
        let keySlots = self.keySlots
        self.membership.keyFreed.withLock { $0 = { key in keySlots.freed(key) } }
        self.membership.jobsChanged.withLock {
            $0 = { [weak self] ids in
                guard let self else { return }
                let dropped = self.cache.withLock { $0.invalidate(ids) }
                withExtendedLifetime(dropped) {}
            }
        }
        self.membership.flushWrites.withLock {
            $0 = { [weak self] in
                guard let self else { return true }
                // Refused by the fence: done. The database away: the journal stays queued.
                do {
                    try self.flush().wait()
                    return true
                } catch {
                    return error as? StoreError != .unavailable
                }
            }
        }
    }

    public var isDurable: Bool { true }

    public var eventFeed: (any EventFeed)? { self.feed }

    public var cluster: (any Cluster)? { self.membership }

    public var sharedKeys: (any SharedConcurrencyKeys)? { self.keySlots }

    /// Whether the database answers (`/readyz` says 503 while it does not).
    public var isAvailable: Bool { self.available.load(ordering: .relaxed) }

    // MARK: - Jobs

    public func insert(_ job: NewJobRecord) -> Future<InsertOutcome> {
        let promise = Promise<InsertOutcome>()
        guard self.isAvailable else { return Future(error: StoreError.unavailable) }
        guard self.enqueue(.insert(job, promise), refuseWhenFull: true) else {
            return Future(error: StoreError.busy)
        }
        return promise.future
    }

    public func append(_ batch: JournalBatch) { self.enqueue(.journal(batch)) }

    public func job(_ id: String) -> Future<StoredJob?> {
        if let job = self.cache.withLock({ $0.finished[id] }) { return Future(value: job) }
        guard JobID.isPlausible(id) else { return Future(value: nil) }
        let deletes = self.cache.withLock { $0.deletes }
        return self.read { db in try self.load(id, db) }.map { job in
            guard let job else { return nil }
            if job.state.isTerminal { self.cacheFinished([job], ifNoDeleteSince: deletes) }
            return job
        }
    }

    public func list(_ query: JobQuery) -> Future<JobPage> {
        self.read { db -> JobPage in
            let (sql, values) = Self.listSQL(query)
            let rows = try db.query(sql, values)
            var items: [(position: UInt64, snapshot: JobSnapshot)] = []
            for row in 0..<rows.count {
                items.append((UInt64(bitPattern: rows.int(row, 0)), try StoredRecords.snapshot(rows.row(row))))
            }
            let more = items.count > query.limit
            if more { items.removeLast() }
            return JobPage(items: items.map(\.snapshot), next: more ? items.last?.position : nil)
        }
    }

    /// The query of a list page and its values (`$n` placeholders in order).
    static func listSQL(_ query: JobQuery) -> (sql: String, values: [PostgresValue?]) {
        var values: [PostgresValue?] = []
        func parameter(_ value: PostgresValue) -> String {
            values.append(value)
            return "$\(values.count)"
        }
        var conditions: [String] = []
        switch query.state {
        case nil: break
        case .pending: conditions.append("state IN ('pending', 'sleeping')")
        case .running: conditions.append("state = 'running'")
        case .failed: conditions.append("state = 'failed'")
        case .cancelled: conditions.append("state = 'cancelled'")
        case .succeeded: conditions.append("state = 'succeeded'")
        }
        if let before = query.before { conditions.append("position < \(parameter(.int(Int64(bitPattern: before))))") }
        for label in query.labels {
            let key = parameter(.text(label.key))
            let value = parameter(.text(label.value))
            conditions.append("position IN (SELECT position FROM labels WHERE key = \(key) AND value = \(value))")
        }
        if let definition = query.definition { conditions.append("definition = \(parameter(.text(definition)))") }
        for (column, comparison, time) in query.timeBounds {
            conditions.append("\(column) \(comparison) \(parameter(.int(time.milliseconds)))")
        }
        let limit = parameter(.int(Int64(query.limit + 1)))
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        return (
            "SELECT \(StoredRecords.listColumns) FROM jobs\(filter) ORDER BY position DESC LIMIT \(limit)",
            values
        )
    }

    public func delete(_ id: String) -> Future<DeleteResult> {
        guard JobID.isPlausible(id) else { return Future(value: .notFound) }
        return self.queued { .delete(id, $0) }
    }

    public func requestCancel(_ id: String) -> Future<Void> {
        self.queued { .cancelRequested(id, $0) }
    }

    public func reopen(_ id: String, startingAt now: Timestamp) -> Future<StoredJob?> {
        guard JobID.isPlausible(id) else { return Future(value: nil) }
        return self.queued { .reopen(id, now, $0) }
    }

    /// Claims the unfinished jobs no live server runs: without an owner (a delayed job woken by a
    /// cancellation), this server's name's (its predecessor's, or its own left by a lost lease),
    /// or a server's whose row a takeover deleted. What was queued is committed first, so that a
    /// job handed back by this server is read with everything it wrote.
    public func claimUnfinished(excluding live: Set<String>) -> Future<[StoredJob]> {
        self.flush().flatMap {
            self.read { db -> [StoredJob] in
                let token = self.membership.token.load(ordering: .sequentiallyConsistent)
                let ids = try db.transaction { () -> [String] in
                    try self.fence(db, token)
                    let rows = try db.query(
                        """
                        UPDATE jobs SET owner = $1, owner_token = $2 WHERE position IN (
                            SELECT position FROM jobs j WHERE state IN ('pending', 'running')
                                AND (owner IS NULL OR owner = $1 OR NOT EXISTS (SELECT 1 FROM servers s WHERE s.id = j.owner))
                                AND NOT (id = ANY($3::text[]))
                            ORDER BY position FOR UPDATE SKIP LOCKED)
                        RETURNING id, position
                        """,
                        [.text(self.serverID), .int(token), .textArray(live.map { $0 })]
                    )
                    return (0..<rows.count).map { (rows.int($0, 1), rows.text($0, 0)) }.sorted { $0.0 < $1.0 }.map(\.1)
                }
                var jobs: [StoredJob] = []
                for id in ids {
                    do {
                        guard let job = try self.load(id, db), !job.state.isTerminal else { continue }
                        jobs.append(job)
                    } catch let error as PostgresError where error.connectionLost {
                        throw error
                    } catch {
                        self.logger.error(
                            "cannot resume a stored job; it stays as it was",
                            metadata: ["job.id": "\(id)", "error": "\(error)"]
                        )
                    }
                }
                return jobs
            }
        }
    }

    /// Opens a write transaction of this server: fails (`PostgresError.isFenced`) once another
    /// server has taken this one's jobs over.
    func fence(_ db: PostgresConnection, _ token: Int64) throws {
        try db.query("SELECT taskserver_fence($1, $2)", [.text(self.serverID), .int(token)])
    }

    public func claimSleeping(through: Timestamp, limit: Int) -> Future<[StoredJob]> {
        // Asked every second: a reader looks first, so that an idle server costs no write.
        self.read { db -> Bool in
            try db.query(
                "SELECT 1 FROM jobs WHERE state = 'sleeping' AND run_at <= $1 LIMIT 1",
                [.int(through.milliseconds)]
            ).count > 0
        }.flatMap { due -> Future<[StoredJob]> in
            guard due else { return Future(value: []) }
            return self.queued { .claimSleeping(through, limit, $0) }
        }
    }

    public func count() -> Future<Int> { Future(value: self.cache.withLock { $0.count }) }

    /// Completes when every write queued so far is committed (tests: a consistent crash image).
    func flush() -> Future<Void> { self.queued { .flush($0) } }

    // MARK: - DefinitionStore

    /// Every server of a cluster changes them.
    public var definitionsAreShared: Bool { true }

    public func putDefinition(_ name: String, body: JSONValue, at: Timestamp) -> Future<DefinitionPut> {
        self.queued { .putDefinition(name, body, at, $0) }
    }

    public func retireDefinition(_ name: String, at: Timestamp) -> Future<Bool> {
        self.queued { .retireDefinition(name, at, $0) }
    }

    public func storedDefinition(_ name: String, version: Int?) -> Future<StoredDefinition?> {
        self.read { db in
            let pinned = version.map { PostgresValue.int(Int64($0)) }
            let rows = try db.query(
                """
                SELECT \(StoredRecords.definitionColumns) FROM definitions d JOIN definition_names n ON n.name = d.name
                WHERE d.name = $1 AND d.version = coalesce($2, n.latest) AND (n.retired_at IS NULL OR $2 IS NOT NULL)
                """,
                [.text(name), pinned]
            )
            return try rows.count == 1 ? StoredRecords.definition(rows.row(0)) : nil
        }
    }

    public func storedDefinitions(limit: Int, after: String?) -> Future<[StoredDefinition]> {
        self.read { db in
            try db.query(
                """
                SELECT \(StoredRecords.definitionColumns) FROM definition_names n
                JOIN definitions d ON d.name = n.name AND d.version = n.latest
                WHERE n.retired_at IS NULL AND n.name COLLATE "C" > $1 ORDER BY n.name COLLATE "C" LIMIT $2
                """,
                [.text(after ?? ""), .int(Int64(limit))]
            ).map(StoredRecords.definition)
        }
    }

    public func storedDefinitionVersions(_ name: String, limit: Int, before: Int?) -> Future<[StoredDefinition]> {
        self.read { db in
            try db.query(
                """
                SELECT \(StoredRecords.definitionColumns) FROM definitions d JOIN definition_names n ON n.name = d.name
                WHERE d.name = $1 AND d.version < $2 ORDER BY d.version DESC LIMIT $3
                """,
                [.text(name), .int(Int64(before ?? Int.max)), .int(Int64(limit))]
            ).map(StoredRecords.definition)
        }
    }

    // MARK: - ScheduleStore

    public func putSchedule(_ schedule: StoredSchedule) -> Future<Void> {
        self.queued { .putSchedule(schedule, $0) }
    }

    public func deleteSchedule(_ id: String) -> Future<Bool> {
        self.queued { .deleteSchedule(id, $0) }
    }

    public func recordFire(_ id: String, at: Timestamp?, jobID: String?) -> Future<Void> {
        self.queued { .recordFire(id, at, jobID, $0) }
    }

    public func storedSchedules() -> Future<[StoredSchedule]> {
        self.read { db in
            let rows = try db.query(
                "SELECT \(StoredRecords.scheduleColumns) FROM schedules ORDER BY id"
            )
            return try rows.map(StoredRecords.schedule)
        }
    }

    public func storedSchedule(_ id: String) -> Future<StoredSchedule?> {
        self.read { db in
            let rows = try db.query(
                "SELECT \(StoredRecords.scheduleColumns) FROM schedules WHERE id = $1",
                [.text(id)]
            )
            return try rows.count == 1 ? StoredRecords.schedule(rows.row(0)) : nil
        }
    }

    // MARK: - LeaseJournal

    public func recordLeases(_ leases: [StoredLease]) -> Future<Void> {
        if leases.isEmpty { return Future(value: ()) }
        return self.queued { .addLeases(leases, $0) }
    }

    public func removeLeases(_ hashes: [String]) {
        if !hashes.isEmpty { self.enqueue(.removeLeases(hashes)) }
    }

    public func storedLeases(ofJobs ids: [String]) -> Future<[StoredLease]> {
        if ids.isEmpty { return Future(value: []) }
        return self.read { db in
            let rows = try db.query(
                """
                SELECT \(StoredRecords.leaseColumns)
                FROM leases WHERE job_id = ANY($1::text[])
                """,
                [.textArray(ids)]
            )
            return rows.map(StoredRecords.lease)
        }
    }

    public func storedLeases() -> Future<[StoredLease]> {
        self.read { db in
            // Not those of jobs another live server runs: they are its to keep.
            let rows = try db.query(
                """
                SELECT \(StoredRecords.leaseColumns)
                FROM leases l WHERE NOT EXISTS (
                    SELECT 1 FROM jobs j JOIN servers s ON s.id = j.owner WHERE j.id = l.job_id AND j.owner <> $1)
                """,
                [.text(self.serverID)]
            )
            return rows.map(StoredRecords.lease)
        }
    }

    // MARK: - DeliveryStore

    public func update(_ delivery: Delivery) -> Future<Void> {
        self.queued { .updateDelivery(delivery, $0) }
    }

    public func claimDue(at now: Timestamp, limit: Int) -> Future<(deliveries: [Delivery], next: Timestamp?)> {
        self.queued { .claimDeliveries(now, limit, $0) }
    }

    public func deliveries(jobID: String) -> Future<[Delivery]> {
        self.read { db in
            let rows = try db.query(
                "SELECT \(StoredRecords.deliveryColumnNames) FROM deliveries WHERE job_id = $1 ORDER BY seq, id",
                [.text(jobID)]
            )
            return try rows.map(StoredRecords.delivery).compactMap { $0 }
        }
    }

    // MARK: - Closing

    /// Writes what is queued and closes the connections; the future completes when done.
    @discardableResult
    public func close() -> Future<Void> {
        if let timer = self.retentionTimer.withLock({ $0 }) { self.options.clock.cancel(timer) }
        let closed = Promise<Void>()
        self.flush().flatMap { self.membership.leave() }.whenComplete { _ in
            self.keySlots.close()
            self.writerPool.execute {
                self.writer.connection = nil
                self.completionPool.execute {
                    self.readers.withLock { $0 = [] }
                    self.writerPool.shutdown()
                    self.readerPool.shutdown()
                    self.completionPool.shutdown()
                    closed.succeed(())
                }
            }
        }
        return closed.future
    }

    // MARK: - Reading

    /// Runs `body` on a reader thread with a connection of its own (a lost one is dropped, and
    /// the read answers `StoreError.unavailable`).
    func read<R: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> R) -> Future<R> {
        // While the writer has no connection, reads fail at once rather than queue behind
        // connection attempts (an unreachable host takes `connect_timeout` per attempt).
        guard self.isAvailable else { return Future(error: StoreError.unavailable) }
        return self.readerPool.submit {
            var pooled = self.readers.withLock { $0.popLast() }
            while true {
                let connection: PostgresConnection
                do {
                    // Readers run fenced transactions too (`claimUnfinished`).
                    connection = try pooled ?? PostgresConnection(self.settings)
                    if pooled == nil { try connection.endIdleTransactions() }
                } catch {
                    self.logger.warning("cannot connect to the database", metadata: ["error": "\(error)"])
                    throw StoreError.unavailable
                }
                do {
                    let value = try body(connection)
                    self.readers.withLock { $0.append(connection) }
                    return value
                } catch let error as PostgresError where error.connectionLost || !connection.isUsable {
                    // A pooled connection may have died with a database restart: once more on a
                    // new one.
                    if pooled != nil {
                        pooled = nil
                        continue
                    }
                    self.logger.warning("lost the database connection of a read", metadata: ["error": "\(error)"])
                    throw StoreError.unavailable
                } catch {
                    // A failed query, or a stored document that no longer decodes: either way a
                    // 503 store error, never a 500, and the cause is logged.
                    self.readers.withLock { $0.append(connection) }
                    self.logger.error("store read failed", metadata: ["error": "\(error)"])
                    throw StoreError.readFailed
                }
            }
        }
    }

    /// Forgets the cached record of job `id` (a redrive made it unfinished again).
    func uncacheFinished(_ id: String) {
        let removed = self.cache.withLock { cache in cache.invalidate([id]) }
        withExtendedLifetime(removed) {}
    }

    func cacheFinished(_ jobs: [StoredJob], ifNoDeleteSince deletes: UInt64? = nil) {
        if jobs.isEmpty { return }
        let evicted = self.cache.withLock { cache in
            cache.add(jobs, limit: self.options.cachedFinishedJobs, ifNoDeleteSince: deletes)
        }
        withExtendedLifetime(evicted) {}
    }
}
