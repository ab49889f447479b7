import NIOCore
import NIOHTTP1
import TaskCore
import TaskGraph
import TaskWorkerProtocol

/// The external worker protocol (SPEC §6): claims, heartbeats and completions of leases, and the
/// workers of a pool.
///
/// Lease ids appear in two URL forms because SPEC §6 defines them; the batch forms
/// (`/v1/leases/heartbeat`, `/v1/leases/complete`) carry them in the body, which is what the
/// reference worker and the examples use: proxies and access logs record URLs. This server never
/// logs a lease id (request targets under `/v1/leases/` are logged as their route).
struct ExternalPoolsAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.POST, "/v1/executors/{name}/claim", self.claim)
        router.add(.GET, "/v1/executors/{name}/workers", self.workers)
        // A lease id is a capability (SPEC §6): never logged, never echoed.
        router.add(.POST, "/v1/leases/{leaseId}/heartbeat", redactsPath: true, self.heartbeat)
        router.add(.POST, "/v1/leases/{leaseId}/complete", redactsPath: true, self.complete)
        router.add(.POST, "/v1/leases/heartbeat", self.batchHeartbeat)
        router.add(.POST, "/v1/leases/complete", self.batchComplete)
    }

    private var pools: ExternalPools { self.app.externalPools }

    /// The external pool `name`, or the 404/409 problem.
    private func pool(_ request: Request) throws(HTTPProblem) -> String {
        let name = request.parameter("name")
        if self.pools.isPool(name) { return name }
        if self.app.engine.pools[name] != nil || name == Engine.immediateExecutor {
            throw HTTPProblem.conflict(
                "executor.notExternal",
                "executor \(name) runs in the server; workers claim from external executors (--executor NAME=external)"
            )
        }
        throw HTTPProblem.notFound("executor.notFound", "no executor \(name.prefix(100))")
    }

    @Sendable func claim(_ request: Request) throws -> Future<Response> {
        let pool = try self.pool(request)
        let claim = try ClaimRequest(try self.app.jsonBody(request))
        let pools = self.pools
        return try self.claim(claim, pool: pool, withdrawnBy: request.connectionClosed).map { items in
            Self.givingBack(items, to: pools, .json(["items": .array(items)]))
        }
    }

    /// A completion's `claimNext`: like a claim, except that a pool with its fill of waiting
    /// claims answers `[]` rather than 429 — the completion itself is already recorded.
    private func claimNext(_ claim: ClaimRequest, pool: String, _ request: Request) -> Future<[JSONValue]> {
        (try? self.claim(claim, pool: pool, withdrawnBy: request.connectionClosed)) ?? Future(value: [])
    }

    private func claim(
        _ claim: ClaimRequest,
        pool: String,
        withdrawnBy withdrawal: CancellationToken
    ) throws(HTTPProblem) -> Future<[JSONValue]> {
        do {
            return try self.pools.claim(
                pool: pool,
                workerId: claim.workerId,
                actions: claim.actions,
                max: claim.max,
                waitMs: claim.waitMs,
                withdrawnBy: withdrawal
            ).map { claimed in claimed.map(Self.json) }
        } catch {
            throw Self.problem(error)
        }
    }

    /// The answer to a refusal of the external pools.
    static func problem(_ error: ExternalPoolsError) -> HTTPProblem {
        switch error {
        case .tooManyClaims(let pool, let limit):
            var headers = HTTPHeaders()
            headers.add(name: "retry-after", value: "1")
            return HTTPProblem(
                .tooManyRequests,
                code: "executor.tooManyClaims",
                detail: "\(limit) claims already wait on executor \(pool); retry later or claim more tasks per request",
                headers: headers
            )
        }
    }

    /// `response`, which hands out the leases of `items`: if it never reaches the worker, they are
    /// given back without consuming their attempts (issue #27: a parked claim whose client had just
    /// gone used to waste an attempt, and fail a one-attempt job with task.heartbeatTimeout).
    static func givingBack(_ items: [JSONValue], to pools: ExternalPools, _ response: Response) -> Response {
        let leases = items.compactMap { $0["leaseId"]?.stringValue }
        guard !leases.isEmpty else { return response }
        var response = response
        response.onUndelivered = { pools.giveBack(leases) }
        return response
    }

    /// A claim item (SPEC §6).
    static func json(_ claimed: ExternalPools.Claimed) -> JSONValue {
        let task = claimed.task
        return ClaimItem(
            leaseId: claimed.leaseID,
            jobId: task.jobID,
            taskId: task.taskID,
            action: task.action,
            params: task.params,
            input: task.input,
            attempt: task.attempt,
            heartbeatTimeoutMs: task.heartbeatTimeoutMs,
            deadline: claimed.deadline?.rfc3339
        ).json
    }

    @Sendable func workers(_ request: Request) throws -> Future<Response> {
        let pool = try self.pool(request)
        let items: [JSONValue] = (self.pools.workers(pool) ?? []).map { worker in
            [
                "workerId": .string(worker.workerId), "lastSeenAt": .string(worker.lastSeen.rfc3339),
                "leases": .int(worker.leases),
            ]
        }
        return Future(value: .json(["items": .array(items)]))
    }

    // MARK: - One lease

    @Sendable func heartbeat(_ request: Request) throws -> Future<Response> {
        let leaseId = request.parameter("leaseId")
        var progress: JSONValue?
        if let body = request.body, body.readableBytes > 0 {
            let reader = BodyReader(try self.app.jsonBody(request), allowed: ["progress"])
            progress = reader.object["progress"]
            try reader.check("heartbeat")
        }
        switch self.pools.heartbeat(leaseId, progress: progress) {
        case .ok(let cancelRequested): return Future(value: .json(["cancelRequested": .bool(cancelRequested)]))
        case .gone: throw Self.gone
        case .notFound: throw Self.notFound
        }
    }

    @Sendable func complete(_ request: Request) throws -> Future<Response> {
        let completion = try CompleteRequest(try self.app.jsonBody(request), leaseId: request.parameter("leaseId"))
        let outcome = completion.outcome
        let completed = outcome.completion
        switch self.pools.complete(outcome.leaseId, with: completed.outcome, retryable: completed.isRetryable) {
        case .notFound: throw Self.notFound
        case .gone: throw Self.gone
        case .done(let task, let pool, let workerId):
            // Answered once the outcome is durable: a restart never forgets an acknowledged one.
            let node = self.app.jobs.durable(task.jobID).map { task.node?.json ?? .null }
            guard var next = completion.claimNext else { return node.map { .json($0) } }
            next.workerId = workerId
            let claimed = self.claimNext(next, pool: pool, request)
            return node.flatMap { node in
                claimed.map { items in
                    guard case .object(var object) = node else { return .json(node) }
                    object["claimed"] = .array(items)
                    return Self.givingBack(items, to: self.pools, .json(.object(object)))
                }
            }
        }
    }

    // MARK: - Batches

    @Sendable func batchHeartbeat(_ request: Request) throws -> Future<Response> {
        let batch = try BatchHeartbeatRequest(try self.app.jsonBody(request))
        let items: [JSONValue] = batch.items.map { item in
            var object: JSONObject = ["leaseId": .string(item.leaseId)]
            switch self.pools.heartbeat(item.leaseId, progress: item.progress) {
            case .ok(let cancelRequested):
                object["status"] = 200
                object["cancelRequested"] = .bool(cancelRequested)
            case .gone:
                object["status"] = 409
                object["code"] = "lease.gone"
            case .notFound:
                object["status"] = 404
                object["code"] = "lease.notFound"
            }
            return .object(object)
        }
        return Future(value: .json(["items": .array(items)]))
    }

    @Sendable func batchComplete(_ request: Request) throws -> Future<Response> {
        let batch = try BatchCompleteRequest(try self.app.jsonBody(request))
        var items: [JSONValue] = []
        items.reserveCapacity(batch.items.count)
        var claimFrom: (pool: String, workerId: String)?
        var completedJobs: Set<String> = []
        for item in batch.items {
            var object: JSONObject = ["leaseId": .string(item.leaseId)]
            let completion = item.completion
            switch self.pools.complete(item.leaseId, with: completion.outcome, retryable: completion.isRetryable) {
            case .done(let task, let pool, let workerId):
                completedJobs.insert(task.jobID)
                object["status"] = 200
                if claimFrom == nil { claimFrom = (pool, workerId) }
            case .gone(let pool, let workerId):
                object["status"] = 409
                object["code"] = "lease.gone"
                if claimFrom == nil, let pool, let workerId { claimFrom = (pool, workerId) }
            case .notFound:
                object["status"] = 404
                object["code"] = "lease.notFound"
            }
            items.append(.object(object))
        }
        // Answered once every outcome is durable.
        let answered = Future.whenAll(completedJobs.map { self.app.jobs.durable($0) }).asVoid()
        let results = items
        guard var next = batch.claimNext else {
            return answered.map { .json(["items": .array(results)]) }
        }
        let claimed: Future<[JSONValue]>
        if let claimFrom {
            next.workerId = claimFrom.workerId
            claimed = self.claimNext(next, pool: claimFrom.pool, request)
        } else {
            claimed = Future(value: [])
        }
        return answered.flatMap { _ in
            claimed.map { claimed in
                Self.givingBack(claimed, to: self.pools, .json(["items": .array(results), "claimed": .array(claimed)]))
            }
        }
    }

    static let notFound = HTTPProblem.notFound("lease.notFound", "no such lease (never issued, or long forgotten)")
    static let gone = HTTPProblem.conflict(
        "lease.gone",
        "the lease ended (completed, expired, or its task was cancelled); nothing was changed"
    )
}
