import Synchronization
import TaskCore
import TaskGraph

/// Worker claims and leases through any server of a cluster (SPEC §9).
///
/// An attempt is queued on the server that runs its job, and its lease lives there. So:
/// - **Claims.** A claim takes from the queue of the server it reaches. When that has nothing for
///   it and another server published queued attempts of the pool with its last heartbeat, the
///   claim is relayed there (a `claim` command, answered once the leases are stored). A claim that
///   waits is relayed when it starts waiting, when another server announces attempts queued there
///   for nobody (`Cluster.announceQueued`: its empty queue got one no claim there took), and at
///   every heartbeat that shows work elsewhere (the fallback, should a notification be lost): a
///   worker waiting on one server gets another's attempts within milliseconds.
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
    let cluster: any Cluster
    /// Other servers' queued attempts by pool and server, as of the last heartbeat (a claim that
    /// found nothing there forgets that server until the next).
    private let peersQueued = Mutex<[String: [String: Int]]>([:])
    /// Pool commands being applied here, so that a notification and a heartbeat's look for lost
    /// ones do not apply one twice.
    private let applying = Mutex<Set<Int64>>([])

    init(pools: ExternalPools, cluster: any Cluster) {
        self.pools = pools
        self.cluster = cluster
        cluster.observePools(self)
        pools.onQueuedForNobody { [weak cluster] pool in cluster?.announceQueued(pool: pool) }
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
        let command = ClusterCommand.claim(
            server: server,
            pool: pool,
            workerId: workerId,
            actions: actions,
            leases: ids.map(LeaseID.hash)
        )
        return self.cluster.relay(command).continueWith(on: .immediate) { answered in
            var items: [JSONValue] = []
            if case .claimed(let claimed)?? = answered.outcome?.value { items = claimed }
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
        return self.relay(.leaseHeartbeat(lease: LeaseID.hash(id), progress: progress)).map { answer in
            switch answer {
            case .alive(let cancelRequested): .ok(cancelRequested: cancelRequested)
            case .gone: .gone
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
        let command = ClusterCommand.leaseComplete(
            lease: LeaseID.hash(id),
            outcome: ClusterCommand.TaskOutcome(outcome),
            retryable: retryable
        )
        return self.relay(command).map { answer in
            switch answer {
            case .completed(let node, let pool, let workerId): .done(node: node, pool: pool, workerId: workerId)
            case .gone(let pool, let workerId): .gone(pool: pool, workerId: workerId)
            default: .notFound
            }
        }
    }

    /// Leases this server does not hold whose claim's answer never reached its worker: given back
    /// by the servers that hold them.
    func giveBackElsewhere(_ ids: [String]) {
        for id in ids where LeaseID.isPlausible(id) {
            _ = self.relay(.leaseRelease(lease: LeaseID.hash(id)))
        }
    }

    /// Relays a lease command to the server that runs its lease's job: its answer; fails
    /// `ownerUnavailable` when no answer came in time, or the owner could not record it.
    private func relay(_ command: ClusterCommand) -> Future<ClusterAnswer.LeaseAnswer> {
        self.cluster.relay(command).continueWith(on: .immediate) { answered in
            switch answered.outcome?.value ?? nil {
            case .lease(let answer)?: return answer
            case .task, .claimed, .unavailable, nil: throw StoreError.ownerUnavailable
            }
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

    func clusterPeerQueued(server: String, pool: String, count: Int) {
        self.peersQueued.withLock { $0[pool, default: [:]][server] = count }
        if self.pools.hasWaitingClaims(pool) { self.relayWaiting(pool) }
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
                self.cluster.answer(id, .unavailable)
            case .failure, .cancelled: break
            }
        }
    }

    private func apply(_ command: ClusterCommand) -> Future<ClusterAnswer> {
        switch command {
        case .claim(_, let pool, let workerId, let actions, let leases):
            guard leases.count <= ClaimRequest.maxItems else { return Future(value: .claimed([])) }
            return self.pools.claimForPeer(pool: pool, workerId: workerId, actions: actions, peerHashes: leases).map {
                claimed in .claimed(claimed.map(\.json))
            }
        case .leaseHeartbeat(let hash, let progress):
            let answer: ClusterAnswer.LeaseAnswer =
                switch self.pools.heartbeat(leaseHash: hash, progress: progress) {
                case .ok(let cancelRequested): .alive(cancelRequested: cancelRequested)
                case .gone: .gone(pool: nil, workerId: nil)
                case .notFound: .notFound
                }
            return Future(value: .lease(answer))
        case .leaseComplete(let hash, let outcome, let retryable):
            switch self.pools.complete(leaseHash: hash, with: outcome.outcome, retryable: retryable) {
            case .done(let task, let key, let pool, let workerId):
                return self.pools.durable(task, lease: key).map {
                    .lease(.completed(node: task.node?.json ?? .null, pool: pool, workerId: workerId))
                }
            case .gone(let pool, let workerId):
                return Future(value: .lease(.gone(pool: pool, workerId: workerId)))
            case .notFound:
                return Future(value: .lease(.notFound))
            }
        case .leaseRelease(let hash):
            self.pools.giveBack(leaseHashes: [hash])
            return Future(value: .lease(.released))
        case .cancelTask, .complete:
            return Future(value: .lease(.notFound))
        }
    }
}
