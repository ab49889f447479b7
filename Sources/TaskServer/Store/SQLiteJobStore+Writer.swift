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
            self.commit(Self.coalescingEvents(batch))
        }
    }

    /// `batch` with each job's event writes merged into its first one, in order: a job that
    /// starts and ends within one batch (most short jobs: `job.started` is published on its own)
    /// then costs one pass of `writeEvents` — one row update instead of two. Moving a job's later
    /// events forward is safe: nothing else in a batch depends on them.
    static func coalescingEvents(_ batch: [Write]) -> [Write] {
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
    func commit(_ batch: [Write]) {
        var completions: [@Sendable () -> Void] = []
        completions.reserveCapacity(batch.count)
        var continueExpiring: Timestamp?
        var planned: [Delivery] = []
        let started = monotonicNanoseconds()
        do {
            try self.writer.transaction {
                for write in batch {
                    switch write {
                    case .insert(let run, let document, let idempotency, let promise):
                        let result = try self.writeInsert(run, document: document, idempotency: idempotency)
                        completions.append { promise.succeed(result) }
                    case .events(let run, let events):
                        try self.writeEvents(run, events, planned: &planned)
                        // Readers see the events once they are committed (JobRun.markDurable).
                        if let last = events.last?.seq { completions.append { run.markDurable(through: last) } }
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
                        try self.writer.prepared("UPDATE jobs SET cancel_requested = 1 WHERE id = ?").bind(.text(id))
                            .run()
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
                case .addLeases(_, let promise): completions.append { promise.fail(problem) }
                case .events, .cancelRequested, .expire, .addDeliveries, .updateDelivery, .removeLeases: break
                }
            }
        }
        self.options.onCommit(monotonicNanoseconds() &- started)
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
        if !planned.isEmpty, let dispatcher = self.webhooks.withLock({ $0?.dispatcher }) {
            dispatcher.dispatch(planned)
        }
    }

    func writeInsert(_ run: JobRun, document: ByteBuffer, idempotency: IdempotencyKey?) throws -> InsertResult {
        let db = self.writer
        if let idempotency {
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
        var labels = JSONObject()
        for key in spec.labels.keys.sorted() { labels[key] = .string(spec.labels[key]!) }
        let snapshot = run.snapshot
        try db.prepared(
            "INSERT INTO jobs (id, name, document, labels, state, idempotency_key, body_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
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

    func writeEvents(_ run: JobRun, _ events: [JobEvent], planned: inout [Delivery]) throws {
        let db = self.writer
        let cached = self.cache.withLock { $0.runs[run.id] === run }
        if !cached {
            // Deleted meanwhile (or evicted): journal only for a job that still exists.
            let exists = try db.prepared("SELECT 1 FROM jobs WHERE id = ?").bind(.text(run.id))
            let found = try exists.step()
            exists.reset()
            guard found else { return }
        }
        let insert = try db.prepared(
            "INSERT OR IGNORE INTO events (job_id, seq, type, time, task_id, data) VALUES (?, ?, ?, ?, ?, ?)"
        )
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
            try db.prepared(
                "UPDATE jobs SET state = ?, result = ?, error = ?, progress = ?, started_at = ?, finished_at = ? WHERE id = ?"
            ).bind(
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
            try db.prepared("UPDATE jobs SET state = 'running', started_at = ? WHERE id = ?").bind(
                .int(startedAt.milliseconds),
                .text(run.id)
            ).run()
        }
    }

    func writeNode(_ jobID: String, ordinal: Int, _ record: NodeRecord) throws {
        try self.writer.prepared(
            """
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

    func deleteRows(_ id: String) throws {
        let db = self.writer
        try db.prepared("DELETE FROM events WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM deliveries WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM leases WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM nodes WHERE job_id = ?").bind(.text(id)).run()
        try db.prepared("DELETE FROM labels WHERE position IN (SELECT position FROM jobs WHERE id = ?)").bind(.text(id))
            .run()
        try db.prepared("DELETE FROM jobs WHERE id = ?").bind(.text(id)).run()
        self.cache.withLock { cache in
            cache.runs[id] = nil
            cache.count -= 1
        }
    }

    /// Deletes up to 500 jobs that finished before `before`; `true` when there may be more.
    func writeExpire(before: Timestamp) throws -> Bool {
        let select = try self.writer.prepared(
            "SELECT id FROM jobs WHERE finished_at < ? ORDER BY finished_at LIMIT 500"
        )
        .bind(.int(before.milliseconds))
        var doomed: [String] = []
        while try select.step() { doomed.append(select.text(0)) }
        select.reset()
        for id in doomed { try self.deleteRows(id) }
        if !doomed.isEmpty {
            self.logger.debug("retention removed finished jobs", metadata: ["count": "\(doomed.count)"])
        }
        return doomed.count == 500
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
