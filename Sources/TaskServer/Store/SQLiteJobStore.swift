#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging
import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// The embedded durable store (the default; `--data PATH`): one SQLite file in WAL mode.
///
/// **Writes** go through one writer connection owned by a one-thread pool. Every change — a new
/// job, each batch of events with the node and job rows they change, a delete — is queued, and the
/// writer commits everything queued in one transaction (group commit), then completes the waiting
/// futures. So `insert` completes (and the API sends its `201`) only once the job is on disk, and
/// one fsync serves every request that arrived while the previous commit ran.
/// `synchronous=FULL` by default: a commit survives power loss, not only a crash of the process —
/// group commit makes that affordable (one fsync per batch, ~0.3 ms here).
///
/// **Reads** of jobs in memory never touch the disk: every unfinished job, and the most recently
/// finished ones, stay cached as `JobRun`s. Other jobs are loaded on a small reader pool, each
/// thread with its own connection (WAL lets readers run beside the writer); event loops never wait
/// for the disk.
///
/// **Journal**: the store is a `JobObserver`. A node's row is written from the event that
/// announces its state, in the same transaction as that event — so a restart never sees an outcome
/// without its event or the other way round, and a node that finished is never run again.
public final class SQLiteJobStore: JobStore, JobObserver, DeliveryStore, WebhookJournaling {
    public struct Options: Sendable {
        /// `FULL` (default): every commit is fsynced. `NORMAL`: WAL commits survive a crash of the
        /// process but the last ones may be lost on power failure.
        public var synchronousFull = true
        /// Finished jobs kept in memory for fast reads; older ones are loaded from the file.
        public var cachedFinishedJobs = 10_000
        /// Queued writes past which new jobs are refused (503 `store.busy`) rather than queued.
        public var maxQueuedWrites = 200_000
        /// Runs `PRAGMA quick_check` when opening the file and refuses a damaged one.
        public var checkIntegrity = false
        /// Finished jobs older than this are deleted in the background (`--retention`).
        public var retention: Duration?
        /// Told how long each transaction took, after it ends (metrics); must be quick.
        public var onCommit: @Sendable (_ nanoseconds: UInt64) -> Void = { _ in }
        public init() {}
    }

    public let path: String
    let engine: Engine
    let logger: Logger
    let options: Options
    private let writer: SQLiteConnection
    private let writerPool = WorkerPool(name: "store-writer", size: 1)
    private let readerPool = WorkerPool(name: "store-readers", size: 2)
    /// Completes the futures of committed writes, in commit order (one thread).
    private let completionPool = WorkerPool(name: "store-completions", size: 1)
    private let readers: Mutex<[SQLiteConnection]>
    private let cache = Mutex(Cache())
    private let queue = Mutex(WriteQueue())
    private let retentionTimer = Mutex<TimerQueue.ID?>(nil)
    /// Set once by `attachWebhooks`, before any job runs.
    private let webhooks = Mutex<(planner: WebhookPlanner, dispatcher: WebhookDispatcher)?>(nil)

    private struct Cache {
        var runs: [String: JobRun] = [:]
        /// Ids of finished jobs in the order they finished; the oldest leave the cache first.
        var finished: [String] = []
        var finishedHead = 0
        var count = 0
        /// Jobs just evicted, freed by the completion thread after the next commit: freeing a job
        /// is many small frees, and the writer thread bounds durable throughput.
        var evicted: [JobRun] = []
    }

    private struct WriteQueue {
        var items: [Write] = []
        var draining = false
    }

    private enum Write {
        case insert(JobRun, ByteBuffer, IdempotencyKey?, Promise<InsertResult>)
        case events(JobRun, [JobEvent])
        case cancelRequested(String)
        case delete(String, Promise<DeleteResult>)
        case flush(Promise<Void>)
        case expire(before: Timestamp)
        case addDeliveries([Delivery])
        case updateDelivery(Delivery)
    }

    /// Opens (creating the file and its directory if needed) and migrates the store, and starts
    /// journalling `engine`'s jobs.
    public init(path: String, engine: Engine, options: Options = Options(), logger: Logger) throws {
        self.path = path
        self.engine = engine
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
                throw SQLiteError(code: 11, message: "\(path) is damaged: \(problems.prefix(5).joined(separator: "; "))")
            }
        }
        try SQLiteSchema.migrate(writer)
        let count = Int(try writer.scalar("SELECT count(*) FROM jobs") ?? 0)
        self.writer = writer
        self.readers = Mutex(try (0..<2).map { _ in try SQLiteConnection(path: path) })
        self.cache.withLock { $0.count = count }
        engine.addObserver(self)
        if let retention = options.retention { self.scheduleRetention(retention) }
    }

    // MARK: - JobStore

    public func insert(_ run: JobRun, document: ByteBuffer, idempotency: IdempotencyKey?) -> Future<InsertResult> {
        let promise = Promise<InsertResult>()
        guard self.enqueue(.insert(run, document, idempotency, promise), refuseWhenFull: true) else {
            return Future(error: StoreError.busy)
        }
        return promise.future
    }

    public func run(_ id: String) -> Future<JobRun?> {
        if let run = self.cache.withLock({ $0.runs[id] }) { return Future(value: run) }
        guard JobID.isPlausible(id) else { return Future(value: nil) }
        return self.read { db in try self.load(id, db) }.map { run in
            guard let run else { return nil }
            return self.cacheFinished(run)
        }
    }

    public func list(_ query: JobQuery) -> Future<JobPage> {
        self.read { db -> JobPage in
            var sql = "SELECT position, id, name, labels, state, error, progress, created_at, started_at, finished_at FROM jobs WHERE 1"
            var binds: [SQLiteValue?] = []
            if let before = query.before {
                sql += " AND position < ?"
                binds.append(.int(Int64(bitPattern: before)))
            }
            if let state = query.state {
                sql += " AND state = ?"
                binds.append(.text(state.rawValue))
            }
            for label in query.labels {
                sql += " AND position IN (SELECT position FROM labels WHERE key = ? AND value = ?)"
                binds.append(.text(label.key))
                binds.append(.text(label.value))
            }
            sql += " ORDER BY position DESC LIMIT ?"
            binds.append(.int(Int64(query.limit + 1)))
            let statement = try db.statement(sql, cached: query.labels.count <= 2)
            for (offset, value) in binds.enumerated() { try statement.bind(value, at: Int32(offset + 1)) }
            var rows: [(position: UInt64, snapshot: JobSnapshot)] = []
            while try statement.step() {
                rows.append((UInt64(bitPattern: statement.int(0)), try Self.snapshot(statement)))
            }
            statement.reset()
            let more = rows.count > query.limit
            if more { rows.removeLast() }
            // Jobs in memory are shown as they are now (the file may be a commit behind).
            let live = self.cache.withLock { cache in rows.map { cache.runs[$0.snapshot.id] } }
            var items: [JobSnapshot] = []
            for (row, run) in zip(rows, live) {
                let snapshot = run?.snapshot ?? row.snapshot
                if let state = query.state, snapshot.state != state { continue }
                items.append(snapshot)
            }
            return JobPage(items: items, next: more ? rows.last?.position : nil)
        }
    }

    public func delete(_ id: String) -> Future<DeleteResult> {
        if let run = self.cache.withLock({ $0.runs[id] }), !run.snapshot.state.isTerminal { return Future(value: .notTerminal) }
        guard JobID.isPlausible(id) else { return Future(value: .notFound) }
        let promise = Promise<DeleteResult>()
        self.enqueue(.delete(id, promise))
        return promise.future
    }

    public func flush() -> Future<Void> {
        let promise = Promise<Void>()
        self.enqueue(.flush(promise))
        return promise.future
    }

    public func noteCancelRequested(_ run: JobRun) {
        self.enqueue(.cancelRequested(run.id))
    }

    public var count: Int { self.cache.withLock { $0.count } }

    public func recoverUnfinished() throws -> [JobRun] {
        // A connection of its own: the writer's belongs to the writer thread, which may already be
        // running retention (`writeExpire`) on it — its prepared-statement cache is not shareable.
        let db = try SQLiteConnection(path: self.path)
        let statement = try db.prepared("SELECT id FROM jobs WHERE state IN ('pending', 'running') ORDER BY position")
        var ids: [String] = []
        while try statement.step() { ids.append(statement.text(0)) }
        statement.reset()
        var runs: [JobRun] = []
        for id in ids {
            do {
                guard let run = try self.load(id, db) else { continue }
                runs.append(run)
            } catch {
                self.logger.error("cannot resume a stored job; it stays as it was", metadata: ["job.id": "\(id)", "error": "\(error)"])
            }
        }
        self.cache.withLock { cache in for run in runs { cache.runs[run.id] = run } }
        return runs
    }

    /// Writes what is queued, checkpoints the WAL into the file and lets the store's threads exit;
    /// the future completes when that is done.
    @discardableResult
    public func close() -> Future<Void> {
        if let timer = self.retentionTimer.withLock({ $0 }) { TimerQueue.shared.cancel(timer) }
        let closed = Promise<Void>()
        self.flush().whenComplete { _ in
            self.writerPool.execute {
                try? self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self.completionPool.execute {
                    self.writerPool.shutdown()
                    self.readerPool.shutdown()
                    self.completionPool.shutdown()
                    closed.succeed(())
                }
            }
        }
        return closed.future
    }

    // MARK: - JobObserver

    public func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        // A copy of the batch: holding a slice would make the run's event array copy on append.
        self.enqueue(.events(run, Array(events)))
    }

    // MARK: - The writer

    @discardableResult
    private func enqueue(_ write: Write, refuseWhenFull: Bool = false) -> Bool {
        let (accepted, start): (Bool, Bool) = self.queue.withLock { queue in
            if refuseWhenFull, queue.items.count >= self.options.maxQueuedWrites { return (false, false) }
            queue.items.append(write)
            if queue.draining { return (true, false) }
            queue.draining = true
            return (true, true)
        }
        if start { self.writerPool.execute { self.drain() } }
        return accepted
    }

    /// Commits what is queued, batch after batch, until the queue is empty.
    private func drain() {
        while true {
            let batch: [Write] = self.queue.withLock { queue in
                if queue.items.isEmpty {
                    queue.draining = false
                    return []
                }
                let take = min(queue.items.count, 4096)
                if take == queue.items.count {
                    defer { queue.items = [] }
                    return queue.items
                }
                defer { queue.items.removeFirst(take) }
                return Array(queue.items[0..<take])
            }
            if batch.isEmpty { return }
            self.commit(Self.coalescingEvents(batch))
        }
    }

    /// `batch` with each job's event writes merged into its first one, in order: a job that
    /// starts and ends within one batch (most short jobs: `job.started` is published on its own)
    /// then costs one pass of `writeEvents` — one row update instead of two. Moving a job's later
    /// events forward is safe: nothing else in a batch depends on them.
    private static func coalescingEvents(_ batch: [Write]) -> [Write] {
        var merged: [Write] = []
        merged.reserveCapacity(batch.count)
        var firstEvents: [ObjectIdentifier: Int] = [:]
        for write in batch {
            if case .events(let run, let events) = write {
                if let index = firstEvents[ObjectIdentifier(run)], case .events(_, let earlier) = merged[index] {
                    merged[index] = .events(run, earlier + events)
                    continue
                }
                firstEvents[ObjectIdentifier(run)] = merged.count
            }
            merged.append(write)
        }
        return merged
    }

    /// Writes `batch` in one transaction; then completes its futures (outside the transaction).
    private func commit(_ batch: [Write]) {
        var completions: [@Sendable () -> Void] = []
        completions.reserveCapacity(batch.count)
        var continueExpiring: Timestamp?
        var planned: [Delivery] = []
        let started = DispatchTimeNanoseconds.now()
        do {
            try self.writer.transaction {
                for write in batch {
                    switch write {
                    case .insert(let run, let document, let idempotency, let promise):
                        let result = try self.writeInsert(run, document: document, idempotency: idempotency)
                        completions.append { promise.succeed(result) }
                    case .events(let run, let events):
                        try self.writeEvents(run, events, planned: &planned)
                    case .addDeliveries(let deliveries):
                        for delivery in deliveries { try self.writeDelivery(delivery) }
                    case .updateDelivery(let delivery):
                        try self.writer.prepared("UPDATE deliveries SET state = ?, attempts = ?, next_attempt_at = ? WHERE id = ?").bind(
                            .text(delivery.state.rawValue),
                            .text(Self.attemptsJSON(delivery.attempts).jsonString),
                            .int(delivery.nextAttemptAt.milliseconds),
                            .text(delivery.id)
                        ).run()
                    case .cancelRequested(let id):
                        try self.writer.prepared("UPDATE jobs SET cancel_requested = 1 WHERE id = ?").bind(.text(id)).run()
                    case .delete(let id, let promise):
                        let result = try self.writeDelete(id)
                        completions.append { promise.succeed(result) }
                    case .flush(let promise):
                        completions.append { promise.succeed(()) }
                    case .expire(let before):
                        if try self.writeExpire(before: before) { continueExpiring = before }
                    }
                }
            }
        } catch {
            // The transaction rolled back: nothing of this batch is on disk. New jobs are refused
            // (their clients get a 503 and may retry); journal entries are lost, which is logged.
            self.logger.error("store commit failed", metadata: ["error": "\(error)", "writes": "\(batch.count)"])
            completions = []
            planned = []
            let problem = StoreError.writeFailed
            for write in batch {
                switch write {
                case .insert(let run, _, _, let promise):
                    self.cache.withLock { cache in
                        if cache.runs.removeValue(forKey: run.id) != nil { cache.count -= 1 }
                    }
                    completions.append { promise.fail(problem) }
                case .delete(_, let promise): completions.append { promise.fail(problem) }
                case .flush(let promise): completions.append { promise.fail(problem) }
                case .events, .cancelRequested, .expire, .addDeliveries, .updateDelivery: break
                }
            }
        }
        self.options.onCommit(DispatchTimeNanoseconds.now() &- started)
        // The waiting requests continue on another thread (starting their jobs, building their
        // responses) while this one commits the next batch.
        let evicted = self.cache.withLock { cache in
            defer { cache.evicted = [] }
            return cache.evicted
        }
        if !completions.isEmpty || !evicted.isEmpty {
            let finished = completions
            self.completionPool.execute {
                for completion in finished { completion() }
                withExtendedLifetime(evicted) {}
            }
        }
        if let continueExpiring { self.enqueue(.expire(before: continueExpiring)) }
        // Deliveries are sent only once they are on disk with the events they announce.
        if !planned.isEmpty, let dispatcher = self.webhooks.withLock({ $0?.dispatcher }) { dispatcher.dispatch(planned) }
    }

    private func writeInsert(_ run: JobRun, document: ByteBuffer, idempotency: IdempotencyKey?) throws -> InsertResult {
        let db = self.writer
        if let idempotency {
            let seen = try db.prepared("SELECT id, body_hash FROM jobs WHERE idempotency_key = ?").bind(.text(idempotency.key))
            if try seen.step() {
                let id = seen.text(0)
                let hash = UInt64(bitPattern: seen.int(1))
                seen.reset()
                guard hash == idempotency.bodyHash else { return .mismatch }
                if let existing = self.cache.withLock({ $0.runs[id] }) { return .existing(existing) }
                if let existing = try self.load(id, db) { return .existing(self.cacheFinished(existing)) }
            }
        }
        let spec = run.spec
        var labels = JSONObject()
        for key in spec.labels.keys.sorted() { labels[key] = .string(spec.labels[key]!) }
        let snapshot = run.snapshot
        try db.prepared("INSERT INTO jobs (id, name, document, labels, state, idempotency_key, body_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        ).bind(
            .text(run.id),
            spec.name.map(SQLiteValue.text),
            .bytes(Array(document.readableBytesView)),
            .text(JSONValue.object(labels).jsonString),
            .text(snapshot.state.rawValue),
            idempotency.map { .text($0.key) },
            idempotency.map { .int(Int64(bitPattern: $0.bodyHash)) },
            .int(snapshot.createdAt.milliseconds)
        ).run()
        if !spec.labels.isEmpty {
            let position = db.lastInsertRowID
            let statement = try db.prepared("INSERT INTO labels (key, value, position) VALUES (?, ?, ?)")
            for (key, value) in spec.labels {
                try statement.bind(.text(key), .text(value), .int(position)).run()
                statement.reset()
            }
        }
        self.cache.withLock { cache in
            cache.runs[run.id] = run
            cache.count += 1
        }
        return .inserted
    }

    private func writeEvents(_ run: JobRun, _ events: [JobEvent], planned: inout [Delivery]) throws {
        let db = self.writer
        let cached = self.cache.withLock { $0.runs[run.id] === run }
        if !cached {
            // Deleted meanwhile (or evicted): journal only for a job that still exists.
            let exists = try db.prepared("SELECT 1 FROM jobs WHERE id = ?").bind(.text(run.id))
            let found = try exists.step()
            exists.reset()
            guard found else { return }
        }
        let insert = try db.prepared("INSERT OR IGNORE INTO events (job_id, seq, type, time, task_id, data) VALUES (?, ?, ?, ?, ?, ?)")
        // One row write per node and per job for the whole batch: the state its last event says.
        var nodeOrder: [String] = []
        var lastNodeEvent: [String: JobEventType] = [:]
        var startedAt: Timestamp?
        var ended = false
        for event in events {
            try insert.bind(
                .text(run.id),
                .int(Int64(event.seq)),
                .text(event.type.rawValue),
                .int(event.time.milliseconds),
                event.taskId.map(SQLiteValue.text),
                event.data.map { .text($0.jsonString) }
            ).run()
            insert.reset()
            switch event.type {
            case .jobCreated: break
            case .jobStarted: startedAt = event.time
            case .jobSucceeded, .jobFailed, .jobCancelled: ended = true
            case .taskStarted, .taskRetrying, .taskSucceeded, .taskFailed, .taskCancelled, .taskSkipped:
                guard let taskId = event.taskId else { continue }
                if lastNodeEvent.updateValue(event.type, forKey: taskId) == nil { nodeOrder.append(taskId) }
            }
        }
        for taskId in nodeOrder {
            guard let type = lastNodeEvent[taskId], let (ordinal, record) = run.indexedNode(taskId) else { continue }
            var row = record
            if type == .taskStarted || type == .taskRetrying {
                // The row says what the event says, even when the node has moved on since: its
                // outcome is written with the event that announces it, in a later batch.
                row.state = .running
                row.result = nil
                row.error = nil
                row.finishedAt = nil
            } else if !record.state.isTerminal {
                continue
            }
            try self.writeNode(run.id, ordinal: ordinal, row)
        }
        if let planner = self.webhooks.withLock({ $0?.planner }) {
            let deliveries = planner.plan(run, events: events[...])
            for delivery in deliveries { try self.writeDelivery(delivery) }
            planned += deliveries
        }
        if ended {
            let snapshot = run.snapshot
            try db.prepared("UPDATE jobs SET state = ?, result = ?, error = ?, progress = ?, started_at = ?, finished_at = ? WHERE id = ?").bind(
                .text(snapshot.state.rawValue),
                snapshot.result.map { .text($0.jsonString) },
                snapshot.error.map { .text($0.json.jsonString) },
                .text(snapshot.progress.jsonString),
                snapshot.startedAt.map { .int($0.milliseconds) },
                .int((snapshot.finishedAt ?? .now()).milliseconds),
                .text(run.id)
            ).run()
            // Nodes that never ran have no events: store them too, so the job reads back whole.
            for (ordinal, record) in run.nodes.enumerated() where record.state == .pending {
                try self.writeNode(run.id, ordinal: ordinal, record)
            }
            _ = self.cacheFinished(run)
        } else if let startedAt {
            try db.prepared("UPDATE jobs SET state = 'running', started_at = ? WHERE id = ?").bind(.int(startedAt.milliseconds), .text(run.id)).run()
        }
    }

    private func writeNode(_ jobID: String, ordinal: Int, _ record: NodeRecord) throws {
        try self.writer.prepared("""
            INSERT INTO nodes (job_id, node_id, ordinal, type, action, executor, parent, state, attempts, result, error, started_at, finished_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (job_id, node_id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
                result = excluded.result, error = excluded.error, started_at = excluded.started_at, finished_at = excluded.finished_at
            """
        ).bind(
            .text(jobID),
            .text(record.id),
            .int(Int64(ordinal)),
            .text(record.type),
            record.action.map(SQLiteValue.text),
            record.executor.map(SQLiteValue.text),
            record.parent.map(SQLiteValue.text),
            .text(record.state.rawValue),
            .int(Int64(record.attempts)),
            record.state == .succeeded ? record.result.map { .text($0.jsonString) } : nil,
            record.error.map { .text($0.json.jsonString) },
            record.startedAt.map { .int($0.milliseconds) },
            record.finishedAt.map { .int($0.milliseconds) }
        ).run()
    }

    private func writeDelete(_ id: String) throws -> DeleteResult {
        let db = self.writer
        let row = try db.prepared("SELECT state FROM jobs WHERE id = ?").bind(.text(id))
        guard try row.step() else { return .notFound }
        let stored = JobState(rawValue: row.text(0)) ?? .running
        row.reset()
        let live = self.cache.withLock { $0.runs[id] }
        // Memory is ahead of the file: a job that ended a moment ago may not have its row updated.
        let state = live?.snapshot.state ?? stored
        guard state.isTerminal else { return .notTerminal }
        try self.deleteRows(id)
        return .deleted
    }

    private func deleteRows(_ id: String) throws {
        let db = self.writer
        try db.prepared("DELETE FROM events WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM deliveries WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM nodes WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM labels WHERE position IN (SELECT position FROM jobs WHERE id = ?)").bind(.text(id)).run()
        try db.prepared("DELETE FROM jobs WHERE id = ?").bind(.text(id)).run()
        self.cache.withLock { cache in
            cache.runs[id] = nil
            cache.count -= 1
        }
    }

    /// Deletes up to 500 jobs that finished before `before`; `true` when there may be more.
    private func writeExpire(before: Timestamp) throws -> Bool {
        let select = try self.writer.prepared("SELECT id FROM jobs WHERE finished_at < ? ORDER BY finished_at LIMIT 500")
            .bind(.int(before.milliseconds))
        var doomed: [String] = []
        while try select.step() { doomed.append(select.text(0)) }
        select.reset()
        for id in doomed { try self.deleteRows(id) }
        if !doomed.isEmpty { self.logger.debug("retention removed finished jobs", metadata: ["count": "\(doomed.count)"]) }
        return doomed.count == 500
    }

    private func scheduleRetention(_ retention: Duration) {
        let seconds = Double(retention.components.seconds)
        let period = Duration.milliseconds(Int64(max(1, min(60, seconds / 10)) * 1000))
        self.enqueue(.expire(before: Timestamp(milliseconds: Timestamp.now().milliseconds - retention.milliseconds)))
        let timer = TimerQueue.shared.schedule(after: period) { [weak self] in self?.scheduleRetention(retention) }
        self.retentionTimer.withLock { $0 = timer }
    }

    // MARK: - Webhook outbox

    public func attachWebhooks(planner: WebhookPlanner, deliveries: any DeliveryStore, dispatcher: WebhookDispatcher) {
        self.webhooks.withLock { $0 = (planner, dispatcher) }
    }

    /// Queues new deliveries (the server plans its own inside the journal instead).
    public func add(_ deliveries: [Delivery]) {
        self.enqueue(.addDeliveries(deliveries))
    }

    /// Records an attempt. Queued, not awaited: if the process dies first, the delivery is still
    /// `pending` on disk and is sent again after the restart (at least once).
    public func update(_ delivery: Delivery) {
        self.enqueue(.updateDelivery(delivery))
    }

    public func deliveries(jobID: String) -> Future<[Delivery]> {
        self.read { db in
            let rows = try db.prepared(
                "SELECT id, job_id, seq, event_type, url, headers, secret, body, state, attempts, next_attempt_at, retry, created_at FROM deliveries WHERE job_id = ? ORDER BY seq, id"
            ).bind(.text(jobID))
            var found: [Delivery] = []
            while try rows.step() { if let delivery = try Self.delivery(rows) { found.append(delivery) } }
            rows.reset()
            return found
        }
    }

    /// The deliveries still to send (start-up, on a connection of its own).
    public func pending() -> [Delivery] {
        do {
            let db = try SQLiteConnection(path: self.path)
            let rows = try db.prepared(
                "SELECT id, job_id, seq, event_type, url, headers, secret, body, state, attempts, next_attempt_at, retry, created_at FROM deliveries WHERE state = 'pending' ORDER BY next_attempt_at"
            )
            var found: [Delivery] = []
            while try rows.step() { if let delivery = try Self.delivery(rows) { found.append(delivery) } }
            rows.reset()
            return found
        } catch {
            self.logger.error("cannot read pending webhook deliveries", metadata: ["error": "\(error)"])
            return []
        }
    }

    /// Nothing to do: deleting a job removes its deliveries in the same transaction.
    public func remove(jobID: String) {}

    private func writeDelivery(_ delivery: Delivery) throws {
        var headers = JSONObject()
        for key in delivery.headers.keys.sorted() { headers[key] = .string(delivery.headers[key]!) }
        var retry = JSONObject()
        retry["maxAttempts"] = .int(delivery.retry.maxAttempts)
        retry["delayMs"] = .int(delivery.retry.delayMs)
        retry["backoff"] = .double(delivery.retry.backoff)
        if let maxDelayMs = delivery.retry.maxDelayMs { retry["maxDelayMs"] = .int(maxDelayMs) }
        retry["jitter"] = .bool(delivery.retry.jitter)
        try self.writer.prepared(
            """
            INSERT OR IGNORE INTO deliveries (id, job_id, seq, event_type, url, headers, secret, body, state, attempts, next_attempt_at, retry, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        ).bind(
            .text(delivery.id),
            .text(delivery.jobID),
            .int(Int64(delivery.seq)),
            .text(delivery.eventType.rawValue),
            .text(delivery.url),
            .text(JSONValue.object(headers).jsonString),
            .text(delivery.secret.storageText),
            .bytes(delivery.body),
            .text(delivery.state.rawValue),
            .text(Self.attemptsJSON(delivery.attempts).jsonString),
            .int(delivery.nextAttemptAt.milliseconds),
            .text(JSONValue.object(retry).jsonString),
            .int(delivery.createdAt.milliseconds)
        ).run()
    }

    private static func attemptsJSON(_ attempts: [DeliveryAttempt]) -> JSONValue {
        .array(
            attempts.map { attempt in
                var object = JSONObject()
                object["at"] = .int(Int(attempt.at.milliseconds))
                if let status = attempt.status { object["status"] = .int(status) }
                if let error = attempt.error { object["error"] = .string(error) }
                object["durationMs"] = .int(attempt.durationMs)
                return .object(object)
            }
        )
    }

    private static func delivery(_ row: SQLiteStatement) throws -> Delivery? {
        guard let type = JobEventType(rawValue: row.text(3)), let state = DeliveryState(rawValue: row.text(8)),
            let secret = SecretReference(storageText: row.text(6))
        else { return nil }
        var headers: [String: String] = [:]
        if case .object(let object) = try JSONParser.parse(row.text(5), limits: storedLimits) {
            for (key, value) in object { headers[key] = value.stringValue ?? "" }
        }
        var attempts: [DeliveryAttempt] = []
        for item in try JSONParser.parse(row.text(9), limits: storedLimits).arrayValue ?? [] {
            attempts.append(
                DeliveryAttempt(
                    at: Timestamp(milliseconds: Int64(item["at"]?.intValue ?? 0)),
                    status: item["status"]?.intValue,
                    error: item["error"]?.stringValue,
                    durationMs: item["durationMs"]?.intValue ?? 0
                )
            )
        }
        let retryObject = try JSONParser.parse(row.text(11), limits: storedLimits)
        let retry = RetrySpec(
            maxAttempts: retryObject["maxAttempts"]?.intValue ?? 1,
            delayMs: retryObject["delayMs"]?.intValue ?? 0,
            backoff: retryObject["backoff"]?.doubleValue ?? 2,
            maxDelayMs: retryObject["maxDelayMs"]?.intValue,
            jitter: retryObject["jitter"]?.boolValue ?? false
        )
        let body = row.withBytes(7) { Array($0) }
        return Delivery(
            id: row.text(0),
            jobID: row.text(1),
            seq: Int(row.int(2)),
            eventType: type,
            url: row.text(4),
            headers: headers,
            secret: secret,
            body: body,
            state: state,
            attempts: attempts,
            nextAttemptAt: Timestamp(milliseconds: row.int(10)),
            retry: retry,
            createdAt: Timestamp(milliseconds: row.int(12))
        )
    }

    // MARK: - Reading

    /// Runs `body` on a reader thread with a connection of its own.
    private func read<R: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> R) -> Future<R> {
        self.readerPool.submit {
            let connection = try self.readers.withLock { readers in
                if let connection = readers.popLast() { return connection }
                return try SQLiteConnection(path: self.path)
            }
            defer { self.readers.withLock { $0.append(connection) } }
            do {
                return try body(connection)
            } catch let error as SQLiteError {
                self.logger.error("store read failed", metadata: ["error": "\(error)"])
                throw StoreError.readFailed
            }
        }
    }

    /// Puts a finished job in the cache of recent ones (the cached copy wins if there is one).
    private func cacheFinished(_ run: JobRun) -> JobRun {
        self.cache.withLock { cache in
            if let cached = cache.runs[run.id], cached !== run { return cached }
            if cache.runs[run.id] == nil { cache.runs[run.id] = run }
            cache.finished.append(run.id)
            let excess = cache.finished.count - cache.finishedHead - self.options.cachedFinishedJobs
            if excess > 0 {
                for id in cache.finished[cache.finishedHead..<(cache.finishedHead + excess)] {
                    if let old = cache.runs[id], old.jobState.isTerminal {
                        cache.runs[id] = nil
                        cache.evicted.append(old)
                    }
                }
                cache.finishedHead += excess
                if cache.finishedHead > 4096, cache.finishedHead * 2 > cache.finished.count {
                    cache.finished.removeFirst(cache.finishedHead)
                    cache.finishedHead = 0
                }
            }
            return run
        }
    }

    /// Rebuilds job `id` from the file: a finished job as it ended, an unfinished one ready to
    /// resume (nodes with a stored outcome keep it).
    private func load(_ id: String, _ db: SQLiteConnection) throws -> JobRun? {
        let row = try db.prepared("SELECT document, state, result, error, created_at, started_at, finished_at, cancel_requested FROM jobs WHERE id = ?"
        ).bind(.text(id))
        guard try row.step() else { return nil }
        let document = try row.withBytes(0) { bytes in try JSONParser.parse(bytes, limits: Self.storedLimits) }
        let state = JobState(rawValue: row.text(1)) ?? .running
        let result = try row.optionalText(2).map { try JSONParser.parse($0, limits: Self.storedLimits) }
        let error = try row.optionalText(3).flatMap { TaskError(json: try JSONParser.parse($0, limits: Self.storedLimits)) }
        let createdAt = Timestamp(milliseconds: row.int(4))
        let startedAt = row.optionalInt(5).map(Timestamp.init(milliseconds:))
        let finishedAt = row.optionalInt(6).map(Timestamp.init(milliseconds:))
        let cancelRequested = row.int(7) != 0
        row.reset()
        let spec = try self.engine.decoder.decodeJob(document)

        let nodes = try db.prepared("SELECT node_id, type, action, executor, parent, state, attempts, result, error, started_at, finished_at FROM nodes WHERE job_id = ? ORDER BY ordinal"
        ).bind(.text(id))
        var records: [NodeRecord] = []
        while try nodes.step() {
            records.append(
                NodeRecord(
                    id: nodes.text(0),
                    type: nodes.text(1),
                    action: nodes.optionalText(2),
                    executor: nodes.optionalText(3),
                    state: NodeState(rawValue: nodes.text(5)) ?? .pending,
                    attempts: Int(nodes.int(6)),
                    result: try nodes.optionalText(7).map { try JSONParser.parse($0, limits: Self.storedLimits) },
                    error: try nodes.optionalText(8).flatMap { TaskError(json: try JSONParser.parse($0, limits: Self.storedLimits)) },
                    startedAt: nodes.optionalInt(9).map(Timestamp.init(milliseconds:)),
                    finishedAt: nodes.optionalInt(10).map(Timestamp.init(milliseconds:)),
                    parent: nodes.optionalText(4)
                )
            )
        }
        nodes.reset()

        let eventRows = try db.prepared("SELECT seq, type, time, task_id, data FROM events WHERE job_id = ? ORDER BY seq").bind(.text(id))
        var events: [JobEvent] = []
        while try eventRows.step() {
            guard let type = JobEventType(rawValue: eventRows.text(1)) else { continue }
            events.append(
                JobEvent(
                    seq: Int(eventRows.int(0)),
                    type: type,
                    time: Timestamp(milliseconds: eventRows.int(2)),
                    taskId: eventRows.optionalText(3),
                    data: try eventRows.optionalText(4).map { try JSONParser.parse($0, limits: Self.storedLimits) }
                )
            )
        }
        eventRows.reset()

        var restored = RestoredJob(nodes: [:], events: events, startedAt: startedAt, cancelRequested: cancelRequested)
        if state.isTerminal {
            restored.finished = FinishedJob(state: state, result: result, error: error, finishedAt: finishedAt ?? createdAt, records: records)
        } else {
            for record in records { restored.nodes[record.id] = record }
        }
        return self.engine.makeRun(id: id, spec: spec, createdAt: createdAt, restored: restored)
    }

    private static let storedLimits = JSONParser.Limits(maxDepth: 1024, maxBytes: 1 << 30, maxStringBytes: 1 << 30)

    /// A list item from a `jobs` row (list views show no input or result).
    private static func snapshot(_ row: SQLiteStatement) throws -> JobSnapshot {
        var labels: [String: String] = [:]
        if case .object(let object) = try JSONParser.parse(row.text(3), limits: storedLimits) {
            for (key, value) in object { labels[key] = value.stringValue ?? "" }
        }
        var progress = JobProgress()
        if let text = row.optionalText(6), case .object(let object) = try JSONParser.parse(text, limits: storedLimits) {
            progress.total = object["total"]?.intValue ?? 0
            progress.pending = object["pending"]?.intValue ?? 0
            progress.running = object["running"]?.intValue ?? 0
            progress.succeeded = object["succeeded"]?.intValue ?? 0
            progress.failed = object["failed"]?.intValue ?? 0
            progress.cancelled = object["cancelled"]?.intValue ?? 0
            progress.skipped = object["skipped"]?.intValue ?? 0
        }
        return JobSnapshot(
            id: row.text(1),
            name: row.optionalText(2),
            state: JobState(rawValue: row.text(4)) ?? .running,
            input: .null,
            result: nil,
            error: try row.optionalText(5).flatMap { TaskError(json: try JSONParser.parse($0, limits: storedLimits)) },
            labels: labels,
            createdAt: Timestamp(milliseconds: row.int(7)),
            startedAt: row.optionalInt(8).map(Timestamp.init(milliseconds:)),
            finishedAt: row.optionalInt(9).map(Timestamp.init(milliseconds:)),
            progress: progress,
            lastEventSeq: 0
        )
    }

    private static func createDirectory(of path: String) throws {
        guard let slash = path.lastIndex(of: "/") else { return }
        let directory = String(path[..<slash])
        guard !directory.isEmpty else { return }
        var current = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o755) != 0, errno != EEXIST {
                throw SQLiteError(code: 0, message: "cannot create the directory \(current) for \(path): \(String(cString: strerror(errno)))")
            }
        }
    }
}

extension Duration {
    var milliseconds: Int64 { self.components.seconds * 1000 + self.components.attoseconds / 1_000_000_000_000_000 }
}
