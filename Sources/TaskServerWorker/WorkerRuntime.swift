import Dispatch
import Foundation
import Logging
import Synchronization
import TaskCore
import TaskGraph
import TaskWorkerProtocol

/// What `taskserver worker` was told to do, checked.
package struct WorkerSettings: Sendable {
    package var executor: String
    package var actions: [String]
    package var concurrency: Int
    package var workerId: String
    package var grace: Duration
    /// Heartbeats at least this often (they are also sent every third of a task's heartbeat timeout).
    package var maxHeartbeatInterval: Duration?
    package var maxOutputBytes: Int
    /// COMMAND as given, for messages.
    package var commandName: String
    package var executable: String
    package var arguments: [String]

    /// How long a claim waits on the server for a task.
    static let claimWaitMs = 20_000

    package init(
        executor: String,
        actions: [String],
        concurrency: Int,
        workerId: String,
        grace: Duration,
        maxHeartbeatInterval: Duration?,
        maxOutputBytes: Int,
        commandName: String,
        executable: String,
        arguments: [String]
    ) {
        self.executor = executor
        self.actions = actions
        self.concurrency = concurrency
        self.workerId = workerId
        self.grace = grace
        self.maxHeartbeatInterval = maxHeartbeatInterval
        self.maxOutputBytes = maxOutputBytes
        self.commandName = commandName
        self.executable = executable
        self.arguments = arguments
    }
}

/// A running `taskserver worker`: plain threads around blocking `ServerClient` requests.
///
/// - a claimer long-polls `POST /v1/executors/NAME/claim` for as many tasks as there are free slots;
/// - each claimed task gets a thread that runs COMMAND (`ChildCommand`) and queues its completion;
/// - a heartbeater sends `POST /v1/leases/heartbeat` for every lease held, each every third of its
///   heartbeat timeout, and stops the commands whose task was cancelled or whose lease is gone;
/// - a completer sends queued completions in batches to `POST /v1/leases/complete`;
/// - the calling thread coordinates the shutdown (SIGTERM/SIGINT, or an error it cannot recover from).
///
/// Lease ids travel only in request bodies (batch forms); they are never logged.
package final class WorkerRuntime: Sendable {
    let settings: WorkerSettings
    let client: ServerClient
    let logger: Logger
    let state = Mutex(WorkerState())
    // Wake-ups: each thread re-reads the state when its semaphore is signalled; an extra signal
    // only costs a look.
    let claimerWake = DispatchSemaphore(value: 0)
    let heartbeaterWake = DispatchSemaphore(value: 0)
    let completerWake = DispatchSemaphore(value: 0)
    let coordinatorWake = DispatchSemaphore(value: 0)
    /// Ends the long-polling claim in flight on the first SIGTERM/SIGINT.
    let claimCancellation = CancellationTokenSource()

    /// The exit status when the server refuses the worker (as the other terminal commands'
    /// `ClientExit.error`).
    package static let failureExitStatus: Int32 = 3
    /// Leases per heartbeat or completion batch (the server's limit).
    static let batchLimit = 100

    package init(settings: WorkerSettings, client: ServerClient, logger: Logger) {
        self.settings = settings
        self.client = client
        self.logger = logger
    }

    /// Runs until SIGTERM/SIGINT (then returns 0 once the commands have ended, or the grace has)
    /// or until the server refuses the worker (then returns `failureExitStatus`).
    ///
    /// - Note: Blocks the calling thread. `signals` is the read end of the pipe the signal handler
    ///   writes to (each byte read is one signal); the thread that reads it ends when the pipe is
    ///   closed.
    package func run(signals: Int32) -> Int32 {
        // The request threads keep SIGTERM/SIGINT blocked, so the handler never interrupts their
        // socket calls; ChildCommand gives each command an empty signal mask of its own.
        self.logger.info(
            "worker started",
            metadata: [
                "worker.id": "\(self.settings.workerId)", "executor": "\(self.settings.executor)",
                "concurrency": "\(self.settings.concurrency)", "server": "\(self.client.server)",
            ]
        )
        let blocked = WorkerSignals.block()
        Thread.detachNewThread { self.watchSignals(signals) }
        Thread.detachNewThread { self.claimLoop() }
        Thread.detachNewThread { self.heartbeatLoop() }
        Thread.detachNewThread { self.completeLoop() }
        WorkerSignals.restore(blocked)
        let status = self.coordinate()
        // The heartbeater and the completer end too (the claimer has, or does at its next
        // answer): a process that goes on after `run`, such as a test, keeps no threads behind.
        self.state.withLock { $0.isFinished = true }
        self.heartbeaterWake.signal()
        self.completerWake.signal()
        return status
    }

    // MARK: - Coordination

    private func coordinate() -> Int32 {
        var graceEnd: ContinuousClock.Instant?
        var hardEnd: ContinuousClock.Instant?
        while true {
            _ = self.coordinatorWake.wait(timeout: dispatchTime(after: .milliseconds(200)))
            let now = ContinuousClock.now
            let (isStopping, isGraceCut, failure, isIdle, running) = self.state.withLock { state in
                (
                    state.isStopping, state.isGraceCut, state.failure, state.leases.isEmpty && state.isClaimerDone,
                    state.running
                )
            }
            if let failure {
                if hardEnd == nil {
                    hardEnd = now + ChildCommand.killAfter + .seconds(1)
                    self.stopCommands(.workerFailed)
                }
                if running == 0 || now >= hardEnd! {
                    FileHandle.standardError.write(Data("taskserver worker: \(failure)\n".utf8))
                    return Self.failureExitStatus
                }
                continue
            }
            guard isStopping else { continue }
            if graceEnd == nil {
                graceEnd = now + self.settings.grace
                self.logger.notice(
                    "stopping: claiming no more tasks, waiting for the running commands",
                    metadata: ["running": "\(running)", "grace.seconds": "\(self.settings.grace.components.seconds)"]
                )
            }
            if isIdle { break }
            if hardEnd == nil && (now >= graceEnd! || isGraceCut) {
                if running > 0 {
                    self.logger.notice(
                        "grace ended: stopping the running commands",
                        metadata: ["running": "\(running)"]
                    )
                }
                self.stopCommands(.shutdown)
                hardEnd = now + ChildCommand.killAfter + ChildCommand.drainAfterExit + .seconds(1)
            }
            if let hardEnd, now >= hardEnd { break }
        }
        // Whatever is left (a completion the server did not take in time) is left to the server.
        let left = self.state.withLock { state in
            let left = Array(state.leases.values)
            state.leases = [:]
            return left
        }
        for lease in left { self.logEnd(lease, stoppedFor: lease.stopReason ?? .shutdown) }
        self.logger.notice("worker stopped")
        return 0
    }

    /// First SIGTERM/SIGINT: stop claiming. Second: stop the commands now.
    private func watchSignals(_ fd: Int32) {
        var byte: UInt8 = 0
        while true {
            let count = read(fd, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return }
            let isFirst = self.state.withLock { state in
                defer {
                    if state.isStopping { state.isGraceCut = true }
                    state.isStopping = true
                }
                return !state.isStopping
            }
            if isFirst { self.claimCancellation.cancel() }
            self.claimerWake.signal()
            self.coordinatorWake.signal()
        }
    }

    /// Stops every running command for `reason` (their threads drop the leases once they end).
    private func stopCommands(_ reason: StopReason) {
        let dropped = self.state.withLock { state in
            let running = state.leases.filter { $0.value.isChildRunning }.keys
            return running.compactMap { state.stop($0, reason) }
        }
        for lease in dropped { self.logEnd(lease, stoppedFor: reason) }
    }

    func fail(_ message: String) {
        self.state.withLock { state in
            if state.failure == nil { state.failure = message }
            state.isStopping = true
        }
        self.claimCancellation.cancel()
        self.claimerWake.signal()
        self.coordinatorWake.signal()
    }

    // MARK: - Claims

    private func claimLoop() {
        defer {
            self.state.withLock { $0.isClaimerDone = true }
            self.coordinatorWake.signal()
        }
        var backoff = Backoff()
        let path = "/v1/executors/\(ServerClient.escape(self.settings.executor))/claim"
        while true {
            let free: Int? = self.state.withLock { state in
                state.isStopping ? nil : self.settings.concurrency - state.running
            }
            guard let free else { return }
            guard free > 0 else {
                _ = self.claimerWake.wait(timeout: dispatchTime(after: .seconds(1)))
                continue
            }
            var body = JSONObject()
            body["workerId"] = .string(self.settings.workerId)
            if !self.settings.actions.isEmpty { body["actions"] = .array(self.settings.actions.map { .string($0) }) }
            body["max"] = .int(min(free, Self.batchLimit))
            body["waitMs"] = .int(WorkerSettings.claimWaitMs)
            let response: ServerClient.Response
            do {
                response = try self.client.post(
                    path,
                    json: JSONValue.object(body).jsonBytes,
                    timeout: .milliseconds(WorkerSettings.claimWaitMs) + .seconds(30),
                    cancellation: self.claimCancellation.token
                )
            } catch {
                if self.claimCancellation.isCancellationRequested { return }
                self.serverUnreachable(error)
                _ = self.claimerWake.wait(timeout: dispatchTime(after: backoff.next()))
                continue
            }
            switch response.status {
            case 200:
                self.serverReachable()
                backoff.reset()
                for item in response.json?["items"]?.arrayValue ?? [] {
                    guard let claimed = ClaimItem(json: item) else {
                        self.logger.error("a claim item lacks a field the worker needs; left to expire")
                        continue
                    }
                    self.start(LeasedTask(claimed))
                }
            case 429, 500...:
                self.serverUnreachable(ServerClientError(problem: response))
                _ = self.claimerWake.wait(timeout: dispatchTime(after: backoff.next(retryAfter: response.retryAfter)))
            default:
                self.fail(
                    "cannot claim tasks from executor \"\(self.settings.executor)\": \(ServerClientError(problem: response))"
                )
                return
            }
        }
    }

    private func start(_ task: LeasedTask) {
        let number = self.state.withLock { state in
            state.add(task, now: .now, maxInterval: self.settings.maxHeartbeatInterval)
        }
        self.heartbeaterWake.signal()
        Thread.detachNewThread { self.runTask(number, task) }
    }

    // MARK: - Commands

    private func runTask(_ number: Int, _ task: LeasedTask) {
        let command = ChildCommand(
            executable: self.settings.executable,
            arguments: self.settings.arguments,
            stdoutLimit: self.settings.maxOutputBytes
        )
        let completion: CompletionItem
        do {
            let outcome = try command.run(input: task.stdin, environment: task.traceEnvironment) {
                self.state.withLock { $0.shouldStop(number, now: Date()) }
            }
            completion = CompletionItem(task: task, outcome: outcome, settings: self.settings)
        } catch {
            completion = CompletionItem(
                leaseId: task.leaseId,
                code: "worker.startFailed",
                message: "cannot start \(self.settings.commandName): \(error.localizedDescription)",
                details: [],
                retryable: true
            )
        }
        let stopped = self.state.withLock { state in
            state.childEnded(
                number,
                completion: completion.item,
                outcome: completion.outcome,
                exitStatus: completion.exitStatus
            )
        }
        self.claimerWake.signal()
        if let stopped {
            self.logEnd(stopped, stoppedFor: stopped.stopReason ?? .shutdown)
            self.coordinatorWake.signal()
        } else {
            self.completerWake.signal()
        }
    }

    // MARK: - Logging

    func serverUnreachable(_ error: any Error) {
        let isNew = self.state.withLock { state in
            defer { state.isServerUnreachable = true }
            return !state.isServerUnreachable
        }
        if isNew { self.logger.warning("the server is unreachable or busy; retrying", metadata: ["error": "\(error)"]) }
    }

    func serverReachable() {
        let wasUnreachable = self.state.withLock { state in
            defer { state.isServerUnreachable = false }
            return state.isServerUnreachable
        }
        if wasUnreachable { self.logger.notice("the server answers again") }
    }

    /// The one line per task: how it ended. Never the lease id.
    func logEnd(_ lease: WorkerState.Lease, stoppedFor reason: StopReason? = nil, notCompleted: String? = nil) {
        var metadata: Logger.Metadata = [
            "job.id": "\(lease.task.jobId)", "task.id": "\(lease.task.taskId)", "task.attempt": "\(lease.task.attempt)",
            "duration.ms": "\((ContinuousClock.now - lease.startedAt).wholeMilliseconds)",
        ]
        if let exitStatus = lease.exitStatus { metadata["exit.status"] = "\(exitStatus)" }
        if let reason {
            metadata["reason"] = "\(reason.rawValue)"
            self.logger.info("task stopped, not completed", metadata: metadata)
        } else if let notCompleted {
            metadata["code"] = "\(notCompleted)"
            self.logger.info("task completion not accepted", metadata: metadata)
        } else {
            metadata["outcome"] = "\(lease.outcome)"
            self.logger.info("task completed", metadata: metadata)
        }
    }
}

// MARK: - Backoff

/// Retry delays: 0.1 s, doubling to 5 s, with ±20 % jitter so that many workers do not retry in step.
struct Backoff {
    private var delay: Duration = .zero

    mutating func next(retryAfter: Duration? = nil) -> Duration {
        self.delay = self.delay == .zero ? .milliseconds(100) : min(self.delay * 2, .seconds(5))
        let jittered = self.delay * Double.random(in: 0.8...1.2)
        return max(jittered, retryAfter ?? .zero)
    }

    mutating func reset() { self.delay = .zero }
}

/// Now plus `duration`, for semaphore waits.
func dispatchTime(after duration: Duration) -> DispatchTime {
    let (seconds, attoseconds) = duration.components
    return .now() + .nanoseconds(Int(max(seconds, 0)) * 1_000_000_000 + Int(max(attoseconds, 0) / 1_000_000_000))
}
