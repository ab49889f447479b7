import TaskCore
import TaskGraph

// Records rebuilt from rows, the same for SQLite and PostgreSQL: each kind of row has its column
// list here, beside the code that reads it, so that a query and its reader cannot drift apart.

extension StoredRecords {
    /// The `jobs` columns `JobRow` reads, in its order.
    static let jobColumns = """
        position, document, state, result, error, created_at, started_at, finished_at, cancel_requested, nodes, \
        name, labels, run_at
        """

    /// A job's own row: what it was submitted with, how it stands, and the node list it keeps once
    /// it ended (its node rows and events are read after it, from its `position`).
    struct JobRow {
        let position: Int64
        let document: JSONValue
        let state: JobState
        let result: JSONValue?
        let error: TaskError?
        let createdAt: Timestamp
        let startedAt: Timestamp?
        let finishedAt: Timestamp?
        let cancelRequested: Bool
        let nodes: [NodeRecord]
        let name: String?
        let labels: [String: String]
        let runAt: Timestamp?

        init(_ row: some StoreRow) throws {
            self.position = row.int(0)
            self.document = try row.json(1)
            self.state = StoredRecords.jobState(row.text(2))
            self.result = try row.optionalJSON(3)
            self.error = try row.optionalError(4)
            self.createdAt = row.timestamp(5)
            self.startedAt = row.optionalTimestamp(6)
            self.finishedAt = row.optionalTimestamp(7)
            self.cancelRequested = row.bool(8)
            self.nodes = try row.isNull(9) ? [] : StoredRecords.decodeNodes(try row.json(9))
            self.name = row.optionalText(10)
            self.labels = try StoredRecords.decodeLabels(row.optionalText(11))
            self.runAt = row.optionalTimestamp(12)
        }

        /// The job `id` of this row, with its node records and events; `withDocument`: a finished
        /// job's document too (a redrive runs it again).
        func job(id: String, nodes: [NodeRecord], events: [JobEvent], withDocument: Bool) -> StoredJob {
            StoredJob(
                id: id,
                key: self.position,
                name: self.name,
                labels: self.labels,
                input: self.document["input"] ?? .null,
                document: self.state.isTerminal && !withDocument ? nil : self.document,
                state: self.state,
                result: self.result,
                error: self.error,
                createdAt: self.createdAt,
                startedAt: self.startedAt,
                finishedAt: self.state.isTerminal ? (self.finishedAt ?? self.createdAt) : nil,
                cancelRequested: self.cancelRequested,
                runAt: self.runAt,
                priority: self.document["priority"]?.intValue ?? JobSpec.defaultPriority,
                definition: self.document["definition"].flatMap(DefinitionRef.init(json:)),
                nodes: nodes,
                events: events
            )
        }
    }

    /// The `nodes` columns `node(_:)` reads, in its order.
    static let nodeColumns =
        "node_id, type, action, executor, parent, state, attempts, result, error, started_at, finished_at"

    /// A node row: a node's record while its job runs.
    static func node(_ row: some StoreRow) throws -> NodeRecord {
        NodeRecord(
            id: row.text(0),
            type: row.text(1),
            action: row.optionalText(2),
            executor: row.optionalText(3),
            state: NodeState(rawValue: row.text(5)) ?? .pending,
            attempts: Int(row.int(6)),
            result: try row.optionalJSON(7),
            error: try row.optionalError(8),
            startedAt: row.optionalTimestamp(9),
            finishedAt: row.optionalTimestamp(10),
            parent: row.optionalText(4)
        )
    }

    /// The events of an `events` row (column 0: the events committed together).
    static func events(_ row: some StoreRow) throws -> [JobEvent] {
        try StoredRecords.decodeEvents(try row.json(0))
    }

    /// The `jobs` columns `sleepingJob(_:)` reads, in its order.
    static let sleepingColumns = "position, id, document, created_at, name, labels, run_at, cancel_requested"

    /// A sleeping job (delayed, not started): it has no node or event rows, its row is all there is.
    static func sleepingJob(_ row: some StoreRow) throws -> StoredJob {
        let document = try row.json(2)
        return StoredJob(
            id: row.text(1),
            key: row.int(0),
            name: row.optionalText(4),
            labels: try StoredRecords.decodeLabels(row.optionalText(5)),
            input: document["input"] ?? .null,
            document: document,
            state: .pending,
            createdAt: row.timestamp(3),
            cancelRequested: row.bool(7),
            runAt: row.optionalTimestamp(6),
            priority: document["priority"]?.intValue ?? JobSpec.defaultPriority,
            definition: document["definition"].flatMap(DefinitionRef.init(json:))
        )
    }

    /// The `jobs` columns `snapshot(_:)` reads, in its order.
    static let listColumns =
        "position, id, name, labels, state, error, progress, created_at, started_at, finished_at, run_at, priority, "
        + "definition, definition_version"

    /// A list item from a `jobs` row (list views show no input or result).
    static func snapshot(_ row: some StoreRow) throws -> JobSnapshot {
        JobSnapshot(
            id: row.text(1),
            name: row.optionalText(2),
            state: StoredRecords.jobState(row.text(4)),
            input: .null,
            result: nil,
            error: try row.optionalError(5),
            labels: try StoredRecords.decodeLabels(row.optionalText(3)),
            createdAt: row.timestamp(7),
            startedAt: row.optionalTimestamp(8),
            finishedAt: row.optionalTimestamp(9),
            progress: try StoredRecords.decodeProgress(row.optionalText(6)),
            lastEventSeq: 0,
            runAt: row.optionalTimestamp(10),
            priority: row.optionalInt(11).map { Int($0) } ?? JobSpec.defaultPriority,
            definition: row.optionalText(12).map { DefinitionRef(name: $0, version: Int(row.int(13))) }
        )
    }

    /// A delivery from the columns of `deliveryColumnNames`; nil when its stored fields do not
    /// parse.
    static func delivery(_ row: some StoreRow) throws -> Delivery? {
        try StoredRecords.delivery(
            id: row.text(0),
            jobID: row.text(1),
            seq: Int(row.int(2)),
            eventType: row.text(3),
            url: row.text(4),
            headers: row.text(5),
            secret: row.text(6),
            body: row.bytes(7),
            state: row.text(8),
            attempts: row.text(9),
            nextAttemptAt: row.int(10),
            retry: row.text(11),
            createdAt: row.int(12)
        )
    }

    /// The `schedules` columns `schedule(_:)` reads, in its order.
    static let scheduleColumns = "id, definition, created_at, updated_at, last_fire_at, last_job_id"

    static func schedule(_ row: some StoreRow) throws -> StoredSchedule {
        StoredSchedule(
            id: row.text(0),
            definition: try row.json(1),
            createdAt: row.timestamp(2),
            updatedAt: row.timestamp(3),
            lastFireAt: row.optionalTimestamp(4),
            lastJobID: row.optionalText(5)
        )
    }

    /// The columns `definition(_:)` reads, in its order, of `definitions d JOIN definition_names n`.
    static let definitionColumns = "d.name, d.version, d.body, d.created_at, n.latest, n.retired_at"

    static func definition(_ row: some StoreRow) throws -> StoredDefinition {
        StoredDefinition(
            name: row.text(0),
            version: Int(row.int(1)),
            body: try row.json(2),
            createdAt: row.timestamp(3),
            latest: Int(row.int(4)),
            retiredAt: row.optionalTimestamp(5)
        )
    }

    /// The `leases` columns `lease(_:)` reads, in its order.
    static let leaseColumns =
        "lease_hash, job_id, task_id, executor, worker_id, attempt, heartbeat_timeout_ms, claimed_at"

    static func lease(_ row: some StoreRow) -> StoredLease {
        StoredLease(
            hash: row.text(0),
            jobID: row.text(1),
            taskID: row.text(2),
            executor: row.text(3),
            workerId: row.text(4),
            attempt: Int(row.int(5)),
            heartbeatTimeoutMs: Int(row.int(6)),
            claimedAt: row.timestamp(7)
        )
    }
}
