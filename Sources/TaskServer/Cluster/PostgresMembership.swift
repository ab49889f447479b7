import TaskCore
import TaskGraph

/// The statements of a server's membership in the cluster (SPEC §9), and nothing else: each runs
/// on the connection it is given and returns what it read. When and why they run is
/// `PostgresCluster`'s (and `NodeLease`'s) business.
///
/// Tables: `servers` (one row per server: its fencing token and lease, on the database's clock),
/// `commands` (relayed commands and their answers), `deliveries.claimed_by`, `feed`.
struct PostgresMembership: Sendable {
    let nodeName: String
    let timing: ClusterTiming

    /// Takes this server's row (a new token, a fresh lease, this process); a predecessor under the
    /// same name is fenced by it. Returns the token.
    func register(_ db: PostgresConnection) throws -> Int64 {
        try db.query(
            """
            INSERT INTO servers (id, token, started_at, heartbeat_at, lease_until, process)
            SELECT $1, nextval('servers_token'), now_ms, now_ms, now_ms + $2, $3 FROM taskserver_now_ms() AS now_ms
            ON CONFLICT (id) DO UPDATE SET token = excluded.token, started_at = excluded.started_at,
                heartbeat_at = excluded.heartbeat_at, lease_until = excluded.lease_until, process = excluded.process
            RETURNING token
            """,
            [
                .text(self.nodeName), .int(self.timing.lease.wholeMilliseconds),
                ProcessIdentity.current.map { .text($0.text) },
            ]
        ).int(0, 0)
    }

    /// The process holding this server's name with a live lease, if another one on this host
    /// does (a second server started under the same name: refused, not fenced against).
    func liveHolderHere(_ db: PostgresConnection) throws -> ProcessIdentity? {
        let rows = try db.query(
            "SELECT process FROM servers WHERE id = $1 AND lease_until >= taskserver_now_ms()",
            [.text(self.nodeName)]
        )
        guard rows.count == 1, let text = rows.row(0).optionalText(0), let holder = ProcessIdentity(text) else {
            return nil
        }
        return holder.isAnotherLiveProcessHere ? holder : nil
    }

    /// Webhook deliveries held by `servers` (dead, or this name's predecessor): sent again.
    func releaseDeliveries(of servers: [String], _ db: PostgresConnection) throws {
        try db.query(
            "UPDATE deliveries SET claimed_by = NULL WHERE claimed_by = ANY($1::text[])",
            [.textArray(servers)]
        )
    }

    /// Sends `notice` on the cluster's channel (a notice that announces no commit of its own).
    func notify(_ notice: ClusterNotice, _ db: PostgresConnection) throws {
        try db.query("SELECT pg_notify(taskserver_channel(), $1)", [.text(notice.payload)])
    }

    /// Renews the lease of the row under `token`, publishing `queued` (`{"pool": count}`);
    /// false when the row is gone or under another token (another server took over).
    func renew(token: Int64, queued: String?, executors: String?, _ db: PostgresConnection) throws -> Bool {
        try db.query(
            """
            UPDATE servers SET heartbeat_at = now_ms, lease_until = now_ms + $3, queued = $4, executors = $5
            FROM taskserver_now_ms() AS now_ms WHERE id = $1 AND token = $2
            """,
            [
                .text(self.nodeName), .int(token), .int(self.timing.lease.wholeMilliseconds), queued.map { .text($0) },
                executors.map { .text($0) },
            ]
        ).affected == 1
    }

    /// Deletes the rows of other servers whose lease ended (`SKIP LOCKED`: one server deletes
    /// each); their names.
    func reapExpired(_ db: PostgresConnection) throws -> [String] {
        let dead = try db.query(
            """
            DELETE FROM servers WHERE id IN (
                SELECT id FROM servers WHERE lease_until < taskserver_now_ms() AND id <> $1 FOR UPDATE SKIP LOCKED)
            RETURNING id
            """,
            [.text(self.nodeName)]
        )
        return (0..<dead.count).map { dead.text($0, 0) }
    }

    /// The servers whose lease has not ended, as this server sees them.
    struct Alive {
        /// Other live servers.
        var peers: Int
        /// The oldest live registration's token: its server leads.
        var leaderToken: Int64
        /// The others' published queued counts, `{"server": {"pool": count}}`.
        var queued: String?
        /// The others' published executors, `{"server": [item, …]}`.
        var executors: String?
    }

    func alive(_ db: PostgresConnection) throws -> Alive {
        let rows = try db.query(
            """
            SELECT count(*) FILTER (WHERE id <> $1), coalesce(min(token), 0),
                json_object_agg(id, queued::json) FILTER (WHERE id <> $1 AND queued IS NOT NULL)::text,
                json_object_agg(id, executors::json) FILTER (WHERE id <> $1 AND executors IS NOT NULL)::text
            FROM servers WHERE lease_until >= taskserver_now_ms()
            """,
            [.text(self.nodeName)]
        )
        let row = rows.row(0)
        return Alive(
            peers: Int(rows.int(0, 0)),
            leaderToken: rows.int(0, 1),
            queued: row.optionalText(2),
            executors: row.optionalText(3)
        )
    }

    /// The leader's chore: the server-wide feed keeps `entries` positions.
    func trimFeed(keeping entries: Int, _ db: PostgresConnection) throws {
        try db.query(
            "DELETE FROM feed WHERE first_position < (SELECT last FROM feed_head) - $1",
            [.int(Int64(entries))]
        )
    }

    /// The leader's chore: slots of concurrency keys whose job ended or is gone (a release lost
    /// with a crash), and the waiting marks of servers that are gone. Servers waiting for a key
    /// freed so are told (`freed <key>`).
    func sweepKeySlots(_ db: PostgresConnection) throws {
        try db.query(
            """
            WITH gone AS (
                DELETE FROM key_slots s WHERE NOT EXISTS (
                    SELECT 1 FROM jobs j WHERE j.id = s.job_id AND j.state NOT IN ('succeeded', 'failed', 'cancelled'))
                RETURNING s.key)
            SELECT pg_notify(taskserver_channel(), 'freed ' || g.key) FROM (SELECT DISTINCT key FROM gone) g
            WHERE EXISTS (SELECT 1 FROM key_waiters w WHERE w.key = g.key)
            """
        )
        try db.query("DELETE FROM key_waiters w WHERE NOT EXISTS (SELECT 1 FROM servers s WHERE s.id = w.server)")
    }

    /// The leader's chore: commands answered `commandRetention` ago, and claims nobody applied in
    /// that time (never applied later).
    func deleteOldCommands(_ db: PostgresConnection) throws {
        try db.query(
            """
            DELETE FROM commands WHERE applied_at < taskserver_now_ms() - $1
                OR (kind = 'claim' AND applied_at IS NULL AND created_at < taskserver_now_ms() - $1)
            """,
            [.int(self.timing.commandRetention.wholeMilliseconds)]
        )
    }

    // MARK: - Commands

    /// Where a relayed command went.
    enum Inserted: Equatable {
        /// Inserted as `id`; its target was notified.
        case sent(id: Int64)
        /// A lease command whose lease is stored as ended: answered as its holder would (`409
        /// lease.gone`) with no command — the server that held it may be gone.
        case leaseEnded
        /// A lease command whose lease is not stored at all: no one holds it.
        case leaseNotStored
    }

    /// Inserts `command` and notifies its target in one statement.
    func insert(_ command: ClusterCommand, _ db: PostgresConnection) throws -> Inserted {
        // A lease command goes to the server that runs the lease's job; a claim to its server.
        // The payload is `ClusterNotice.command`'s.
        let row = command.row
        let rows = try db.query(
            """
            WITH c AS (
                INSERT INTO commands (job_id, server, kind, task_id, body, created_at)
                SELECT target.job_id, $5::text, $2, $3, $4, taskserver_now_ms() FROM (SELECT coalesce($1::text,
                    (SELECT job_id FROM leases WHERE lease_hash = $6::text)) AS job_id) AS target
                WHERE target.job_id IS NOT NULL OR $5::text IS NOT NULL
                RETURNING id, job_id, server
            )
            SELECT id, pg_notify(taskserver_channel(), 'command ' || id || ' ' || coalesce(job_id, '@' || server))::text
            FROM c
            UNION ALL
            SELECT NULL, NULL FROM ended_leases WHERE lease_hash = $6::text AND NOT EXISTS (SELECT FROM c)
            """,
            [
                row.jobID.map { .text($0) }, .text(row.kind), .text(row.taskID),
                row.body.map { .bytes(Array($0.jsonString.utf8)) }, row.server.map { .text($0) },
                command.leaseHash.map { .text($0) },
            ]
        )
        guard rows.count == 1 else { return .leaseNotStored }
        return rows.isNull(0, 0) ? .leaseEnded : .sent(id: rows.int(0, 0))
    }

    /// Records the answer to command `id` and wakes the server waiting for it.
    func answer(_ id: Int64, _ answer: ClusterAnswer, _ db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE commands SET applied_at = taskserver_now_ms(), result = $2 WHERE id = $1 AND applied_at IS NULL
            RETURNING pg_notify(taskserver_channel(), 'answered ' || id)
            """,
            [.int(id), .text(answer.json.jsonString)]
        )
    }

    /// Command `id`, unless applied already or (a claim) no longer fresh.
    func command(_ id: Int64, _ db: PostgresConnection) throws -> ClusterCommand? {
        let rows = try db.query(
            """
            SELECT id, job_id, kind, task_id, body, server FROM commands WHERE id = $1 AND applied_at IS NULL
                AND (kind <> 'claim' OR created_at >= taskserver_now_ms() - $2)
            """,
            [.int(id), .int(self.timing.claimFreshness.wholeMilliseconds)]
        )
        return rows.count == 1 ? try Self.command(rows.row(0)) : nil
    }

    /// Unapplied commands for jobs this server owns, older than `lostCommandAge` (their
    /// notification was lost: a newer one's is on its way), with the job each is for.
    func lostCommands(_ db: PostgresConnection) throws -> [(id: Int64, job: String, command: ClusterCommand)] {
        let rows = try db.query(
            """
            SELECT c.id, c.job_id, c.kind, c.task_id, c.body, c.server FROM commands c JOIN jobs j ON j.id = c.job_id
            WHERE c.applied_at IS NULL AND j.owner = $1 AND c.created_at < taskserver_now_ms() - $2
            """,
            [.text(self.nodeName), .int(self.timing.lostCommandAge.wholeMilliseconds)]
        )
        return try (0..<rows.count).compactMap { row in
            try Self.command(rows.row(row)).map { (rows.int(row, 0), rows.text(row, 1), $0) }
        }
    }

    /// The answers recorded for these commands (nil: one this server cannot read).
    func answers(_ ids: [Int64], _ db: PostgresConnection) throws -> [(id: Int64, answer: ClusterAnswer?)] {
        let rows = try db.query(
            "SELECT id, result FROM commands WHERE id = ANY($1::bigint[]) AND applied_at IS NOT NULL",
            [.intArray(ids)]
        )
        return try (0..<rows.count).map { row in
            (rows.int(row, 0), try rows.row(row).optionalJSON(1).flatMap(ClusterAnswer.init(json:)))
        }
    }

    /// Deletes this server's row (a graceful leave: the others claim at once what is left).
    func leave(token: Int64, _ db: PostgresConnection) throws {
        // The others take up what it leaves unfinished at once (`left`), not at their next takeover.
        try db.query(
            """
            WITH gone AS (DELETE FROM servers WHERE id = $1 AND token = $2 RETURNING id)
            SELECT pg_notify(taskserver_channel(), 'left ' || id) FROM gone
            """,
            [.text(self.nodeName), .int(token)]
        )
    }

    /// The command of a `commands` row read as `id, job_id, kind, task_id, body, server`.
    private static func command(_ row: PostgresRow) throws -> ClusterCommand? {
        guard let taskID = row.optionalText(3) else { return nil }
        return ClusterCommand(
            row: ClusterCommand.Row(
                kind: row.text(2),
                taskID: taskID,
                body: try row.optionalJSON(4),
                server: row.optionalText(5),
                jobID: row.optionalText(1)
            )
        )
    }
}
