/// The store's tables, as numbered migrations applied in order at start-up.
///
/// `PRAGMA user_version` holds the number of migrations applied; each runs in its own transaction
/// with the version bump, so a crash mid-migration leaves the file at the previous version. A file
/// from a newer server (a higher version than this one knows) is refused rather than guessed at.
enum SQLiteSchema {
    static let migrations: [String] = [
        // 1: jobs, their labels, node outcomes and the event log.
        """
        CREATE TABLE jobs (
            position INTEGER PRIMARY KEY,          -- insertion order: list order and cursors
            id TEXT NOT NULL UNIQUE,
            name TEXT,
            document TEXT NOT NULL,                -- the job as submitted, to rebuild it on restart
            labels TEXT NOT NULL,                  -- JSON object, for list views
            state TEXT NOT NULL,
            result TEXT,
            error TEXT,
            progress TEXT,                         -- JSON, written when the job ends
            idempotency_key TEXT UNIQUE,
            body_hash INTEGER,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL,           -- Unix milliseconds
            started_at INTEGER,
            finished_at INTEGER
        );
        CREATE INDEX jobs_by_state ON jobs(state, position);
        CREATE INDEX jobs_by_finish ON jobs(finished_at) WHERE finished_at IS NOT NULL;
        CREATE TABLE labels (
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            position INTEGER NOT NULL,
            PRIMARY KEY (key, value, position)
        ) WITHOUT ROWID;
        CREATE TABLE nodes (
            job_id TEXT NOT NULL,
            node_id TEXT NOT NULL,
            ordinal INTEGER NOT NULL,              -- registration order (document order, then expansions)
            type TEXT NOT NULL,
            action TEXT,
            executor TEXT,
            parent TEXT,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            result TEXT,
            error TEXT,
            started_at INTEGER,
            finished_at INTEGER,
            PRIMARY KEY (job_id, node_id)
        ) WITHOUT ROWID;
        CREATE TABLE events (
            job_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            time INTEGER NOT NULL,
            task_id TEXT,
            data TEXT,
            PRIMARY KEY (job_id, seq)
        ) WITHOUT ROWID;
        """,
        // 2: the webhook outbox.
        """
        CREATE TABLE deliveries (
            id TEXT PRIMARY KEY,                   -- the webhook-id
            job_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            event_type TEXT NOT NULL,
            url TEXT NOT NULL,
            headers TEXT NOT NULL,                 -- JSON object
            secret TEXT NOT NULL,                  -- none | server | literal:whsec_…
            body TEXT NOT NULL,                    -- the payload exactly as signed
            state TEXT NOT NULL,
            attempts TEXT NOT NULL,                -- JSON array
            next_attempt_at INTEGER NOT NULL,
            retry TEXT NOT NULL,                   -- JSON object
            created_at INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX deliveries_by_job ON deliveries(job_id, seq);
        CREATE INDEX deliveries_pending ON deliveries(state) WHERE state = 'pending';
        """,
        // 3: live leases of external worker pools (SPEC §6), so a worker can heartbeat and
        // complete its lease after a restart. The lease id is a capability: only its hash is kept.
        """
        CREATE TABLE leases (
            lease_hash TEXT PRIMARY KEY,           -- HMAC-SHA256 of the lease id, hexadecimal
            job_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            executor TEXT NOT NULL,
            worker_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            heartbeat_timeout_ms INTEGER NOT NULL,
            claimed_at INTEGER NOT NULL            -- Unix milliseconds
        ) WITHOUT ROWID;
        CREATE INDEX leases_by_job ON leases(job_id);
        """,
        // 4: the journal made cheap per job (issue #16), and shaped for SPEC §9. Every table a job
        // owns is keyed by the job's integer `position` (not its 26-character id); a commit writes
        // one `events` row per job (the events committed together, as a JSON array); a finished
        // job keeps its node records in its own row (`jobs.nodes`), so a short job costs one row
        // insert and one row update beyond its events; `labels` is NULL for a job without labels;
        // the idempotency index holds only jobs that have a key. Big columns come last, so list
        // views read past none of them. Rows of version 3 are carried over as they are (each old
        // event becomes a one-event row; node rows stay rows).
        """
        CREATE TABLE jobs_v4 (
            position INTEGER PRIMARY KEY,          -- the job's key in every table; list order and cursors
            id TEXT NOT NULL UNIQUE,
            state TEXT NOT NULL,
            created_at INTEGER NOT NULL,           -- Unix milliseconds
            started_at INTEGER,
            finished_at INTEGER,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            name TEXT,
            labels TEXT,                           -- JSON object, for list views; NULL when none
            idempotency_key TEXT,
            body_hash INTEGER,
            error TEXT,
            progress TEXT,                         -- JSON, written when the job ends
            result TEXT,
            document BLOB NOT NULL,                -- the job as submitted, to rebuild it on restart
            nodes TEXT                             -- a finished job's node records (StoredRecords)
        );
        INSERT INTO jobs_v4 (position, id, state, created_at, started_at, finished_at, cancel_requested, name,
                             labels, idempotency_key, body_hash, error, progress, result, document)
            SELECT position, id, state, created_at, started_at, finished_at, cancel_requested, name,
                   NULLIF(labels, '{}'), idempotency_key, body_hash, error, progress, result, document
            FROM jobs;
        CREATE TABLE nodes_v4 (
            job INTEGER NOT NULL,                  -- jobs.position
            node_id TEXT NOT NULL,
            ordinal INTEGER NOT NULL,              -- registration order (document order, then expansions)
            type TEXT NOT NULL,
            action TEXT,
            executor TEXT,
            parent TEXT,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            result TEXT,
            error TEXT,
            started_at INTEGER,
            finished_at INTEGER,
            PRIMARY KEY (job, node_id)
        ) WITHOUT ROWID;
        INSERT INTO nodes_v4
            SELECT jobs.position, node_id, ordinal, type, action, executor, parent, nodes.state, attempts,
                   nodes.result, nodes.error, nodes.started_at, nodes.finished_at
            FROM nodes JOIN jobs ON jobs.id = nodes.job_id;
        CREATE TABLE events_v4 (
            job INTEGER NOT NULL,                  -- jobs.position
            seq INTEGER NOT NULL,                  -- the seq of the row's first event
            events TEXT NOT NULL,                  -- JSON array of the events committed together (StoredRecords)
            PRIMARY KEY (job, seq)
        ) WITHOUT ROWID;
        INSERT INTO events_v4
            SELECT jobs.position, seq,
                   json_array(json_array(seq, type, time, task_id, json(data)))
            FROM events JOIN jobs ON jobs.id = events.job_id;
        DROP TABLE events;
        DROP TABLE nodes;
        DROP TABLE jobs;
        ALTER TABLE jobs_v4 RENAME TO jobs;
        ALTER TABLE nodes_v4 RENAME TO nodes;
        ALTER TABLE events_v4 RENAME TO events;
        CREATE INDEX jobs_by_state ON jobs(state, position);
        CREATE INDEX jobs_by_finish ON jobs(finished_at) WHERE finished_at IS NOT NULL;
        CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs(idempotency_key) WHERE idempotency_key IS NOT NULL;
        """,
        // 5: fewer index pages per commit (issue #16). A commit writes every page it changes, and
        // each index a job's rows touch costs at least a page per commit whatever the batch size:
        // an index on (state, position) changed three places per job (a state's range to leave,
        // two to join) and one on finished_at a fourth. Now the only state index holds unfinished
        // jobs by position — a job enters and leaves it at its tail — and one holds the rare failed
        // and cancelled jobs. Succeeded jobs are listed by scanning positions (most jobs succeed),
        // retention walks positions (`writeExpire`). Measured on the one-task benchmark: WAL
        // frames per commit 23 → 18. A query uses a partial index only when its WHERE clause
        // repeats the index's condition word for word (see `SQLiteJobRepository.listSQL`).
        """
        DROP INDEX jobs_by_state;
        DROP INDEX jobs_by_finish;
        CREATE INDEX jobs_unfinished ON jobs(position) WHERE state IN ('pending', 'running');
        CREATE INDEX jobs_failed_or_cancelled ON jobs(position) WHERE state IN ('failed', 'cancelled');
        """,
        // 6: the webhook dispatcher claims due deliveries from the outbox (issue #26) instead of
        // being handed them: `claimed` marks the ones this process holds (cleared at start: a
        // claim does not outlive its process), and the pending, unclaimed ones are found by due
        // time without touching the others.
        """
        ALTER TABLE deliveries ADD COLUMN claimed INTEGER NOT NULL DEFAULT 0;
        DROP INDEX deliveries_pending;
        CREATE INDEX deliveries_due ON deliveries(next_attempt_at) WHERE state = 'pending' AND claimed = 0;
        CREATE INDEX deliveries_claimed ON deliveries(id) WHERE claimed = 1;
        """,
        // 7: delayed starts (issue #28, SPEC §8). A job with `runAt` / `delayMs` is stored with
        // the state `sleeping` (shown as `pending`) until its start is journalled: a state of its
        // own keeps sleeping jobs out of `jobs_unfinished`, so a restart with a million of them
        // asleep reads none, and jobs that never sleep touch no new index. `jobs_sleeping` lists
        // them newest first (`state=pending`), `jobs_sleeping_by_start` is the index of start times
        // the service reads the ones falling due from. `run_at` stays after the start (`runAt`).
        """
        ALTER TABLE jobs ADD COLUMN run_at INTEGER;  -- Unix milliseconds
        CREATE INDEX jobs_sleeping ON jobs(position) WHERE state = 'sleeping';
        CREATE INDEX jobs_sleeping_by_start ON jobs(run_at, position) WHERE state = 'sleeping';
        """,
        // 8: cron schedules (issue #28, SPEC §8), each with the latest fire it handled. Each fire's
        // job carries an idempotency key made of the schedule and the fire time, so a fire is
        // started at most once whatever happens between the job's insert and `last_fire_at`.
        """
        CREATE TABLE schedules (
            id TEXT PRIMARY KEY,
            definition TEXT NOT NULL,              -- JSON: cron, timezone, job, overlap, catchUp, paused
            created_at INTEGER NOT NULL,           -- Unix milliseconds
            updated_at INTEGER NOT NULL,
            last_fire_at INTEGER,
            last_job_id TEXT
        ) WITHOUT ROWID;
        """,
        // 9: a job's priority (issue #29, SPEC §8), NULL for the default 5: lists show it without
        // reading documents, and a claim query on a shared store can order by it.
        """
        ALTER TABLE jobs ADD COLUMN priority INTEGER;
        """,
        // 10: workflow definitions (issue #45). Every change of a definition is a new immutable
        // version row; `definition_names` holds each name's latest version and whether it is
        // retired. A job started from one names it in `definition` / `definition_version` (also
        // in its document, which is what a restart runs), indexed for `GET /v1/jobs?definition=`.
        """
        ALTER TABLE jobs ADD COLUMN definition TEXT;
        ALTER TABLE jobs ADD COLUMN definition_version INTEGER;
        CREATE INDEX jobs_by_definition ON jobs(definition, position) WHERE definition IS NOT NULL;
        CREATE TABLE definitions (
            name TEXT NOT NULL,
            version INTEGER NOT NULL,
            body TEXT NOT NULL,                    -- JSON: graph, inputSchema, defaults, description
            created_at INTEGER NOT NULL,           -- Unix milliseconds
            PRIMARY KEY (name, version)
        ) WITHOUT ROWID;
        CREATE TABLE definition_names (
            name TEXT PRIMARY KEY,
            latest INTEGER NOT NULL,
            retired_at INTEGER                     -- set by DELETE; a PUT brings the name back
        ) WITHOUT ROWID;
        """,
    ]

    /// Brings the file up to the latest version.
    static func migrate(_ db: SQLiteConnection) throws {
        let version = Int(try db.scalar("PRAGMA user_version") ?? 0)
        guard version <= self.migrations.count else {
            throw SQLiteError(
                code: 0,
                message:
                    "the data file is at schema version \(version), newer than this server knows (\(self.migrations.count)); use a newer taskserver"
            )
        }
        for index in version..<self.migrations.count {
            try db.transaction {
                try db.execute(self.migrations[index])
                try db.execute("PRAGMA user_version = \(index + 1)")
            }
        }
    }
}
