import Logging
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
    /// Claims and leases, here or (in a cluster) where they are held.
    private var leases: WorkerLeases { self.app.workerLeases }

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
        return try self.claim(claim, pool: pool, withdrawnBy: request.connectionClosed).map { items in
            self.givingBack(items, .json(["items": .array(items)]))
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
            return try self.leases.claim(claim, pool: pool, withdrawnBy: withdrawal).map { $0.map(\.json) }
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
    func givingBack(_ items: [JSONValue], _ response: Response) -> Response {
        let leases = items.compactMap { $0["leaseId"]?.stringValue }
        guard !leases.isEmpty else { return response }
        var response = response
        let leaseHolders = self.leases
        response.onUndelivered = { leaseHolders.giveBack(leases) }
        return response
    }

    /// A heartbeat of lease `id`: here, or (in a cluster) at the server that holds it.
    private func heartbeat(_ id: String, progress: JSONValue?) -> Future<ExternalPools.HeartbeatResult> {
        self.leases.heartbeat(id, progress: progress)
    }

    /// Completes lease `id`: here, or (in a cluster) at the server that holds it; answered once
    /// the outcome is durable.
    private func complete(_ id: String, _ completion: CompletionBody) -> Future<LeaseCompletion> {
        self.leases.complete(id, with: completion.outcome, retryable: completion.isRetryable)
    }

    @Sendable func workers(_ request: Request) throws -> Future<Response> {
        let pool = try self.pool(request)
        let local = (self.pools.workers(pool) ?? []).map(Self.workerItem)
        guard let cluster = self.app.repository.cluster else {
            return Future(value: .json(["items": .array(local.map(JSONValue.object))]))
        }
        var lists = [(server: cluster.nodeName, workers: local)]
        for (peer, items) in cluster.peerExecutors().sorted(by: { $0.key < $1.key }) {
            let list = items.first { $0["name"] == .string(pool) }?["workerList"]?.arrayValue ?? []
            lists.append((peer, list.compactMap(\.objectValue)))
        }
        return Future(value: .json(["items": .array(Self.clusterWorkers(lists).map(JSONValue.object))]))
    }

    /// A worker as `GET /v1/executors/{name}/workers` lists it (and a cluster's heartbeat
    /// publishes it).
    static func workerItem(_ worker: (workerId: String, lastSeen: Timestamp, leases: Int)) -> JSONObject {
        [
            "workerId": .string(worker.workerId), "lastSeenAt": .string(worker.lastSeen.rfc3339),
            "leases": .int(worker.leases),
        ]
    }

    /// A cluster's workers of one pool, from each server's list (this server's first): one item
    /// per worker, seen last when any server saw it last, holding the leases of all of them, with
    /// each server's own in `servers`. Most recently seen first. A worker claims through any
    /// server, so one worker often shows on several.
    static func clusterWorkers(_ lists: [(server: String, workers: [JSONObject])]) -> [JSONObject] {
        var merged: [String: JSONObject] = [:]
        for (server, workers) in lists {
            for worker in workers {
                guard let id = worker["workerId"]?.stringValue, let seen = worker["lastSeenAt"]?.stringValue,
                    let leases = worker["leases"]?.intValue
                else { continue }
                let entry: JSONValue = ["server": .string(server), "lastSeenAt": .string(seen), "leases": .int(leases)]
                guard var item = merged[id] else {
                    merged[id] = [
                        "workerId": .string(id), "lastSeenAt": .string(seen), "leases": .int(leases),
                        "servers": [entry],
                    ]
                    continue
                }
                // RFC 3339 times with milliseconds in UTC: later sorts after.
                if seen > (item["lastSeenAt"]?.stringValue ?? "") { item["lastSeenAt"] = .string(seen) }
                item["leases"] = .int((item["leases"]?.intValue ?? 0) + leases)
                item["servers"] = .array((item["servers"]?.arrayValue ?? []) + [entry])
                merged[id] = item
            }
        }
        return merged.values.sorted {
            let (left, right) = ($0["lastSeenAt"]?.stringValue ?? "", $1["lastSeenAt"]?.stringValue ?? "")
            return left != right
                ? left > right : ($0["workerId"]?.stringValue ?? "") < ($1["workerId"]?.stringValue ?? "")
        }
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
        return self.heartbeat(leaseId, progress: progress).map { result in
            switch result {
            case .ok(let cancelRequested): return .json(["cancelRequested": .bool(cancelRequested)])
            case .gone: throw Self.gone
            case .notFound: throw Self.notFound
            }
        }
    }

    @Sendable func complete(_ request: Request) throws -> Future<Response> {
        let completion = try CompleteRequest(try self.app.jsonBody(request), leaseId: request.parameter("leaseId"))
        let outcome = completion.outcome
        // Answered once the outcome is durable: a restart never forgets an acknowledged one.
        return self.complete(outcome.leaseId, outcome.completion).continueOnSuccessWithTask(on: request.executor) {
            completed in
            switch completed {
            case .notFound: throw Self.notFound
            case .gone: throw Self.gone
            case .done(let node, let pool, let workerId):
                guard var next = completion.claimNext else { return Future(value: .json(node)) }
                next.workerId = workerId
                return self.claimNext(next, pool: pool, request).map { items in
                    guard case .object(var object) = node else { return .json(node) }
                    object["claimed"] = .array(items)
                    return self.givingBack(items, .json(.object(object)))
                }
            }
        }
    }

    // MARK: - Batches

    @Sendable func batchHeartbeat(_ request: Request) throws -> Future<Response> {
        let batch = try BatchHeartbeatRequest(try self.app.jsonBody(request))
        let beats = batch.items.map { item in self.heartbeat(item.leaseId, progress: item.progress) }
        // Settled one by one: an item that fails (the server holding its lease did not answer in
        // time) is that item's answer, never the batch's.
        return Future.whenAllSettled(beats).map { outcomes in
            let items = zip(batch.items, outcomes).map { item, outcome -> JSONValue in
                var object: JSONObject = ["leaseId": .string(item.leaseId)]
                switch outcome {
                case .success(.ok(let cancelRequested)):
                    object["status"] = 200
                    object["cancelRequested"] = .bool(cancelRequested)
                case .success(.gone):
                    object["status"] = 409
                    object["code"] = "lease.gone"
                case .success(.notFound):
                    object["status"] = 404
                    object["code"] = "lease.notFound"
                case .failure, .cancelled:
                    self.failedItem(outcome.error, &object)
                }
                return .object(object)
            }
            return .json(["items": .array(items)])
        }
    }

    @Sendable func batchComplete(_ request: Request) throws -> Future<Response> {
        let batch = try BatchCompleteRequest(try self.app.jsonBody(request))
        // Each answered once its outcome is durable (here, or where its lease is held), and settled
        // one by one, as heartbeats are. The answer (and its claimNext) is made on the request's
        // event loop, not on the thread that completed the last wait: with a durable store that is
        // the store's one completion thread, which every commit's waiters need.
        let items = batch.items.map { ($0.leaseId, $0.completion.outcome, $0.completion.isRetryable) }
        return self.leases.complete(items).continueOnSuccessWithTask(on: request.executor) { completions in
            var items: [JSONValue] = []
            items.reserveCapacity(completions.count)
            var claimFrom: (pool: String, workerId: String)?
            for (item, completed) in zip(batch.items, completions) {
                var object: JSONObject = ["leaseId": .string(item.leaseId)]
                switch completed {
                case .success(.done(_, let pool, let workerId)):
                    object["status"] = 200
                    if claimFrom == nil { claimFrom = (pool, workerId) }
                case .success(.gone(let pool, let workerId)):
                    object["status"] = 409
                    object["code"] = "lease.gone"
                    if claimFrom == nil, let pool, let workerId { claimFrom = (pool, workerId) }
                case .success(.notFound):
                    object["status"] = 404
                    object["code"] = "lease.notFound"
                case .failure, .cancelled:
                    self.failedItem(completed.error, &object)
                }
                items.append(.object(object))
            }
            let results = items
            guard var next = batch.claimNext else { return Future(value: .json(["items": .array(results)])) }
            guard let claimFrom else { return Future(value: .json(["items": .array(results), "claimed": []])) }
            next.workerId = claimFrom.workerId
            return self.claimNext(next, pool: claimFrom.pool, request).map { claimed in
                self.givingBack(claimed, .json(["items": .array(results), "claimed": .array(claimed)]))
            }
        }
    }

    /// A batch item whose own call failed: the status, code and detail its single form would have
    /// answered — `503 store.unavailable` when the server holding the lease did not answer in time
    /// (the change may still apply: that server's successor applies it once it takes the job
    /// over) or the outcome could not be stored. `error`: nil when the call was cancelled (the
    /// server is stopping).
    private func failedItem(_ error: (any Error)?, _ object: inout JSONObject) {
        let problem: HTTPProblem
        if let error = error as? any HTTPResponseError {
            problem = error.problem
        } else if let error {
            // A bug, as for any request: logged (never with the lease id), answered without its text.
            self.app.logger.error("a batch lease call failed", metadata: ["error": "\(error)"])
            problem = HTTPProblem.internalError
        } else {
            problem = HTTPProblem(
                .serviceUnavailable,
                code: "server.draining",
                detail: "the request was cancelled because the server is stopping"
            )
        }
        object["status"] = .int(Int(problem.status.code))
        object["code"] = .string(problem.code)
        object["detail"] = .string(problem.detail)
    }

    static let notFound = HTTPProblem.notFound("lease.notFound", "no such lease (never issued, or long forgotten)")
    static let gone = HTTPProblem.conflict(
        "lease.gone",
        "the lease ended (completed, expired, or its task was cancelled); nothing was changed"
    )
}
