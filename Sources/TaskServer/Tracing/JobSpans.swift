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
            span = self.tracing.tracer.span(
                (snapshot.name ?? snapshot.definition?.name).map { "job " + $0 } ?? "job",
                under: label.parent,
                own: label.own,
                kind: .internal,
                at: SpanInstant(milliseconds: run.createdAt.milliseconds)
            )
            if let started = snapshot.startedAt {
                let queued = max(0, started.milliseconds - run.createdAt.milliseconds)
                span.update { $0.set("taskserver.job.queue_ms", queued) }
                span.addEvent("job.started", at: SpanInstant(milliseconds: started.milliseconds).nanosecondsSinceEpoch)
                {
                    $0.set("taskserver.job.queue_ms", queued)
                }
            }
        }
        span.update { attributes in
            attributes.set("taskserver.job.id", run.id)
            if let name = snapshot.name { attributes.set("taskserver.job.name", name) }
            attributes.set("taskserver.job.state", snapshot.state.rawValue)
            attributes.set("taskserver.job.priority", Int64(snapshot.priority))
            if let definition = snapshot.definition {
                attributes.set("taskserver.job.definition", definition.name)
                attributes.set("taskserver.job.definition_version", Int64(definition.version))
            }
            if let parent = snapshot.labels[JobSnapshot.parentLabel] {
                attributes.set("taskserver.job.parent_id", parent)
            }
            if snapshot.state == .failed {
                attributes.set("error.type", snapshot.error?.code ?? "failed")
            }
        }
        if snapshot.state == .failed { span.setStatus(SpanStatus(code: .error, message: snapshot.error?.code)) }
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
        span.update { attributes in
            attributes.set("taskserver.job.id", run.id)
            attributes.set("taskserver.task.id", taskID)
            attributes.set("taskserver.task.attempt", Int64(attempt))
            attributes.set("taskserver.task.action", action)
            attributes.set("taskserver.executor", executor)
            attributes.set("messaging.destination.name", executor)
            attributes.set("taskserver.job.priority", Int64(run.spec.priority))
            if let name = run.spec.name { attributes.set("taskserver.job.name", name) }
        }
        return TracedAttempt(tracing: self.tracing, span: span, executor: executor)
    }
}

/// One attempt's span, its waits, and its worker's lease span (SPEC §6).
final class TracedAttempt: AttemptTrace {
    let tracing: ServerTracing
    let span: OTLPSpan
    private let executor: String
    private let state = Mutex(State())

    private struct State {
        var waitStarted: [WaitReason: UInt64] = [:]
        /// The lease span's context, chosen when it is first asked for (a claim item carries it to
        /// the worker, before the lease span starts); nil until then (most attempts are no worker's).
        var lease: SpanContext?
        var leaseSpan: OTLPSpan?
    }

    init(tracing: ServerTracing, span: OTLPSpan, executor: String) {
        self.tracing = tracing
        self.span = span
        self.executor = executor
    }

    var traceparent: String { self.span.own.traceparent }
    var tracestate: String? { self.span.own.traceState }
    /// What a worker's claim carries: its lease span's context.
    var workerTraceparent: String { self.lease.traceparent }

    /// The lease span's context (see `State.lease`).
    var lease: SpanContext {
        self.state.withLock { state in
            if let lease = state.lease { return lease }
            let lease = self.span.own.child(TraceIDs.spanID())
            state.lease = lease
            return lease
        }
    }

    func heldKey(_ key: String) {
        self.span.update { $0.set("taskserver.concurrency.key", key) }
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
        self.span.addEvent("taskserver.wait", at: started) { attributes in
            attributes.set("taskserver.wait.reason", reason.rawValue)
            attributes.set("taskserver.wait.ms", Int64(waited))
        }
    }

    func claimed(by workerId: String) {
        guard self.span.isRecording else { return }
        let lease = self.tracing.tracer.span(
            "lease " + self.executor,
            under: self.span.own,
            own: self.lease,
            kind: .consumer,
            at: .now()
        )
        lease.update { attributes in
            attributes.set("taskserver.worker.id", workerId)
            attributes.set("taskserver.executor", self.executor)
            attributes.set("messaging.destination.name", self.executor)
            attributes.set("messaging.operation.type", "process")
        }
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
        let payloads = self.tracing.configuration.includePayloads
        var failure: String?
        if case .failure(let error) = outcome { failure = TaskError.from(error).code }
        self.span.update { attributes in
            switch outcome {
            case .success(let result):
                attributes.set("taskserver.task.outcome", "succeeded")
                if payloads { attributes.set("taskserver.task.result", Self.cut(result.jsonString)) }
            case .failure:
                attributes.set("taskserver.task.outcome", "failed")
                attributes.set("error.type", failure ?? "failed")
            case .cancelled:
                attributes.set("taskserver.task.outcome", "cancelled")
            }
        }
        if let failure {
            self.span.setStatus(SpanStatus(code: .error, message: failure))
            lease?.setStatus(SpanStatus(code: .error, message: failure))
        }
        lease?.end(at: now)
        self.span.end(at: now)
    }

    static func cut(_ text: String) -> String {
        text.utf8.count <= JobSpans.maxPayloadBytes
            ? text : String(decoding: Array(text.utf8.prefix(JobSpans.maxPayloadBytes)), as: UTF8.self)
    }
}
