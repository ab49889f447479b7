import Logging
import NIOCore
import Synchronization
import TaskCore
import TaskGraph

// The writer: one thread commits everything queued in one transaction (group commit), each table's
// rows in one statement (arrays bound as parameters, `unnest`ed), and reconnects when the database
// went away.

extension PostgresJobRepository: GroupCommitting {
    /// Queues `write`; false when `refuseWhenFull` and the queue is full. While the database is
    /// away, a write someone waits for fails at once (`StoreError.unavailable`); the journal and
    /// lease removals are kept for the reconnection.
    @discardableResult
    func enqueue(_ write: StoreWrite, refuseWhenFull: Bool = false) -> Bool {
        if !self.isAvailable, let fail = write.fail(StoreError.unavailable) {
            if case .journal = write {
                // Kept: below.
            } else {
                fail()
                return true
            }
        }
        let (accepted, start) = self.queue.withLock {
            $0.add(write, refuseWhenFull: refuseWhenFull, limit: self.options.maxQueuedWrites)
        }
        if start { self.writerPool.execute { self.drain() } }
        return accepted
    }

    /// Commits what is queued, batch after batch, until the queue is empty (or the database is
    /// away: then the writer stays "draining" until `reconnect` has a connection again).
    func drain() {
        while true {
            let (batch, unsure) = self.queue.withLock { $0.take() }
            if batch.isEmpty { return }
            guard self.commit(batch, unsure: unsure) else { return }
        }
    }

    /// Writes `batch` in one transaction, then completes its futures (outside the transaction);
    /// false when the connection is lost (what must not be lost is queued again). `unsure`: the
    /// batch was sent before and its commit's answer lost, so part of it may be stored already.
    func commit(_ batch: [StoreWrite], unsure: Bool = false) -> Bool {
        let plan = CommitPlan(batch) { 0 }
        var outcome = CommitOutcome()
        let started = monotonicNanoseconds()
        let token = self.membership.token.load(ordering: .sequentiallyConsistent)
        do {
            guard let db = self.writer.connection else {
                throw PostgresError(message: "not connected", connectionLost: true)
            }
            try self.write(plan, db, token: token, unsure: unsure, &outcome)
        } catch let error as PostgresError where error.connectionLost {
            self.connectionLost(error, batch)
            return false
        } catch let error as PostgresError
            where error.isFenced
            && (self.membership.registering.load(ordering: .sequentiallyConsistent)
                || token != self.membership.token.load(ordering: .sequentiallyConsistent))
        {
            // This server registered again while the batch was on its way under the previous
            // token (the writes of given-up runs were flushed before that): sent again under the
            // new one, not taken for another takeover.
            self.queue.withLock { $0.items = batch + $0.items }
            return true
        } catch let error as PostgresError where error.isFenced {
            // Another server took this one's jobs over: nothing of the batch may be stored. The
            // membership stops the jobs here and registers again (a new token) at once.
            self.logger.warning(
                "a commit was refused: this server's jobs were taken over",
                metadata: ["writes": "\(plan.steps.count)"]
            )
            self.membership.noteFenced()
            outcome = CommitOutcome()
            outcome.completions = plan.failures(StoreError.writeFailed)
        } catch {
            self.commitRefused(error, batch)
            return false
        }
        let duration = monotonicNanoseconds() &- started
        if outcome.highestInserted > self.highestPosition.load(ordering: .relaxed) {
            self.highestPosition.store(outcome.highestInserted, ordering: .relaxed)
        }
        if self.refusing.load(ordering: .relaxed) {
            self.refusing.store(false, ordering: .relaxed)
            self.reconnectAttempts.store(0, ordering: .relaxed)
            self.available.store(true, ordering: .relaxed)
            self.logger.notice("the database takes commits again")
        }
        let result = outcome
        self.completionPool.execute {
            // Cached first: a listener lets the service forget a job that ended, and reads of it
            // then come here.
            self.cacheFinished(result.finished)
            for listener in result.committed { listener(true) }
            for completion in result.completions { completion() }
            self.options.onCommit(duration)
        }
        if let before = outcome.continueExpiring { self.enqueue(.expire(before: before)) }
        return true
    }

    /// What a commit hands to the completion thread.
    struct CommitOutcome {
        var completions: [@Sendable () -> Void] = []
        var finished: [StoredJob] = []
        /// The journal entries' listeners, told after the commit.
        var committed: [@Sendable (Bool) -> Void] = []
        var continueExpiring: Timestamp?
        /// The highest position of a job this commit inserted (0: none): `highestPosition` once
        /// the commit is known to have happened, never before (a position read in a transaction
        /// that then failed may never be committed, nor its sequence step logged).
        var highestInserted: Int64 = 0
    }

    // MARK: - The database away

    /// The connection broke during a commit: writes someone waits for fail (503, retry); the
    /// journal and lease removals go back to the head of the queue, and the writer reconnects.
    func connectionLost(_ error: PostgresError, _ batch: [StoreWrite]) {
        let wasAvailable = self.available.exchange(false, ordering: .relaxed)
        if wasAvailable {
            self.logger.error("lost the database connection; writes wait for it", metadata: ["error": "\(error)"])
        }
        // The commit may have been stored before the connection broke: sent again alone (`unsure`).
        let kept = self.setAside(batch, failing: StoreError.unavailable)
        self.queue.withLock { $0.unsure = kept + $0.unsure }
        self.writer.connection = nil
        self.scheduleReconnect()
    }

    /// The database refused a commit for another reason than a lost connection — a full disk
    /// (`53100`), a read-only transaction, a constraint or trigger a DBA added: it rolled back,
    /// nothing of it is stored. As while the database is away: writes someone waits for fail
    /// (`503 store.unavailable`, retry), `/readyz` says 503, and the journal and lease removals
    /// wait at the head of the queue for the next try, on a new connection after a backoff (100
    /// ms doubling to 5 s), until the database takes them. (A write refused for good would hold
    /// the writer there; losing acknowledged events instead is what this avoids.)
    func commitRefused(_ error: any Error, _ batch: [StoreWrite]) {
        self.refusing.store(true, ordering: .relaxed)
        let wasAvailable = self.available.exchange(false, ordering: .relaxed)
        if wasAvailable {
            self.logger.error(
                "the database refused a commit; writes wait until it takes them",
                metadata: ["error": "\(error)", "writes": "\(batch.count)"]
            )
        }
        let kept = self.setAside(batch, failing: StoreError.writeFailed)
        self.queue.withLock { $0.items = kept + $0.items }
        self.writer.connection = nil
        self.scheduleReconnect()
    }

    /// The writes of `batch` kept for the next commit (`isKeptForRetry`); the others fail with
    /// `error`, on the completion thread.
    private func setAside(_ batch: [StoreWrite], failing error: StoreError) -> [StoreWrite] {
        var kept: [StoreWrite] = []
        var failures: [@Sendable () -> Void] = []
        for write in batch {
            if write.isKeptForRetry {
                kept.append(write)
            } else if let fail = write.fail(error) {
                failures.append(fail)
            }
        }
        let toFail = failures
        if !toFail.isEmpty { self.completionPool.execute { for fail in toFail { fail() } } }
        return kept
    }

    /// Tries to connect again after a backoff (100 ms doubling to 5 s); the writer stays
    /// "draining" meanwhile, so nothing else starts it.
    func scheduleReconnect() {
        let attempt = self.reconnectAttempts.wrappingAdd(1, ordering: .relaxed).oldValue
        let delay = Duration.milliseconds(min(5000, 100 << min(attempt, 6)))
        _ = self.options.clock.schedule(after: delay) { [weak self] in
            guard let self else { return }
            self.writerPool.execute { self.reconnect() }
        }
    }

    func reconnect() {
        let highest = self.highestPosition.load(ordering: .relaxed)
        let last: Int64
        do {
            let connection = try PostgresConnection(self.settings)
            try connection.endIdleTransactions()
            last = try connection.query("SELECT last_value FROM jobs_position").int(0, 0)
            self.writer.connection = connection
        } catch {
            self.logger.debug("the database is still away", metadata: ["error": "\(error)"])
            self.scheduleReconnect()
            return
        }
        // The sequence is ahead of every position ever committed (PostgreSQL logs it ahead of
        // use): behind one this server saw committed, the database lost commits — a failover to
        // an asynchronous standby that was behind, or a restore. The jobs this server holds in
        // memory would be written over the jobs given those positions again: it stops instead.
        if last < highest {
            self.writer.connection = nil
            self.logger.critical(
                "the database lost commits this server saw acknowledged (a failover to a standby that was behind, or a restore): this server stops, so that nothing it holds is written over other jobs; start it again to go on from what the database holds",
                metadata: ["jobs.lastPosition": "\(last)", "jobs.committedPosition": "\(highest)"]
            )
            self.options.onRewound()
            return
        }
        // After a refused commit, available again (and the backoff reset) once one is stored —
        // or now, when nothing is kept to try again (the next write finds out).
        if self.refusing.load(ordering: .relaxed), self.queue.withLock({ $0.items.isEmpty && $0.unsure.isEmpty }) {
            self.refusing.store(false, ordering: .relaxed)
        }
        if !self.refusing.load(ordering: .relaxed) {
            self.reconnectAttempts.store(0, ordering: .relaxed)
            self.available.store(true, ordering: .relaxed)
            self.logger.notice("reconnected to the database")
        }
        self.drain()
    }

    // MARK: - Statements

    /// Writes `plan` in one transaction. A commit of new jobs and journal entries only (nearly
    /// every commit) is one round trip: BEGIN, a statement per table, COMMIT, pipelined. `unsure`:
    /// the plan was committed before, perhaps (`commit`).
    func write(
        _ plan: CommitPlan,
        _ db: PostgresConnection,
        token: Int64,
        unsure: Bool,
        _ outcome: inout CommitOutcome
    ) throws {
        var inserts: [CommitPlan.NewJob] = []
        var entries: [JournalEntry] = []
        var others: [StoreWrite] = []
        for step in plan.steps {
            switch step {
            case .insert(let job): inserts.append(job)
            case .journal(let index): entries.append(plan.entries[index])
            case .write(.flush(let promise)): outcome.completions.append { promise.succeed(()) }
            case .write(let write): others.append(write)
            }
        }
        // Inserts and journal entries never depend on another write of the same commit (whoever
        // sends a write that depends on an earlier one waits for that one's answer first), so the
        // statements go table by table.
        // Every transaction opens with the fence: refused once another server took over.
        var statements: [PostgresConnection.Statement] = [
            .init(sql: "SELECT taskserver_fence($1, $2)", values: [.text(self.serverID), .int(token)])
        ]
        if !inserts.isEmpty { statements.append(self.insertStatement(inserts, token: token)) }
        if !entries.isEmpty { statements += self.journalStatements(entries, &outcome) }
        // Every statement of a journal entry is idempotent but the feed's, which adds a row: a
        // re-sent entry whose events are stored already adds none (the feed exactly once).
        let stored = unsure ? try Self.storedEvents(entries, db) : []
        let (feed, feedEntries) = Self.feedStatement(entries.filter { !stored.contains(EventRowKey($0)) })
        // New jobs whose idempotency keys another server's commit took while this one ran.
        var raced: [CommitPlan.NewJob] = []
        if others.isEmpty {
            if statements.count == 1 { return }
            let rows: [PostgresRows]
            do {
                rows = try db.pipeline(
                    [PostgresConnection.Statement(sql: "BEGIN")] + statements + (feed.map { [$0] } ?? [])
                        + [PostgresConnection.Statement(sql: "COMMIT")]
                )
            } catch let error as PostgresError where !error.connectionLost {
                try? db.execute("ROLLBACK")
                throw error
            }
            if !inserts.isEmpty { raced = self.readInserts(inserts, rows[2], &outcome) }
            if feed != nil { self.feed.committed(first: Int(rows[statements.count + 1].int(0, 0)), feedEntries) }
        } else {
            var first: Int?
            try db.transaction {
                let rows = try statements.map { try db.query($0.sql, $0.values) }
                if !inserts.isEmpty { raced = self.readInserts(inserts, rows[1], &outcome) }
                for write in others { try self.commitWrite(write, db, &outcome) }
                if let feed { first = Int(try db.query(feed.sql, feed.values).int(0, 0)) }
            }
            if let first { self.feed.committed(first: first, feedEntries) }
        }
        if !raced.isEmpty { self.resolveRaced(raced, db, &outcome) }
    }

    /// The event rows of `entries` that are stored already (their commit's answer was lost).
    static func storedEvents(_ entries: [JournalEntry], _ db: PostgresConnection) throws -> Set<EventRowKey> {
        let keys = entries.filter { $0.position != 0 }.map(EventRowKey.init)
        guard !keys.isEmpty else { return [] }
        let rows = try db.query(
            "SELECT e.job, e.seq FROM events e JOIN unnest($1::bigint[], $2::bigint[]) AS u(job, seq) USING (job, seq)",
            [.intArray(keys.map { $0.job }), .intArray(keys.map { Int64($0.seq) })]
        )
        return Set((0..<rows.count).map { EventRowKey(job: rows.int($0, 0), seq: Int(rows.int($0, 1))) })
    }

    /// The row of the server-wide feed for the `job.*` events of `entries` (nil: none), numbered
    /// from `feed_head`. Sent last before the commit: the head's row lock is held from there to
    /// the commit's end, so positions are given in commit order and a reader never sees a later
    /// position without every earlier one (`PostgresEventFeed`). The row keeps the events only
    /// (`PostgresEventFeed.line`); readers take the jobs from their rows. Returns the entries too:
    /// once committed, the feed holds them at once when nothing came between.
    static func feedStatement(_ entries: [JournalEntry]) -> (PostgresConnection.Statement?, [FeedEntry.Parts]) {
        var parts: [FeedEntry.Parts] = []
        var lines: [UInt8] = []
        for entry in entries {
            for (event, job) in entry.feed {
                if !parts.isEmpty { lines.append(UInt8(ascii: "\n")) }
                PostgresEventFeed.line(jobID: entry.id, event, to: &lines)
                parts.append((entry.id, event, job))
            }
        }
        guard !parts.isEmpty else { return (nil, []) }
        let statement = PostgresConnection.Statement(
            sql: """
                WITH head AS (UPDATE feed_head SET last = last + $1 RETURNING last)
                INSERT INTO feed (first_position, count, entries, created_at)
                SELECT last - $1 + 1, $1, $2, taskserver_now_ms() FROM head RETURNING first_position
                """,
            values: [.int(Int64(parts.count)), .bytes(lines)]
        )
        return (statement, parts)
    }

    /// New jobs with their labels, in one statement that also reads back the jobs whose
    /// idempotency keys they repeat: rows `(id, position, NULL, NULL)` for each job inserted, and
    /// `(id, NULL, key, hash)` for each earlier job with one of the keys (jobs inserted by the
    /// statement itself are not among these: the statement's snapshot predates them; nor are
    /// jobs of another server's commit that ended while the statement waited for it: see
    /// `resolveRaced`).
    func insertStatement(_ inserts: [CommitPlan.NewJob], token: Int64) -> PostgresConnection.Statement {
        var labels: (ids: [String?], keys: [String?], values: [String?]) = ([], [], [])
        for insert in inserts {
            // Labels only the server sets (`@trace`) are kept with the job, not indexed for filters.
            for (key, value) in insert.job.labels where key.utf8.first != UInt8(ascii: "@") {
                labels.ids.append(insert.job.id)
                labels.keys.append(key)
                labels.values.append(value)
            }
        }
        return PostgresConnection.Statement(
            sql: """
                WITH new AS (
                    INSERT INTO jobs (id, state, created_at, name, labels, idempotency_key, body_hash, document, run_at,
                        priority, definition, definition_version, owner, owner_token)
                    SELECT u.*, CASE WHEN u.state = 'sleeping' THEN NULL ELSE $14 END,
                        CASE WHEN u.state = 'sleeping' THEN NULL ELSE $15::bigint END
                    FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
                        $7::bigint[], $8::bytea[], $9::bigint[], $10::bigint[], $16::text[], $17::bigint[])
                        AS u(id, state, created_at, name, labels, idempotency_key, body_hash, document, run_at, priority,
                            definition, definition_version)
                    ON CONFLICT DO NOTHING RETURNING id, position
                ), new_labels AS (
                    INSERT INTO labels (key, value, position)
                    SELECT l.key, l.value, new.position FROM unnest($11::text[], $12::text[], $13::text[]) AS l(id, key, value)
                    JOIN new ON new.id = l.id
                    ON CONFLICT DO NOTHING
                )
                SELECT id, position, NULL::text, NULL::bigint FROM new
                UNION ALL
                SELECT id, NULL, idempotency_key, body_hash FROM jobs WHERE idempotency_key = ANY($6::text[])
                """,
            values: [
                .textArray(inserts.map(\.job.id)),
                .textArray(inserts.map { $0.job.sleeps ? "sleeping" : "pending" }),
                .intArray(inserts.map(\.job.createdAt.milliseconds)),
                .textArray(inserts.map(\.job.name)),
                .textArray(inserts.map { $0.labels.map { String(decoding: $0, as: UTF8.self) } }),
                .textArray(inserts.map { $0.job.idempotency?.key }),
                .intArray(inserts.map { $0.job.idempotency.map { Int64(bitPattern: $0.bodyHash) } }),
                .bytesArray(inserts.map { Array($0.job.document.readableBytesView) }),
                .intArray(inserts.map { $0.job.runAt?.milliseconds }),
                .intArray(inserts.map { $0.job.priority == JobSpec.defaultPriority ? nil : Int64($0.job.priority) }),
                .textArray(labels.ids), .textArray(labels.keys), .textArray(labels.values),
                .text(self.serverID), .int(token),
                .textArray(inserts.map { $0.job.definition?.name }),
                .intArray(inserts.map { $0.job.definition.map { Int64($0.version) } }),
            ]
        )
    }

    /// Each new job's outcome, from the rows of `insertStatement`; returns the jobs the rows do
    /// not answer (`resolveRaced`).
    func readInserts(
        _ inserts: [CommitPlan.NewJob],
        _ rows: PostgresRows,
        _ outcome: inout CommitOutcome
    ) -> [CommitPlan.NewJob] {
        var positions: [String: Int64] = [:]
        var earlier: [String: (id: String, hash: UInt64)] = [:]
        for index in 0..<rows.count {
            let row = rows.row(index)
            if let position = row.optionalInt(1) {
                positions[row.text(0)] = position
                outcome.highestInserted = max(outcome.highestInserted, position)
            } else if let key = row.optionalText(2) {
                earlier[key] = (row.text(0), UInt64(bitPattern: row.optionalInt(3) ?? 0))
            }
        }
        var inserted = 0
        var raced: [CommitPlan.NewJob] = []
        for insert in inserts {
            let job = insert.job
            let result: InsertOutcome
            if let position = positions[job.id] {
                result = .inserted(position)
                inserted += 1
                if let idempotency = job.idempotency { earlier[idempotency.key] = (job.id, idempotency.bodyHash) }
            } else if let idempotency = job.idempotency, let first = earlier[idempotency.key] {
                // A job stored before, or one inserted earlier in this commit.
                result = first.hash == idempotency.bodyHash ? .existing(id: first.id) : .mismatch
            } else {
                raced.append(insert)
                continue
            }
            outcome.completions.append { insert.promise.succeed(result) }
        }
        let count = inserted
        self.cache.withLock { $0.count += count }
        return raced
    }

    /// New jobs the insert statement neither inserted nor matched with an earlier job: another
    /// server's transaction had inserted their idempotency keys and not committed yet, so the
    /// statement waited for it, then skipped these rows (`ON CONFLICT DO NOTHING`), but its
    /// snapshot, taken before that commit, does not show the other server's jobs. Read once this
    /// commit is done, with a snapshot of its own, they answer as any earlier job does
    /// (`.existing`, `.mismatch`). One statement for all of them, sent only after such a race
    /// (never on a server alone, whose one writer commits every insert). A job still unanswered
    /// (the other job deleted in between, or the read failed) fails as before: the client's retry
    /// decides.
    func resolveRaced(_ jobs: [CommitPlan.NewJob], _ db: PostgresConnection, _ outcome: inout CommitOutcome) {
        var earlier: [String: (id: String, hash: UInt64)] = [:]
        let keys = jobs.compactMap { $0.job.idempotency?.key }
        if !keys.isEmpty {
            do {
                let rows = try db.query(
                    "SELECT id, idempotency_key, body_hash FROM jobs WHERE idempotency_key = ANY($1::text[])",
                    [.textArray(keys)]
                )
                for index in 0..<rows.count {
                    let row = rows.row(index)
                    earlier[row.text(1)] = (row.text(0), UInt64(bitPattern: row.optionalInt(2) ?? 0))
                }
                rows.close()
            } catch {
                // A lost connection is found by the next commit.
                self.logger.error(
                    "cannot read the jobs whose idempotency keys were taken meanwhile",
                    metadata: ["error": "\(error)"]
                )
            }
        }
        for insert in jobs {
            guard let idempotency = insert.job.idempotency, let first = earlier[idempotency.key] else {
                self.logger.error("a new job was not inserted", metadata: ["job.id": "\(insert.job.id)"])
                outcome.completions.append { insert.promise.fail(StoreError.writeFailed) }
                continue
            }
            let result: InsertOutcome = first.hash == idempotency.bodyHash ? .existing(id: first.id) : .mismatch
            outcome.completions.append { insert.promise.succeed(result) }
        }
    }

    /// The statements of a commit's journal entries (a statement per table), and what the commit
    /// tells once done.
    func journalStatements(
        _ entries: [JournalEntry],
        _ outcome: inout CommitOutcome
    ) -> [PostgresConnection.Statement] {
        let deleted = self.deleted.withLock { $0 }
        var events: (jobs: [Int64?], seqs: [Int64?], rows: [[UInt8]?]) = ([], [], [])
        var nodes = NodeColumns()
        var ends = EndColumns()
        var started: (positions: [Int64?], times: [Int64?]) = ([], [])
        var deliveries: [Delivery] = []
        for entry in entries {
            // Readers see the events once they are committed (the service marks them durable).
            outcome.committed += entry.committed
            guard entry.position != 0, !deleted.contains(entry.position) else { continue }
            events.jobs.append(entry.position)
            events.seqs.append(Int64(entry.firstSeq))
            events.rows.append(StoredRecords.encodeEvents(entry.events))
            for (ordinal, record) in entry.latestNodes { nodes.append(entry.position, ordinal, record) }
            deliveries += entry.deliveries
            if let ended = entry.ended {
                ends.append(entry.position, ended)
                if let record = entry.finishedRecord { outcome.finished.append(record) }
            } else if let startedAt = entry.startedAt {
                started.positions.append(entry.position)
                started.times.append(startedAt.milliseconds)
            }
        }
        var statements: [PostgresConnection.Statement] = []
        if !events.jobs.isEmpty {
            statements.append(
                .init(
                    sql: """
                        INSERT INTO events (job, seq, events) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])
                        ON CONFLICT DO NOTHING
                        """,
                    values: [.intArray(events.jobs), .intArray(events.seqs), .bytesArray(events.rows)]
                )
            )
        }
        if !nodes.jobs.isEmpty {
            statements.append(
                .init(
                    sql: """
                        INSERT INTO nodes (job, node_id, ordinal, type, action, executor, parent, state, attempts, result,
                            error, started_at, finished_at)
                        SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
                            $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::bigint[], $13::bigint[])
                        ON CONFLICT (job, node_id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
                            result = excluded.result, error = excluded.error, started_at = excluded.started_at,
                            finished_at = excluded.finished_at
                        """,
                    values: nodes.values
                )
            )
        }
        if !ends.positions.isEmpty {
            statements.append(
                .init(
                    sql: """
                        UPDATE jobs SET state = u.state, result = u.result, error = u.error, progress = u.progress,
                            started_at = u.started_at, finished_at = u.finished_at, nodes = u.nodes
                        FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                            $7::bigint[], $8::bytea[]) AS u(position, state, result, error, progress, started_at,
                            finished_at, nodes)
                        WHERE jobs.position = u.position
                        """,
                    values: ends.values
                )
            )
            // Node rows of earlier commits go: the job's own row has its records now.
            statements.append(
                .init(sql: "DELETE FROM nodes WHERE job = ANY($1::bigint[])", values: [.intArray(ends.positions)])
            )
        }
        if !started.positions.isEmpty {
            statements.append(
                .init(
                    sql: """
                        UPDATE jobs SET state = 'running', started_at = u.started_at
                        FROM unnest($1::bigint[], $2::bigint[]) AS u(position, started_at) WHERE jobs.position = u.position
                        """,
                    values: [.intArray(started.positions), .intArray(started.times)]
                )
            )
        }
        if !deliveries.isEmpty { statements.append(Self.deliveriesStatement(deliveries)) }
        // Waits on these jobs' records on other servers wake (none while this server is alone):
        // with this commit when the window allows, else a moment after it.
        if !ends.positions.isEmpty, self.membership.peers.load(ordering: .relaxed) > 0 {
            let ids = entries.compactMap { $0.ended == nil ? nil : $0.id }
            let now = monotonicNanoseconds()
            let attached = self.endedNotices.withLock { notices -> [String]? in
                guard now &- notices.lastSent >= EndedNotices.window else { return nil }
                notices.lastSent = now
                defer { notices.pending = [] }
                return notices.pending + ids
            }
            if let attached {
                for payload in ClusterNotice.listPayloads("ended", attached) {
                    statements.append(
                        .init(sql: "SELECT pg_notify(taskserver_channel(), $1)", values: [.text(payload)])
                    )
                }
            } else {
                outcome.completions.append { [weak self] in self?.noteEnded(ids) }
            }
        }
        return statements
    }

    /// Jobs whose end is committed and not yet told: sent with the next commit in the window, or
    /// at the window's end on a connection of the readers.
    func noteEnded(_ ids: [String]) {
        let schedule = self.endedNotices.withLock { notices -> Bool in
            notices.pending += ids
            defer { notices.flushScheduled = true }
            return !notices.flushScheduled
        }
        guard schedule else { return }
        TimerQueue.shared.schedule(after: .nanoseconds(Int64(EndedNotices.window))) { [weak self] in
            self?.sendEndedNotices()
        }
    }

    private func sendEndedNotices() {
        let now = monotonicNanoseconds()
        let ids = self.endedNotices.withLock { notices -> [String] in
            notices.flushScheduled = false
            guard !notices.pending.isEmpty else { return [] }
            notices.lastSent = now
            defer { notices.pending = [] }
            return notices.pending
        }
        guard !ids.isEmpty else { return }
        // Unfenced: a notification changes no job, and a late one costs a wasted read. Lost (the
        // database away): the waits' own polls find the ends.
        _ = self.read { db in
            for payload in ClusterNotice.listPayloads("ended", ids) {
                try db.query("SELECT pg_notify(taskserver_channel(), $1)", [.text(payload)])
            }
        }
    }

    /// The columns of node rows, one array per column.
    struct NodeColumns {
        var jobs: [Int64?] = []
        var ids: [String?] = []
        var ordinals: [Int64?] = []
        var types: [String?] = []
        var actions: [String?] = []
        var executors: [String?] = []
        var parents: [String?] = []
        var states: [String?] = []
        var attempts: [Int64?] = []
        var results: [String?] = []
        var errors: [String?] = []
        var startedAt: [Int64?] = []
        var finishedAt: [Int64?] = []

        mutating func append(_ job: Int64, _ ordinal: Int, _ record: NodeRecord) {
            self.jobs.append(job)
            self.ids.append(record.id)
            self.ordinals.append(Int64(ordinal))
            self.types.append(record.type)
            self.actions.append(record.action)
            self.executors.append(record.executor)
            self.parents.append(record.parent)
            self.states.append(record.state.rawValue)
            self.attempts.append(Int64(record.attempts))
            self.results.append(record.state == .succeeded ? record.result.map(\.jsonString) : nil)
            self.errors.append(record.error.map(\.json.jsonString))
            self.startedAt.append(record.startedAt?.milliseconds)
            self.finishedAt.append(record.finishedAt?.milliseconds)
        }

        var values: [PostgresValue?] {
            [
                .intArray(self.jobs), .textArray(self.ids), .intArray(self.ordinals), .textArray(self.types),
                .textArray(self.actions), .textArray(self.executors), .textArray(self.parents),
                .textArray(self.states), .intArray(self.attempts), .textArray(self.results), .textArray(self.errors),
                .intArray(self.startedAt), .intArray(self.finishedAt),
            ]
        }
    }

    /// The columns of the job rows of jobs that ended.
    struct EndColumns {
        var positions: [Int64?] = []
        var states: [String?] = []
        var results: [String?] = []
        var errors: [String?] = []
        var progress: [String?] = []
        var startedAt: [Int64?] = []
        var finishedAt: [Int64?] = []
        var nodes: [[UInt8]?] = []

        mutating func append(_ position: Int64, _ ended: EndedJob) {
            let snapshot = ended.snapshot
            self.positions.append(position)
            self.states.append(snapshot.state.rawValue)
            self.results.append(snapshot.result.map(\.jsonString))
            self.errors.append(snapshot.error.map(\.json.jsonString))
            self.progress.append(snapshot.progress.jsonString)
            self.startedAt.append(snapshot.startedAt?.milliseconds)
            self.finishedAt.append((snapshot.finishedAt ?? .now()).milliseconds)
            self.nodes.append(StoredRecords.encodeNodes(ended.nodes))
        }

        var values: [PostgresValue?] {
            [
                .intArray(self.positions), .textArray(self.states), .textArray(self.results), .textArray(self.errors),
                .textArray(self.progress), .intArray(self.startedAt), .intArray(self.finishedAt),
                .bytesArray(self.nodes),
            ]
        }
    }

    static func deliveriesStatement(_ deliveries: [Delivery]) -> PostgresConnection.Statement {
        let columns = deliveries.map(StoredRecords.deliveryColumns)
        return PostgresConnection.Statement(
            sql: """
                INSERT INTO deliveries (\(StoredRecords.deliveryColumnNames))
                SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
                    $8::bytea[], $9::text[], $10::text[], $11::bigint[], $12::text[], $13::bigint[])
                ON CONFLICT DO NOTHING
                """,
            values: [
                .textArray(deliveries.map(\.id)),
                .textArray(deliveries.map(\.jobID)),
                .intArray(deliveries.map { Int64($0.seq) }),
                .textArray(deliveries.map(\.eventType.rawValue)),
                .textArray(deliveries.map(\.url)),
                .textArray(columns.map(\.headers)),
                .textArray(deliveries.map(\.secret.storageText)),
                .bytesArray(deliveries.map(\.body)),
                .textArray(deliveries.map(\.state.rawValue)),
                .textArray(columns.map(\.attempts)),
                .intArray(deliveries.map(\.nextAttemptAt.milliseconds)),
                .textArray(columns.map(\.retry)),
                .intArray(deliveries.map(\.createdAt.milliseconds)),
            ]
        )
    }

    /// The writes other than inserts and journal entries, one by one.
    func commitWrite(_ write: StoreWrite, _ db: PostgresConnection, _ outcome: inout CommitOutcome) throws {
        switch write {
        case .insert, .journal:
            preconditionFailure("planned as a step of its own")
        case .claimDeliveries(let now, let limit, let promise):
            // SKIP LOCKED: another server's claim running beside this one takes other rows.
            let rows = try db.query(
                """
                UPDATE deliveries SET claimed_by = $3 WHERE id IN (
                    SELECT id FROM deliveries WHERE state = 'pending' AND claimed_by IS NULL AND next_attempt_at <= $1
                    ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                RETURNING \(StoredRecords.deliveryColumnNames)
                """,
                [.int(now.milliseconds), .int(Int64(limit)), .text(self.serverID)]
            )
            let claimed = try rows.map(StoredRecords.delivery).compactMap { $0 }
                .sorted { ($0.nextAttemptAt.milliseconds, $0.id) < ($1.nextAttemptAt.milliseconds, $1.id) }
            let next = try db.query(
                """
                SELECT min(next_attempt_at) FROM deliveries
                WHERE state = 'pending' AND claimed_by IS NULL AND next_attempt_at > $1
                """,
                [.int(now.milliseconds)]
            )
            let nextDue = next.row(0).optionalInt(0).map(Timestamp.init(milliseconds:))
            outcome.completions.append { promise.succeed((claimed, nextDue)) }
        case .updateDelivery(let delivery, let promise):
            try db.query(
                "UPDATE deliveries SET state = $1, attempts = $2, next_attempt_at = $3, claimed_by = NULL WHERE id = $4",
                [
                    .text(delivery.state.rawValue),
                    .text(StoredRecords.attemptsJSON(delivery.attempts).jsonString),
                    .int(delivery.nextAttemptAt.milliseconds),
                    .text(delivery.id),
                ]
            )
            outcome.completions.append { promise.succeed(()) }
        case .addLeases(let leases, let promise):
            try db.query(
                """
                INSERT INTO leases (lease_hash, job_id, task_id, executor, worker_id, attempt, heartbeat_timeout_ms, claimed_at)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
                    $8::bigint[])
                ON CONFLICT (lease_hash) DO UPDATE SET job_id = excluded.job_id, task_id = excluded.task_id,
                    executor = excluded.executor, worker_id = excluded.worker_id, attempt = excluded.attempt,
                    heartbeat_timeout_ms = excluded.heartbeat_timeout_ms, claimed_at = excluded.claimed_at
                """,
                [
                    .textArray(leases.map(\.hash)), .textArray(leases.map(\.jobID)), .textArray(leases.map(\.taskID)),
                    .textArray(leases.map(\.executor)), .textArray(leases.map(\.workerId)),
                    .intArray(leases.map { Int64($0.attempt) }), .intArray(leases.map { Int64($0.heartbeatTimeoutMs) }),
                    .intArray(leases.map(\.claimedAt.milliseconds)),
                ]
            )
            outcome.completions.append { promise.succeed(()) }
        case .removeLeases(let hashes):
            // Kept as ended until their job is deleted: any server answers `409 lease.gone` for them.
            try db.query(
                """
                WITH ended AS (DELETE FROM leases WHERE lease_hash = ANY($1::text[]) RETURNING lease_hash, job_id)
                INSERT INTO ended_leases (lease_hash, job_id, ended_at)
                SELECT lease_hash, job_id, taskserver_now_ms() FROM ended ON CONFLICT (lease_hash) DO NOTHING
                """,
                [.textArray(hashes)]
            )
        case .cancelRequested(let id, let promise):
            // A sleeping job wakes: it is an unfinished job a restart resumes, to end it cancelled.
            try db.query(
                """
                UPDATE jobs SET cancel_requested = true, state = CASE WHEN state = 'sleeping' THEN 'pending' ELSE state END
                WHERE id = $1 RETURNING pg_notify(taskserver_channel(), 'cancel ' || id)
                """,
                [.text(id)]
            )
            outcome.completions.append { promise.succeed(()) }
        case .reopen(let id, let now, let promise):
            let reopened = try self.writeReopen(id, startingAt: now, db)
            outcome.completions.append { promise.succeed(reopened) }
        case .putSchedule(let schedule, let promise):
            try db.query(
                """
                INSERT INTO schedules (id, definition, created_at, updated_at, last_fire_at, last_job_id)
                VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (id) DO UPDATE SET definition = excluded.definition, updated_at = excluded.updated_at,
                    last_fire_at = excluded.last_fire_at, last_job_id = excluded.last_job_id
                """,
                [
                    .text(schedule.id), .text(schedule.definition.jsonString), .int(schedule.createdAt.milliseconds),
                    .int(schedule.updatedAt.milliseconds), schedule.lastFireAt.map { .int($0.milliseconds) },
                    schedule.lastJobID.map(PostgresValue.text),
                ]
            )
            try self.notifyScheduleChanged(schedule.id, db)
            outcome.completions.append { promise.succeed(()) }
        case .deleteSchedule(let id, let promise):
            let deleted = try db.query("DELETE FROM schedules WHERE id = $1", [.text(id)]).affected > 0
            try self.notifyScheduleChanged(id, db)
            outcome.completions.append { promise.succeed(deleted) }
        case .recordFire(let id, let at, let jobID, let promise):
            try db.query(
                """
                UPDATE schedules SET last_fire_at = coalesce($1, last_fire_at), last_job_id = coalesce($2, last_job_id)
                WHERE id = $3
                """,
                [at.map { .int($0.milliseconds) }, jobID.map(PostgresValue.text), .text(id)]
            )
            try self.notifyScheduleChanged(id, db)
            outcome.completions.append { promise.succeed(()) }
        case .putDefinition(let name, let body, let at, let promise):
            let put = try Self.writePutDefinition(name, body, at: at, db)
            outcome.completions.append { promise.succeed(put) }
        case .retireDefinition(let name, let at, let promise):
            let retired =
                try db.query(
                    "UPDATE definition_names SET retired_at = $1 WHERE name = $2 AND retired_at IS NULL",
                    [.int(at.milliseconds), .text(name)]
                ).affected > 0
            outcome.completions.append { promise.succeed(retired) }
        case .claimSleeping(let through, let limit, let promise):
            let rows = try db.query(
                """
                UPDATE jobs SET state = 'pending', owner = $3, owner_token = $4 WHERE position IN (
                    SELECT position FROM jobs WHERE state = 'sleeping' AND run_at <= $1
                    ORDER BY run_at, position LIMIT $2 FOR UPDATE SKIP LOCKED)
                RETURNING \(StoredRecords.sleepingColumns)
                """,
                [
                    .int(through.milliseconds), .int(Int64(limit)), .text(self.serverID),
                    .int(self.membership.token.load(ordering: .sequentiallyConsistent)),
                ]
            )
            let jobs = try rows.map(StoredRecords.sleepingJob)
                .sorted { ($0.runAt?.milliseconds ?? 0, $0.key) < ($1.runAt?.milliseconds ?? 0, $1.key) }
            outcome.completions.append { promise.succeed(jobs) }
        case .delete(let id, let promise):
            let result = try self.writeDelete(id, db)
            outcome.completions.append { promise.succeed(result) }
        case .flush:
            preconditionFailure("completed with the commit")
        case .expire(let before):
            if try self.writeExpire(before: before, db) { outcome.continueExpiring = before }
        }
    }

    /// Tells the other servers that schedule `id` changed (created, updated, deleted or fired):
    /// they read it again (`schedule <id>`; an id has no spaces and at most 100 bytes).
    /// `putDefinition` in the writer's transaction. Servers of a cluster may put the same name at
    /// once: the name's row, made first if new, is locked until the commit, so the second waits
    /// and then compares with the version the first made.
    static func writePutDefinition(
        _ name: String,
        _ body: JSONValue,
        at: Timestamp,
        _ db: PostgresConnection
    ) throws -> DefinitionPut {
        try db.query(
            "INSERT INTO definition_names (name, latest) VALUES ($1, 0) ON CONFLICT DO NOTHING",
            [.text(name)]
        )
        let latest = Int(
            try db.query("SELECT latest FROM definition_names WHERE name = $1 FOR UPDATE", [.text(name)]).int(0, 0)
        )
        if latest > 0 {
            let rows = try db.query(
                """
                SELECT \(StoredRecords.definitionColumns) FROM definitions d JOIN definition_names n ON n.name = d.name
                WHERE d.name = $1 AND d.version = $2
                """,
                [.text(name), .int(Int64(latest))]
            )
            let current = try StoredRecords.definition(rows.row(0))
            if StoredDefinition.sameDefinition(current.body, body) {
                try db.query("UPDATE definition_names SET retired_at = NULL WHERE name = $1", [.text(name)])
                var unchanged = current
                unchanged.retiredAt = nil
                return .unchanged(unchanged)
            }
        }
        let version = latest + 1
        try db.query(
            "INSERT INTO definitions (name, version, body, created_at) VALUES ($1, $2, $3, $4)",
            [.text(name), .int(Int64(version)), .text(body.jsonString), .int(at.milliseconds)]
        )
        try db.query(
            "UPDATE definition_names SET latest = $2, retired_at = NULL WHERE name = $1",
            [.text(name), .int(Int64(version))]
        )
        return .created(StoredDefinition(name: name, version: version, body: body, createdAt: at, latest: version))
    }

    func notifyScheduleChanged(_ id: String, _ db: PostgresConnection) throws {
        try db.query("SELECT pg_notify(taskserver_channel(), 'schedule ' || $1)", [.text(id)])
    }

    /// Tells every server, once this commit is done, that these finished jobs were redriven or
    /// deleted: a copy of their records kept anywhere is stale (`ClusterNotice.changed`).
    func notifyChanged(_ ids: [String], _ db: PostgresConnection) throws {
        for payload in ClusterNotice.listPayloads("changed", ids) {
            try db.query("SELECT pg_notify(taskserver_channel(), $1)", [.text(payload)])
        }
    }

    /// Turns a failed or cancelled job's row back into an unfinished one (`reopen`), keeping its
    /// node list as a redrive starts from it (`NodeRecord.redriven`).
    func writeReopen(_ id: String, startingAt now: Timestamp, _ db: PostgresConnection) throws -> StoredJob? {
        // Locked first: two servers redriving the job at once reopen it once.
        try db.query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", [.text(id)])
        guard let stored = try self.load(id, db, withDocument: true),
            stored.state == .failed || stored.state == .cancelled
        else {
            return nil
        }
        try db.query(
            """
            UPDATE jobs SET state = 'running', result = NULL, error = NULL, progress = NULL, finished_at = NULL,
                cancel_requested = false, nodes = $1, owner = $3, owner_token = $4,
                started_at = coalesce(started_at, $5) WHERE position = $2
            """,
            [
                .bytes(StoredRecords.encodeNodes(stored.nodes.map(\.redriven))), .int(stored.key), .text(self.serverID),
                .int(self.membership.token.load(ordering: .sequentiallyConsistent)), .int(now.milliseconds),
            ]
        )
        try db.query("DELETE FROM nodes WHERE job = $1", [.int(stored.key)])
        try self.notifyChanged([id], db)
        self.uncacheFinished(id)
        return stored
    }

    func writeDelete(_ id: String, _ db: PostgresConnection) throws -> DeleteResult {
        let row = try db.query("SELECT position, state FROM jobs WHERE id = $1", [.text(id)])
        guard row.count == 1 else { return .notFound }
        let position = row.int(0, 0)
        // The service sends a delete only once the job's end is recorded: the row says how it ended.
        guard StoredRecords.jobState(row.text(0, 1)).isTerminal else { return .notTerminal }
        try self.deleteRows([(position, id)], db)
        // Its last events may still be queued behind this delete: they must not come back.
        self.deleted.withLock { _ = $0.insert(position) }
        return .deleted
    }

    /// Removes every row of these jobs.
    func deleteRows(_ jobs: [(position: Int64, id: String)], _ db: PostgresConnection) throws {
        let positions = PostgresValue.intArray(jobs.map(\.position))
        let ids = PostgresValue.textArray(jobs.map(\.id))
        try db.query("DELETE FROM events WHERE job = ANY($1::bigint[])", [positions])
        try db.query("DELETE FROM nodes WHERE job = ANY($1::bigint[])", [positions])
        try db.query("DELETE FROM labels WHERE position = ANY($1::bigint[])", [positions])
        try db.query("DELETE FROM deliveries WHERE job_id = ANY($1::text[])", [ids])
        try db.query("DELETE FROM leases WHERE job_id = ANY($1::text[])", [ids])
        try db.query("DELETE FROM ended_leases WHERE job_id = ANY($1::text[])", [ids])
        try db.query("DELETE FROM jobs WHERE position = ANY($1::bigint[])", [positions])
        try self.notifyChanged(jobs.map(\.id), db)
        let removed = self.cache.withLock { cache in
            cache.count -= jobs.count
            return cache.invalidate(jobs.map(\.id))
        }
        withExtendedLifetime(removed) {}
    }

    /// Deletes up to 500 jobs that finished before `before` (through `jobs_finished`); `true`
    /// when there may be more (the writer calls again after its next commit).
    func writeExpire(before: Timestamp, _ db: PostgresConnection) throws -> Bool {
        let rows = try db.query(
            "SELECT position, id FROM jobs WHERE finished_at < $1 ORDER BY finished_at LIMIT 500",
            [.int(before.milliseconds)]
        )
        let doomed = (0..<rows.count).map { (rows.int($0, 0), rows.text($0, 1)) }
        rows.close()
        if doomed.isEmpty { return false }
        try self.deleteRows(doomed, db)
        self.logger.debug("retention removed finished jobs", metadata: ["count": "\(doomed.count)"])
        return doomed.count == 500
    }

    func scheduleRetention(_ retention: Duration) {
        let seconds = Double(retention.components.seconds)
        let period = Duration.milliseconds(Int64(max(1, min(60, seconds / 10)) * 1000))
        // One server of a cluster deletes (the leader): several would delete the same rows.
        if self.membership.isLeader.load(ordering: .relaxed) {
            self.enqueue(
                .expire(
                    before: Timestamp(milliseconds: self.options.clock.now().milliseconds - retention.wholeMilliseconds)
                )
            )
        }
        let timer = self.options.clock.schedule(after: period) { [weak self] in self?.scheduleRetention(retention) }
        self.retentionTimer.withLock { $0 = timer }
    }
}

/// `ended` notifications of one server, at most one commit's worth per `window`. On a busy
/// server nearly every commit ends jobs; a notification with each would have PostgreSQL serialise
/// those commits on its notification queue and wake every listening server once per commit
/// (measured with 2 servers: half the database's transactions were listeners reading the queue).
struct EndedNotices {
    /// 20 ms: a long-poll on another server wakes at most this much later than it could.
    static let window: UInt64 = 20_000_000
    var pending: [String] = []
    var lastSent: UInt64 = 0
    var flushScheduled = false
}

/// The key of an `events` row: the job's position and the seq of the row's first event.
struct EventRowKey: Hashable {
    let job: Int64
    let seq: Int

    init(job: Int64, seq: Int) {
        self.job = job
        self.seq = seq
    }

    init(_ entry: JournalEntry) {
        self.job = entry.position
        self.seq = entry.firstSeq
    }
}
