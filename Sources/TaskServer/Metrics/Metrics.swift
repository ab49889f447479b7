import Prometheus
import Synchronization
import TaskCore
import TaskGraph

/// The metrics behind `GET /metrics`, kept in a swift-prometheus registry (Prometheus text format
/// 0.0.4).
///
/// Each `Application` owns its registry, so several servers in one process (the tests) keep their
/// own figures; the executable also bootstraps swift-metrics' `MetricsSystem` on it, so anything
/// instrumented with swift-metrics reports here too. Metric objects are created once per label set
/// and cached: updating one is an atomic add or a short lock, cheap enough for every request.
///
/// Jobs and tasks are counted from the engine's events (this is a `JobObserver`), HTTP requests by
/// the server after each response, webhook attempts by the dispatcher, commits by the SQLite store;
/// executor and outbound gauges are sampled when `/metrics` is read.
final class Metrics: JobObserver {
    let registry = PrometheusCollectorRegistry()

    private let jobsSubmitted: Counter
    private let jobsFinished: [JobState: Counter]
    private let jobsRedriven: Counter
    /// Spans sent to the OTLP collector, and spans dropped (queue full, export failed) (issue #46).
    private let spansExported: Counter
    private let spansDropped: Counter
    private let storeCommits: DurationHistogram
    private let jobsHeld: Gauge
    private let connectionsOpen: Gauge
    private let connectionsRefused: Counter
    private let streamsOpen: Gauge
    /// Refused connections counted at the last scrape.
    private let lastRefused = Mutex(0)
    /// Waits per reason (SPEC §8), and the engine's counts when last rendered.
    private let waits: [WaitReason: Counter]
    private let lastWaits = Mutex([WaitReason: Int]())
    /// Concurrency keys held or waited for, and the attempts (and jobs) waiting for one.
    private let concurrencyKeys: Gauge
    private let concurrencyWaiting: Gauge
    private let outboundActive: Gauge
    private let outboundQueued: Gauge

    /// Counters and histograms whose label values are only known when they are first used.
    private struct Dynamic {
        var tasksFinished: [TaskKey: Counter] = [:]
        var taskRetries: [TaskKey: Counter] = [:]
        /// Each response's counter, and the latency histogram of its route and method.
        var requests: [RequestKey: (count: Counter, latency: DurationHistogram)] = [:]
        var latencies: [LatencyKey: DurationHistogram] = [:]
        var webhookAttempts: [String: Counter] = [:]
        var executors: [String: ExecutorMetrics] = [:]
        var pools: [String: PoolMetrics] = [:]
        /// Action label values seen: worker actions are named by clients (SPEC §6), so past
        /// `maxActionLabels` distinct names they are counted as `other`.
        var actionLabels: Set<String> = []
    }

    /// The most distinct `action` label values (built-ins included).
    static let maxActionLabels = 200

    private struct PoolMetrics {
        let queued: Gauge
        let leased: Gauge
        let waitingClaims: Gauge
        let claimed: Counter
        let expired: Counter
        var lastClaimed = 0
        var lastExpired = 0
    }

    private struct TaskKey: Hashable {
        var state: String
        var action: String
        var executor: String
    }

    private struct RequestKey: Hashable {
        var route: String
        var method: String
        var status: Int
    }

    private struct LatencyKey: Hashable {
        var route: String
        var method: String
    }

    private struct ExecutorMetrics {
        let size: Gauge
        let running: Gauge
        let queued: Gauge
        let completed: Counter
        /// The pool's `completed` at the last scrape: the counter grows by the difference.
        var lastCompleted = 0
    }

    private let dynamic = Mutex(Dynamic())

    /// Upper bounds of the request-latency histogram's buckets.
    static let requestBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10),
        .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500),
        .seconds(5), .seconds(10), .seconds(30), .seconds(60),
    ]

    /// Upper bounds of the store-commit histogram's buckets (an fsync is ~0.1–10 ms).
    static let commitBuckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
        .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
    ]

    init() {
        let registry = self.registry
        self.jobsSubmitted = registry.makeCounter(
            descriptor: Self.name("jobs_submitted", unit: "total", "Jobs accepted by POST /v1/jobs.")
        )
        let finished = Self.name("jobs_finished", unit: "total", "Jobs that reached a terminal state, by state.")
        self.jobsFinished = Dictionary(
            uniqueKeysWithValues: [JobState.succeeded, .failed, .cancelled].map { state in
                (state, registry.makeCounter(descriptor: finished, labels: [("state", state.rawValue)]))
            }
        )
        self.jobsRedriven = registry.makeCounter(
            descriptor: Self.name("jobs_redriven", unit: "total", "Failed or cancelled jobs run again (redrive).")
        )
        self.spansExported = registry.makeCounter(
            descriptor: Self.name("spans_exported", unit: "total", "Trace spans the OTLP collector accepted.")
        )
        self.spansDropped = registry.makeCounter(
            descriptor: Self.name(
                "spans_dropped",
                unit: "total",
                "Trace spans dropped: the export queue was full, or the collector failed or refused an export."
            )
        )
        self.storeCommits = registry.makeDurationHistogram(
            descriptor: Self.name(
                "store_commit_duration",
                unit: "seconds",
                "Time of one store transaction (a group commit), fsync included."
            ),
            buckets: Self.commitBuckets
        )
        self.jobsHeld = registry.makeGauge(descriptor: Self.name("jobs", unit: "", "Jobs held by the store."))
        self.connectionsOpen = registry.makeGauge(
            descriptor: Self.name("http_connections", unit: "", "Open HTTP connections (capped by --max-connections).")
        )
        self.connectionsRefused = registry.makeCounter(
            descriptor: Self.name(
                "http_connections_refused",
                unit: "total",
                "Connections answered 503 server.busy because --max-connections were open."
            )
        )
        self.streamsOpen = registry.makeGauge(
            descriptor: Self.name("event_streams", unit: "", "Open server-sent event streams.")
        )
        let transfers = Self.name(
            "outbound_transfers",
            unit: "",
            "Outbound HTTP transfers (http tasks, webhooks) in progress and waiting."
        )
        self.outboundActive = registry.makeGauge(descriptor: transfers, labels: [("state", "active")])
        self.outboundQueued = registry.makeGauge(descriptor: transfers, labels: [("state", "queued")])
        let waits = Self.name(
            "queue_waits",
            unit: "total",
            "Task attempts (and jobs) that could not start at once, by what they waited for: concurrency (a key), rate (a pool's rate limit), slot (a pool's free slot)."
        )
        self.waits = Dictionary(
            uniqueKeysWithValues: WaitReason.allCases.map { reason in
                (reason, registry.makeCounter(descriptor: waits, labels: [("reason", reason.rawValue)]))
            }
        )
        self.concurrencyKeys = registry.makeGauge(
            descriptor: Self.name("concurrency_keys", unit: "", "Concurrency keys with a holder or a waiter.")
        )
        self.concurrencyWaiting = registry.makeGauge(
            descriptor: Self.name(
                "concurrency_waiting",
                unit: "",
                "Task attempts and jobs waiting for a place under their concurrency key."
            )
        )
        // Families that always appear, before their first use: dashboards and alerts can rely on them.
        for result in WebhookDispatcher.AttemptResult.allCases { self.webhookAttempt(result, count: 0) }
    }

    private static func name(_ name: String, unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "taskserver", metricName: name, unitName: unit, helpText: help)
    }

    // MARK: - Recording

    /// The exporter's counters, for `ServerTracing`.
    var spanCounters: SpanExporter.Counters {
        let (exported, dropped) = (self.spansExported, self.spansDropped)
        return SpanExporter.Counters(
            onExported: { exported.increment(by: Int64($0)) },
            onDropped: { dropped.increment(by: Int64($0)) }
        )
    }

    func jobSubmitted(count: Int = 1) {
        if count > 0 { self.jobsSubmitted.increment(by: Int64(count)) }
    }

    /// One answered request: `route` is the matched path template (`/v1/jobs/{id}`), or
    /// `unmatched` for a target no route matched (so clients cannot mint label values).
    func httpResponse(route: String, method: String, status: Int, nanoseconds: UInt64) {
        let (counter, histogram) = self.dynamic.withLock { dynamic -> (Counter, DurationHistogram) in
            let key = RequestKey(route: route, method: method, status: status)
            if let known = dynamic.requests[key] { return known }
            let counter = self.registry.makeCounter(
                descriptor: Self.name(
                    "http_requests",
                    unit: "total",
                    "HTTP requests answered, by route template, method and status."
                ),
                labels: [("route", route), ("method", method), ("status", String(status))]
            )
            let latencyKey = LatencyKey(route: route, method: method)
            let histogram =
                dynamic.latencies[latencyKey]
                ?? {
                    let made = self.registry.makeDurationHistogram(
                        descriptor: Self.name(
                            "http_request_duration",
                            unit: "seconds",
                            "Time from a request's head to its response, by route template and method."
                        ),
                        labels: [("route", route), ("method", method)],
                        buckets: Self.requestBuckets
                    )
                    dynamic.latencies[latencyKey] = made
                    return made
                }()
            dynamic.requests[key] = (counter, histogram)
            return (counter, histogram)
        }
        counter.increment()
        histogram.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    func webhookAttempt(_ result: WebhookDispatcher.AttemptResult, count: Int64 = 1) {
        let counter = self.dynamic.withLock { dynamic in
            dynamic.webhookAttempts[result.rawValue]
                ?? {
                    let made = self.registry.makeCounter(
                        descriptor: Self.name(
                            "webhook_attempts",
                            unit: "total",
                            "Webhook delivery attempts by result (delivered, retrying, failed)."
                        ),
                        labels: [("result", result.rawValue)]
                    )
                    dynamic.webhookAttempts[result.rawValue] = made
                    return made
                }()
        }
        counter.increment(by: count)
    }

    /// One store transaction and how long it took.
    func storeCommit(nanoseconds: UInt64) {
        self.storeCommits.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    /// `action` as a label value: itself, or `other` once `maxActionLabels` names are in use.
    private static func actionLabel(_ action: String, in dynamic: inout Dynamic) -> String {
        if dynamic.actionLabels.contains(action) { return action }
        guard dynamic.actionLabels.count < Self.maxActionLabels else { return "other" }
        dynamic.actionLabels.insert(action)
        return action
    }

    private func taskCounter(state: String, action: String, executor: String) -> Counter {
        self.dynamic.withLock { dynamic in
            let action = Self.actionLabel(action, in: &dynamic)
            let key = TaskKey(state: state, action: action, executor: executor)
            if let counter = dynamic.tasksFinished[key] { return counter }
            let made = self.registry.makeCounter(
                descriptor: Self.name(
                    "tasks_finished",
                    unit: "total",
                    "Tasks (leaf nodes) that reached a terminal state, by state, action and executor."
                ),
                labels: [("state", state), ("action", action), ("executor", executor)]
            )
            dynamic.tasksFinished[key] = made
            return made
        }
    }

    private func retryCounter(action: String, executor: String) -> Counter {
        self.dynamic.withLock { dynamic in
            let action = Self.actionLabel(action, in: &dynamic)
            let key = TaskKey(state: "", action: action, executor: executor)
            if let counter = dynamic.taskRetries[key] { return counter }
            let made = self.registry.makeCounter(
                descriptor: Self.name(
                    "task_retries",
                    unit: "total",
                    "Failed task attempts that were retried, by action and executor."
                ),
                labels: [("action", action), ("executor", executor)]
            )
            dynamic.taskRetries[key] = made
            return made
        }
    }

    func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        for event in events {
            switch event.type {
            case .jobSucceeded: self.jobsFinished[.succeeded]?.increment()
            case .jobFailed: self.jobsFinished[.failed]?.increment()
            case .jobCancelled: self.jobsFinished[.cancelled]?.increment()
            case .jobRedriven: self.jobsRedriven.increment()
            case .taskSucceeded, .taskFailed, .taskCancelled, .taskSkipped, .taskRetrying:
                // Only tasks (leaves) have an action; composite nodes are not counted.
                guard let taskId = event.taskId, let record = run.node(taskId), let action = record.action else {
                    continue
                }
                let executor = record.executor ?? "default"
                switch event.type {
                case .taskRetrying: self.retryCounter(action: action, executor: executor).increment()
                case .taskSucceeded:
                    self.taskCounter(state: "succeeded", action: action, executor: executor).increment()
                case .taskFailed: self.taskCounter(state: "failed", action: action, executor: executor).increment()
                case .taskCancelled:
                    self.taskCounter(state: "cancelled", action: action, executor: executor).increment()
                default: self.taskCounter(state: "skipped", action: action, executor: executor).increment()
                }
            default:
                break
            }
        }
    }

    // MARK: - Reading

    /// Samples the gauges, then renders every metric in the Prometheus text format.
    func render(app: Application, jobs: Int) -> [UInt8] {
        self.jobsHeld.set(Int64(jobs))
        let connections = app.connectionStatistics
        self.connectionsOpen.set(Int64(connections.open))
        self.streamsOpen.set(Int64(connections.streams))
        let newlyRefused = self.lastRefused.withLock { last in
            defer { last = max(last, connections.refused) }
            return max(0, connections.refused - last)
        }
        if newlyRefused > 0 { self.connectionsRefused.increment(by: Int64(newlyRefused)) }
        let waitCounts = Dictionary(uniqueKeysWithValues: WaitReason.allCases.map { ($0, app.engine.waitCount($0)) })
        let newWaits = self.lastWaits.withLock { last in
            defer { last = waitCounts }
            return waitCounts.map { ($0.key, $0.value - (last[$0.key] ?? 0)) }
        }
        for (reason, count) in newWaits where count > 0 { self.waits[reason]?.increment(by: Int64(count)) }
        let keys = app.engine.sharedKeys?.statistics ?? app.engine.concurrency.statistics
        self.concurrencyKeys.set(Int64(keys.keys))
        self.concurrencyWaiting.set(Int64(keys.waiting))
        let outbound = app.outbound.statistics
        self.outboundActive.set(Int64(outbound.active))
        self.outboundQueued.set(Int64(outbound.queued))
        for entry in app.engine.executorStatistics {
            self.dynamic.withLock { dynamic in
                var metrics = dynamic.executors[entry.name] ?? self.makeExecutorMetrics(entry.name)
                metrics.size.set(Int64(entry.statistics.size))
                metrics.running.set(Int64(entry.statistics.running))
                metrics.queued.set(Int64(entry.statistics.queued))
                let completed = entry.statistics.completed
                if completed > metrics.lastCompleted {
                    metrics.completed.increment(by: Int64(completed - metrics.lastCompleted))
                    metrics.lastCompleted = completed
                }
                dynamic.executors[entry.name] = metrics
            }
        }
        for name in app.externalPools.names {
            guard let statistics = app.externalPools.statistics(name) else { continue }
            self.dynamic.withLock { dynamic in
                var metrics = dynamic.pools[name] ?? self.makePoolMetrics(name)
                metrics.queued.set(Int64(statistics.queued))
                metrics.leased.set(Int64(statistics.leased))
                metrics.waitingClaims.set(Int64(statistics.waitingClaims))
                if statistics.claimed > metrics.lastClaimed {
                    metrics.claimed.increment(by: Int64(statistics.claimed - metrics.lastClaimed))
                    metrics.lastClaimed = statistics.claimed
                }
                if statistics.expired > metrics.lastExpired {
                    metrics.expired.increment(by: Int64(statistics.expired - metrics.lastExpired))
                    metrics.lastExpired = statistics.expired
                }
                dynamic.pools[name] = metrics
            }
        }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(8192)
        self.registry.emit(into: &buffer)
        return buffer
    }

    private func makePoolMetrics(_ name: String) -> PoolMetrics {
        let labels = [("executor", name)]
        return PoolMetrics(
            queued: self.registry.makeGauge(
                descriptor: Self.name(
                    "worker_tasks_queued",
                    unit: "",
                    "Worker tasks waiting in each external pool's queue for a claim."
                ),
                labels: labels
            ),
            leased: self.registry.makeGauge(
                descriptor: Self.name(
                    "worker_leases",
                    unit: "",
                    "Live leases (claimed attempts) of each external pool."
                ),
                labels: labels
            ),
            waitingClaims: self.registry.makeGauge(
                descriptor: Self.name(
                    "worker_claims_waiting",
                    unit: "",
                    "Claims long-polling each external pool for work (at most 1000 each)."
                ),
                labels: labels
            ),
            claimed: self.registry.makeCounter(
                descriptor: Self.name("worker_tasks_claimed", unit: "total", "Attempts handed to workers, per pool."),
                labels: labels
            ),
            expired: self.registry.makeCounter(
                descriptor: Self.name(
                    "worker_lease_expiries",
                    unit: "total",
                    "Leases that expired without a heartbeat (task.heartbeatTimeout), per pool."
                ),
                labels: labels
            )
        )
    }

    private func makeExecutorMetrics(_ name: String) -> ExecutorMetrics {
        let labels = [("executor", name)]
        return ExecutorMetrics(
            size: self.registry.makeGauge(
                descriptor: Self.name("executor_slots", unit: "", "Slots of each executor (worker pool)."),
                labels: labels
            ),
            running: self.registry.makeGauge(
                descriptor: Self.name("executor_running", unit: "", "Work holding a slot of each executor."),
                labels: labels
            ),
            queued: self.registry.makeGauge(
                descriptor: Self.name(
                    "executor_queued",
                    unit: "",
                    "Work waiting for a slot of each executor, in FIFO order."
                ),
                labels: labels
            ),
            completed: self.registry.makeCounter(
                descriptor: Self.name("executor_completed", unit: "total", "Work finished on each executor."),
                labels: labels
            )
        )
    }
}
