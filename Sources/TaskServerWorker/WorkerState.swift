import Foundation
import TaskGraph
import TaskWorkerProtocol

/// A task this worker holds a lease on, as a claim handed it out (SPEC §6).
struct LeasedTask: Sendable {
    var leaseId: String
    var jobId: String
    var taskId: String
    var attempt: Int
    var heartbeatTimeoutMs: Int
    var deadline: Date?
    /// What COMMAND reads: `{"action", "params", "input", "jobId", "taskId", "attempt"}`, params
    /// and input as the server sent them.
    var stdin: Data
    /// The command's `TRACEPARENT` and `TRACESTATE` (issue #46), when the job is traced.
    var traceEnvironment: [String: String] = [:]

    init(_ item: ClaimItem) {
        if let traceparent = item.traceparent {
            self.traceEnvironment["TRACEPARENT"] = traceparent
            if let tracestate = item.tracestate { self.traceEnvironment["TRACESTATE"] = tracestate }
        }
        let stdin: JSONValue = [
            "action": .string(item.action), "params": item.params, "input": item.input,
            "jobId": .string(item.jobId), "taskId": .string(item.taskId), "attempt": .int(item.attempt),
        ]
        self.leaseId = item.leaseId
        self.jobId = item.jobId
        self.taskId = item.taskId
        self.attempt = item.attempt
        self.heartbeatTimeoutMs = item.heartbeatTimeoutMs
        self.deadline = item.deadline.flatMap(Self.date)
        self.stdin = Data(stdin.jsonBytes)
    }

    /// An RFC 3339 time, with or without fractional seconds.
    static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}

/// Why the worker stopped a task's command and left its attempt to the server (no completion).
enum StopReason: String, Sendable {
    /// A heartbeat answered `cancelRequested: true`.
    case cancelled
    /// A heartbeat answered 404 or 409: the lease expired, or was never known.
    case leaseGone
    /// The task's deadline (its `timeoutMs`, from the claim) passed; the server fails the attempt.
    case deadlinePassed
    /// The worker is shutting down and its grace ended.
    case shutdown
    /// The worker stops on an error it cannot recover from.
    case workerFailed
}

/// Everything `taskserver worker`'s threads share, behind one lock. Plain data and pure
/// transitions: the threads do the I/O after unlocking.
struct WorkerState {
    struct Lease {
        var task: LeasedTask
        var startedAt: ContinuousClock.Instant
        var interval: Duration
        var nextHeartbeat: ContinuousClock.Instant
        var isChildRunning = true
        /// Set when the command must stop and its attempt not be completed.
        var stopReason: StopReason?
        /// The batch item (`{"leaseId", "result"}` or `{"leaseId", "error", …}`), once the command ended.
        var completion: [UInt8]?
        /// For the log line: `succeeded`, `failed`, …
        var outcome = ""
        var exitStatus: Int32?
        var isSending = false
        /// Set after the server refused a batch as too large or invalid: send it on its own.
        var mustSendAlone = false
        /// Connection failures of its completion, each after the server had answered.
        var completionFailures = 0
    }

    /// The leases held, by the worker's own number for them: running, or waiting to be completed.
    var leases: [Int: Lease] = [:]
    /// Leases with a completion ready to send, oldest first.
    var outbox: [Int] = []
    /// Commands running (the slots in use).
    var running = 0
    var nextNumber = 0
    var isStopping = false
    /// Set by a second SIGTERM/SIGINT: stop the commands now.
    var isGraceCut = false
    var isClaimerDone = false
    /// Why the worker must stop with an error.
    var failure: String?
    var isServerUnreachable = false
    /// Set when `WorkerRuntime.run` returns: the threads still running end.
    var isFinished = false

    mutating func add(_ task: LeasedTask, now: ContinuousClock.Instant, maxInterval: Duration?) -> Int {
        let number = self.nextNumber
        self.nextNumber += 1
        var interval = Duration.milliseconds(task.heartbeatTimeoutMs) / 3
        if let maxInterval { interval = min(interval, maxInterval) }
        interval = max(interval, .milliseconds(100))
        self.leases[number] = Lease(task: task, startedAt: now, interval: interval, nextHeartbeat: now + interval)
        self.running += 1
        return number
    }

    /// Whether the command of lease `number` must stop: told so, or past its deadline.
    mutating func shouldStop(_ number: Int, now: Date) -> Bool {
        guard var lease = self.leases[number] else { return true }
        if lease.stopReason == nil, let deadline = lease.task.deadline, now >= deadline {
            lease.stopReason = .deadlinePassed
            self.leases[number] = lease
        }
        return lease.stopReason != nil
    }

    /// The command of lease `number` ended. Returns the lease when the worker leaves it (it was
    /// stopped), nil when its completion is queued.
    mutating func childEnded(_ number: Int, completion: [UInt8], outcome: String, exitStatus: Int32?) -> Lease? {
        self.running -= 1
        guard var lease = self.leases[number] else { return nil }
        lease.isChildRunning = false
        if lease.stopReason != nil {
            self.leases[number] = nil
            return lease
        }
        lease.completion = completion
        lease.outcome = outcome
        lease.exitStatus = exitStatus
        self.leases[number] = lease
        self.outbox.append(number)
        return nil
    }

    /// Stops lease `number` for `reason`. Returns the lease when it is dropped at once (its
    /// completion was waiting): the caller logs it. A running command is stopped by its thread,
    /// which then drops the lease; a completion being sent is left to the server's answer.
    mutating func stop(_ number: Int, _ reason: StopReason) -> Lease? {
        guard var lease = self.leases[number], lease.stopReason == nil else { return nil }
        lease.stopReason = reason
        if lease.isChildRunning || lease.isSending {
            self.leases[number] = lease
            return nil
        }
        self.leases[number] = nil
        self.outbox.removeAll { $0 == number }
        return lease
    }

    /// Leases whose heartbeat is due (or nearly: they are sent together), at most `limit`, and
    /// when the next one falls due.
    func dueHeartbeats(
        now: ContinuousClock.Instant,
        limit: Int
    ) -> (due: [(number: Int, leaseId: String)], next: ContinuousClock.Instant?) {
        var due: [(number: Int, leaseId: String)] = []
        var next: ContinuousClock.Instant?
        for (number, lease) in self.leases.sorted(by: { $0.key < $1.key }) where lease.stopReason == nil {
            if lease.nextHeartbeat <= now + min(lease.interval / 4, .seconds(2)) && due.count < limit {
                due.append((number, lease.task.leaseId))
            } else {
                next = min(next ?? lease.nextHeartbeat, lease.nextHeartbeat)
            }
        }
        return (due, next)
    }

    /// A heartbeat of lease `number` went through: the next is due an interval after it was sent.
    mutating func heartbeatAnswered(_ number: Int, at sent: ContinuousClock.Instant) {
        guard let interval = self.leases[number]?.interval else { return }
        self.leases[number]?.nextHeartbeat = sent + interval
    }

    /// Heartbeats that did not go through are tried again at `at` (but no later than an interval on).
    mutating func postponeHeartbeats(_ numbers: [Int], to at: ContinuousClock.Instant) {
        for number in numbers {
            guard let lease = self.leases[number] else { continue }
            self.leases[number]?.nextHeartbeat = min(at, lease.nextHeartbeat + lease.interval)
        }
    }

    /// Takes the next completions to send: at most `limit` items and about `maxBytes` of them (at
    /// least one), and marks them as being sent.
    mutating func takeBatch(limit: Int, maxBytes: Int) -> [(number: Int, item: [UInt8])] {
        var batch: [(number: Int, item: [UInt8])] = []
        var bytes = 0
        while batch.count < limit, let number = self.outbox.first {
            guard var lease = self.leases[number], let item = lease.completion else {
                self.outbox.removeFirst()
                continue
            }
            if !batch.isEmpty && (lease.mustSendAlone || bytes + item.count > maxBytes) { break }
            self.outbox.removeFirst()
            lease.isSending = true
            self.leases[number] = lease
            batch.append((number, item))
            bytes += item.count
            if lease.mustSendAlone { break }
        }
        return batch
    }

    /// A completion batch failed at the connection level. Counts it against its leases when the
    /// server answered since the last failure (it is reachable: the body may be the trouble), and
    /// returns the most any of them has.
    mutating func completionFailed(_ numbers: [Int]) -> Int {
        let isReachable = !self.isServerUnreachable
        var most = 0
        for number in numbers {
            guard var lease = self.leases[number] else { continue }
            if isReachable { lease.completionFailures += 1 }
            most = max(most, lease.completionFailures)
            self.leases[number] = lease
        }
        return most
    }

    /// Puts completions back to be sent again, in their order, at the front of the queue. Returns
    /// the leases stopped meanwhile, which are dropped instead.
    mutating func putBack(_ numbers: [Int], alone: Bool) -> [Lease] {
        var dropped: [Lease] = []
        var kept: [Int] = []
        for number in numbers {
            guard var lease = self.leases[number] else { continue }
            if lease.stopReason != nil {
                self.leases[number] = nil
                dropped.append(lease)
                continue
            }
            lease.isSending = false
            if alone { lease.mustSendAlone = true }
            self.leases[number] = lease
            kept.append(number)
        }
        self.outbox.insert(contentsOf: kept, at: 0)
        return dropped
    }
}
