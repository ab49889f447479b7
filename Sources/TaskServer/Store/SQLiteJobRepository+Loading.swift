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

// Rebuilding jobs from the file: a finished job as it ended, an unfinished one ready to resume.

extension SQLiteJobRepository {
    /// Reads job `id` from the file: a finished job as it ended, an unfinished one with what it
    /// needs to resume (its document, and node records where the rows are newer than the list);
    /// `withDocument`: a finished job's document too (a redrive runs it again).
    func load(_ id: String, _ db: SQLiteConnection, withDocument: Bool = false) throws -> StoredJob? {
        let row = try db.prepared(
            """
            SELECT position, document, state, result, error, created_at, started_at, finished_at, cancel_requested, nodes,
                name, labels, run_at
            FROM jobs WHERE id = ?
            """
        ).bind(.text(id))
        guard try row.step() else { return nil }
        let position = row.int(0)
        let document = try row.withBytes(1) { bytes in try JSONParser.parse(bytes, limits: StoredRecords.limits) }
        let state = StoredRecords.jobState(row.text(2))
        let result = try row.optionalText(3).map { try JSONParser.parse($0, limits: StoredRecords.limits) }
        let error = try row.optionalText(4).flatMap {
            TaskError(json: try JSONParser.parse($0, limits: StoredRecords.limits))
        }
        let createdAt = Timestamp(milliseconds: row.int(5))
        let startedAt = row.optionalInt(6).map(Timestamp.init(milliseconds:))
        let finishedAt = row.optionalInt(7).map(Timestamp.init(milliseconds:))
        let cancelRequested = row.int(8) != 0
        let list =
            try row.isNull(9)
            ? []
            : row.withBytes(9) { bytes in
                try StoredRecords.decodeNodes(try JSONParser.parse(bytes, limits: StoredRecords.limits))
            }
        let name = row.optionalText(10)
        let labels = try StoredRecords.decodeLabels(row.optionalText(11))
        let runAt = row.optionalInt(12).map(Timestamp.init(milliseconds:))
        row.reset()

        // Node rows (a job that has not ended, or one stored by schema 3) over the job's own list:
        // a row is newer than the list.
        let nodes = try db.prepared(
            """
            SELECT node_id, type, action, executor, parent, state, attempts, result, error, started_at, finished_at
            FROM nodes WHERE job = ? ORDER BY ordinal
            """
        ).bind(.int(position))
        var overlay = NodeOverlay(list)
        while try nodes.step() {
            let record = NodeRecord(
                id: nodes.text(0),
                type: nodes.text(1),
                action: nodes.optionalText(2),
                executor: nodes.optionalText(3),
                state: NodeState(rawValue: nodes.text(5)) ?? .pending,
                attempts: Int(nodes.int(6)),
                result: try nodes.optionalText(7).map { try JSONParser.parse($0, limits: StoredRecords.limits) },
                error: try nodes.optionalText(8).flatMap {
                    TaskError(json: try JSONParser.parse($0, limits: StoredRecords.limits))
                },
                startedAt: nodes.optionalInt(9).map(Timestamp.init(milliseconds:)),
                finishedAt: nodes.optionalInt(10).map(Timestamp.init(milliseconds:)),
                parent: nodes.optionalText(4)
            )
            overlay.apply(record)
        }
        nodes.reset()
        let records = overlay.records

        let eventRows = try db.prepared("SELECT events FROM events WHERE job = ? ORDER BY seq").bind(.int(position))
        var events: [JobEvent] = []
        while try eventRows.step() {
            events += try eventRows.withBytes(0) { bytes in
                try StoredRecords.decodeEvents(try JSONParser.parse(bytes, limits: StoredRecords.limits))
            }
        }
        eventRows.reset()

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

    /// Sleeping jobs due by a time, in start order (`claimSleeping`), through the partial index
    /// `jobs_sleeping_by_start` (the WHERE clause repeats its condition). A sleeping job has no
    /// node or event rows: its row is all there is.
    static let sleepingSQL: StaticString = """
        SELECT position, id, document, created_at, name, labels, run_at, cancel_requested FROM jobs
        WHERE state = 'sleeping' AND run_at <= ? ORDER BY run_at, position LIMIT ?
        """

    /// Reads the sleeping jobs `claimSleeping` takes.
    func readSleeping(through: Timestamp, limit: Int, _ db: SQLiteConnection) throws -> [StoredJob] {
        let rows = try db.prepared(Self.sleepingSQL).bind(.int(through.milliseconds), .int(Int64(limit)))
        var jobs: [StoredJob] = []
        while try rows.step() {
            let document = try rows.withBytes(2) { bytes in try JSONParser.parse(bytes, limits: StoredRecords.limits) }
            jobs.append(
                StoredJob(
                    id: rows.text(1),
                    key: rows.int(0),
                    name: rows.optionalText(4),
                    labels: try StoredRecords.decodeLabels(rows.optionalText(5)),
                    input: document["input"] ?? .null,
                    document: document,
                    state: .pending,
                    createdAt: Timestamp(milliseconds: rows.int(3)),
                    cancelRequested: rows.int(7) != 0,
                    runAt: rows.optionalInt(6).map(Timestamp.init(milliseconds:)),
                    priority: document["priority"]?.intValue ?? JobSpec.defaultPriority
                )
            )
        }
        rows.reset()
        return jobs
    }

    /// A list item from a `jobs` row (list views show no input or result).
    static func snapshot(_ row: SQLiteStatement) throws -> JobSnapshot {
        let labels = try StoredRecords.decodeLabels(row.optionalText(3))
        let progress = try StoredRecords.decodeProgress(row.optionalText(6))
        return JobSnapshot(
            id: row.text(1),
            name: row.optionalText(2),
            state: StoredRecords.jobState(row.text(4)),
            input: .null,
            result: nil,
            error: try row.optionalText(5).flatMap {
                TaskError(json: try JSONParser.parse($0, limits: StoredRecords.limits))
            },
            labels: labels,
            createdAt: Timestamp(milliseconds: row.int(7)),
            startedAt: row.optionalInt(8).map(Timestamp.init(milliseconds:)),
            finishedAt: row.optionalInt(9).map(Timestamp.init(milliseconds:)),
            progress: progress,
            lastEventSeq: 0,
            runAt: row.optionalInt(10).map(Timestamp.init(milliseconds:)),
            priority: row.optionalInt(11).map { Int($0) } ?? JobSpec.defaultPriority
        )
    }
}
