import Synchronization
import TaskCore
import TaskGraph

/// Worker claims and leases through any server of a cluster (SPEC §9).
///
/// An attempt is queued on the server that runs its job, and its lease lives there. So:
/// - **Claims.** A claim takes from the queue of the server it reaches. When that has nothing for
///   it and another server published queued attempts of the pool with its last heartbeat, the
///   claim is relayed there (a `claim` command, answered once the leases are stored). A claim that
///   waits is relayed when it starts waiting and at every heartbeat that shows work elsewhere, so
///   a worker waiting on one server gets another's attempts within about a heartbeat (1 s).
/// - **Lease ids** stay capabilities: the relaying server makes them and sends only their hashes;
///   the owner keys those leases by hash (as after a restart). A relayed lease's id exists only
///   at the relaying server, in its answer, and at the worker.
/// - **Heartbeats, completions, give-backs** of a lease this server does not hold go, by the
///   lease's hash, to the server that runs its job (the stored lease names the job), and are
///   answered as that server answers — a completion once its outcome is durable. A lease that
///   ended is stored as ended until its job is deleted: `lease.gone` through every server.
///
/// A relayed claim whose answer comes too late (the owner slow for `PostgresCluster`'s 2 s) is
/// not applied; one applied but not delivered leaves leases that end at their heartbeat timeout.
final class PoolRelay: ClusterPoolsObserver, Sendable {
    let pools: ExternalPools
    let jobs: JobService
    let cluster: any Cluster
    /// How long a relay waits for its answer: past the owner's 2 s freshness of a claim.
    static let timeout: Duration = .seconds(3)
    /// Other servers' queued attempts by pool and server, as of the last heartbeat (a claim that
    /// found nothing there forgets that server until the next).
    private let peersQueued = Mutex<[String: [String: Int]]>([:])
    /// Pool commands being applied here, so that a notification and a heartbeat's look for lost
    /// ones do not apply one twice.
    private let applying = Mutex<Set<Int64>>([])

    init(pools: ExternalPools, jobs: JobService, cluster: any Cluster) {
        self.pools = pools
        self.jobs = jobs
        self.cluster = cluster
        cluster.observePools(self)
    }

    // MARK: - The claiming server's side

    /// A claim: from this server's queue, else relayed to a server with queued attempts.
    func claim(
        _ claim: ClaimRequest,
        pool: String,
        withdrawnBy withdrawal: CancellationToken
    ) throws(ExternalPoolsError) -> Future<[ExternalPools.Claimed]> {
        let (workerId, actions, max, waitMs) = (claim.workerId, claim.actions, claim.max, claim.waitMs)
        let local = try self.pools.claim(
            pool: pool,
            workerId: workerId,
            actions: actions,
            max: max,
            waitMs: waitMs,
            withdrawnBy: withdrawal
        )
        guard self.peer(with: pool) != nil else { return local }
        if waitMs > 0 {
            // Waiting here (or answered from here): a waiting claim is relayed now.
            if !local.isCompleted { self.relayWaiting(pool) }
            return local
        }
        return local.flatMap { claimed in
            guard claimed.isEmpty, let server = self.peer(with: pool) else { return Future(value: claimed) }
            return self.relayClaim(to: server, pool: pool, workerId: workerId, actions: actions, max: max)
        }
    }

    /// Relays the oldest claim waiting on `pool` to a server with queued attempts, then the next
    /// while that answers with some.
    private func relayWaiting(_ pool: String) {
        guard let server = self.peer(with: pool), let claim = self.pools.withdrawWaiter(pool: pool) else { return }
        self.relayClaim(to: server, pool: pool, workerId: claim.workerId, actions: claim.actions, max: claim.max)
            .whenComplete { outcome in
                let claimed = outcome.value ?? []
                self.pools.answerWithdrawn(claim, with: claimed)
                if !claimed.isEmpty { self.relayWaiting(pool) }
            }
    }

    /// A server that published queued attempts of `pool`, picked at random by weight.
    private func peer(with pool: String) -> String? {
        self.peersQueued.withLock { queued in
            guard let servers = queued[pool], !servers.isEmpty else { return nil }
            var pick = Int.random(in: 0..<servers.values.reduce(0, +))
            for (server, count) in servers.sorted(by: { $0.key < $1.key }) {
                if pick < count { return server }
                pick -= count
            }
            return servers.keys.first
        }
    }

    /// Claims up to `max` attempts of `pool` from `server` under lease ids made here.
    private func relayClaim(
        to server: String,
        pool: String,
        workerId: String,
        actions: [String]?,
        max: Int
    ) -> Future<[ExternalPools.Claimed]> {
        let ids = (0..<max).map { _ in LeaseID.make() }
        var body: JSONObject = [
            "pool": .string(pool), "workerId": .string(workerId),
            "leases": .array(ids.map { .string(LeaseID.hash($0)) }),
        ]
        if let actions { body["actions"] = .array(actions.map { .string($0) }) }
        let command = ClusterCommand(jobID: nil, kind: .claim, taskID: pool, body: .object(body), server: server)
        return self.cluster.relay(command, timeout: Self.timeout).continueWith(on: .immediate) { answered in
            let items = answered.outcome?.value??["items"]?.arrayValue ?? []
            self.peersQueued.withLock { queued in
                // Found nothing there: not asked again before its next heartbeat says otherwise.
                if items.count < max { queued[pool]?[server] = nil }
            }
            return zip(ids, items).map { ExternalPools.Claimed(leaseID: $0, item: .relayed($1)) }
        }
    }

    /// A heartbeat of lease `id`, which this server does not hold, at the server that does.
    func heartbeatElsewhere(_ id: String, progress: JSONValue?) -> Future<ExternalPools.HeartbeatResult> {
        guard LeaseID.isPlausible(id) else { return Future(value: .notFound) }
        var body: JSONObject = [:]
        if let progress { body["progress"] = progress }
        return self.relay(.leaseHeartbeat, lease: id, body).map { answer in
            switch answer["outcome"]?.stringValue {
            case "ok": .ok(cancelRequested: answer["cancelRequested"]?.boolValue ?? false)
            case "gone": .gone
            default: .notFound
            }
        }
    }

    /// Completes lease `id`, which this server does not hold, at the server that does; answered
    /// as it answers, once the outcome is durable there.
    func completeElsewhere(
        _ id: String,
        with outcome: Outcome<JSONValue>,
        retryable: Bool
    )
        -> Future<LeaseCompletion>
    {
        guard LeaseID.isPlausible(id) else { return Future(value: .notFound) }
        let body: JSONObject = ["outcome": ClusterCommand.encode(outcome), "retryable": .bool(retryable)]
        return self.relay(.leaseComplete, lease: id, body).map { answer in
            let pool = answer["pool"]?.stringValue
            let workerId = answer["workerId"]?.stringValue
            switch answer["outcome"]?.stringValue {
            case "done":
                guard let pool, let workerId else { return .notFound }
                return .done(node: answer["node"] ?? .null, pool: pool, workerId: workerId)
            case "gone": return .gone(pool: pool, workerId: workerId)
            case "unavailable": throw StoreError.ownerUnavailable
            default: return .notFound
            }
        }
    }

    /// Leases this server does not hold whose claim's answer never reached its worker: given back
    /// by the servers that hold them.
    func giveBackElsewhere(_ ids: [String]) {
        for id in ids where LeaseID.isPlausible(id) {
            _ = self.relay(.leaseRelease, lease: id, [:])
        }
    }

    /// Relays a lease command for lease `id` to the server that runs its job: its answer,
    /// `leaseEnded` (stored as ended: gone, whoever held it) or `leaseNotStored`; fails
    /// `ownerUnavailable` when no answer came in time (the command stays, and the job's next owner
    /// applies it: the change may still happen).
    private func relay(_ kind: ClusterCommand.Kind, lease id: String, _ body: JSONObject) -> Future<JSONValue> {
        let hash = LeaseID.hash(id)
        var body = body
        body["lease"] = .string(hash)
        let command = ClusterCommand(jobID: nil, kind: kind, taskID: "", body: .object(body), lease: hash)
        return self.cluster.relay(command, timeout: Self.timeout).continueWith(on: .immediate) { answered in
            guard let answer = answered.outcome?.value ?? nil else { throw StoreError.ownerUnavailable }
            return answer
        }
    }

    // MARK: - The owner's side (ClusterPoolsObserver)

    func clusterQueuedCounts() -> [String: Int] { self.pools.queuedCounts() }

    func clusterPeersQueued(_ queued: [String: [String: Int]]) {
        self.peersQueued.withLock { $0 = queued }
        for pool in self.pools.poolsWithWaitingClaims() where queued[pool] != nil {
            self.relayWaiting(pool)
        }
    }

    func clusterApplyPoolCommand(_ id: Int64, _ command: ClusterCommand) {
        guard self.applying.withLock({ $0.insert(id).inserted }) else { return }
        let applied = self.apply(command)
        applied.whenComplete { outcome in
            self.applying.withLock { _ = $0.remove(id) }
            switch outcome {
            case .success(let answer): self.cluster.answer(id, answer)
            // The run was given up before the outcome was recorded: the worker is told to retry
            // (the job's next run takes the lease up and answers then).
            case .failure(let error as StoreError) where error == .ownerUnavailable:
                self.cluster.answer(id, ["outcome": "unavailable"])
            case .failure, .cancelled: break
            }
        }
    }

    private func apply(_ command: ClusterCommand) -> Future<JSONValue> {
        let body = command.body ?? .null
        if command.kind == .claim {
            let hashes = body["leases"]?.arrayValue?.compactMap(\.stringValue) ?? []
            guard let pool = body["pool"]?.stringValue, let workerId = body["workerId"]?.stringValue,
                hashes.count <= ClaimRequest.maxItems
            else { return Future(value: ["items": []]) }
            let actions = body["actions"]?.arrayValue?.compactMap(\.stringValue)
            return self.pools.claimForPeer(pool: pool, workerId: workerId, actions: actions, peerHashes: hashes).map {
                claimed in
                ["items": .array(claimed.map(ExternalPoolsAPI.json))]
            }
        }
        guard let hash = body["lease"]?.stringValue else { return Future(value: ["outcome": "notFound"]) }
        switch command.kind {
        case .leaseHeartbeat:
            let answer: JSONValue =
                switch self.pools.heartbeat(leaseHash: hash, progress: body["progress"]) {
                case .ok(let cancelRequested): ["outcome": "ok", "cancelRequested": .bool(cancelRequested)]
                case .gone: ["outcome": "gone"]
                case .notFound: ["outcome": "notFound"]
                }
            return Future(value: answer)
        case .leaseComplete:
            guard let outcome = body["outcome"].flatMap(ClusterCommand.decodeOutcome) else {
                return Future(value: ["outcome": "notFound"])
            }
            let retryable = body["retryable"]?.boolValue ?? true
            switch self.pools.complete(leaseHash: hash, with: outcome, retryable: retryable) {
            case .done(let task, let key, let pool, let workerId):
                return self.pools.durable(task, lease: key).map {
                    [
                        "outcome": "done", "node": task.node?.json ?? .null, "pool": .string(pool),
                        "workerId": .string(workerId),
                    ]
                }
            case .gone(let pool, let workerId):
                var answer: JSONObject = ["outcome": "gone"]
                if let pool { answer["pool"] = .string(pool) }
                if let workerId { answer["workerId"] = .string(workerId) }
                return Future(value: .object(answer))
            case .notFound:
                return Future(value: ["outcome": "notFound"])
            }
        case .leaseRelease:
            self.pools.giveBack(leaseHashes: [hash])
            return Future(value: ["outcome": "released"])
        case .claim, .cancelTask, .complete:
            return Future(value: ["outcome": "notFound"])
        }
    }
}
