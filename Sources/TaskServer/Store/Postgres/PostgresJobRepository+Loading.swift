import TaskCore
import TaskGraph

// Rebuilding jobs from rows: a finished job as it ended, an unfinished one ready to resume (the
// same records as the SQLite store's, read by the same code: `StoredRecords+Rows.swift`).

extension PostgresJobRepository {
    /// Reads job `id`: a finished job as it ended, an unfinished one with what it needs to resume
    /// (its document, and node records where the rows are newer than the list); `withDocument`:
    /// a finished job's document too (a redrive runs it again).
    func load(_ id: String, _ db: PostgresConnection, withDocument: Bool = false) throws -> StoredJob? {
        let rows = try db.query("SELECT \(StoredRecords.jobColumns) FROM jobs WHERE id = $1", [.text(id)])
        guard rows.count == 1 else { return nil }
        let job = try StoredRecords.JobRow(rows.row(0))
        rows.close()

        // Node rows (a job that has not ended) over the job's own list: a row is newer than the list.
        var overlay = NodeOverlay(job.nodes)
        let nodes = try db.query(
            "SELECT \(StoredRecords.nodeColumns) FROM nodes WHERE job = $1 ORDER BY ordinal",
            [.int(job.position)]
        )
        for record in try nodes.map(StoredRecords.node) { overlay.apply(record) }
        nodes.close()

        let eventRows = try db.query("SELECT events FROM events WHERE job = $1 ORDER BY seq", [.int(job.position)])
        let events = try eventRows.map(StoredRecords.events).flatMap { $0 }
        eventRows.close()
        return job.job(id: id, nodes: overlay.records, events: events, withDocument: withDocument)
    }
}
