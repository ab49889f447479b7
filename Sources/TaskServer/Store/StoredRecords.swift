import TaskGraph

/// How the store keeps events and node records inside a row (schema 4): compact JSON, written
/// with `JSONWriter` before the transaction begins and read back with `JSONParser`.
///
/// - Events: one `events` row per job per commit holds the events committed together, as an array
///   of `[seq, type, time, taskId?, data?]` (`time` in Unix milliseconds; `taskId` null when there
///   is data but no task). Arrays, not objects: half the bytes, and every byte is written twice
///   (WAL, then checkpoint). One row instead of one per event is most of what makes a short
///   job's journal cheaper than in schema 3.
/// - Nodes: a finished job keeps its node records in its own `jobs.nodes` (an array of
///   `{"id", "type", "action"?, "executor"?, "parent"?, "state", "attempts", "result"?, "error"?,
///   "startedAt"?, "finishedAt"?}`, in registration order). While it runs, a node's state is an
///   upserted `nodes` row, written with the event that announces it.
enum StoredRecords {
    /// The parser limits of stored JSON (written by the server itself, possibly large).
    static let limits = JSONParser.Limits(maxDepth: 1024, maxBytes: 1 << 30, maxStringBytes: 1 << 30)

    // MARK: - Job columns

    /// A `jobs.state`: a job's state, `sleeping` (delayed, not started) being `pending`.
    static func jobState(_ text: String) -> JobState {
        if let state = JobState(rawValue: text) { return state }
        return text == "sleeping" ? .pending : .running
    }

    /// `jobs.labels`: a JSON object with sorted keys.
    static func encodeLabels(_ labels: [String: String]) -> [UInt8] {
        var json = JSONWriter(capacity: 64)
        json.beginObject()
        for key in labels.keys.sorted() {
            json.escapedKey(key)
            json.string(labels[key]!)
        }
        json.endObject()
        return json.bytes
    }

    static func decodeLabels(_ text: String?) throws -> [String: String] {
        var labels: [String: String] = [:]
        if let text, case .object(let object) = try JSONParser.parse(text, limits: Self.limits) {
            for (key, value) in object { labels[key] = value.stringValue ?? "" }
        }
        return labels
    }

    /// `jobs.progress`, written when a job ends.
    static func decodeProgress(_ text: String?) throws -> JobProgress {
        var progress = JobProgress()
        if let text, case .object(let object) = try JSONParser.parse(text, limits: Self.limits) {
            progress.total = object["total"]?.intValue ?? 0
            progress.pending = object["pending"]?.intValue ?? 0
            progress.running = object["running"]?.intValue ?? 0
            progress.succeeded = object["succeeded"]?.intValue ?? 0
            progress.failed = object["failed"]?.intValue ?? 0
            progress.cancelled = object["cancelled"]?.intValue ?? 0
            progress.skipped = object["skipped"]?.intValue ?? 0
        }
        return progress
    }

    // MARK: - Events

    static func encodeEvents(_ events: some Collection<JobEvent>) -> [UInt8] {
        var json = JSONWriter(capacity: 48 * events.count)
        json.beginArray()
        for event in events {
            json.beginArray()
            json.int(event.seq)
            json.string(event.type.rawValue)
            json.int(Int(event.time.milliseconds))
            if event.taskId != nil || event.data != nil {
                if let taskId = event.taskId { json.string(taskId) } else { json.null() }
            }
            if let data = event.data { json.value(data) }
            json.endArray()
        }
        json.endArray()
        return json.bytes
    }

    /// The events of one row, in order; unknown event types (from a newer server) are skipped.
    static func decodeEvents(_ json: JSONValue) throws(StoredRecordError) -> [JobEvent] {
        guard case .array(let items) = json else { throw StoredRecordError("an events row is not an array") }
        var events: [JobEvent] = []
        events.reserveCapacity(items.count)
        for item in items {
            guard case .array(let fields) = item, fields.count >= 3, let seq = fields[0].intValue,
                let typeName = fields[1].stringValue, let time = fields[2].intValue
            else { throw StoredRecordError("a stored event is not [seq, type, time, …]") }
            guard let type = JobEventType(rawValue: typeName) else { continue }
            // A null `data` (version-3 rows carried over by migration 4) is no data. (Spelled out:
            // JSONValue is ExpressibleByNilLiteral, so a `nil` in a conditional would become `.null`.)
            var data = Optional<JSONValue>.none
            if fields.count > 4, fields[4] != .null { data = fields[4] }
            events.append(
                JobEvent(
                    seq: seq,
                    type: type,
                    time: Timestamp(milliseconds: Int64(time)),
                    taskId: fields.count > 3 ? fields[3].stringValue : nil,
                    data: data
                )
            )
        }
        return events
    }

    // MARK: - Nodes

    static func encodeNodes(_ records: [NodeRecord]) -> [UInt8] {
        var json = JSONWriter(capacity: 160 * records.count)
        json.beginArray()
        for record in records {
            json.beginObject()
            json.key("id")
            json.string(record.id)
            json.key("type")
            json.string(record.type)
            if let action = record.action {
                json.key("action")
                json.string(action)
            }
            if let executor = record.executor {
                json.key("executor")
                json.string(executor)
            }
            if let parent = record.parent {
                json.key("parent")
                json.string(parent)
            }
            json.key("state")
            json.string(record.state.rawValue)
            json.key("attempts")
            json.int(record.attempts)
            if record.state == .succeeded, let result = record.result {
                json.key("result")
                json.value(result)
            }
            if let error = record.error {
                json.key("error")
                json.value(error.json)
            }
            if let startedAt = record.startedAt {
                json.key("startedAt")
                json.int(Int(startedAt.milliseconds))
            }
            if let finishedAt = record.finishedAt {
                json.key("finishedAt")
                json.int(Int(finishedAt.milliseconds))
            }
            json.endObject()
        }
        json.endArray()
        return json.bytes
    }

    static func decodeNodes(_ json: JSONValue) throws(StoredRecordError) -> [NodeRecord] {
        guard case .array(let items) = json else { throw StoredRecordError("a job's nodes are not an array") }
        var records: [NodeRecord] = []
        records.reserveCapacity(items.count)
        for item in items {
            guard let id = item["id"]?.stringValue, let type = item["type"]?.stringValue,
                let stateName = item["state"]?.stringValue
            else { throw StoredRecordError("a stored node lacks id, type or state") }
            records.append(
                NodeRecord(
                    id: id,
                    type: type,
                    action: item["action"]?.stringValue,
                    executor: item["executor"]?.stringValue,
                    state: NodeState(rawValue: stateName) ?? .pending,
                    attempts: item["attempts"]?.intValue ?? 0,
                    result: item["result"],
                    error: item["error"].flatMap(TaskError.init(json:)),
                    startedAt: item["startedAt"]?.intValue.map { Timestamp(milliseconds: Int64($0)) },
                    finishedAt: item["finishedAt"]?.intValue.map { Timestamp(milliseconds: Int64($0)) },
                    parent: item["parent"]?.stringValue
                )
            )
        }
        return records
    }
}

/// A stored row that does not read back as the store wrote it (a damaged or foreign file).
struct StoredRecordError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

// MARK: - Deliveries

extension StoredRecords {
    /// A delivery's JSON columns: `headers`, `attempts` and `retry`.
    static func deliveryColumns(_ delivery: Delivery) -> (headers: String, attempts: String, retry: String) {
        var headers = JSONObject()
        for key in delivery.headers.keys.sorted() { headers[key] = .string(delivery.headers[key]!) }
        var retry = JSONObject()
        retry["maxAttempts"] = .int(delivery.retry.maxAttempts)
        retry["delayMs"] = .int(delivery.retry.delayMs)
        retry["backoff"] = .double(delivery.retry.backoff)
        if let maxDelayMs = delivery.retry.maxDelayMs { retry["maxDelayMs"] = .int(maxDelayMs) }
        retry["jitter"] = .bool(delivery.retry.jitter)
        return (
            JSONValue.object(headers).jsonString, Self.attemptsJSON(delivery.attempts).jsonString,
            JSONValue.object(retry).jsonString
        )
    }

    static func attemptsJSON(_ attempts: [DeliveryAttempt]) -> JSONValue {
        .array(
            attempts.map { attempt in
                var object = JSONObject()
                object["at"] = .int(Int(attempt.at.milliseconds))
                if let status = attempt.status { object["status"] = .int(status) }
                if let error = attempt.error { object["error"] = .string(error) }
                object["durationMs"] = .int(attempt.durationMs)
                return .object(object)
            }
        )
    }

    /// A delivery from its columns (the order of `deliveryColumnNames`); nil when a column holds
    /// a value this server does not know (written by a newer one).
    static func delivery(
        id: String,
        jobID: String,
        seq: Int,
        eventType: String,
        url: String,
        headers: String,
        secret: String,
        body: [UInt8],
        state: String,
        attempts: String,
        nextAttemptAt: Int64,
        retry: String,
        createdAt: Int64
    ) throws -> Delivery? {
        guard let type = JobEventType(rawValue: eventType), let state = DeliveryState(rawValue: state),
            let secret = SecretReference(storageText: secret)
        else { return nil }
        var headerFields: [String: String] = [:]
        if case .object(let object) = try JSONParser.parse(headers, limits: Self.limits) {
            for (key, value) in object { headerFields[key] = value.stringValue ?? "" }
        }
        var attemptList: [DeliveryAttempt] = []
        for item in try JSONParser.parse(attempts, limits: Self.limits).arrayValue ?? [] {
            attemptList.append(
                DeliveryAttempt(
                    at: Timestamp(milliseconds: Int64(item["at"]?.intValue ?? 0)),
                    status: item["status"]?.intValue,
                    error: item["error"]?.stringValue,
                    durationMs: item["durationMs"]?.intValue ?? 0
                )
            )
        }
        let retryObject = try JSONParser.parse(retry, limits: Self.limits)
        let retrySpec = RetrySpec(
            maxAttempts: retryObject["maxAttempts"]?.intValue ?? 1,
            delayMs: retryObject["delayMs"]?.intValue ?? 0,
            backoff: retryObject["backoff"]?.doubleValue ?? 2,
            maxDelayMs: retryObject["maxDelayMs"]?.intValue,
            jitter: retryObject["jitter"]?.boolValue ?? false
        )
        return Delivery(
            id: id,
            jobID: jobID,
            seq: seq,
            eventType: type,
            url: url,
            headers: headerFields,
            secret: secret,
            body: body,
            state: state,
            attempts: attemptList,
            nextAttemptAt: Timestamp(milliseconds: nextAttemptAt),
            retry: retrySpec,
            createdAt: Timestamp(milliseconds: createdAt)
        )
    }

    /// The columns of a delivery, in the order `delivery(…)` takes them.
    static let deliveryColumnNames =
        "id, job_id, seq, event_type, url, headers, secret, body, state, attempts, next_attempt_at, retry, created_at"
}

/// A job's node records as its own list has them (`jobs.nodes`), overlaid with its node rows: a
/// row is newer than the list (a job that has not ended, or a redriven one).
struct NodeOverlay {
    private(set) var records: [NodeRecord]
    private var indexes: [String: Int]?

    init(_ list: [NodeRecord]) { self.records = list }

    mutating func apply(_ row: NodeRecord) {
        if self.indexes == nil {
            self.indexes = Dictionary(
                self.records.enumerated().map { ($1.id, $0) },
                uniquingKeysWith: { first, _ in first }
            )
        }
        if let index = self.indexes?[row.id] {
            self.records[index] = row
        } else {
            self.indexes?[row.id] = self.records.count
            self.records.append(row)
        }
    }
}
