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

extension SQLiteJobStore {
    /// Rebuilds job `id` from the file: a finished job as it ended, an unfinished one ready to
    /// resume (nodes with a stored outcome keep it).
    func load(_ id: String, _ db: SQLiteConnection) throws -> JobRun? {
        let row = try db.prepared(
            "SELECT document, state, result, error, created_at, started_at, finished_at, cancel_requested FROM jobs WHERE id = ?"
        ).bind(.text(id))
        guard try row.step() else { return nil }
        let document = try row.withBytes(0) { bytes in try JSONParser.parse(bytes, limits: Self.storedLimits) }
        let state = JobState(rawValue: row.text(1)) ?? .running
        let result = try row.optionalText(2).map { try JSONParser.parse($0, limits: Self.storedLimits) }
        let error = try row.optionalText(3).flatMap {
            TaskError(json: try JSONParser.parse($0, limits: Self.storedLimits))
        }
        let createdAt = Timestamp(milliseconds: row.int(4))
        let startedAt = row.optionalInt(5).map(Timestamp.init(milliseconds:))
        let finishedAt = row.optionalInt(6).map(Timestamp.init(milliseconds:))
        let cancelRequested = row.int(7) != 0
        row.reset()
        let spec = try self.engine.decoder.decodeJob(document)

        let nodes = try db.prepared(
            "SELECT node_id, type, action, executor, parent, state, attempts, result, error, started_at, finished_at FROM nodes WHERE job_id = ? ORDER BY ordinal"
        ).bind(.text(id))
        var records: [NodeRecord] = []
        while try nodes.step() {
            records.append(
                NodeRecord(
                    id: nodes.text(0),
                    type: nodes.text(1),
                    action: nodes.optionalText(2),
                    executor: nodes.optionalText(3),
                    state: NodeState(rawValue: nodes.text(5)) ?? .pending,
                    attempts: Int(nodes.int(6)),
                    result: try nodes.optionalText(7).map { try JSONParser.parse($0, limits: Self.storedLimits) },
                    error: try nodes.optionalText(8).flatMap {
                        TaskError(json: try JSONParser.parse($0, limits: Self.storedLimits))
                    },
                    startedAt: nodes.optionalInt(9).map(Timestamp.init(milliseconds:)),
                    finishedAt: nodes.optionalInt(10).map(Timestamp.init(milliseconds:)),
                    parent: nodes.optionalText(4)
                )
            )
        }
        nodes.reset()

        let eventRows = try db.prepared(
            "SELECT seq, type, time, task_id, data FROM events WHERE job_id = ? ORDER BY seq"
        ).bind(.text(id))
        var events: [JobEvent] = []
        while try eventRows.step() {
            guard let type = JobEventType(rawValue: eventRows.text(1)) else { continue }
            events.append(
                JobEvent(
                    seq: Int(eventRows.int(0)),
                    type: type,
                    time: Timestamp(milliseconds: eventRows.int(2)),
                    taskId: eventRows.optionalText(3),
                    data: try eventRows.optionalText(4).map { try JSONParser.parse($0, limits: Self.storedLimits) }
                )
            )
        }
        eventRows.reset()

        var restored = RestoredJob(nodes: [:], events: events, startedAt: startedAt, cancelRequested: cancelRequested)
        if state.isTerminal {
            restored.finished = FinishedJob(
                state: state,
                result: result,
                error: error,
                finishedAt: finishedAt ?? createdAt,
                records: records
            )
        } else {
            for record in records { restored.nodes[record.id] = record }
        }
        return self.engine.makeRun(id: id, spec: spec, createdAt: createdAt, restored: restored)
    }

    static let storedLimits = JSONParser.Limits(maxDepth: 1024, maxBytes: 1 << 30, maxStringBytes: 1 << 30)

    /// A list item from a `jobs` row (list views show no input or result).
    static func snapshot(_ row: SQLiteStatement) throws -> JobSnapshot {
        var labels: [String: String] = [:]
        if case .object(let object) = try JSONParser.parse(row.text(3), limits: storedLimits) {
            for (key, value) in object { labels[key] = value.stringValue ?? "" }
        }
        var progress = JobProgress()
        if let text = row.optionalText(6), case .object(let object) = try JSONParser.parse(text, limits: storedLimits) {
            progress.total = object["total"]?.intValue ?? 0
            progress.pending = object["pending"]?.intValue ?? 0
            progress.running = object["running"]?.intValue ?? 0
            progress.succeeded = object["succeeded"]?.intValue ?? 0
            progress.failed = object["failed"]?.intValue ?? 0
            progress.cancelled = object["cancelled"]?.intValue ?? 0
            progress.skipped = object["skipped"]?.intValue ?? 0
        }
        return JobSnapshot(
            id: row.text(1),
            name: row.optionalText(2),
            state: JobState(rawValue: row.text(4)) ?? .running,
            input: .null,
            result: nil,
            error: try row.optionalText(5).flatMap { TaskError(json: try JSONParser.parse($0, limits: storedLimits)) },
            labels: labels,
            createdAt: Timestamp(milliseconds: row.int(7)),
            startedAt: row.optionalInt(8).map(Timestamp.init(milliseconds:)),
            finishedAt: row.optionalInt(9).map(Timestamp.init(milliseconds:)),
            progress: progress,
            lastEventSeq: 0
        )
    }
}
