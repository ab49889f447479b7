import TaskCore
import TaskGraph

// Rebuilding jobs from the file: a finished job as it ended, an unfinished one ready to resume
// (the same records as the PostgreSQL store's, read by the same code: `StoredRecords+Rows.swift`).
// The statements are literals, prepared once each;
// `SQLiteStoreTests.preparedStatementsSelectTheColumnsTheirReadersRead` checks that each names the
// columns its reader reads.

extension SQLiteJobRepository {
    /// A job's row (`StoredRecords.jobColumns`).
    static let jobSQL: StaticString = """
        SELECT position, document, state, result, error, created_at, started_at, finished_at, cancel_requested, nodes,
            name, labels, run_at
        FROM jobs WHERE id = ?
        """

    /// A job's node rows (`StoredRecords.nodeColumns`).
    static let nodesSQL: StaticString = """
        SELECT node_id, type, action, executor, parent, state, attempts, result, error, started_at, finished_at
        FROM nodes WHERE job = ? ORDER BY ordinal
        """

    /// Sleeping jobs due by a time, in start order (`claimSleeping`), through the partial index
    /// `jobs_sleeping_by_start` (the WHERE clause repeats its condition); `StoredRecords.sleepingColumns`.
    static let sleepingSQL: StaticString = """
        SELECT position, id, document, created_at, name, labels, run_at, cancel_requested FROM jobs
        WHERE state = 'sleeping' AND run_at <= ? ORDER BY run_at, position LIMIT ?
        """

    /// Reads job `id` from the file: a finished job as it ended, an unfinished one with what it
    /// needs to resume (its document, and node records where the rows are newer than the list);
    /// `withDocument`: a finished job's document too (a redrive runs it again).
    func load(_ id: String, _ db: SQLiteConnection, withDocument: Bool = false) throws -> StoredJob? {
        let row = try db.prepared(Self.jobSQL).bind(.text(id))
        guard try row.step() else { return nil }
        let job = try StoredRecords.JobRow(row)
        row.reset()

        // Node rows (a job that has not ended, or one stored by schema 3) over the job's own list:
        // a row is newer than the list.
        var overlay = NodeOverlay(job.nodes)
        let nodes = try db.prepared(Self.nodesSQL).bind(.int(job.position))
        while try nodes.step() { overlay.apply(try StoredRecords.node(nodes)) }
        nodes.reset()

        let eventRows = try db.prepared("SELECT events FROM events WHERE job = ? ORDER BY seq").bind(.int(job.position))
        var events: [JobEvent] = []
        while try eventRows.step() { events += try StoredRecords.events(eventRows) }
        eventRows.reset()
        return job.job(id: id, nodes: overlay.records, events: events, withDocument: withDocument)
    }

    /// Reads the sleeping jobs `claimSleeping` takes.
    func readSleeping(through: Timestamp, limit: Int, _ db: SQLiteConnection) throws -> [StoredJob] {
        let rows = try db.prepared(Self.sleepingSQL).bind(.int(through.milliseconds), .int(Int64(limit)))
        var jobs: [StoredJob] = []
        while try rows.step() { jobs.append(try StoredRecords.sleepingJob(rows)) }
        rows.reset()
        return jobs
    }
}
