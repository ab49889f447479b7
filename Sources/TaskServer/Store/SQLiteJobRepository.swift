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

/// The embedded durable repository (the default; `--data PATH`): one SQLite file in WAL mode.
///
/// **Writes** go through one writer connection owned by a one-thread pool. Every change — a new
/// job, each batch of events with the node and job rows they change, a delete — is queued, and the
/// writer commits everything queued in one transaction (group commit), then completes the waiting
/// futures. So `insert` completes (and the API sends its `201`) only once the job is on disk, and
/// one fsync serves every request that arrived while the previous commit ran.
/// `synchronous=FULL` by default: a commit survives power loss, not only a crash of the process —
/// group commit makes that affordable (one fsync per batch, ~0.3 ms here).
///
/// **Reads** run on a small reader pool, each thread with its own connection (WAL lets readers run
/// beside the writer); event loops never wait for the disk. The records of the most recently
/// finished jobs are cached, so reading a job that just ended costs no disk read.
///
/// **Journal**: a node's row is written from the event that announces its state, in the same
/// transaction as that event — so a restart never sees an outcome without its event or the other
/// way round, and a node that finished is never run again. Webhook deliveries are rows of the same
/// transaction (the outbox).
public final class SQLiteJobRepository: JobRepository {
    public struct Options: Sendable {
        /// `FULL` (default): every commit is fsynced. `NORMAL`: WAL commits survive a crash of the
        /// process but the last ones may be lost on power failure.
        public var synchronousFull = true
        /// Records of finished jobs kept in memory for fast reads; older ones are read from the file.
        public var cachedFinishedJobs = 10_000
        /// Queued writes past which new jobs are refused (503 `store.busy`) rather than queued.
        public var maxQueuedWrites = 200_000
        /// Runs `PRAGMA quick_check` when opening the file and refuses a damaged one.
        public var checkIntegrity = false
        /// Finished jobs older than this are deleted in the background (`--retention`).
        public var retention: Duration?
        /// Told how long each transaction took, after it ends (metrics); must be quick.
        public var onCommit: @Sendable (_ nanoseconds: UInt64) -> Void = { _ in }
        /// The time retention counts by, and its timer.
        public var clock: any ServerClock = SystemClock()
        public init() {}
    }

    public let path: String
    let logger: Logger
    let options: Options
    let writer: SQLiteConnection
    let writerPool = WorkerPool(name: "store-writer", size: 1)
    let readerPool = WorkerPool(name: "store-readers", size: 2)
    /// Completes the futures of committed writes, in commit order (one thread).
    let completionPool = WorkerPool(name: "store-completions", size: 1)
    let readers: Mutex<[SQLiteConnection]>
    let cache = Mutex(FinishedJobCache())
    let queue = Mutex(StoreWriteQueue())
    /// False from a commit SQLite refused (a full disk: `SQLITE_FULL`, an I/O error) until one
    /// is stored; `/readyz` says 503 meanwhile.
    let available = Atomic(true)
    /// Retries of a refused commit since the last one stored (for the backoff).
    let refusedCommits = Atomic(0)
    public var isAvailable: Bool { self.available.load(ordering: .relaxed) }
    let retentionTimer = Mutex<ClockTimer?>(nil)
    /// The position the last new job was given (`jobs.position`): positions are handed out when
    /// a batch is planned, so a job's rows can be written without asking SQLite for its rowid.
    let nextPosition: Atomic<Int64>
    /// Used by the writer thread only (the lock is never contended).
    let writerState = Mutex(WriterState())
    /// Checkpoints (copying the WAL into the database file) run here, on a connection of their
    /// own, rather than on the writer after a commit: see `checkpointIfDue`.
    let checkpointPool = WorkerPool(name: "store-checkpoint", size: 1)
    let checkpointConnection: SQLiteConnection
    let checkpointRunning = Atomic(false)
    /// The writer's WAL size, as of its last commit.
    let walSize = WALSize()

    struct WriterState {
        /// Positions of jobs deleted by this process: late journal entries of theirs are dropped.
        var deleted: Set<Int64> = []
        /// Where a retention pass that stopped early goes on (`writeExpire`); 0: from the oldest job.
        var expiredThrough: Int64 = 0
    }

    /// Opens (creating the file and its directory if needed) and migrates the file.
    public init(path: String, options: Options = Options(), logger: Logger) throws {
        self.path = path
        self.options = options
        self.logger = logger
        try Self.createDirectory(of: path)
        let writer = try SQLiteConnection(path: path)
        let mode = try writer.prepared("PRAGMA journal_mode=WAL")
        guard try mode.step(), mode.text(0).lowercased() == "wal" else {
            throw SQLiteError(code: 0, message: "\(path): cannot switch to WAL mode")
        }
        mode.reset()
        try writer.execute("PRAGMA synchronous=\(options.synchronousFull ? "FULL" : "NORMAL")")
        if options.checkIntegrity {
            let check = try writer.prepared("PRAGMA quick_check")
            var problems: [String] = []
            while try check.step() { problems.append(check.text(0)) }
            check.reset()
            guard problems == ["ok"] else {
                throw SQLiteError(
                    code: 11,
                    message: "\(path) is damaged: \(problems.prefix(5).joined(separator: "; "))"
                )
            }
        }
        try SQLiteSchema.migrate(writer)
        // Claims of deliveries were this process's predecessor's: none outlives its process.
        // (Through the partial index `deliveries_claimed`: the held ones are few.)
        try writer.execute("UPDATE deliveries SET claimed = 0 WHERE claimed = 1")
        let count = Int(try writer.scalar("SELECT count(*) FROM jobs") ?? 0)
        self.nextPosition = Atomic(try writer.scalar("SELECT max(position) FROM jobs") ?? 0)
        self.writer = writer
        writer.reportWALSize(to: self.walSize)
        self.checkpointConnection = try SQLiteConnection(path: path)
        self.readers = Mutex(try (0..<2).map { _ in try SQLiteConnection(path: path) })
        self.cache.withLock { $0.count = count }
        if let retention = options.retention { self.scheduleRetention(retention) }
    }

    public var isDurable: Bool { true }

    // MARK: - Jobs

    public func insert(_ job: NewJobRecord) -> Future<InsertOutcome> {
        let promise = Promise<InsertOutcome>()
        guard self.enqueue(.insert(job, promise), refuseWhenFull: true) else {
            return Future(error: StoreError.busy)
        }
        return promise.future
    }

    public func append(_ batch: JournalBatch) {
        self.enqueue(.journal(batch))
    }

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

    /// The query of a list page and its values. A state filter repeats the condition of the
    /// partial index that holds the state (schema 5): SQLite uses a partial index only for a
    /// query whose WHERE clause contains the index's condition as written. Succeeded jobs have
    /// no index; they are found by walking positions newest first (most jobs succeed). Pending
    /// jobs are in two indexes — awake (`jobs_unfinished`) and sleeping (`jobs_sleeping`, schema
    /// 7) — so that page is the newest of a page from each.
    static func listSQL(_ query: JobQuery) -> (sql: String, binds: [SQLiteValue?]) {
        var filter = ""
        var binds: [SQLiteValue?] = []
        if let before = query.before {
            filter += " AND position < ?"
            binds.append(.int(Int64(bitPattern: before)))
        }
        for label in query.labels {
            filter += " AND position IN (SELECT position FROM labels WHERE key = ? AND value = ?)"
            binds.append(.text(label.key))
            binds.append(.text(label.value))
        }
        if let definition = query.definition {
            filter += " AND definition = ?"
            binds.append(.text(definition))
        }
        for (column, comparison, time) in query.timeBounds {
            filter += " AND \(column) \(comparison) ?"
            binds.append(.int(time.milliseconds))
        }
        let columns = StoredRecords.listColumns
        let limit = SQLiteValue.int(Int64(query.limit + 1))
        func select(_ condition: String) -> String {
            "SELECT \(columns) FROM jobs WHERE \(condition)\(filter) ORDER BY position DESC LIMIT ?"
        }
        switch query.state {
        case nil:
            return (select("1"), binds + [limit])
        case .pending:
            let sql = """
                SELECT * FROM (\(select("state = 'pending' AND state IN ('pending', 'running')")))
                UNION ALL SELECT * FROM (\(select("state = 'sleeping'")))
                ORDER BY position DESC LIMIT ?
                """
            return (sql, binds + [limit] + binds + [limit, limit])
        case .running:
            return (select("state = 'running' AND state IN ('pending', 'running')"), binds + [limit])
        case .failed, .cancelled:
            return (
                select("state = ? AND state IN ('failed', 'cancelled')"),
                [.text(query.state!.rawValue)] + binds + [limit]
            )
        case .succeeded:
            return (select("state = 'succeeded'"), binds + [limit])
        }
    }

    public func list(_ query: JobQuery) -> Future<JobPage> {
        self.read { db -> JobPage in
            let (sql, binds) = Self.listSQL(query)
            let statement = try db.statement(sql, cached: query.labels.count <= 2)
            for (offset, value) in binds.enumerated() { try statement.bind(value, at: Int32(offset + 1)) }
            var rows: [(position: UInt64, snapshot: JobSnapshot)] = []
            while try statement.step() {
                rows.append((UInt64(bitPattern: statement.int(0)), try StoredRecords.snapshot(statement)))
            }
            statement.reset()
            let more = rows.count > query.limit
            if more { rows.removeLast() }
            return JobPage(items: rows.map(\.snapshot), next: more ? rows.last?.position : nil)
        }
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

    /// The jobs a restart resumes, oldest first (through the partial index `jobs_unfinished`).
    static let unfinishedSQL: StaticString =
        "SELECT id FROM jobs WHERE state IN ('pending', 'running') ORDER BY position"

    public func claimUnfinished(excluding live: Set<String>) -> Future<[StoredJob]> {
        self.read { db in
            let statement = try db.prepared(Self.unfinishedSQL)
            var ids: [String] = []
            while try statement.step() {
                let id = statement.text(0)
                if !live.contains(id) { ids.append(id) }
            }
            statement.reset()
            var jobs: [StoredJob] = []
            for id in ids {
                do {
                    guard let job = try self.load(id, db), !job.state.isTerminal else { continue }
                    jobs.append(job)
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

    /// Whether a sleeping job is due by a time (through `jobs_sleeping_by_start`).
    static let sleepingDueSQL: StaticString =
        "SELECT 1 FROM jobs WHERE state = 'sleeping' AND run_at <= ? LIMIT 1"

    public func claimSleeping(through: Timestamp, limit: Int) -> Future<[StoredJob]> {
        // Asked every second: a reader looks first, so that an idle server (or one whose sleeping
        // jobs are all due later) costs no write transaction.
        self.read { db -> Bool in
            let due = try db.prepared(Self.sleepingDueSQL).bind(.int(through.milliseconds))
            defer { due.reset() }
            return try due.step()
        }.flatMap { due -> Future<[StoredJob]> in
            guard due else { return Future(value: []) }
            return self.queued { .claimSleeping(through, limit, $0) }
        }
    }

    public func count() -> Future<Int> { Future(value: self.cache.withLock { $0.count }) }

    /// Completes when every write queued so far is committed (tests: a consistent crash image).
    func flush() -> Future<Void> { self.queued { .flush($0) } }

    // MARK: - DefinitionStore

    public func putDefinition(_ name: String, body: JSONValue, at: Timestamp) -> Future<DefinitionPut> {
        self.queued { .putDefinition(name, body, at, $0) }
    }

    public func retireDefinition(_ name: String, at: Timestamp) -> Future<Bool> {
        self.queued { .retireDefinition(name, at, $0) }
    }

    public func storedDefinition(_ name: String, version: Int?) -> Future<StoredDefinition?> {
        self.read { db in try Self.readDefinition(name, version: version, includeRetired: false, db) }
    }

    public func storedDefinitions(limit: Int, after: String?) -> Future<[StoredDefinition]> {
        self.read { db in
            let rows = try db.statement(
                """
                SELECT \(StoredRecords.definitionColumns) FROM definition_names n
                JOIN definitions d ON d.name = n.name AND d.version = n.latest
                WHERE n.retired_at IS NULL AND n.name > ? ORDER BY n.name LIMIT ?
                """
            )
            defer { rows.reset() }
            try rows.bind(.text(after ?? ""), .int(Int64(limit)))
            var definitions: [StoredDefinition] = []
            while try rows.step() { definitions.append(try StoredRecords.definition(rows)) }
            return definitions
        }
    }

    public func storedDefinitionVersions(_ name: String, limit: Int, before: Int?) -> Future<[StoredDefinition]> {
        self.read { db in
            let rows = try db.statement(
                """
                SELECT \(StoredRecords.definitionColumns) FROM definitions d JOIN definition_names n ON n.name = d.name
                WHERE d.name = ? AND d.version < ? ORDER BY d.version DESC LIMIT ?
                """
            )
            defer { rows.reset() }
            try rows.bind(.text(name), .int(Int64(before ?? Int.max)), .int(Int64(limit)))
            var definitions: [StoredDefinition] = []
            while try rows.step() { definitions.append(try StoredRecords.definition(rows)) }
            return definitions
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
            let rows = try db.statement("SELECT \(StoredRecords.scheduleColumns) FROM schedules ORDER BY id")
            var schedules: [StoredSchedule] = []
            while try rows.step() { schedules.append(try StoredRecords.schedule(rows)) }
            rows.reset()
            return schedules
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

    public func storedLeases() -> Future<[StoredLease]> {
        self.read { db in
            let statement = try db.statement("SELECT \(StoredRecords.leaseColumns) FROM leases")
            var leases: [StoredLease] = []
            while try statement.step() { leases.append(StoredRecords.lease(statement)) }
            statement.reset()
            return leases
        }
    }

    /// Writes what is queued, checkpoints the WAL into the file and lets the repository's threads
    /// exit; the future completes when that is done.
    @discardableResult
    public func close() -> Future<Void> {
        if let timer = self.retentionTimer.withLock({ $0 }) { self.options.clock.cancel(timer) }
        let closed = Promise<Void>()
        self.flush().whenComplete { _ in
            self.writerPool.execute {
                try? self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self.completionPool.execute {
                    self.checkpointPool.shutdown()
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

    /// Runs `body` on a reader thread with a connection of its own.
    func read<R: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> R) -> Future<R> {
        self.readerPool.submit {
            let connection = try self.readers.withLock { readers in
                if let connection = readers.popLast() { return connection }
                return try SQLiteConnection(path: self.path)
            }
            defer { self.readers.withLock { $0.append(connection) } }
            do {
                return try body(connection)
            } catch {
                // A failed query, or a stored document that no longer decodes: either way the
                // client gets a 503 store error, never a 500, and the cause is logged.
                self.logger.error("store read failed", metadata: ["error": "\(error)"])
                throw StoreError.readFailed
            }
        }
    }

    /// Forgets the cached record of job `id` (a redrive made it unfinished again).
    func uncacheFinished(_ id: String) {
        let removed = self.cache.withLock { cache in cache.finished.removeValue(forKey: id) }
        withExtendedLifetime(removed) {}
    }

    /// Keeps the records of finished jobs (read from the file, or just committed) for fast reads;
    /// the oldest beyond the cache's size leave it (freed outside the lock).
    func cacheFinished(_ jobs: [StoredJob], ifNoDeleteSince deletes: UInt64? = nil) {
        if jobs.isEmpty { return }
        let evicted = self.cache.withLock { cache in
            cache.add(jobs, limit: self.options.cachedFinishedJobs, ifNoDeleteSince: deletes)
        }
        withExtendedLifetime(evicted) {}
    }

    static func createDirectory(of path: String) throws {
        guard let slash = path.lastIndex(of: "/") else { return }
        let directory = String(path[..<slash])
        guard !directory.isEmpty else { return }
        var current = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o755) != 0, errno != EEXIST {
                throw SQLiteError(
                    code: 0,
                    message: "cannot create the directory \(current) for \(path): \(String(cString: strerror(errno)))"
                )
            }
        }
    }
}
