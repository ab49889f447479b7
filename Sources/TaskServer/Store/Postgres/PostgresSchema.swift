/// The PostgreSQL store's tables, as numbered migrations the server applies at start.
///
/// `taskserver_migrations` lists the versions applied. Each migration runs in its own transaction
/// with its row, under a transaction-level advisory lock, so that servers starting together
/// migrate once (the others wait for the lock, then find the work done). A database migrated by
/// a newer server (a version this one does not know) is refused, never guessed at: exit 64 with
/// both versions in the message, which is what makes a rolling upgrade safe.
///
/// Shaped for several servers sharing the database (SPEC §9), though one server uses it today:
/// - every table a job owns is keyed by the job's `position` (a sequence: unique across servers,
///   and the list order);
/// - a running job has an owner (`jobs.owner`, a row of `servers`) and the fencing token of that
///   owner's lease (`jobs.owner_token`): a server's writes name its token, so a server whose lease
///   ended cannot overwrite the jobs another took over;
/// - `commands` carries requests (cancel, complete, redrive) for a job owned by another server;
/// - claims (`deliveries`, sleeping jobs) are rows taken with `FOR UPDATE SKIP LOCKED`.
/// Times are Unix milliseconds in `bigint`s, as in the SQLite store, so records read the same.
enum PostgresSchema {
    static let migrations: [String] = [
        // 1: everything the SQLite store keeps (its schema 9), and the cluster's tables.
        """
        CREATE SEQUENCE jobs_position;
        CREATE TABLE jobs (
            position bigint PRIMARY KEY DEFAULT nextval('jobs_position'),  -- the key in every table; list order
            id text NOT NULL UNIQUE,
            state text NOT NULL,                   -- pending | sleeping | running | succeeded | failed | cancelled
            created_at bigint NOT NULL,
            started_at bigint,
            finished_at bigint,
            run_at bigint,                         -- a delayed job's start
            priority smallint,                     -- NULL: the default (5)
            cancel_requested boolean NOT NULL DEFAULT false,
            owner text,                            -- servers.id of the server running it
            owner_token bigint,                    -- that server's fencing token
            name text,
            labels text,                           -- JSON object, NULL when none
            idempotency_key text,
            body_hash bigint,
            error text,
            progress text,                         -- JSON, written when the job ends
            result text,
            document bytea NOT NULL,               -- the job as submitted
            nodes bytea                            -- a finished job's node records (StoredRecords)
        );
        ALTER SEQUENCE jobs_position OWNED BY jobs.position;
        CREATE UNIQUE INDEX jobs_idempotency ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
        CREATE INDEX jobs_unfinished ON jobs (state, position) WHERE state IN ('pending', 'running');
        CREATE INDEX jobs_failed ON jobs (state, position) WHERE state IN ('failed', 'cancelled');
        CREATE INDEX jobs_sleeping ON jobs (run_at, position) WHERE state = 'sleeping';
        CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
        CREATE TABLE labels (
            key text NOT NULL,
            value text NOT NULL,
            position bigint NOT NULL,
            PRIMARY KEY (key, value, position)
        );
        CREATE TABLE nodes (
            job bigint NOT NULL,
            node_id text NOT NULL,
            ordinal bigint NOT NULL,
            type text NOT NULL,
            action text,
            executor text,
            parent text,
            state text NOT NULL,
            attempts bigint NOT NULL,
            result text,
            error text,
            started_at bigint,
            finished_at bigint,
            PRIMARY KEY (job, node_id)
        );
        CREATE TABLE events (
            job bigint NOT NULL,
            seq bigint NOT NULL,                   -- the seq of the row's first event
            events bytea NOT NULL,                 -- the events committed together (StoredRecords)
            PRIMARY KEY (job, seq)
        );
        CREATE TABLE deliveries (
            id text PRIMARY KEY,                   -- the webhook-id
            job_id text NOT NULL,
            seq bigint NOT NULL,
            event_type text NOT NULL,
            url text NOT NULL,
            headers text NOT NULL,
            secret text NOT NULL,                  -- none | server | literal:whsec_…
            body bytea NOT NULL,
            state text NOT NULL,
            attempts text NOT NULL,
            next_attempt_at bigint NOT NULL,
            retry text NOT NULL,
            created_at bigint NOT NULL,
            claimed_by text                        -- servers.id holding it while it is sent
        );
        CREATE INDEX deliveries_by_job ON deliveries (job_id, seq);
        CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'pending';
        CREATE TABLE leases (
            lease_hash text PRIMARY KEY,           -- HMAC-SHA256 of the lease id
            job_id text NOT NULL,
            task_id text NOT NULL,
            executor text NOT NULL,
            worker_id text NOT NULL,
            attempt bigint NOT NULL,
            heartbeat_timeout_ms bigint NOT NULL,
            claimed_at bigint NOT NULL
        );
        CREATE INDEX leases_by_job ON leases (job_id);
        CREATE TABLE schedules (
            id text PRIMARY KEY,
            definition text NOT NULL,
            created_at bigint NOT NULL,
            updated_at bigint NOT NULL,
            last_fire_at bigint,
            last_job_id text
        );
        CREATE TABLE servers (
            id text PRIMARY KEY,                   -- one row per server process
            token bigint NOT NULL,                 -- its fencing token (from servers_token)
            started_at bigint NOT NULL,
            heartbeat_at bigint NOT NULL,
            lease_until bigint NOT NULL            -- its jobs are another's to take after this
        );
        CREATE SEQUENCE servers_token;
        CREATE TABLE commands (
            id bigserial PRIMARY KEY,
            job_id text NOT NULL,
            kind text NOT NULL,                    -- cancel | cancel-task | complete | redrive
            body bytea,
            created_at bigint NOT NULL
        );
        CREATE INDEX commands_by_job ON commands (job_id, id);
        """,
        // 2: the cluster (SPEC §9). Lease times are the database's clock (`taskserver_now_ms`), so
        // servers whose clocks differ still agree on when a lease ends. `taskserver_fence` opens
        // every write transaction of a server: it fails (SQLSTATE TSF01) once the server's row is
        // gone or names another token — another server took its jobs over — and holds the row
        // (FOR SHARE) until the transaction ends, so a takeover (which deletes the row) waits for
        // a commit already past its check and then sees everything it wrote.
        """
        CREATE FUNCTION taskserver_now_ms() RETURNS bigint LANGUAGE sql VOLATILE
            AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;
        CREATE FUNCTION taskserver_fence(server text, server_token bigint) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM 1 FROM servers WHERE id = server AND token = server_token FOR SHARE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'server % no longer holds its lease: another server took its jobs over', server
                    USING ERRCODE = 'TSF01';
            END IF;
        END $$;
        ALTER TABLE commands ADD COLUMN task_id text, ADD COLUMN applied_at bigint, ADD COLUMN result text;
        CREATE INDEX commands_unapplied ON commands (job_id) WHERE applied_at IS NULL;
        """,
        // 3: worker claims through any server (SPEC §9). Each heartbeat publishes the server's
        // queued attempts per pool; a claim with nothing queued where it arrives is relayed to a
        // server that has some (`commands.server`, no job).
        """
        ALTER TABLE servers ADD COLUMN queued text;    -- {"pool": count, …}, as of its last heartbeat
        ALTER TABLE commands ALTER COLUMN job_id DROP NOT NULL, ADD COLUMN server text;
        """,
        // 4: the server-wide feed (SPEC §7 `GET /v1/events`), one for every server: a commit with
        // `job.*` events adds a row of them, numbered from `feed_head` in commit order
        // (`PostgresEventFeed`).
        """
        CREATE TABLE feed (
            first_position bigint PRIMARY KEY,     -- its entries are first_position … + count - 1
            count integer NOT NULL,
            entries bytea NOT NULL,                -- a line per entry: type, a tab, its JSON
            created_at bigint NOT NULL
        );
        CREATE TABLE feed_head (
            only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
            last bigint NOT NULL                   -- the last position given
        );
        INSERT INTO feed_head (last) VALUES (0);
        """,
        // 5: worker leases that ended, kept until their job is deleted, so that a call on one is
        // `409 lease.gone` through any server, not only the one that held it (which may be gone).
        // A table of their own: `leases` keeps meaning "live", which is what every server —
        // including one of the previous version during a rolling upgrade — carries on.
        """
        CREATE TABLE ended_leases (
            lease_hash text PRIMARY KEY,           -- HMAC-SHA256 of the lease id
            job_id text NOT NULL,
            ended_at bigint NOT NULL
        );
        CREATE INDEX ended_leases_by_job ON ended_leases (job_id);
        """,
        // 6: which process holds a server's row (`ProcessIdentity`: boot id, pid, start time), so
        // that a second server on one host under the same name is refused, not fenced against.
        """
        ALTER TABLE servers ADD COLUMN process text;
        """,
        // 7: concurrency keys for the whole cluster (`PostgresKeySlots`): a holder fills one of
        // the key's `max` slots; the primary key makes two servers racing for the last slot take
        // it once. A slot belongs to its holder (a job, or a job's task), taken up by the server
        // that runs the holder after a takeover; a job's end deletes its slots.
        """
        CREATE TABLE key_slots (
            key text NOT NULL,
            slot bigint NOT NULL,                  -- 0 … max - 1
            holder text NOT NULL,                  -- the job id, or the job id, a slash, the task
            job_id text NOT NULL,
            token bigint NOT NULL,                 -- the registration that took it (or took it up)
            grant_id bigint NOT NULL,              -- this taking: a release names it, so a release of
                                                   -- the holder's earlier attempt frees nothing
            taken_at bigint NOT NULL,
            PRIMARY KEY (key, slot)
        );
        CREATE UNIQUE INDEX key_slots_by_holder ON key_slots (key, holder);
        CREATE INDEX key_slots_by_job ON key_slots (job_id);
        CREATE TABLE key_waiters (
            key text NOT NULL,
            server text NOT NULL,                  -- a server with a line for the key, refused a slot
            PRIMARY KEY (key, server)
        );
        CREATE FUNCTION taskserver_take_slot(k text, max_holders bigint, who text, job text, server_token bigint,
            server text, grant_number bigint) RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE
            got bigint;
            free bigint;
        BEGIN
            PERFORM taskserver_fence(server, server_token);
            UPDATE key_slots SET token = server_token, grant_id = grant_number WHERE key = k AND holder = who
                RETURNING slot INTO got;
            IF got IS NOT NULL THEN RETURN got; END IF;
            FOR free IN SELECT g FROM generate_series(0, max_holders - 1) g
                    WHERE NOT EXISTS (SELECT 1 FROM key_slots s WHERE s.key = k AND s.slot = g) LOOP
                INSERT INTO key_slots VALUES (k, free, who, job, server_token, grant_number, taskserver_now_ms())
                    ON CONFLICT DO NOTHING RETURNING slot INTO got;
                IF got IS NOT NULL THEN RETURN got; END IF;
            END LOOP;
            INSERT INTO key_waiters VALUES (k, server) ON CONFLICT DO NOTHING;
            RETURN NULL;
        END $$;
        """,
        // 8: the cluster's notification channel, one per schema, so that clusters in the schemas
        // of one database do not wake each other (`public` keeps the name it had).
        """
        CREATE FUNCTION taskserver_channel() RETURNS text LANGUAGE sql STABLE AS $$
            SELECT CASE WHEN current_schema() = 'public' THEN 'taskserver'
                ELSE left('taskserver_' || current_schema(), 63) END
        $$;
        """,
        // 9: each server's executors as `GET /v1/executors` lists them, with each heartbeat, so
        // that any server answers for the cluster.
        """
        ALTER TABLE servers ADD COLUMN executors text;
        """,
        // 10: one line per key across the servers. A server's refused head records its priority
        // and since when it waits (`key_waiters`); a take yields a free slot to a live server's
        // head that waits ahead of it (a higher priority, or as high and waiting longer), and
        // wakes that server (`freed`). The 7-argument function stays for servers not yet upgraded.
        """
        ALTER TABLE key_waiters ADD COLUMN priority integer NOT NULL DEFAULT 0,
            ADD COLUMN since bigint NOT NULL DEFAULT 0;
        CREATE FUNCTION taskserver_take_slot(k text, max_holders bigint, who text, job text, server_token bigint,
            me text, grant_number bigint, my_priority bigint, my_since bigint) RETURNS bigint
            LANGUAGE plpgsql AS $$
        DECLARE
            got bigint;
            free bigint;
        BEGIN
            PERFORM taskserver_fence(me, server_token);
            UPDATE key_slots SET token = server_token, grant_id = grant_number WHERE key = k AND holder = who
                RETURNING slot INTO got;
            IF got IS NOT NULL THEN RETURN got; END IF;
            FOR free IN SELECT g FROM generate_series(0, max_holders - 1) g
                    WHERE NOT EXISTS (SELECT 1 FROM key_slots s WHERE s.key = k AND s.slot = g) LOOP
                IF EXISTS (SELECT 1 FROM key_waiters w JOIN servers s ON s.id = w.server
                        WHERE w.key = k AND w.server <> me AND s.lease_until >= taskserver_now_ms()
                            AND (w.priority > my_priority OR (w.priority = my_priority AND w.since < my_since))) THEN
                    PERFORM pg_notify(taskserver_channel(), 'freed ' || k);
                    EXIT;
                END IF;
                INSERT INTO key_slots VALUES (k, free, who, job, server_token, grant_number, taskserver_now_ms())
                    ON CONFLICT DO NOTHING RETURNING slot INTO got;
                IF got IS NOT NULL THEN
                    DELETE FROM key_waiters WHERE key = k AND server = me;
                    RETURN got;
                END IF;
            END LOOP;
            INSERT INTO key_waiters VALUES (k, me, my_priority, my_since)
                ON CONFLICT (key, server) DO UPDATE SET priority = excluded.priority, since = excluded.since;
            RETURN NULL;
        END $$;
        """,
        // 11: workflow definitions (issue #45), as SQLite's schema 10: immutable version rows,
        // each name's latest version and retirement, and the definition a job was started from.
        """
        ALTER TABLE jobs ADD COLUMN definition text, ADD COLUMN definition_version bigint;
        CREATE INDEX jobs_by_definition ON jobs (definition, position) WHERE definition IS NOT NULL;
        CREATE TABLE definitions (
            name text NOT NULL,
            version bigint NOT NULL,
            body text NOT NULL,
            created_at bigint NOT NULL,
            PRIMARY KEY (name, version)
        );
        CREATE TABLE definition_names (
            name text PRIMARY KEY,
            latest bigint NOT NULL,
            retired_at bigint
        );
        """,
    ]

    /// The advisory lock key of migrations (any fixed number; "TSMG" in ASCII).
    static let lockKey: Int64 = 0x5453_4D47

    /// Applies the migrations this database lacks; throws when it was migrated past what this
    /// server knows.
    static func migrate(_ connection: PostgresConnection) throws {
        // Under the lock too: servers starting together on an empty database would otherwise race
        // in `CREATE TABLE IF NOT EXISTS` (one fails on the catalog's unique index).
        try connection.transaction {
            try connection.query("SELECT pg_advisory_xact_lock($1)", [.int(Self.lockKey)])
            try connection.execute(
                """
                CREATE TABLE IF NOT EXISTS taskserver_migrations (
                    version integer PRIMARY KEY,
                    applied_at timestamptz NOT NULL DEFAULT now(),
                    server_version text NOT NULL
                )
                """
            )
        }
        for (index, sql) in Self.migrations.enumerated() {
            let version = index + 1
            try connection.transaction {
                try connection.query("SELECT pg_advisory_xact_lock($1)", [.int(Self.lockKey)])
                let newest = try connection.query("SELECT coalesce(max(version), 0)::bigint FROM taskserver_migrations")
                let known = Int(newest.int(0, 0))
                if known > Self.migrations.count {
                    throw PostgresSchemaError.newer(database: known, server: Self.migrations.count)
                }
                if known >= version { return }
                try connection.execute(sql)
                try connection.query(
                    "INSERT INTO taskserver_migrations (version, server_version) VALUES ($1, $2)",
                    [.int(Int64(version)), .text(TaskServerVersion.current)]
                )
            }
        }
        // Nothing to apply, but a newer server may have migrated further.
        let newest = Int(
            try connection.query("SELECT coalesce(max(version), 0)::bigint FROM taskserver_migrations").int(0, 0)
        )
        if newest > Self.migrations.count {
            throw PostgresSchemaError.newer(database: newest, server: Self.migrations.count)
        }
    }

    /// The tables and columns the migrations make, in the order they make them (a test checks
    /// that a migrated schema has exactly these).
    static let tables: KeyValuePairs<String, [String]> = [
        "jobs": [
            "position", "id", "state", "created_at", "started_at", "finished_at", "run_at", "priority",
            "cancel_requested", "owner", "owner_token", "name", "labels", "idempotency_key", "body_hash", "error",
            "progress", "result", "document", "nodes", "definition", "definition_version",
        ],
        "labels": ["key", "value", "position"],
        "nodes": [
            "job", "node_id", "ordinal", "type", "action", "executor", "parent", "state", "attempts", "result",
            "error", "started_at", "finished_at",
        ],
        "events": ["job", "seq", "events"],
        "deliveries": [
            "id", "job_id", "seq", "event_type", "url", "headers", "secret", "body", "state", "attempts",
            "next_attempt_at", "retry", "created_at", "claimed_by",
        ],
        "leases": [
            "lease_hash", "job_id", "task_id", "executor", "worker_id", "attempt", "heartbeat_timeout_ms",
            "claimed_at",
        ],
        "schedules": ["id", "definition", "created_at", "updated_at", "last_fire_at", "last_job_id"],
        "servers": ["id", "token", "started_at", "heartbeat_at", "lease_until", "queued", "process", "executors"],
        "commands": ["id", "job_id", "kind", "body", "created_at", "task_id", "applied_at", "result", "server"],
        "feed": ["first_position", "count", "entries", "created_at"],
        "feed_head": ["only_row", "last"],
        "ended_leases": ["lease_hash", "job_id", "ended_at"],
        "key_slots": ["key", "slot", "holder", "job_id", "token", "grant_id", "taken_at"],
        "key_waiters": ["key", "server", "priority", "since"],
        "definitions": ["name", "version", "body", "created_at"],
        "definition_names": ["name", "latest", "retired_at"],
    ]

    /// The functions the migrations make, with their numbers of arguments.
    static let functions: [(name: String, arguments: Int)] = [
        ("taskserver_now_ms", 0), ("taskserver_fence", 2), ("taskserver_take_slot", 9), ("taskserver_channel", 0),
    ]

    /// Checks that the schema the connection uses (its `search_path`) has every table, column and
    /// function the migrations make — a schema migrated, then changed by hand (a table dropped),
    /// would fail every write, or answer `201` for what never commits. Throws
    /// `PostgresSchemaError.incomplete` naming what is missing.
    static func verify(_ connection: PostgresConnection) throws {
        let rows = try connection.query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns WHERE table_schema = current_schema()"
        )
        var present: [String: Set<String>] = [:]
        for row in 0..<rows.count { present[rows.text(row, 0), default: []].insert(rows.text(row, 1)) }
        var missing: [String] = []
        for (table, columns) in Self.tables {
            guard let have = present[table] else {
                missing.append("table \(table)")
                continue
            }
            for column in columns where !have.contains(column) { missing.append("column \(table).\(column)") }
        }
        let defined = try connection.query(
            "SELECT proname::text, pronargs::bigint FROM pg_proc WHERE pronamespace = current_schema()::regnamespace"
        )
        var have: Set<String> = []
        for row in 0..<defined.count { have.insert("\(defined.text(row, 0))/\(defined.int(row, 1))") }
        for function in Self.functions where !have.contains("\(function.name)/\(function.arguments)") {
            missing.append("function \(function.name) (\(function.arguments) arguments)")
        }
        if !missing.isEmpty { throw PostgresSchemaError.incomplete(missing) }
    }
}

enum PostgresSchemaError: Error, CustomStringConvertible {
    case newer(database: Int, server: Int)
    /// Migrated, yet without these (`table jobs`, `column jobs.nodes`, `function …`).
    case incomplete([String])

    var description: String {
        switch self {
        case .newer(let database, let server):
            "the database has schema version \(database), newer than this server knows (\(server)): "
                + "run a server at least as new as the one that migrated it"
        case .incomplete(let missing):
            "the schema is recorded as migrated but lacks "
                + "\(missing.prefix(10).joined(separator: ", "))\(missing.count > 10 ? " and \(missing.count - 10) more" : ""): "
                + "restore it from a backup, or point --database at another schema or database"
        }
    }
}
