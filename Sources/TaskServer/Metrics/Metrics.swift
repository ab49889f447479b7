import Synchronization
import TaskCore
import TaskGraph

/// Counters behind `GET /metrics` (Prometheus text format 0.0.4).
///
/// Jobs and tasks are counted from the engine's events (it is a `JobObserver`); HTTP responses by
/// the server. The full metric set (per route, per action, store latency) comes with the operations
/// work; these are the ones an operator needs first.
final class Metrics: JobObserver {
    private struct State {
        var jobsSubmitted = 0
        var jobsFinished: [String: Int] = [:]
        var tasksFinished: [String: Int] = [:]
        var taskRetries = 0
        var responses: [Int: Int] = [:]
        var latencyBuckets = [Int](repeating: 0, count: Metrics.bucketBounds.count)
        var latencyCount = 0
        var latencySum: Double = 0
        var webhookAttempts: [String: Int] = [:]
    }

    /// Upper bounds (seconds) of the request-latency histogram's buckets.
    static let bucketBounds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]

    private let state = Mutex(State())

    func jobSubmitted() {
        self.state.withLock { $0.jobsSubmitted += 1 }
    }

    func httpResponse(status: Int, nanoseconds: UInt64) {
        let seconds = Double(nanoseconds) / 1e9
        self.state.withLock { state in
            state.responses[status, default: 0] += 1
            state.latencyCount += 1
            state.latencySum += seconds
            if let bucket = Self.bucketBounds.firstIndex(where: { seconds <= $0 }) { state.latencyBuckets[bucket] += 1 }
        }
    }

    func webhookAttempt(_ result: WebhookDispatcher.AttemptResult) {
        self.state.withLock { $0.webhookAttempts[result.rawValue, default: 0] += 1 }
    }

    func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        self.state.withLock { state in
            for event in events {
                switch event.type {
                case .jobSucceeded: state.jobsFinished["succeeded", default: 0] += 1
                case .jobFailed: state.jobsFinished["failed", default: 0] += 1
                case .jobCancelled: state.jobsFinished["cancelled", default: 0] += 1
                case .taskSucceeded: state.tasksFinished["succeeded", default: 0] += 1
                case .taskFailed: state.tasksFinished["failed", default: 0] += 1
                case .taskCancelled: state.tasksFinished["cancelled", default: 0] += 1
                case .taskSkipped: state.tasksFinished["skipped", default: 0] += 1
                case .taskRetrying: state.taskRetries += 1
                default: break
                }
            }
        }
    }

    func render(app: Application) -> String {
        let state = self.state.withLock { $0 }
        var out = ""
        func line(_ text: String) { out += text + "\n" }
        line("# HELP taskserver_jobs_submitted_total Jobs accepted by POST /v1/jobs.")
        line("# TYPE taskserver_jobs_submitted_total counter")
        line("taskserver_jobs_submitted_total \(state.jobsSubmitted)")
        line("# HELP taskserver_jobs_finished_total Jobs that reached a terminal state, by state.")
        line("# TYPE taskserver_jobs_finished_total counter")
        for name in ["succeeded", "failed", "cancelled"] { line("taskserver_jobs_finished_total{state=\"\(name)\"} \(state.jobsFinished[name] ?? 0)") }
        line("# HELP taskserver_nodes_finished_total Nodes that reached a terminal state, by state.")
        line("# TYPE taskserver_nodes_finished_total counter")
        for name in ["succeeded", "failed", "cancelled", "skipped"] { line("taskserver_nodes_finished_total{state=\"\(name)\"} \(state.tasksFinished[name] ?? 0)") }
        line("# HELP taskserver_task_retries_total Failed attempts that were retried.")
        line("# TYPE taskserver_task_retries_total counter")
        line("taskserver_task_retries_total \(state.taskRetries)")
        line("# HELP taskserver_jobs Jobs held by the store.")
        line("# TYPE taskserver_jobs gauge")
        line("taskserver_jobs \(app.store.count)")
        line("# HELP taskserver_executor_slots Slots of each executor (worker pool).")
        line("# TYPE taskserver_executor_slots gauge")
        let executors = app.engine.executorStatistics
        for entry in executors { line("taskserver_executor_slots{executor=\"\(entry.name)\"} \(entry.statistics.size)") }
        line("# HELP taskserver_executor_running Work running on each executor.")
        line("# TYPE taskserver_executor_running gauge")
        for entry in executors { line("taskserver_executor_running{executor=\"\(entry.name)\"} \(entry.statistics.running)") }
        line("# HELP taskserver_executor_queued Work waiting for a slot on each executor.")
        line("# TYPE taskserver_executor_queued gauge")
        for entry in executors { line("taskserver_executor_queued{executor=\"\(entry.name)\"} \(entry.statistics.queued)") }
        line("# HELP taskserver_executor_completed_total Work finished on each executor.")
        line("# TYPE taskserver_executor_completed_total counter")
        for entry in executors { line("taskserver_executor_completed_total{executor=\"\(entry.name)\"} \(entry.statistics.completed)") }
        line("# HELP taskserver_webhook_attempts_total Webhook delivery attempts by result (delivered, retrying, failed).")
        line("# TYPE taskserver_webhook_attempts_total counter")
        for name in ["delivered", "retrying", "failed"] { line("taskserver_webhook_attempts_total{result=\"\(name)\"} \(state.webhookAttempts[name] ?? 0)") }
        let outbound = app.outbound.statistics
        line("# HELP taskserver_outbound_transfers Outbound HTTP transfers (http tasks, webhooks) in progress and waiting.")
        line("# TYPE taskserver_outbound_transfers gauge")
        line("taskserver_outbound_transfers{state=\"active\"} \(outbound.active)")
        line("taskserver_outbound_transfers{state=\"queued\"} \(outbound.queued)")
        line("# HELP taskserver_http_responses_total HTTP responses by status code.")
        line("# TYPE taskserver_http_responses_total counter")
        for code in state.responses.keys.sorted() { line("taskserver_http_responses_total{code=\"\(code)\"} \(state.responses[code]!)") }
        line("# HELP taskserver_http_request_duration_seconds Time from request head to response written.")
        line("# TYPE taskserver_http_request_duration_seconds histogram")
        var cumulative = 0
        for (index, bound) in Self.bucketBounds.enumerated() {
            cumulative += state.latencyBuckets[index]
            line("taskserver_http_request_duration_seconds_bucket{le=\"\(bound)\"} \(cumulative)")
        }
        line("taskserver_http_request_duration_seconds_bucket{le=\"+Inf\"} \(state.latencyCount)")
        line("taskserver_http_request_duration_seconds_sum \(state.latencySum)")
        line("taskserver_http_request_duration_seconds_count \(state.latencyCount)")
        return out
    }
}
