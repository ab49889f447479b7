import Dispatch
import Foundation
import Logging
import Synchronization
import TaskCore
import TaskGraph

/// Heartbeats and completions of the leases a worker holds.
extension WorkerRuntime {
    // MARK: - Heartbeats

    func heartbeatLoop() {
        var backoff = Backoff()
        while !self.state.withLock({ $0.isFinished }) {
            let now = ContinuousClock.now
            let (dueLeases, next) = self.state.withLock { $0.dueHeartbeats(now: now, limit: Self.batchLimit) }
            guard !dueLeases.isEmpty else {
                let wait = next.map { max($0 - now, .milliseconds(10)) } ?? .seconds(5)
                _ = self.heartbeaterWake.wait(timeout: dispatchTime(after: wait))
                continue
            }
            let due = dueLeases.map(\.number)
            let body: JSONValue = ["items": .array(dueLeases.map { ["leaseId": .string($0.leaseId)] })]
            let response: ServerClient.Response
            do {
                response = try self.client.post("/v1/leases/heartbeat", json: body.jsonBytes, timeout: .seconds(30))
            } catch {
                self.serverUnreachable(error)
                self.postponeHeartbeats(due, by: backoff.next())
                continue
            }
            switch response.status {
            case 200:
                self.serverReachable()
                backoff.reset()
                let items = response.json?["items"]?.arrayValue ?? []
                for (index, number) in due.enumerated() {
                    let item = index < items.count ? items[index] : [:]
                    switch item["status"]?.intValue {
                    case 200:
                        if item["cancelRequested"]?.boolValue == true {
                            self.stopLease(number, .cancelled)
                        } else {
                            self.state.withLock { $0.heartbeatAnswered(number, at: now) }
                        }
                    case 404, 409:
                        self.stopLease(number, .leaseGone)
                    default:
                        self.postponeHeartbeats([number], by: backoff.next())
                    }
                }
            case 429, 500...:
                self.serverUnreachable(ServerClientError(problem: response))
                self.postponeHeartbeats(due, by: backoff.next(retryAfter: response.retryAfter))
            default:
                self.fail("the server refused a heartbeat: \(ServerClientError(problem: response))")
                self.postponeHeartbeats(due, by: .seconds(5))
            }
        }
    }

    private func postponeHeartbeats(_ numbers: [Int], by delay: Duration) {
        let at = ContinuousClock.now + delay
        self.state.withLock { $0.postponeHeartbeats(numbers, to: at) }
    }

    private func stopLease(_ number: Int, _ reason: StopReason) {
        if let dropped = self.state.withLock({ $0.stop(number, reason) }) {
            self.logEnd(dropped, stoppedFor: reason)
            self.coordinatorWake.signal()
        }
    }

    // MARK: - Completions

    func completeLoop() {
        var backoff = Backoff()
        while !self.state.withLock({ $0.isFinished }) {
            let batch = self.state.withLock { state in
                state.takeBatch(limit: Self.batchLimit, maxBytes: self.settings.maxOutputBytes)
            }
            guard !batch.isEmpty else {
                _ = self.completerWake.wait(timeout: dispatchTime(after: .seconds(5)))
                continue
            }
            // The items are JSON already, each as its command's output was written: spliced in as is.
            var body = Array(#"{"items":["#.utf8)
            for (index, entry) in batch.enumerated() {
                if index > 0 { body.append(UInt8(ascii: ",")) }
                body.append(contentsOf: entry.item)
            }
            body.append(contentsOf: Array("]}".utf8))
            let numbers = batch.map(\.number)
            let response: ServerClient.Response
            do {
                response = try self.client.post("/v1/leases/complete", json: body, timeout: .seconds(60))
            } catch {
                // A server that refuses a body larger than its limit may reset the connection
                // before its 413 can be read: a completion that keeps failing so while the server
                // answers other requests is then treated as refused.
                let failures = self.state.withLock { $0.completionFailed(numbers) }
                self.serverUnreachable(error)
                if failures >= Self.connectionFailuresToGiveUp {
                    if numbers.count > 1 {
                        self.putBack(numbers, alone: true)
                        continue
                    }
                    if body.count > 64 << 10 {
                        self.rejected(
                            numbers[0],
                            problem: "the server closed the connection on each of \(failures) tries while it answered "
                                + "other requests; is the completion (\(body.count) bytes) larger than its --max-body-bytes?"
                        )
                        continue
                    }
                }
                self.putBack(numbers, alone: false)
                _ = self.completerWake.wait(timeout: dispatchTime(after: backoff.next()))
                continue
            }
            switch response.status {
            case 200:
                self.serverReachable()
                backoff.reset()
                self.completed(numbers, answer: response.json?["items"]?.arrayValue ?? [])
            case 429, 500...:
                self.serverUnreachable(ServerClientError(problem: response))
                self.putBack(numbers, alone: false)
                _ = self.completerWake.wait(timeout: dispatchTime(after: backoff.next(retryAfter: response.retryAfter)))
            case 413, 422:
                if numbers.count > 1 {
                    // One of them is too large or not acceptable: find out which by sending each alone.
                    self.putBack(numbers, alone: true)
                } else {
                    self.rejected(numbers[0], problem: "\(ServerClientError(problem: response))")
                }
            default:
                self.fail("the server refused a completion: \(ServerClientError(problem: response))")
                self.putBack(numbers, alone: false)
                _ = self.completerWake.wait(timeout: dispatchTime(after: .seconds(5)))
            }
        }
    }

    /// The server answered a batch: each item has its own status. An item answered 429 or 5xx
    /// (the server holding its lease did not answer in time, or could not store the outcome; it
    /// may still apply) is sent again, as a batch refused whole would be; the others are done.
    private func completed(_ numbers: [Int], answer items: [JSONValue]) {
        var again: [Int] = []
        for (index, number) in numbers.enumerated() {
            guard let leaseId = self.state.withLock({ $0.leases[number]?.task.leaseId }) else { continue }
            // Items come in request order, each with its lease id.
            let item =
                items.first { $0["leaseId"]?.stringValue == leaseId } ?? (index < items.count ? items[index] : [:])
            let status = item["status"]?.intValue ?? 0
            if status == 429 || status >= 500 {
                again.append(number)
                continue
            }
            guard let lease = self.state.withLock({ $0.leases.removeValue(forKey: number) }) else { continue }
            if status == 200 {
                self.logEnd(lease)
            } else {
                self.logEnd(lease, notCompleted: item["code"]?.stringValue ?? "status \(status)")
            }
        }
        if !again.isEmpty {
            self.putBack(again, alone: false)
            // Not at once: the server that holds them is taking over or catching up (a second).
            _ = self.completerWake.wait(timeout: dispatchTime(after: .milliseconds(250)))
        }
        self.coordinatorWake.signal()
    }

    /// The server refused a completion on its own (too large, or not valid): fail the attempt
    /// instead, once, so that it does not wait for its lease to expire.
    private func rejected(_ number: Int, problem: String) {
        let replaced = self.state.withLock { state -> Bool in
            guard var lease = state.leases[number], lease.outcome != Self.rejectedOutcome else { return false }
            lease.completion =
                CompletionItem(
                    leaseId: lease.task.leaseId,
                    code: "worker.resultRejected",
                    message: "the server refused the result of \(self.settings.commandName): \(problem)",
                    details: [],
                    retryable: false
                ).item
            lease.outcome = Self.rejectedOutcome
            state.leases[number] = lease
            return true
        }
        if replaced {
            self.putBack([number], alone: true)
        } else {
            self.completed([number], answer: [["status": 0, "code": "completion refused"]])
        }
    }

    private static let rejectedOutcome = "failed (worker.resultRejected)"
    private static let connectionFailuresToGiveUp = 3

    private func putBack(_ numbers: [Int], alone: Bool) {
        let dropped = self.state.withLock { $0.putBack(numbers, alone: alone) }
        for lease in dropped { self.logEnd(lease, stoppedFor: lease.stopReason ?? .shutdown) }
        if !dropped.isEmpty { self.coordinatorWake.signal() }
    }
}
