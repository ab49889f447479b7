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

extension SQLiteJobRepository: GroupCommitting {
    // MARK: - The writer

    @discardableResult
    func enqueue(_ write: StoreWrite, refuseWhenFull: Bool = false) -> Bool {
        let (accepted, start) = self.queue.withLock {
            $0.add(write, refuseWhenFull: refuseWhenFull, limit: self.options.maxQueuedWrites)
        }
        if start { self.writerPool.execute { self.drain() } }
        return accepted
    }

    /// Commits what is queued, batch after batch, until the queue is empty (or a commit is
    /// refused: then the writer stays "draining" until the retry after a backoff).
    func drain() {
        while true {
            let batch = self.queue.withLock { $0.take().writes }
            if batch.isEmpty { return }
            let plan = CommitPlan(batch) { self.nextPosition.wrappingAdd(1, ordering: .relaxed).newValue }
            guard self.commit(plan, batch) else { return }
        }
    }

    /// SQLite refused a commit (a full disk, an I/O error): it rolled back, nothing of it is on
    /// disk. Writes someone waits for fail (`503 store.unavailable`, retry); the journal and
    /// chores go back to the head of the queue and are tried again after a backoff (100 ms
    /// doubling to 5 s) until SQLite takes them; `/readyz` says 503 meanwhile. A write refused for
    /// good would hold the writer there: losing acknowledged events instead is what this avoids.
    private func commitRefused(_ error: any Error, _ batch: [StoreWrite]) {
        if self.available.exchange(false, ordering: .relaxed) {
            self.logger.error(
                "the store refused a commit; writes wait until it takes them",
                metadata: ["error": "\(error)", "writes": "\(batch.count)"]
            )
        }
        var kept: [StoreWrite] = []
        var failures: [@Sendable () -> Void] = []
        for write in batch {
            if write.isKeptForRetry {
                kept.append(write)
            } else if let fail = write.fail(StoreError.writeFailed) {
                failures.append(fail)
            }
        }
        self.queue.withLock { $0.items = kept + $0.items }
        let toFail = failures
        if !toFail.isEmpty { self.completionPool.execute { for fail in toFail { fail() } } }
        let attempt = self.refusedCommits.wrappingAdd(1, ordering: .relaxed).oldValue
        _ = self.options.clock.schedule(after: .milliseconds(min(5000, 100 << min(attempt, 6)))) { [weak self] in
            guard let self else { return }
            self.writerPool.execute {
                // Nothing kept to try again: the next write finds out.
                if self.queue.withLock({ $0.items.isEmpty }) {
                    self.refusedCommits.store(0, ordering: .relaxed)
                    self.available.store(true, ordering: .relaxed)
                }
                self.drain()
            }
        }
    }

    // MARK: - Committing

    /// Writes `plan` (made of `batch`) in one transaction; then completes its futures (outside
    /// the transaction). False when SQLite refused it (`commitRefused`).
    func commit(_ plan: CommitPlan, _ batch: [StoreWrite]) -> Bool {
        var completions: [@Sendable () -> Void] = []
        completions.reserveCapacity(plan.steps.count)
        var continueExpiring: Timestamp?
        var finished: [StoredJob] = []
        /// The journal entries' listeners, told after the commit.
        var committed: [@Sendable (Bool) -> Void] = []
        let started = monotonicNanoseconds()
        do {
            try self.writer.transaction {
                for step in plan.steps {
                    switch step {
                    case .insert(let job):
                        let outcome = try self.writeInsert(job)
                        completions.append { job.promise.succeed(outcome) }
                    case .journal(let index):
                        let entry = plan.entries[index]
                        if try self.writeJournal(entry), let record = entry.finishedRecord {
                            finished.append(record)
                        }
                        // Readers see the events once they are committed (the service marks them durable).
                        committed += entry.committed
                    case .write(let write):
                        try self.commitWrite(write, completions: &completions, continueExpiring: &continueExpiring)
                    }
                }
            }
        } catch {
            // The transaction rolled back: nothing of this batch is on disk.
            for step in plan.steps { if case .insert = step { self.cache.withLock { $0.count -= 1 } } }
            self.commitRefused(error, batch)
            return false
        }
        if self.refusedCommits.exchange(0, ordering: .relaxed) > 0 {
            self.available.store(true, ordering: .relaxed)
            self.logger.notice("the store takes commits again")
        }
        let duration = monotonicNanoseconds() &- started
        // The waiting requests continue on another thread (starting their jobs, building their
        // responses) while this one commits the next batch. Jobs that ended join the cache of
        // recent ones there too (evicting older ones is many small frees), and the commit's
        // duration is recorded there: the writer thread bounds durable throughput.
        let records = finished
        let done = completions
        let listeners = committed
        self.completionPool.execute {
            // Cached first: a listener lets the service forget a job that ended, and reads of it
            // then come here.
            self.cacheFinished(records)
            for listener in listeners { listener(true) }
            for completion in done { completion() }
            self.options.onCommit(duration)
        }
        self.checkpointIfDue()
        if let continueExpiring { self.enqueue(.expire(before: continueExpiring)) }
        return true
    }

    /// The writes other than inserts and journal entries.
    func commitWrite(
        _ write: StoreWrite,
        completions: inout [@Sendable () -> Void],
        continueExpiring: inout Timestamp?
    ) throws {
        switch write {
        case .insert, .journal:
            preconditionFailure("planned as a step of its own")
        case .claimDeliveries(let now, let limit, let promise):
            let claimed = try self.writeClaim(at: now, limit: limit)
            completions.append { promise.succeed(claimed) }
        case .updateDelivery(let delivery, let promise):
            completions.append { promise.succeed(()) }
            try self.writer.prepared(
                "UPDATE deliveries SET state = ?, attempts = ?, next_attempt_at = ?, claimed = 0 WHERE id = ?"
            ).bind(
                .text(delivery.state.rawValue),
                .text(StoredRecords.attemptsJSON(delivery.attempts).jsonString),
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
        case .cancelRequested(let id, let promise):
            // A sleeping job wakes: it is an unfinished job a restart resumes, to end it cancelled.
            try self.writer.prepared(
                "UPDATE jobs SET cancel_requested = 1, state = iif(state = 'sleeping', 'pending', state) WHERE id = ?"
            ).bind(.text(id)).run()
            completions.append { promise.succeed(()) }
        case .reopen(let id, let now, let promise):
            let reopened = try self.writeReopen(id, startingAt: now)
            completions.append { promise.succeed(reopened) }
        case .putSchedule(let schedule, let promise):
            try self.writer.prepared(
                """
                INSERT INTO schedules (id, definition, created_at, updated_at, last_fire_at, last_job_id)
                VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET definition = excluded.definition, updated_at = excluded.updated_at,
                    last_fire_at = excluded.last_fire_at, last_job_id = excluded.last_job_id
                """
            ).bind(
                .text(schedule.id),
                .text(schedule.definition.jsonString),
                .int(schedule.createdAt.milliseconds),
                .int(schedule.updatedAt.milliseconds),
                schedule.lastFireAt.map { .int($0.milliseconds) },
                schedule.lastJobID.map(SQLiteValue.text)
            ).run()
            completions.append { promise.succeed(()) }
        case .deleteSchedule(let id, let promise):
            try self.writer.prepared("DELETE FROM schedules WHERE id = ?").bind(.text(id)).run()
            let deleted = self.writer.changes > 0
            completions.append { promise.succeed(deleted) }
        case .recordFire(let id, let at, let jobID, let promise):
            try self.writer.prepared(
                "UPDATE schedules SET last_fire_at = coalesce(?, last_fire_at), last_job_id = coalesce(?, last_job_id) WHERE id = ?"
            ).bind(at.map { .int($0.milliseconds) }, jobID.map(SQLiteValue.text), .text(id)).run()
            completions.append { promise.succeed(()) }
        case .putDefinition(let name, let body, let at, let promise):
            let put = try self.writePutDefinition(name, body, at: at)
            completions.append { promise.succeed(put) }
        case .retireDefinition(let name, let at, let promise):
            try self.writer.prepared("UPDATE definition_names SET retired_at = ? WHERE name = ? AND retired_at IS NULL")
                .bind(.int(at.milliseconds), .text(name)).run()
            let retired = self.writer.changes > 0
            completions.append { promise.succeed(retired) }
        case .claimSleeping(let through, let limit, let promise):
            let jobs = try self.readSleeping(through: through, limit: limit, self.writer)
            let wake = try self.writer.prepared("UPDATE jobs SET state = 'pending' WHERE position = ?")
            for job in jobs {
                try wake.bind(.int(job.key)).run()
                wake.reset()
            }
            completions.append { promise.succeed(jobs) }
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

    func writeInsert(_ new: CommitPlan.NewJob) throws -> InsertOutcome {
        let db = self.writer
        let job = new.job
        if let idempotency = job.idempotency {
            let seen = try db.prepared("SELECT id, body_hash FROM jobs WHERE idempotency_key = ?").bind(
                .text(idempotency.key)
            )
            if try seen.step() {
                let id = seen.text(0)
                let hash = UInt64(bitPattern: seen.int(1))
                seen.reset()
                return hash == idempotency.bodyHash ? .existing(id: id) : .mismatch
            }
        }
        try db.prepared(
            """
            INSERT INTO jobs (position, id, state, created_at, name, labels, idempotency_key, body_hash, document, run_at,
                priority, definition, definition_version)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        ).bind(
            .int(new.position),
            .text(job.id),
            .text(job.sleeps ? "sleeping" : "pending"),
            .int(job.createdAt.milliseconds),
            job.name.map(SQLiteValue.text),
            new.labels.map(SQLiteValue.bytes),
            job.idempotency.map { .text($0.key) },
            job.idempotency.map { .int(Int64(bitPattern: $0.bodyHash)) },
            .bytes(Array(job.document.readableBytesView)),
            job.runAt.map { .int($0.milliseconds) },
            job.priority == JobSpec.defaultPriority ? nil : .int(Int64(job.priority)),
            job.definition.map { .text($0.name) },
            job.definition.map { .int(Int64($0.version)) }
        ).run()
        if !job.labels.isEmpty {
            let statement = try db.prepared("INSERT INTO labels (key, value, position) VALUES (?, ?, ?)")
            // Labels only the server sets (`@trace`) are kept with the job, not indexed for filters.
            for (key, value) in job.labels where key.utf8.first != UInt8(ascii: "@") {
                try statement.bind(.text(key), .text(value), .int(new.position)).run()
                statement.reset()
            }
        }
        self.cache.withLock { $0.count += 1 }
        return .inserted(new.position)
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
            .bytes(StoredRecords.encodeEvents(entry.events))
        ).run()
        if entry.ended == nil {
            for (ordinal, record) in entry.latestNodes { try self.writeNode(entry.position, ordinal: ordinal, record) }
        }
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
                .bytes(StoredRecords.encodeNodes(ended.nodes)),
                .int(entry.position)
            ).run()
            // Node rows may exist from earlier commits (the job did not start in this one): they go.
            if entry.startedAt == nil {
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

    /// Turns a failed or cancelled job's row back into an unfinished one (`reopen`): its node list
    /// is kept as a redrive starts from it (`NodeRecord.redriven`), so that a restart before the
    /// redriven job ends resumes it without running a succeeded node again.
    func writeReopen(_ id: String, startingAt now: Timestamp) throws -> StoredJob? {
        guard let stored = try self.load(id, self.writer, withDocument: true),
            stored.state == .failed || stored.state == .cancelled
        else {
            return nil
        }
        try self.writer.prepared(
            """
            UPDATE jobs SET state = 'running', result = NULL, error = NULL, progress = NULL, finished_at = NULL,
                cancel_requested = 0, nodes = ?, started_at = coalesce(started_at, ?) WHERE position = ?
            """
        ).bind(
            .bytes(StoredRecords.encodeNodes(stored.nodes.map(\.redriven))),
            .int(now.milliseconds),
            .int(stored.key)
        ).run()
        try self.writer.prepared("DELETE FROM nodes WHERE job = ?").bind(.int(stored.key)).run()
        self.uncacheFinished(id)
        return stored
    }

    func writeDelete(_ id: String) throws -> DeleteResult {
        let db = self.writer
        let row = try db.prepared("SELECT position, state, labels FROM jobs WHERE id = ?").bind(.text(id))
        guard try row.step() else { return .notFound }
        let position = row.int(0)
        let stored = StoredRecords.jobState(row.text(1))
        let labels = row.optionalText(2)
        row.reset()
        // The service sends a delete only once the job's end is recorded: the row says how it ended.
        guard stored.isTerminal else { return .notTerminal }
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
        if let labels, case .object(let object) = try JSONParser.parse(labels, limits: StoredRecords.limits) {
            // By the whole key: `labels` is keyed (key, value, position).
            let statement = try db.prepared("DELETE FROM labels WHERE key = ? AND value = ? AND position = ?")
            for (key, value) in object {
                try statement.bind(.text(key), .text(value.stringValue ?? ""), .int(position)).run()
                statement.reset()
            }
        }
        try db.prepared("DELETE FROM jobs WHERE position = ?").bind(.int(position)).run()
        let removed = self.cache.withLock { cache in
            cache.count -= 1
            cache.deletes &+= 1
            return cache.finished.removeValue(forKey: id)
        }
        withExtendedLifetime(removed) {}
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
            .expire(
                before: Timestamp(milliseconds: self.options.clock.now().milliseconds - retention.wholeMilliseconds)
            )
        )
        let timer = self.options.clock.schedule(after: period) { [weak self] in self?.scheduleRetention(retention) }
        self.retentionTimer.withLock { $0 = timer }
    }
}

extension SQLiteJobRepository {
    /// `putDefinition` in the writer's transaction (the one writer: nothing races it).
    func writePutDefinition(_ name: String, _ body: JSONValue, at: Timestamp) throws -> DefinitionPut {
        let latest = try Self.readDefinition(name, version: nil, includeRetired: true, self.writer)
        if let latest, StoredDefinition.sameDefinition(latest.body, body) {
            try self.writer.prepared("UPDATE definition_names SET retired_at = NULL WHERE name = ?").bind(.text(name))
                .run()
            var unchanged = latest
            unchanged.retiredAt = nil
            return .unchanged(unchanged)
        }
        let version = (latest?.latest ?? 0) + 1
        try self.writer.prepared("INSERT INTO definitions (name, version, body, created_at) VALUES (?, ?, ?, ?)")
            .bind(.text(name), .int(Int64(version)), .text(body.jsonString), .int(at.milliseconds)).run()
        try self.writer.prepared(
            """
            INSERT INTO definition_names (name, latest, retired_at) VALUES (?, ?, NULL)
            ON CONFLICT (name) DO UPDATE SET latest = excluded.latest, retired_at = NULL
            """
        ).bind(.text(name), .int(Int64(version))).run()
        return .created(StoredDefinition(name: name, version: version, body: body, createdAt: at, latest: version))
    }

    /// Version `version` of `name` (nil: its latest, only if not retired unless `includeRetired`).
    static func readDefinition(
        _ name: String,
        version: Int?,
        includeRetired: Bool,
        _ db: SQLiteConnection
    ) throws -> StoredDefinition? {
        let statement = try db.statement(
            """
            SELECT \(StoredRecords.definitionColumns) FROM definitions d JOIN definition_names n ON n.name = d.name
            WHERE d.name = ? AND d.version = coalesce(?, n.latest) AND (? OR n.retired_at IS NULL OR ? IS NOT NULL)
            """
        )
        defer { statement.reset() }
        let pinned = version.map { SQLiteValue.int(Int64($0)) }
        try statement.bind(.text(name), pinned, .int(includeRetired ? 1 : 0), pinned)
        return try statement.step() ? StoredRecords.definition(statement) : nil
    }
}
