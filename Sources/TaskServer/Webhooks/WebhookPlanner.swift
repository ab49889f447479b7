import TaskGraph

/// Decides which events go to which webhook endpoint, and builds their deliveries.
///
/// Pure apart from reading the run's current state: the same events of the same job always give
/// deliveries with the same ids (`msg_<jobId>_<seq>` for the job's own webhook,
/// `msg_<jobId>_<seq>_server` for the server-wide one), so a store that plans again after a restart
/// cannot create a second delivery of one event.
///
/// The payload's `data.job` / `data.task` is the job or node as it is when the delivery is planned
/// (in the observer callback that follows the event): for a terminal event that is its final state.
public struct WebhookPlanner: Sendable {
    /// The server-wide default webhook (`--webhook-url`), if any.
    public var serverDefault: WebhookSpec?

    public init(serverDefault: WebhookSpec? = nil) {
        self.serverDefault = serverDefault
    }

    /// The planner of a server: its default webhook comes from `--webhook-url`/`--webhook-secret`.
    public init(configuration: ServerConfiguration) {
        self.init(
            serverDefault: configuration.webhooks.url.map {
                WebhookSpec(url: $0, secret: configuration.webhooks.secret)
            }
        )
    }

    /// The new pending deliveries for `events` of `run` (in event order, the job's endpoint first).
    public func plan(_ run: JobRun, events: ArraySlice<JobEvent>) -> [Delivery] {
        var endpoints: [(spec: WebhookSpec, suffix: String, secret: SecretReference)] = []
        if let own = run.spec.webhook { endpoints.append((own, "", own.secret.map(SecretReference.literal) ?? .none)) }
        if let server = self.serverDefault {
            endpoints.append((server, "_server", server.secret == nil ? .none : .serverDefault))
        }
        guard !endpoints.isEmpty else { return [] }
        var deliveries: [Delivery] = []
        var jobJSON: [UInt8]?
        let now = Timestamp.now()
        // A traced job's deliveries carry its context (issue #46): the dispatcher sends each attempt
        // from a span of its own under the job's. Kept with the delivery, never listed.
        let trace = run.spec.labels[JobSnapshot.traceLabel].flatMap(JobTraceLabel.init)
        for event in events {
            let type = event.type.rawValue
            guard endpoints.contains(where: { $0.spec.wants(type) }) else { continue }
            // {"type", "timestamp", "data": {"seq", "job"} or {"seq", "jobId", "task"}}
            var payload = JSONWriter(capacity: 640)
            payload.beginObject()
            payload.key("type")
            payload.string(type)
            payload.key("timestamp")
            payload.timestamp(event.time)
            payload.key("data")
            payload.beginObject()
            payload.key("seq")
            payload.int(event.seq)
            if event.type.isJobEvent {
                if jobJSON == nil { jobJSON = run.snapshot.jsonBytes() }
                payload.key("job")
                payload.encoded(jobJSON!)
            } else {
                payload.key("jobId")
                payload.string(run.id)
                payload.key("task")
                payload.value(
                    event.taskId.flatMap { run.node($0)?.json } ?? ["id": event.taskId.map(JSONValue.string) ?? .null]
                )
            }
            payload.endObject()
            payload.endObject()
            let body = payload.bytes
            for endpoint in endpoints where endpoint.spec.wants(type) {
                deliveries.append(
                    Delivery(
                        id: "msg_\(run.id)_\(event.seq)\(endpoint.suffix)",
                        jobID: run.id,
                        seq: event.seq,
                        eventType: event.type,
                        url: endpoint.spec.url,
                        headers: Self.headers(endpoint.spec.headers, trace: trace),
                        secret: endpoint.secret,
                        body: body,
                        nextAttemptAt: now,
                        retry: endpoint.spec.retry,
                        createdAt: now
                    )
                )
            }
        }
        return deliveries
    }

    /// A webhook's own headers, with the job's `traceparent` and `tracestate` unless it sets its own.
    static func headers(_ own: [String: String], trace: JobTraceLabel?) -> [String: String] {
        guard let trace, !own.keys.contains(where: { $0.lowercasedASCII == "traceparent" }) else { return own }
        var headers = own
        headers["traceparent"] = trace.own.traceparent
        if let state = trace.own.traceState { headers["tracestate"] = state }
        return headers
    }
}
