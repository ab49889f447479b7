import Synchronization
import TaskCore
import TaskGraph

/// The engine's observer that turns each job's new events into a `JournalBatch` of values for the
/// repository — node records as the events say, the end with the whole record, the webhook
/// deliveries the planner makes — and, once the batch is committed, makes the events visible to
/// readers (`markDurable`), publishes the job's `job.*` events to server-wide readers, and hands
/// the deliveries to the dispatcher. A job's end leaves the live set (`LiveJobs.ended`) once it
/// is recorded.
///
/// One path for every store: a durable repository calls `committed` when the batch is stored; one
/// that keeps nothing across restarts is told only of the job's end and of the deliveries it
/// keeps, and the batch counts as committed when handed over.
final class JobJournal: JobObserver, Sendable {
    let repository: any JobRepository
    let planner: WebhookPlanner
    let dispatcher: WebhookDispatcher?
    /// Where committed `job.*` events go for server-wide readers.
    let eventFeed: (any EventFeed)?
    /// The server-wide feed is the repository's (`JobRepository.eventFeed`): its entries go with
    /// the commits (`JournalBatch.feedJob`), not through `EventFeed.publish`.
    let feedKeptByRepository: Bool
    /// Whether events are gated on commits (`repository.isDurable`).
    let durable: Bool
    let live: LiveJobs

    init(
        repository: any JobRepository,
        planner: WebhookPlanner,
        dispatcher: WebhookDispatcher?,
        eventFeed: (any EventFeed)?,
        live: LiveJobs
    ) {
        self.repository = repository
        self.planner = planner
        self.dispatcher = dispatcher
        self.eventFeed = eventFeed
        self.feedKeptByRepository = repository.eventFeed != nil
        self.durable = repository.isDurable
        self.live = live
    }

    func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        // Given up to another server: what it does from now on is not this server's to record.
        if run.isAbandoned { return }
        let deliveries = self.planner.plan(run, events: events)
        let ends = events.last?.type.isTerminal == true
        // Most batches hold task events only.
        let feed = events.contains(where: \.type.isJobEvent) ? self.eventFeed : nil
        // A repository that keeps nothing across restarts keeps a job's end and its deliveries.
        guard self.durable || ends || !deliveries.isEmpty else {
            feed?.publish(jobID: run.id, events: events, job: run.snapshot)
            return
        }
        var batch = self.batch(run, events)
        batch.deliveries = deliveries
        // A feed the repository keeps gets the job as these events leave it, in their commit;
        // one in process is told once they are committed.
        let keptByRepository = feed != nil && self.feedKeptByRepository
        if keptByRepository { batch.feedJob = batch.ended?.snapshot ?? run.snapshot }
        let committed = Committed(
            run: run,
            lastSeq: self.durable ? batch.lastSeq : nil,
            feed: keptByRepository ? nil : feed,
            events: keptByRepository || feed == nil ? [] : (self.durable ? batch.events[...] : events),
            endedSnapshot: batch.ended?.snapshot,
            dispatcher: deliveries.isEmpty ? nil : self.dispatcher,
            ends: ends,
            live: self.live
        )
        if self.durable {
            batch.committed = committed.call
            self.repository.append(batch)
        } else {
            self.repository.append(batch)
            committed.call(true)
        }
    }

    /// What follows a batch's commit (`committed`: stored; false: refused or lost).
    private struct Committed: Sendable {
        let run: JobRun
        /// The batch's last seq, when the run's events wait for commits.
        let lastSeq: Int?
        let feed: (any EventFeed)?
        let events: ArraySlice<JobEvent>
        let endedSnapshot: JobSnapshot?
        let dispatcher: WebhookDispatcher?
        let ends: Bool
        let live: LiveJobs

        func call(_ committed: Bool) {
            if committed {
                if let lastSeq { self.run.markDurable(through: lastSeq) }
                // Server-wide readers, and deliveries, get only what is stored.
                self.feed?.publish(
                    jobID: self.run.id,
                    events: self.events,
                    job: self.endedSnapshot ?? self.run.snapshot
                )
                self.dispatcher?.wake()
            }
            if self.ends { self.live.ended(self.run) }
        }
    }

    /// The journal batch of `events`: the job's start, its end with its whole record, or — for a
    /// durable repository — the node rows the events change.
    private func batch(_ run: JobRun, _ events: ArraySlice<JobEvent>) -> JournalBatch {
        // A repository that keeps nothing across restarts keeps a job's events with its end.
        var batch = JournalBatch(
            id: run.id,
            key: run.storeKey.load(ordering: .relaxed),
            events: self.durable ? Array(events) : []
        )
        for event in events where event.type == .jobStarted { batch.startedAt = event.time }
        if events.last?.type.isTerminal == true {
            let record = run.record
            batch.ended = EndedJob(snapshot: record.snapshot, nodes: record.nodes, events: record.events)
        } else if self.durable {
            batch.nodes = Self.changedNodes(run, events)
        }
        return batch
    }

    /// The node rows `events` change: one per node, in the order of their first event, each saying
    /// what its last event says — even when the node has moved on since (its outcome is written with
    /// the event that announces it, in a later batch).
    static func changedNodes(_ run: JobRun, _ events: ArraySlice<JobEvent>) -> [(ordinal: Int, record: NodeRecord)] {
        var order: [String] = []
        var last: [String: JobEventType] = [:]
        for event in events {
            switch event.type {
            case .taskStarted, .taskRetrying, .taskSucceeded, .taskFailed, .taskCancelled, .taskSkipped:
                guard let taskId = event.taskId else { continue }
                if last.updateValue(event.type, forKey: taskId) == nil { order.append(taskId) }
            default:
                break
            }
        }
        var rows: [(ordinal: Int, record: NodeRecord)] = []
        rows.reserveCapacity(order.count)
        for taskId in order {
            guard let type = last[taskId], let (ordinal, record) = run.indexedNode(taskId) else { continue }
            var row = record
            if type == .taskStarted || type == .taskRetrying {
                row.state = .running
                row.result = nil
                row.error = nil
                row.finishedAt = nil
            } else if !record.state.isTerminal {
                continue
            }
            rows.append((ordinal, row))
        }
        return rows
    }
}
