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

// The writer: one thread commits everything queued in one transaction (group commit), and the
// journal — every job's events with the node and job rows they change — goes through it.

extension SQLiteJobStore {
    struct WriteQueue {
        var items: [Write] = []
        var draining = false
    }

    enum Write {
        case insert(JobRun, ByteBuffer, IdempotencyKey?, Promise<InsertResult>)
        case events(JobRun, [JobEvent])
        case cancelRequested(String)
        case delete(String, Promise<DeleteResult>)
        case flush(Promise<Void>)
        case expire(before: Timestamp)
        case addDeliveries([Delivery])
        case updateDelivery(Delivery)
        case addLeases([StoredLease], Promise<Void>)
        case removeLeases([String])
    }

    // MARK: - JobObserver (the journal)

    public func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        // A copy of the batch: holding a slice would make the run's event array copy on append.
        self.enqueue(.events(run, Array(events)))
    }

    // MARK: - The writer

    @discardableResult
    func enqueue(_ write: Write, refuseWhenFull: Bool = false) -> Bool {
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
    func drain() {
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
            self.commit(self.plan(batch))
        }
    }

    // MARK: - Planning: everything but the statements

    /// One step of a commit, its rows already encoded.
    enum Step {
        case insert(NewJob)
        case journal(JournalEntry)
        case write(Write)
    }

    /// A job to insert, with the position it will have.
    struct NewJob {
        let run: JobRun
        let position: Int64
        let document: ByteBuffer
        let idempotency: IdempotencyKey?
        let labels: [UInt8]?
        let promise: Promise<InsertResult>
    }

    /// One job's journal for one commit: its events (one row), and the node and job rows they change.
    struct JournalEntry {
        let run: JobRun
        let position: Int64
        let firstSeq: Int
        let lastSeq: Int
        let events: [UInt8]
        /// Node rows to upsert (a job still running after this commit).
        var nodes: [(ordinal: Int, record: NodeRecord)] = []
        /// `job.started` is in this commit and the job goes on.
        var startedAt: Timestamp?
        /// The job ended in this commit.
        var ended: EndedJob?
        var deliveries: [Delivery] = []
    }

    struct EndedJob {
        let snapshot: JobSnapshot
        /// Every node record, for `jobs.nodes`.
        let nodes: [UInt8]
        /// Node rows may exist from earlier commits (the job did not start in this one): they go.
        let dropNodeRows: Bool
    }

    /// `batch` made ready for the connection: positions given to new jobs, each job's events of
    /// the batch merged into one journal entry (at its first write: nothing else in a batch depends
    /// on a job's later events), every row's JSON encoded.
    func plan(_ batch: [Write]) -> [Step] {
        var steps: [Step] = []
        steps.reserveCapacity(batch.count)
        var journals: [ObjectIdentifier: (index: Int, events: [JobEvent])] = [:]
        for write in batch {
            switch write {
            case .insert(let run, let document, let idempotency, let promise):
                let position = self.nextPosition.wrappingAdd(1, ordering: .relaxed).newValue
                // Before the job starts (it starts once this insert is committed), so every
                // journal entry of the job finds it.
                run.storeKey.store(position, ordering: .relaxed)
                let labels = run.spec.labels
                var labelsJSON: [UInt8]?
                if !labels.isEmpty {
                    var json = JSONWriter(capacity: 64)
                    json.beginObject()
                    for key in labels.keys.sorted() {
                        json.escapedKey(key)
                        json.string(labels[key]!)
                    }
                    json.endObject()
                    labelsJSON = json.bytes
                }
                steps.append(
                    .insert(
                        NewJob(
                            run: run,
                            position: position,
                            document: document,
                            idempotency: idempotency,
                            labels: labelsJSON,
                            promise: promise
                        )
                    )
                )
            case .events(let run, let events):
                let key = ObjectIdentifier(run)
                if journals[key] != nil {
                    journals[key]!.events += events
                } else {
                    journals[key] = (steps.count, events)
                    steps.append(.write(write))
                }
            default:
                steps.append(.write(write))
            }
        }
        for (_, journal) in journals {
            guard case .write(.events(let run, _)) = steps[journal.index] else { continue }
            steps[journal.index] = .journal(self.journalEntry(run, journal.events))
        }
        return steps
    }

    func journalEntry(_ run: JobRun, _ events: [JobEvent]) -> JournalEntry {
        var entry = JournalEntry(
            run: run,
            position: run.storeKey.load(ordering: .relaxed),
            firstSeq: events.first?.seq ?? 0,
            lastSeq: events.last?.seq ?? 0,
            events: StoredRecords.encodeEvents(events)
        )
        // One row write per node and per job for the whole batch: the state its last event says.
        var nodeOrder: [String] = []
        var lastNodeEvent: [String: JobEventType] = [:]
        var startedAt: Timestamp?
        var ended = false
        for event in events {
            switch event.type {
            case .jobCreated: break
            case .jobStarted: startedAt = event.time
            case .jobSucceeded, .jobFailed, .jobCancelled: ended = true
            case .taskStarted, .taskRetrying, .taskSucceeded, .taskFailed, .taskCancelled, .taskSkipped:
                guard let taskId = event.taskId else { continue }
                if lastNodeEvent.updateValue(event.type, forKey: taskId) == nil { nodeOrder.append(taskId) }
            }
        }
        if ended {
            // The job's outcome and every node's, in its own row: nodes that never ran included,
            // so the job reads back whole.
            entry.ended = EndedJob(
                snapshot: run.snapshot,
                nodes: StoredRecords.encodeNodes(run.nodes),
                dropNodeRows: startedAt == nil
            )
        } else {
            entry.startedAt = startedAt
            for taskId in nodeOrder {
                guard let type = lastNodeEvent[taskId], let (ordinal, record) = run.indexedNode(taskId) else {
                    continue
                }
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
                entry.nodes.append((ordinal, row))
            }
        }
        if let planner = self.webhooks.withLock({ $0?.planner }) {
            entry.deliveries = planner.plan(run, events: events[...])
        }
        return entry
    }

    // MARK: - Committing

    /// Writes `steps` in one transaction; then completes their futures (outside the transaction).
    func commit(_ steps: [Step]) {
        var completions: [@Sendable () -> Void] = []
        completions.reserveCapacity(steps.count)
        var continueExpiring: Timestamp?
        var planned: [Delivery] = []
        var finished: [JobRun] = []
        let started = monotonicNanoseconds()
        do {
            try self.writer.transaction {
                for step in steps {
                    switch step {
                    case .insert(let job):
                        let result = try self.writeInsert(job)
                        completions.append { job.promise.succeed(result) }
                    case .journal(let entry):
                        if try self.writeJournal(entry) {
                            planned += entry.deliveries
                            if entry.ended != nil { finished.append(entry.run) }
                        }
                        // Readers see the events once they are committed (JobRun.markDurable).
                        let run = entry.run
                        let last = entry.lastSeq
                        completions.append { run.markDurable(through: last) }
                    case .write(let write):
                        try self.commitWrite(write, completions: &completions, continueExpiring: &continueExpiring)
                    }
                }
            }
        } catch {
            // The transaction rolled back: nothing of this batch is on disk. New jobs are refused
            // (their clients get a 503 and may retry); journal entries are lost, which is logged.
            self.logger.error("store commit failed", metadata: ["error": "\(error)", "writes": "\(steps.count)"])
            completions = []
            planned = []
            finished = []
            let problem = StoreError.writeFailed
            for step in steps {
                switch step {
                case .insert(let job):
                    self.cache.withLock { cache in
                        if cache.runs[job.run.id] === job.run {
                            cache.runs[job.run.id] = nil
                            cache.count -= 1
                        }
                    }
                    completions.append { job.promise.fail(problem) }
                case .write(.delete(_, let promise)): completions.append { promise.fail(problem) }
                case .write(.flush(let promise)): completions.append { promise.fail(problem) }
                case .write(.addLeases(_, let promise)): completions.append { promise.fail(problem) }
                case .journal, .write: break
                }
            }
        }
        let duration = monotonicNanoseconds() &- started
        // The waiting requests continue on another thread (starting their jobs, building their
        // responses) while this one commits the next batch. Jobs that ended join the cache of
        // recent ones there too (evicting older ones is many small frees), and the commit's
        // duration is recorded there: the writer thread bounds durable throughput.
        let finishedRuns = finished
        let done = completions
        self.completionPool.execute {
            for completion in done { completion() }
            let evicted = self.noteFinished(finishedRuns)
            withExtendedLifetime(evicted) {}
            self.options.onCommit(duration)
        }
        self.checkpointIfDue()
        if let continueExpiring { self.enqueue(.expire(before: continueExpiring)) }
        // Deliveries are sent only once they are on disk with the events they announce.
        if !planned.isEmpty, let dispatcher = self.webhooks.withLock({ $0?.dispatcher }) {
            dispatcher.dispatch(planned)
        }
    }

    /// The writes other than inserts and journal entries.
    func commitWrite(
        _ write: Write,
        completions: inout [@Sendable () -> Void],
        continueExpiring: inout Timestamp?
    ) throws {
        switch write {
        case .insert, .events:
            preconditionFailure("planned as a step of its own")
        case .addDeliveries(let deliveries):
            for delivery in deliveries { try self.writeDelivery(delivery) }
        case .updateDelivery(let delivery):
            try self.writer.prepared(
                "UPDATE deliveries SET state = ?, attempts = ?, next_attempt_at = ? WHERE id = ?"
            ).bind(
                .text(delivery.state.rawValue),
                .text(Self.attemptsJSON(delivery.attempts).jsonString),
                .int(delivery.nextAttemptAt.milliseconds),
                .text(delivery.id)
            ).run()
        case .addLeases(let leases, let promise):
            try self.writeLeases(leases)
            completions.append { promise.succeed(()) }
        case .removeLeases(let hashes):
            let statement = try self.writer.prepared("DELETE FROM leases WHERE lease_hash = ?")
            for hash in hashes {
                try statement.bind(.text(hash)).run()
                statement.reset()
            }
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

    /// The WAL size past which a checkpoint is started (SQLite's own default).
    static let checkpointFrames: Int32 = 1000
    /// The WAL size past which the writer finishes a checkpoint itself (8 MB of 4 KiB pages). Measured
    /// with 8,000 the copy left to the writer took long enough to double p99; 2,000 keeps it short.
    static let writerCheckpointFrames: Int32 = 2000

    /// Starts a checkpoint on the checkpoint thread when the WAL has grown past `checkpointFrames`.
    ///
    /// A checkpoint copies pages into the database file and fsyncs it; done by the writer after a
    /// commit, as SQLite does by default, every request of the next batch waits for it (measured:
    /// the writer's largest cost after its own fsync, and the cause of its latency spikes). A
    /// passive checkpoint on another connection runs beside the writer's commits. But the WAL
    /// starts over only after a checkpoint that copied every frame, which one running beside a
    /// writer that never pauses may never manage: past `writerCheckpointFrames` the writer copies
    /// what is left itself (little: the checkpoint thread copied the rest), between two commits.
    func checkpointIfDue() {
        let frames = self.walSize.frames.load(ordering: .relaxed)
        guard frames >= Self.checkpointFrames else { return }
        if frames >= Self.writerCheckpointFrames {
            do {
                try self.writer.checkpoint()
            } catch {
                self.logger.error("store checkpoint failed", metadata: ["error": "\(error)"])
            }
            return
        }
        guard !self.checkpointRunning.exchange(true, ordering: .acquiringAndReleasing) else { return }
        self.checkpointPool.execute {
            do {
                try self.checkpointConnection.checkpoint()
            } catch {
                self.logger.error("store checkpoint failed", metadata: ["error": "\(error)"])
            }
            self.checkpointRunning.store(false, ordering: .releasing)
        }
    }

    func writeInsert(_ job: NewJob) throws -> InsertResult {
        let db = self.writer
        let run = job.run
        if let idempotency = job.idempotency {
            let seen = try db.prepared("SELECT id, body_hash FROM jobs WHERE idempotency_key = ?").bind(
                .text(idempotency.key)
            )
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
        let snapshot = run.snapshot
        try db.prepared(
            """
            INSERT INTO jobs (position, id, state, created_at, name, labels, idempotency_key, body_hash, document)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        ).bind(
            .int(job.position),
            .text(run.id),
            .text(snapshot.state.rawValue),
            .int(snapshot.createdAt.milliseconds),
            spec.name.map(SQLiteValue.text),
            job.labels.map(SQLiteValue.bytes),
            job.idempotency.map { .text($0.key) },
            job.idempotency.map { .int(Int64(bitPattern: $0.bodyHash)) },
            .bytes(Array(job.document.readableBytesView))
        ).run()
        if !spec.labels.isEmpty {
            let statement = try db.prepared("INSERT INTO labels (key, value, position) VALUES (?, ?, ?)")
            for (key, value) in spec.labels {
                try statement.bind(.text(key), .text(value), .int(job.position)).run()
                statement.reset()
            }
        }
        self.cache.withLock { cache in
            cache.runs[run.id] = run
            cache.count += 1
        }
        return .inserted
    }

    /// Writes one job's journal entry; `false` when the job is gone (deleted meanwhile: its late
    /// events are not journalled).
    func writeJournal(_ entry: JournalEntry) throws -> Bool {
        let db = self.writer
        let deleted = self.writerState.withLock { !$0.deleted.isEmpty && $0.deleted.contains(entry.position) }
        guard entry.position != 0, !deleted else { return false }
        try db.prepared("INSERT OR IGNORE INTO events (job, seq, events) VALUES (?, ?, ?)").bind(
            .int(entry.position),
            .int(Int64(entry.firstSeq)),
            .bytes(entry.events)
        ).run()
        for (ordinal, record) in entry.nodes { try self.writeNode(entry.position, ordinal: ordinal, record) }
        for delivery in entry.deliveries { try self.writeDelivery(delivery) }
        if let ended = entry.ended {
            let snapshot = ended.snapshot
            try db.prepared(
                """
                UPDATE jobs SET state = ?, result = ?, error = ?, progress = ?, started_at = ?, finished_at = ?,
                    nodes = ? WHERE position = ?
                """
            ).bind(
                .text(snapshot.state.rawValue),
                snapshot.result.map { .text($0.jsonString) },
                snapshot.error.map { .text($0.json.jsonString) },
                .text(snapshot.progress.jsonString),
                snapshot.startedAt.map { .int($0.milliseconds) },
                .int((snapshot.finishedAt ?? .now()).milliseconds),
                .bytes(ended.nodes),
                .int(entry.position)
            ).run()
            if ended.dropNodeRows {
                try db.prepared("DELETE FROM nodes WHERE job = ?").bind(.int(entry.position)).run()
            }
        } else if let startedAt = entry.startedAt {
            try db.prepared("UPDATE jobs SET state = 'running', started_at = ? WHERE position = ?").bind(
                .int(startedAt.milliseconds),
                .int(entry.position)
            ).run()
        }
        return true
    }

    func writeNode(_ position: Int64, ordinal: Int, _ record: NodeRecord) throws {
        try self.writer.prepared(
            """
            INSERT INTO nodes (job, node_id, ordinal, type, action, executor, parent, state, attempts, result, error, started_at, finished_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (job, node_id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
                result = excluded.result, error = excluded.error, started_at = excluded.started_at, finished_at = excluded.finished_at
            """
        ).bind(
            .int(position),
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

    func writeLeases(_ leases: [StoredLease]) throws {
        let statement = try self.writer.prepared(
            """
            INSERT OR REPLACE INTO leases (lease_hash, job_id, task_id, executor, worker_id, attempt, heartbeat_timeout_ms, claimed_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """
        )
        for lease in leases {
            try statement.bind(
                .text(lease.hash),
                .text(lease.jobID),
                .text(lease.taskID),
                .text(lease.executor),
                .text(lease.workerId),
                .int(Int64(lease.attempt)),
                .int(Int64(lease.heartbeatTimeoutMs)),
                .int(lease.claimedAt.milliseconds)
            ).run()
            statement.reset()
        }
    }

    func writeDelete(_ id: String) throws -> DeleteResult {
        let db = self.writer
        let row = try db.prepared("SELECT position, state, labels FROM jobs WHERE id = ?").bind(.text(id))
        guard try row.step() else { return .notFound }
        let position = row.int(0)
        let stored = JobState(rawValue: row.text(1)) ?? .running
        let labels = row.optionalText(2)
        row.reset()
        let live = self.cache.withLock { $0.runs[id] }
        // Memory is ahead of the file: a job that ended a moment ago may not have its row updated.
        let state = live?.snapshot.state ?? stored
        guard state.isTerminal else { return .notTerminal }
        try self.deleteRows(position: position, id: id, labels: labels)
        // Its last events may still be queued behind this delete: they must not come back.
        self.writerState.withLock { _ = $0.deleted.insert(position) }
        return .deleted
    }

    /// Removes every row of the job at `position` (`labels`: its `jobs.labels`).
    func deleteRows(position: Int64, id: String, labels: String?) throws {
        let db = self.writer
        try db.prepared("DELETE FROM events WHERE job = ?").bind(.int(position)).run()
        try db.prepared("DELETE FROM nodes WHERE job = ?").bind(.int(position)).run()
        try db.prepared("DELETE FROM deliveries WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM leases WHERE job_id = ?").bind(.text(id)).run()
        if let labels, case .object(let object) = try JSONParser.parse(labels, limits: Self.storedLimits) {
            // By the whole key: `labels` is keyed (key, value, position).
            let statement = try db.prepared("DELETE FROM labels WHERE key = ? AND value = ? AND position = ?")
            for (key, value) in object {
                try statement.bind(.text(key), .text(value.stringValue ?? ""), .int(position)).run()
                statement.reset()
            }
        }
        try db.prepared("DELETE FROM jobs WHERE position = ?").bind(.int(position)).run()
        self.cache.withLock { cache in
            cache.runs[id] = nil
            cache.count -= 1
        }
    }

    /// Deletes up to 500 jobs that finished before `before`, looking at up to 5,000 jobs; `true`
    /// when there may be more (the writer calls again after its next commit).
    ///
    /// There is no index on `finished_at` (schema 5: it cost a page per commit). Jobs are walked
    /// in position order instead, oldest first: a job created at or after `before` cannot have
    /// finished before it, so the walk ends at the first one (positions follow creation, give or
    /// take the few milliseconds between a request's arrival and its commit). The jobs it passes
    /// over — created before `before` but unfinished, or finished since — are walked again by the
    /// next pass; `WriterState.expiredThrough` carries a pass across calls, so each call does a
    /// bounded amount of work between two commits however many such jobs there are.
    func writeExpire(before: Timestamp) throws -> Bool {
        let after = self.writerState.withLock { $0.expiredThrough }
        let select = try self.writer.prepared(
            "SELECT position, id, labels, created_at, finished_at FROM jobs WHERE position > ? ORDER BY position LIMIT 5000"
        )
        .bind(.int(after))
        let cutoff = before.milliseconds
        var doomed: [(position: Int64, id: String, labels: String?)] = []
        var last = after
        var walked = 0
        var passEnded = true
        while try select.step() {
            walked += 1
            if select.int(3) >= cutoff { break }
            last = select.int(0)
            if let finished = select.optionalInt(4), finished < cutoff {
                doomed.append((last, select.text(1), select.optionalText(2)))
                if doomed.count == 500 {
                    passEnded = false
                    break
                }
            }
            if walked == 5000 { passEnded = false }
        }
        select.reset()
        for job in doomed { try self.deleteRows(position: job.position, id: job.id, labels: job.labels) }
        // A pass that reached a job created since the cutoff (or the end) starts again from the
        // oldest job next time; one that stopped early goes on from where it stopped.
        self.writerState.withLock { $0.expiredThrough = passEnded ? 0 : last }
        if !doomed.isEmpty {
            self.logger.debug("retention removed finished jobs", metadata: ["count": "\(doomed.count)"])
        }
        return !passEnded
    }

    func scheduleRetention(_ retention: Duration) {
        let seconds = Double(retention.components.seconds)
        let period = Duration.milliseconds(Int64(max(1, min(60, seconds / 10)) * 1000))
        self.enqueue(
            .expire(before: Timestamp(milliseconds: Timestamp.now().milliseconds - retention.wholeMilliseconds))
        )
        let timer = TimerQueue.shared.schedule(after: period) { [weak self] in self?.scheduleRetention(retention) }
        self.retentionTimer.withLock { $0 = timer }
    }
}
