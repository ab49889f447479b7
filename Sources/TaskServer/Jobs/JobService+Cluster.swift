import Logging
import Synchronization
import TaskCore
import TaskGraph

/// The job service's part in a cluster (SPEC §9): giving its runs up when its lease is lost,
/// claiming the jobs no live server owns, applying the commands other servers relay for the jobs
/// it runs, and waking waits on records of jobs that ended elsewhere.
extension JobService {
    /// Claims the jobs without a live owner (a server died, or this one registered again), and
    /// tries again every second while the store cannot answer (the database is away).
    func claimOwnerless() {
        self.recover().whenComplete { [weak self] outcome in
            guard let self, outcome.value == nil, !self.stopped.load(ordering: .relaxed) else { return }
            guard !self.claimRetrying.exchange(true, ordering: .relaxed) else { return }
            self.logger.warning("cannot claim the jobs without an owner yet; trying again in a second")
            _ = self.clock.schedule(after: .seconds(1)) { [weak self] in
                self?.claimRetrying.store(false, ordering: .relaxed)
                self?.claimOwnerless()
            }
        }
    }

    /// Stops acting on every job this server runs: another server may run them from now on. Their
    /// runs are dropped (reads go to the database) and drain without running anything.
    func abandonAll() {
        let abandoned = self.live.removeAll()
        for run in abandoned { run.abandon() }
        if !abandoned.isEmpty {
            self.logger.warning("gave up the jobs of a lost lease", metadata: ["count": "\(abandoned.count)"])
        }
    }

    /// Applies `command` (numbered `id`), which another server relayed for a job this server runs,
    /// and records the answer.
    func applyRelayed(_ id: Int64, _ command: ClusterCommand) {
        guard let cluster = self.repository.cluster else { return }
        let apply: () -> Future<TaskCommandOutcome>
        switch command {
        case .cancelTask(let job, let task):
            apply = { self.cancelTask(job, task: task) }
        case .complete(let job, let task, let outcome):
            apply = { self.completeTask(job, task: task, with: outcome.outcome) }
        case .claim, .leaseHeartbeat, .leaseComplete, .leaseRelease:
            return  // The external pools' (`PoolRelay`): the cluster hands them there.
        }
        // A notification and a heartbeat's look for lost commands may both bring it.
        guard self.applying.withLock({ $0.insert(id).inserted }) else { return }
        apply().whenComplete { outcome in
            self.applying.withLock { _ = $0.remove(id) }
            // Not answered when it failed here (the job was lost meanwhile): the server that
            // takes the job over applies it.
            if case .success(let result) = outcome { cluster.answer(id, .task(result)) }
        }
    }

    /// Registers `promise` as a wait on the stored record of job `id`, which another server runs:
    /// its end there (`wakeRemoteWaits`) completes it at once.
    func waitRemotely(_ id: String, _ promise: Promise<Void>) {
        let number = self.remoteWaitNumbers.wrappingAdd(1, ordering: .relaxed).newValue
        self.remoteWaiters.withLock { $0[id, default: [:]][number] = promise }
        promise.future.whenComplete { _ in
            self.remoteWaiters.withLock { waiters in
                waiters[id]?[number] = nil
                if waiters[id]?.isEmpty == true { waiters[id] = nil }
            }
        }
    }

    /// Wakes the waits on the records of these jobs (they ended, or changed, on another server).
    func wakeRemoteWaits(_ ids: [String]) {
        let woken = self.remoteWaiters.withLock { waiters in
            ids.flatMap { waiters.removeValue(forKey: $0).map { Array($0.values) } ?? [] }
        }
        for promise in woken { promise.trySucceed(()) }
    }
}

/// The job service as its cluster's delegate, held weakly: the cluster lives in the repository,
/// which the service holds.
final class ClusterLink: ClusterDelegate {
    private weak let service: JobService?

    init(_ service: JobService) { self.service = service }

    func clusterLostJobs() { self.service?.abandonAll() }
    func clusterClaimJobs() { self.service?.claimOwnerless() }
    func clusterRuns(_ id: String) -> Bool { self.service?.liveRun(id) != nil }
    func clusterCancel(_ id: String) { _ = self.service?.liveRun(id)?.cancel() }
    func clusterApply(_ id: Int64, _ command: ClusterCommand) { self.service?.applyRelayed(id, command) }
    func clusterJobsEnded(_ ids: [String]) { self.service?.wakeRemoteWaits(ids) }
}
