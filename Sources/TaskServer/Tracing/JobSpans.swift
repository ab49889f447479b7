import Synchronization
import TaskCore
import TaskGraph
import Tracing

/// Exports a traced job's span when the job ends (a `JobObserver`), and follows its task attempts
/// (the engine's `AttemptTracer`).
///
/// Attributes (besides the OpenTelemetry conventions' `error.type`, `http.*`, `server.*`):
///
/// | attribute | on | value |
/// |---|---|---|
/// | `taskserver.job.id`, `taskserver.job.name` | every job-related span | |
/// | `taskserver.job.state` | job | `succeeded`, `failed`, `cancelled` |
/// | `taskserver.job.priority` | job, attempt | 0…9 |
/// | `taskserver.job.definition`, `…definition_version` | job | a definition's start |
/// | `taskserver.job.queue_ms` | job | created → started (a delay, a job's key wait) |
/// | `taskserver.task.id`, `taskserver.task.attempt`, `taskserver.task.action` | attempt, lease | |
/// | `taskserver.executor` | attempt, lease | the pool (`messaging.destination.name` too) |
/// | `taskserver.concurrency.key` | attempt | the key it held, if any |
/// | `taskserver.worker.id` | lease | the worker that claimed it |
/// | `taskserver.wait.reason`, `taskserver.wait.ms` | `taskserver.wait` events | `concurrency`, `rate`, `slot` |
/// | `taskserver.task.result` | attempt | only with `--trace-payloads`, at most 4 KiB |
struct JobSpans: JobObserver, AttemptTracer {
    let tracing: ServerTracing

    /// Payload attributes are cut here: a span is not a result store.
    static let maxPayloadBytes = 4096

    // MARK: - The job's span

    func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        for event in events where event.type.isTerminal {
            self.ended(run, at: event.time)
        }
    }

    private func ended(_ run: JobRun, at end: Timestamp) {
        guard let label = JobTraceLabel(run), label.own.sampled, !run.isAbandoned else { return }
        let snapshot = run.snapshot
        let span: OTLPSpan
        if let redriven = run.lastRedrivenAt {
            // The job's own span was exported when it first ended; a redriven run is a span under it.
            span = self.tracing.startSpan(
                under: label,
                "redrive",
                kind: .internal,
                at: SpanInstant(milliseconds: redriven.milliseconds)
            )
        } else {
            var context = ServiceContext.descending(from: label.parent)
            context[PresetSpanKey.self] = label.own
            span = self.tracing.tracer.startSpan(
                (snapshot.name ?? snapshot.definition?.name).map { "job " + $0 } ?? "job",
                context: context,
                ofKind: .internal,
                at: SpanInstant(milliseconds: run.createdAt.milliseconds)
            )
            if let started = snapshot.startedAt {
                let queued = max(0, started.milliseconds - run.createdAt.milliseconds)
                span.attributes.set("taskserver.job.queue_ms", value: .int64(queued))
                span.addEvent(
                    SpanEvent(
                        name: "job.started",
                        at: SpanInstant(milliseconds: started.milliseconds),
                        attributes: ["taskserver.job.queue_ms": .int64(queued)]
                    )
                )
            }
        }
        var attributes = span.attributes
        attributes.set("taskserver.job.id", value: .string(run.id))
        if let name = snapshot.name { attributes.set("taskserver.job.name", value: .string(name)) }
        attributes.set("taskserver.job.state", value: .string(snapshot.state.rawValue))
        attributes.set("taskserver.job.priority", value: .int64(Int64(snapshot.priority)))
        if let definition = snapshot.definition {
            attributes.set("taskserver.job.definition", value: .string(definition.name))
            attributes.set("taskserver.job.definition_version", value: .int64(Int64(definition.version)))
        }
        if let parent = snapshot.labels[JobSnapshot.parentLabel] {
            attributes.set("taskserver.job.parent_id", value: .string(parent))
        }
        if snapshot.state == .failed {
            attributes.set("error.type", value: .string(snapshot.error?.code ?? "failed"))
            span.setStatus(SpanStatus(code: .error, message: snapshot.error?.code))
        }
        span.attributes = attributes
        span.end(at: SpanInstant(milliseconds: end.milliseconds))
    }

    // MARK: - Attempts

    func attemptBegan(
        _ run: JobRun,
        taskID: String,
        attempt: Int,
        executor: String,
        action: String
    ) -> (any AttemptTrace)? {
        guard let label = JobTraceLabel(run) else { return nil }
        let span = self.tracing.startSpan(under: label, "task " + taskID, kind: .internal, at: SpanInstant.now())
        if span.isRecording {
            var attributes: SpanAttributes = [
                "taskserver.job.id": .string(run.id),
                "taskserver.task.id": .string(taskID),
                "taskserver.task.attempt": .int64(Int64(attempt)),
                "taskserver.task.action": .string(action),
                "taskserver.executor": .string(executor),
                "messaging.destination.name": .string(executor),
                "taskserver.job.priority": .int64(Int64(run.spec.priority)),
            ]
            if let name = run.spec.name { attributes.set("taskserver.job.name", value: .string(name)) }
            span.attributes = attributes
        }
        return TracedAttempt(tracing: self.tracing, span: span, executor: executor)
    }
}

/// One attempt's span, its waits, and its worker's lease span (SPEC §6).
final class TracedAttempt: AttemptTrace {
    let tracing: ServerTracing
    let span: OTLPSpan
    private let executor: String
    /// The lease span's context, chosen before the claim: a claim item carries it to the worker.
    let lease: SpanContext
    private let state = Mutex(State())

    private struct State {
        var waitStarted: [WaitReason: UInt64] = [:]
        var leaseSpan: OTLPSpan?
    }

    init(tracing: ServerTracing, span: OTLPSpan, executor: String) {
        self.tracing = tracing
        self.span = span
        self.executor = executor
        self.lease = span.own.child(TraceIDs.spanID())
    }

    var traceparent: String { self.span.own.traceparent }
    var tracestate: String? { self.span.own.traceState }
    /// What a worker's claim carries: its lease span's context.
    var workerTraceparent: String { self.lease.traceparent }

    func heldKey(_ key: String) {
        if self.span.isRecording { self.span.attributes.set("taskserver.concurrency.key", value: .string(key)) }
    }

    func waitBegan(_ reason: WaitReason) {
        guard self.span.isRecording else { return }
        let now = SpanInstant.now().nanosecondsSinceEpoch
        self.state.withLock { $0.waitStarted[reason] = now }
    }

    func waitEnded(_ reason: WaitReason) {
        guard self.span.isRecording, let started = self.state.withLock({ $0.waitStarted.removeValue(forKey: reason) })
        else { return }
        let waited = (SpanInstant.now().nanosecondsSinceEpoch &- started) / 1_000_000
        self.span.addEvent(
            SpanEvent(
                name: "taskserver.wait",
                at: SpanInstant(nanosecondsSinceEpoch: started),
                attributes: [
                    "taskserver.wait.reason": .string(reason.rawValue), "taskserver.wait.ms": .int64(Int64(waited)),
                ]
            )
        )
    }

    func claimed(by workerId: String) {
        guard self.span.isRecording else { return }
        var context = self.span.context
        context[PresetSpanKey.self] = self.lease
        let lease = self.tracing.tracer.startSpan(
            "lease " + self.executor,
            context: context,
            ofKind: .consumer,
            at: SpanInstant.now()
        )
        lease.attributes = [
            "taskserver.worker.id": .string(workerId),
            "taskserver.executor": .string(self.executor),
            "messaging.destination.name": .string(self.executor),
            "messaging.operation.type": "process",
        ]
        let previous = self.state.withLock { state in
            defer { state.leaseSpan = lease }
            return state.leaseSpan
        }
        previous?.end(at: SpanInstant.now())
    }

    func ended(_ outcome: Outcome<JSONValue>) {
        let lease = self.state.withLock { state in
            defer { state.leaseSpan = nil }
            return state.leaseSpan
        }
        let now = SpanInstant.now()
        guard self.span.isRecording else {
            self.span.end(at: now)
            return
        }
        var attributes = self.span.attributes
        switch outcome {
        case .success(let result):
            attributes["taskserver.task.outcome"] = "succeeded"
            if self.tracing.configuration.includePayloads {
                attributes.set("taskserver.task.result", value: .string(Self.cut(result.jsonString)))
            }
        case .failure(let error):
            let code = TaskError.from(error).code
            attributes["taskserver.task.outcome"] = "failed"
            attributes.set("error.type", value: .string(code))
            self.span.setStatus(SpanStatus(code: .error, message: code))
            lease?.setStatus(SpanStatus(code: .error, message: code))
        case .cancelled:
            attributes["taskserver.task.outcome"] = "cancelled"
        }
        self.span.attributes = attributes
        lease?.end(at: now)
        self.span.end(at: now)
    }

    static func cut(_ text: String) -> String {
        text.utf8.count <= JobSpans.maxPayloadBytes
            ? text : String(decoding: Array(text.utf8.prefix(JobSpans.maxPayloadBytes)), as: UTF8.self)
    }
}
