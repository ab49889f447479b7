import TaskCore
import TaskGraph

/// Claims and leases as the worker API sees them (SPEC §6), wherever they live: the one thing
/// `ExternalPoolsAPI` talks to. On one server, this server's external pools. In a cluster
/// (SPEC §9), the pools here first and, for what this server does not hold, the server that does
/// (`PoolRelay`): a claim with nothing queued here is relayed to a server with queued attempts; a
/// heartbeat, completion or give-back of a lease not held here goes to the server that runs its
/// job. So "here or relayed" is decided in one place.
struct WorkerLeases: Sendable {
    let pools: ExternalPools
    /// Claims and leases through the other servers of a cluster; nil on one server.
    let relay: PoolRelay?

    /// Up to `claim.max` attempts of `pool`, waiting up to `claim.waitMs` for the first.
    func claim(
        _ claim: ClaimRequest,
        pool: String,
        withdrawnBy withdrawal: CancellationToken
    ) throws(ExternalPoolsError) -> Future<[ExternalPools.Claimed]> {
        if let relay { return try relay.claim(claim, pool: pool, withdrawnBy: withdrawal) }
        return try self.pools.claim(
            pool: pool,
            workerId: claim.workerId,
            actions: claim.actions,
            max: claim.max,
            waitMs: claim.waitMs,
            withdrawnBy: withdrawal
        )
    }

    /// Gives back leases whose claim's answer never reached the worker (their attempts are not
    /// consumed): here, and the rest where they are held.
    func giveBack(_ leaseIDs: [String]) {
        let elsewhere = self.pools.giveBack(leaseIDs)
        if let relay, !elsewhere.isEmpty { relay.giveBackElsewhere(elsewhere) }
    }

    /// A heartbeat of lease `id`: here, or at the server that holds it.
    func heartbeat(_ id: String, progress: JSONValue?) -> Future<ExternalPools.HeartbeatResult> {
        let here = self.pools.heartbeat(id, progress: progress)
        guard here == .notFound, let relay else { return Future(value: here) }
        return relay.heartbeatElsewhere(id, progress: progress)
    }

    /// Completes lease `id`: here, or at the server that holds it; answered once the outcome is
    /// durable (`ownerUnavailable` when the run was given up first, or its server did not answer).
    func complete(_ id: String, with outcome: Outcome<JSONValue>, retryable: Bool) -> Future<LeaseCompletion> {
        self.complete([(id, outcome, retryable)], nodes: true).flatMap { Future(outcome: $0[0]) }
    }

    /// One item of a batch of completions.
    typealias Completion = (id: String, outcome: Outcome<JSONValue>, retryable: Bool)

    /// Completes each of `items`, in order: here, or (in a cluster) at the server that holds its
    /// lease. Those done here wait for durability once per job (`ExternalPools.durable`). Each
    /// answer is its own outcome, never the batch's; `nodes`: a done one carries its task's node
    /// (a single completion's answer), else `null` (a batch's items do not show it).
    func complete(_ items: [Completion], nodes: Bool = false) -> Future<[Outcome<LeaseCompletion>]> {
        var answers = [Outcome<LeaseCompletion>?](repeating: nil, count: items.count)
        var done: [(index: Int, task: WorkerTask, key: String, pool: String, workerId: String)] = []
        var relayed: [(index: Int, future: Future<LeaseCompletion>)] = []
        for (index, item) in items.enumerated() {
            switch self.pools.complete(item.id, with: item.outcome, retryable: item.retryable) {
            case .done(let task, let key, let pool, let workerId):
                done.append((index, task, key, pool, workerId))
            case .gone(let pool, let workerId):
                answers[index] = .success(.gone(pool: pool, workerId: workerId))
            case .notFound:
                if let relay {
                    relayed.append(
                        (index, relay.completeElsewhere(item.id, with: item.outcome, retryable: item.retryable))
                    )
                } else {
                    answers[index] = .success(.notFound)
                }
            }
        }
        let waits = self.pools.durable(done.map { ($0.task, $0.key) })
        var distinct: [Future<Void>] = []
        var seen: Set<ObjectIdentifier> = []
        for wait in waits where seen.insert(ObjectIdentifier(wait)).inserted { distinct.append(wait) }
        for (_, future) in relayed { distinct.append(future.asVoid()) }
        let (known, doneHere, relayedHere) = (answers, done, relayed)
        let finished: @Sendable () -> [Outcome<LeaseCompletion>] = {
            var answers = known
            for (entry, wait) in zip(doneHere, waits) {
                answers[entry.index] = wait.outcome!.map {
                    .done(
                        node: nodes ? entry.task.node?.json ?? .null : .null,
                        pool: entry.pool,
                        workerId: entry.workerId
                    )
                }
            }
            for (index, future) in relayedHere { answers[index] = future.outcome! }
            return answers.map { $0! }
        }
        if distinct.allSatisfy(\.isCompleted) { return Future(value: finished()) }
        return Future.whenAllSettled(distinct).map { _ in finished() }
    }
}
