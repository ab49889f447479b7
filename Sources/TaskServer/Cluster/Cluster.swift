import TaskCore
import TaskGraph

/// The seam between the job service and servers sharing one store (SPEC §9): membership with a
/// lease, takeover of a dead server's jobs, commands for jobs another server runs, wake-ups.
///
/// A store shared by several servers provides one (`JobRepository.cluster`; PostgreSQL:
/// `PostgresCluster`); the service is its delegate. Memory and SQLite have none: one server owns
/// every job.
public protocol Cluster: AnyObject, Sendable {
    /// This server's name among the servers (`--node-name`).
    var nodeName: String { get }
    /// Starts taking part: heartbeats, takeovers and wake-ups go to `delegate` from now on.
    func start(_ delegate: any ClusterDelegate)
    /// Stops telling the delegate anything (shutdown); the store's `close` ends the membership.
    func stop()
    /// Commits `command` for a job another server runs and wakes that server; completes with its
    /// answer, or nil when no answer came in time (`ClusterTiming.relayTimeout`; a worker's call's
    /// `poolCommandTimeout`: the owner died and no server has taken the job over yet).
    func relay(_ command: ClusterCommand) -> Future<ClusterAnswer?>
    /// Records the answer to relayed command `id`, which wakes the server waiting for it.
    func answer(_ id: Int64, _ answer: ClusterAnswer)
    /// Tells `observer`, until `stop`, whether this server fires the schedules and which schedules
    /// changed.
    func observeSchedules(_ observer: any ClusterScheduleObserver)
    /// Publishes `observer`'s queued counts with every heartbeat, tells it the other servers', and
    /// hands it the pool commands relayed to this server, until `stop`.
    func observePools(_ observer: any ClusterPoolsObserver)
    /// Tells the other servers now that attempts of `pool` wait here with nobody here to claim
    /// them (`ClusterPoolsObserver.clusterQueuedHere`), asking `observer`'s count when it is sent:
    /// their waiting claims come at once instead of at their next heartbeat.
    func announceQueued(pool: String)
    /// Tells `body`, at once and at every heartbeat until `stop`, how many servers are live (this
    /// one included): each in-process pool's `rate=` is divided among them.
    func observeServerCount(_ body: @escaping @Sendable (Int) -> Void)
    /// Publishes what `body` makes (the server's `GET /v1/executors` items, as JSON) with every
    /// heartbeat.
    func publishExecutors(_ body: @escaping @Sendable () -> String?)
    /// The other live servers' executors, as of their last heartbeat, by server.
    func peerExecutors() -> [String: [JSONObject]]
}

/// What a cluster asks of, and tells, the external pools (`PoolRelay`). Called on the cluster's
/// own thread: return quickly.
public protocol ClusterPoolsObserver: AnyObject, Sendable {
    /// This server's queued attempts by pool (pools with none left out), published each heartbeat.
    func clusterQueuedCounts() -> [String: Int]
    /// The other live servers' queued attempts by pool and server, as of this heartbeat.
    func clusterPeersQueued(_ queued: [String: [String: Int]])
    /// Another server relayed a pool command (`claim`, or one for a lease of a job this server
    /// runs), numbered `id`: apply it, then `Cluster.answer` it.
    func clusterApplyPoolCommand(_ id: Int64, _ command: ClusterCommand)
    /// Another server announced `count` queued attempts of `pool` (`Cluster.announceQueued`).
    func clusterPeerQueued(server: String, pool: String, count: Int)
}

/// What a cluster tells the scheduler. Called on the cluster's own thread: return quickly.
public protocol ClusterScheduleObserver: AnyObject, Sendable {
    /// Whether this server holds the leader lease, so fires the schedules (every heartbeat: act on
    /// a change). One server at a time, but for a moment around a change two may: a fire's
    /// idempotency key makes a second start of one fire find the first job.
    func clusterLeadership(_ leading: Bool)
    /// Schedule `id` was created, changed, deleted or fired (by any server); nil: any may have
    /// (the cluster's connection was lost, and notifications with it). Read them again.
    func clusterSchedulesChanged(_ id: String?)
}

/// What a cluster tells the job service. Called on the cluster's own thread: return quickly.
public protocol ClusterDelegate: AnyObject, Sendable {
    /// This server lost its lease (another server took its jobs over, or it could not renew in
    /// time): it must stop acting on every job it runs, at once.
    func clusterLostJobs()
    /// Jobs may be waiting for an owner (a server died, or this one registered again): claim them.
    func clusterClaimJobs()
    /// Whether this server runs job `id`.
    func clusterRuns(_ id: String) -> Bool
    /// Another server recorded a cancellation of job `id`, which this server runs.
    func clusterCancel(_ id: String)
    /// Another server relayed `command` (numbered `id`) for a job this server runs: apply it,
    /// then `Cluster.answer` it.
    func clusterApply(_ id: Int64, _ command: ClusterCommand)
    /// Jobs that ended on another server: waits on their stored records read them again.
    func clusterJobsEnded(_ ids: [String])
}
