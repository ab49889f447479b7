import TaskCore
import TaskGraph

// Rebuilding jobs from rows: a finished job as it ended, an unfinished one ready to resume (the
// same records as the SQLite store's, from the same columns).

extension PostgresJobRepository {
    /// Reads job `id`: a finished job as it ended, an unfinished one with what it needs to resume
    /// (its document, and node records where the rows are newer than the list); `withDocument`:
    /// a finished job's document too (a redrive runs it again).
    func load(_ id: String, _ db: PostgresConnection, withDocument: Bool = false) throws -> StoredJob? {
        let row = try db.query(
            """
            SELECT position, document, state, result, error, created_at, started_at, finished_at, cancel_requested, nodes,
                name, labels, run_at
            FROM jobs WHERE id = $1
            """,
            [.text(id)]
        )
        guard row.count == 1 else { return nil }
        let position = row.int(0, 0)
        let document = try row.withBytes(0, 1) { bytes in try JSONParser.parse(bytes, limits: StoredRecords.limits) }
        let state = StoredRecords.jobState(row.text(0, 2))
        let result = try row.optionalText(0, 3).map { try JSONParser.parse($0, limits: StoredRecords.limits) }
        let error = try row.optionalText(0, 4).flatMap {
            TaskError(json: try JSONParser.parse($0, limits: StoredRecords.limits))
        }
        let createdAt = Timestamp(milliseconds: row.int(0, 5))
        let startedAt = row.optionalInt(0, 6).map(Timestamp.init(milliseconds:))
        let finishedAt = row.optionalInt(0, 7).map(Timestamp.init(milliseconds:))
        let cancelRequested = row.bool(0, 8)
        let list =
            try row.isNull(0, 9)
            ? []
            : row.withBytes(0, 9) { bytes in
                try StoredRecords.decodeNodes(try JSONParser.parse(bytes, limits: StoredRecords.limits))
            }
        let name = row.optionalText(0, 10)
        let labels = try StoredRecords.decodeLabels(row.optionalText(0, 11))
        let runAt = row.optionalInt(0, 12).map(Timestamp.init(milliseconds:))
        row.close()

        // Node rows (a job that has not ended) over the job's own list: a row is newer than the list.
        let nodes = try db.query(
            """
            SELECT node_id, type, action, executor, parent, state, attempts, result, error, started_at, finished_at
            FROM nodes WHERE job = $1 ORDER BY ordinal
            """,
            [.int(position)]
        )
        var overlay = NodeOverlay(list)
        for index in 0..<nodes.count {
            let record = NodeRecord(
                id: nodes.text(index, 0),
                type: nodes.text(index, 1),
                action: nodes.optionalText(index, 2),
                executor: nodes.optionalText(index, 3),
                state: NodeState(rawValue: nodes.text(index, 5)) ?? .pending,
                attempts: Int(nodes.int(index, 6)),
                result: try nodes.optionalText(index, 7).map { try JSONParser.parse($0, limits: StoredRecords.limits) },
                error: try nodes.optionalText(index, 8).flatMap {
                    TaskError(json: try JSONParser.parse($0, limits: StoredRecords.limits))
                },
                startedAt: nodes.optionalInt(index, 9).map(Timestamp.init(milliseconds:)),
                finishedAt: nodes.optionalInt(index, 10).map(Timestamp.init(milliseconds:)),
                parent: nodes.optionalText(index, 4)
            )
            overlay.apply(record)
        }
        nodes.close()
        let records = overlay.records

        let eventRows = try db.query("SELECT events FROM events WHERE job = $1 ORDER BY seq", [.int(position)])
        var events: [JobEvent] = []
        for index in 0..<eventRows.count {
            events += try eventRows.withBytes(index, 0) { bytes in
                try StoredRecords.decodeEvents(try JSONParser.parse(bytes, limits: StoredRecords.limits))
            }
        }
        eventRows.close()

        return StoredJob(
            id: id,
            key: position,
            name: name,
            labels: labels,
            input: document["input"] ?? .null,
            document: state.isTerminal && !withDocument ? nil : document,
            state: state,
            result: result,
            error: error,
            createdAt: createdAt,
            startedAt: startedAt,
            finishedAt: state.isTerminal ? (finishedAt ?? createdAt) : nil,
            cancelRequested: cancelRequested,
            runAt: runAt,
            priority: document["priority"]?.intValue ?? JobSpec.defaultPriority,
            nodes: records,
            events: events
        )
    }

    /// A sleeping job taken by `claimSleeping`, from the columns `position, id, document,
    /// created_at, name, labels, run_at, cancel_requested`. Its row is all there is.
    static func sleepingJob(_ rows: PostgresRows, _ row: Int) throws -> StoredJob {
        let document = try rows.withBytes(row, 2) { bytes in try JSONParser.parse(bytes, limits: StoredRecords.limits) }
        return StoredJob(
            id: rows.text(row, 1),
            key: rows.int(row, 0),
            name: rows.optionalText(row, 4),
            labels: try StoredRecords.decodeLabels(rows.optionalText(row, 5)),
            input: document["input"] ?? .null,
            document: document,
            state: .pending,
            createdAt: Timestamp(milliseconds: rows.int(row, 3)),
            cancelRequested: rows.bool(row, 7),
            runAt: rows.optionalInt(row, 6).map(Timestamp.init(milliseconds:)),
            priority: document["priority"]?.intValue ?? JobSpec.defaultPriority
        )
    }

    /// A list item from a `jobs` row (list views show no input or result).
    static func snapshot(_ rows: PostgresRows, _ row: Int) throws -> JobSnapshot {
        JobSnapshot(
            id: rows.text(row, 1),
            name: rows.optionalText(row, 2),
            state: StoredRecords.jobState(rows.text(row, 4)),
            input: .null,
            result: nil,
            error: try rows.optionalText(row, 5).flatMap {
                TaskError(json: try JSONParser.parse($0, limits: StoredRecords.limits))
            },
            labels: try StoredRecords.decodeLabels(rows.optionalText(row, 3)),
            createdAt: Timestamp(milliseconds: rows.int(row, 7)),
            startedAt: rows.optionalInt(row, 8).map(Timestamp.init(milliseconds:)),
            finishedAt: rows.optionalInt(row, 9).map(Timestamp.init(milliseconds:)),
            progress: try StoredRecords.decodeProgress(rows.optionalText(row, 6)),
            lastEventSeq: 0,
            runAt: rows.optionalInt(row, 10).map(Timestamp.init(milliseconds:)),
            priority: rows.optionalInt(row, 11).map { Int($0) } ?? JobSpec.defaultPriority
        )
    }

    /// A delivery from the columns of `StoredRecords.deliveryColumnNames`.
    static func delivery(_ rows: PostgresRows, _ row: Int) throws -> Delivery? {
        try StoredRecords.delivery(
            id: rows.text(row, 0),
            jobID: rows.text(row, 1),
            seq: Int(rows.int(row, 2)),
            eventType: rows.text(row, 3),
            url: rows.text(row, 4),
            headers: rows.text(row, 5),
            secret: rows.text(row, 6),
            body: rows.bytes(row, 7),
            state: rows.text(row, 8),
            attempts: rows.text(row, 9),
            nextAttemptAt: rows.int(row, 10),
            retry: rows.text(row, 11),
            createdAt: rows.int(row, 12)
        )
    }
}
