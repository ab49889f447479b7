import Logging
import Synchronization
import TaskCore
import TaskGraph

/// Redrive (SPEC §8) and recovery: a job's stored records become a live run again — a failed or
/// cancelled job run once more from where it stopped, an unfinished one resumed after a restart
/// or a takeover, a sleeping one started when its time comes.
extension JobService {
    // MARK: - Redrive

    public enum RedriveOutcome: Sendable {
        /// The job runs again (`202`); the job as it is now.
        case redriven(JobSnapshot)
        /// Not failed or cancelled (`409 job.notRedrivable`): its state.
        case notRedrivable(JobState)
        case notFound
    }

    /// Runs a failed or cancelled job again from where it stopped (SPEC §8): its succeeded nodes
    /// keep their outcomes; failed, cancelled and skipped ones run again, their attempts counting
    /// on. The same path as recovery — the repository hands over the job's records (`reopen`, as
    /// `claimUnfinished` does) and the run resumes from them — plus a `job.redriven` event.
    /// Completes once that event is durable.
    public func redrive(_ id: String) -> Future<RedriveOutcome> {
        switch self.live.place(id) {
        case .notLive: return self.redriveStored(id)
        case .running(let state): return Future(value: .notRedrivable(state))
        case .ending(let recorded): return recorded.flatMap { self.redriveStored(id) }
        }
    }

    func redriveStored(_ id: String) -> Future<RedriveOutcome> {
        // A job cancelled before it ever started starts now (stored so, for every reader).
        let now = self.clock.now()
        return self.repository.reopen(id, startingAt: now).flatMap { stored -> Future<RedriveOutcome> in
            guard let stored else {
                // Not there, or not failed or cancelled (any more): say which.
                return self.job(id).map { job in job.map { .notRedrivable($0.snapshot.state) } ?? .notFound }
            }
            let run: JobRun
            do {
                let spec = try Self.resumedSpec(stored, self.engine)
                run = self.engine.makeRun(
                    id: stored.id,
                    spec: spec,
                    createdAt: stored.createdAt,
                    restored: .redriving(nodes: stored.nodes, events: stored.events, startedAt: stored.startedAt ?? now)
                )
            } catch {
                // Its document was accepted once: this is a stored record gone bad. It stays
                // unfinished, for a recovery to report again.
                self.logger.error(
                    "cannot redrive a stored job",
                    metadata: ["job.id": "\(id)", "error": "\(error)"]
                )
                return Future(value: .notRedrivable(stored.state))
            }
            run.storeKey.store(stored.key, ordering: .relaxed)
            guard self.live.addIfAbsent(run) else { return Future(value: .notRedrivable(.running)) }
            run.startRedriven()
            // Answered once `job.redriven` (and whatever followed it so far) is committed.
            return DurableWait.bounded(run.waitForDurability(through: run.lastSeq), clock: self.clock).map {
                .redriven(run.snapshot)
            }
        }
    }

    // MARK: - Recovery

    /// Claims the unfinished jobs that no live owner holds and resumes them (nodes with a stored
    /// outcome keep it and do not run again); returns how many. Safe to call at any time.
    @discardableResult
    public func recover() -> Future<Int> {
        let live = self.live.beginRecovery()
        let hooks = self.resumeHooks.withLock { $0 }
        let claimed = self.repository.claimUnfinished(excluding: live).flatMap { stored -> Future<[StoredJob]> in
            guard let hooks, !stored.isEmpty else { return Future(value: stored) }
            // Without its leases (the database away a moment): its attempts are queued anew.
            return hooks.before(stored.map(\.id)).continueWith(on: .immediate) { _ in stored }
        }.map { stored in
            var resumed: [JobRun] = []
            for job in stored {
                do {
                    let spec = try Self.resumedSpec(job, self.engine)
                    let run = self.engine.makeRun(
                        id: job.id,
                        spec: spec,
                        createdAt: job.createdAt,
                        restored: RestoredJob(
                            nodes: Dictionary(job.nodes.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last }),
                            events: job.events,
                            startedAt: job.startedAt,
                            cancelRequested: job.cancelRequested
                        )
                    )
                    run.storeKey.store(job.key, ordering: .relaxed)
                    if self.live.addRecovered(run) { resumed.append(run) }
                } catch {
                    self.logger.error(
                        "cannot resume a stored job; it stays as it was",
                        metadata: ["job.id": "\(job.id)", "error": "\(error)"]
                    )
                }
            }
            for run in resumed {
                // A delayed job taken before the restart and not started yet waits for its time
                // (one with a cancellation to carry out ends now).
                if let runAt = run.spec.runAt(createdAt: run.createdAt), run.snapshot.startedAt == nil,
                    !run.isCancelRequested
                {
                    self.delayed.hold(run, at: runAt)
                } else {
                    run.start()
                }
            }
            if !stored.isEmpty { hooks?.after() }
            return resumed.count
        }
        claimed.whenComplete { _ in self.live.endRecovery() }
        return claimed
    }

    /// Makes a sleeping job the loader took live (nil when it is live already or cannot be
    /// built; the latter is logged and the job left as it is).
    func adopt(_ stored: StoredJob) -> JobRun? {
        do {
            let spec = try Self.resumedSpec(stored, self.engine)
            let run = self.engine.makeRun(
                id: stored.id,
                spec: spec,
                createdAt: stored.createdAt,
                restored: RestoredJob(nodes: [:], events: [], startedAt: nil, cancelRequested: stored.cancelRequested)
            )
            run.storeKey.store(stored.key, ordering: .relaxed)
            return self.live.addIfAbsent(run) ? run : nil
        } catch {
            self.logger.error(
                "cannot start a delayed job; it stays as it was",
                metadata: ["job.id": "\(stored.id)", "error": "\(error)"]
            )
            return nil
        }
    }

    /// The spec a stored job resumes with: kept, or decoded from its document again, with the
    /// labels only the server sets (a traced job's context, issue #46) taken from its row — the
    /// document is the client's, and has none of them.
    static func resumedSpec(_ stored: StoredJob, _ engine: Engine) throws -> JobSpec {
        if let spec = stored.spec { return spec }
        var spec = try engine.decoder.decodeJob(stored.document ?? .null)
        if let trace = stored.labels[JobSnapshot.traceLabel] { spec.labels[JobSnapshot.traceLabel] = trace }
        return spec
    }
}
