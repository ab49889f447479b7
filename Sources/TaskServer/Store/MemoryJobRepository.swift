import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Keeps job records in memory (`--memory`): fast, and gone when the process stops.
///
/// Bounded: finished jobs are evicted oldest-finished first once there are more than
/// `maxFinishedJobs` of them, or once they finished longer than `retention` ago (checked as jobs
/// finish, so an idle server keeps its last jobs). Unfinished jobs are never evicted. A job's
/// record is what it was submitted with, its state as of its start and end, and at its end the
/// job as it ended (snapshot, node records, events) — values, which the service's run no longer
/// needs to outlive. Webhook deliveries are kept with their job and go with it.
public final class MemoryJobRepository: JobRepository {
    /// A job's place in the insertion order; `record` is nil once the job is deleted or evicted.
    /// A small class of its own, so that removing a job clears its place without a search, and
    /// compacting the order tests a pointer per entry in small, dense objects rather than hashing
    /// an id (that took ~20 ms under the lock at 200,000 entries, which showed as a p99 spike) or
    /// reading a flag from each large record (a cache miss each: the same spike). Read and written
    /// under the repository's lock only (the invariant behind `@unchecked Sendable`).
    private final class Slot: @unchecked Sendable {
        var position: UInt64 = 0
        var record: Record?
    }

    /// A job's record: a class, so that it changes in place. Its fields are only read and written
    /// under the repository's lock (the invariant behind `@unchecked Sendable`).
    private final class Record: @unchecked Sendable {
        var position: UInt64 = 0
        let id: String
        let name: String?
        let labels: [String: String]
        let createdAt: Timestamp
        let spec: JobSpec?
        let idempotencyKey: String?
        var state = JobState.pending
        var startedAt: Timestamp?
        var cancelRequested = false
        let runAt: Timestamp?
        /// Delayed, owned by no one (`NewJobRecord.sleeps`) until `claimSleeping` takes it or a
        /// cancellation wakes it: `claimUnfinished` skips it meanwhile.
        var sleeping: Bool
        var ended: EndedJob?
        var deliveries: [Delivery] = []

        init(_ job: NewJobRecord) {
            self.id = job.id
            self.name = job.name
            self.labels = job.labels
            self.createdAt = job.createdAt
            self.spec = job.spec
            self.idempotencyKey = job.idempotency?.key
            self.runAt = job.runAt
            self.sleeping = job.sleeps
        }

        var stored: StoredJob {
            StoredJob(
                id: self.id,
                key: JobKey(self.position),
                name: self.name,
                labels: self.labels,
                input: self.spec?.input ?? .null,
                document: nil,
                spec: self.spec,
                state: self.ended?.snapshot.state ?? self.state,
                result: self.ended?.snapshot.result,
                error: self.ended?.snapshot.error,
                createdAt: self.createdAt,
                startedAt: self.ended?.snapshot.startedAt ?? self.startedAt,
                finishedAt: self.ended?.snapshot.finishedAt,
                cancelRequested: self.cancelRequested,
                runAt: self.runAt,
                priority: self.spec?.priority ?? JobSpec.defaultPriority,
                definition: self.spec?.definition,
                nodes: self.ended?.nodes ?? [],
                events: self.ended?.events ?? []
            )
        }

        /// The list item: the job as it ended, or as it was submitted (the service shows a
        /// running job as it is now).
        var snapshot: JobSnapshot {
            if let ended = self.ended { return ended.snapshot }
            return JobSnapshot(
                id: self.id,
                name: self.name,
                state: self.state,
                input: self.spec?.input ?? .null,
                labels: self.labels,
                createdAt: self.createdAt,
                startedAt: self.startedAt,
                progress: JobProgress(),
                lastEventSeq: 0,
                runAt: self.runAt,
                priority: self.spec?.priority ?? JobSpec.defaultPriority,
                definition: self.spec?.definition
            )
        }
    }

    private struct State {
        var records: [JobIDKey: Slot] = [:]
        /// Insertion order; places of jobs deleted or evicted since are skipped when listing and
        /// dropped when they make up half of it.
        var order: [Slot] = []
        var removedSinceCompaction = 0
        var idempotency: [String: (bodyHash: UInt64, id: JobIDKey)] = [:]
        var nextPosition: UInt64 = 1
        /// Finished jobs in the order they finished, with when.
        var finished = CircularBuffer<(id: JobIDKey, at: Timestamp)>()
        /// The pending deliveries nobody has claimed, by id, with their jobs: what `claimDue`
        /// looks through.
        var unclaimed: [String: JobIDKey] = [:]
        /// Sleeping jobs in start order (`claimSleeping`); an entry whose job stopped sleeping
        /// stays until a claim comes across it.
        var sleeping: [(runAt: Timestamp, position: UInt64, id: JobIDKey)] = []
    }

    private let state = Mutex(State())
    private let schedules = Mutex<[String: StoredSchedule]>([:])
    private let definitions = Mutex(DefinitionTable())
    private let maxFinishedJobs: Int
    private let retention: Duration?

    /// - Parameters:
    ///   - maxFinishedJobs: finished jobs kept at most (default 100,000).
    ///   - retention: finished jobs older than this are evicted (`--retention`); nil keeps them.
    public init(maxFinishedJobs: Int = 100_000, retention: Duration? = nil) {
        self.maxFinishedJobs = max(1, maxFinishedJobs)
        self.retention = retention
    }

    public var isDurable: Bool { false }

    public func insert(_ job: NewJobRecord) -> Future<InsertOutcome> {
        let key = JobIDKey(job.id)
        // Made before the lock is taken; only the position is given under it.
        let record = Record(job)
        let slot = Slot()
        slot.record = record
        let outcome: InsertOutcome = self.state.withLock { state in
            if let idempotency = job.idempotency, let seen = state.idempotency[idempotency.key] {
                guard seen.bodyHash == idempotency.bodyHash else { return .mismatch }
                if let existing = state.records[seen.id]?.record { return .existing(id: existing.id) }
            }
            let position = state.nextPosition
            state.nextPosition += 1
            record.position = position
            slot.position = position
            state.records[key] = slot
            state.order.append(slot)
            if let idempotency = job.idempotency { state.idempotency[idempotency.key] = (idempotency.bodyHash, key) }
            if job.sleeps, let runAt = job.runAt {
                // Usually at the end (later jobs are due later); else after the last due earlier.
                var index = state.sleeping.count
                while index > 0, state.sleeping[index - 1].runAt > runAt { index -= 1 }
                state.sleeping.insert((runAt, position, key), at: index)
            }
            return .inserted(JobKey(position))
        }
        return Future(value: outcome)
    }

    public func append(_ batch: JournalBatch) {
        let key = JobIDKey(batch.id)
        // Usually nothing; freed after the lock is released, so the other event loop's inserts do
        // not wait while their memory (cold by now) is released.
        let evicted: [(EndedJob?, [Delivery])] = self.state.withLock { state in
            guard let record = state.records[key]?.record else { return [] }
            if !batch.deliveries.isEmpty {
                record.deliveries += batch.deliveries
                for delivery in batch.deliveries where delivery.state == .pending { state.unclaimed[delivery.id] = key }
            }
            if let startedAt = batch.startedAt, record.state == .pending {
                record.state = .running
                record.startedAt = startedAt
            }
            record.sleeping = false
            guard let ended = batch.ended else { return [] }
            record.state = ended.snapshot.state
            record.ended = ended
            let at = ended.snapshot.finishedAt ?? .now()
            state.finished.append((key, at))
            let expired = self.retention.map { Timestamp(milliseconds: at.milliseconds - $0.wholeMilliseconds) }
            var evicted: [(EndedJob?, [Delivery])] = []
            while let (id, at) = state.finished.first,
                state.finished.count > self.maxFinishedJobs || expired.map({ at < $0 }) == true
            {
                _ = state.finished.popFirst()
                // A redriven job left its earlier end behind: evicted only by its latest one.
                guard let held = state.records[id]?.record?.ended, held.snapshot.finishedAt ?? at == at else {
                    continue
                }
                if let held = Self.remove(id, from: &state) { evicted.append(held) }
            }
            return evicted
        }
        batch.committed?(true)
        withExtendedLifetime(evicted) {}
    }

    /// Forgets job `id` and returns what it held (freed by the caller once the lock is released);
    /// compacts the insertion order when half of it is stale.
    private static func remove(_ id: JobIDKey, from state: inout State) -> (EndedJob?, [Delivery])? {
        guard let slot = state.records.removeValue(forKey: id), let record = slot.record else { return nil }
        slot.record = nil
        if let key = record.idempotencyKey, state.idempotency[key]?.id == id { state.idempotency[key] = nil }
        for delivery in record.deliveries { state.unclaimed[delivery.id] = nil }
        state.removedSinceCompaction += 1
        if state.removedSinceCompaction * 2 > state.order.count {
            state.order.removeAll { $0.record == nil }
            state.removedSinceCompaction = 0
        }
        defer {
            record.ended = nil
            record.deliveries = []
        }
        return (record.ended, record.deliveries)
    }

    public func requestCancel(_ id: String) -> Future<Void> {
        let key = JobIDKey(id)
        self.state.withLock { state in
            guard let record = state.records[key]?.record else { return }
            record.cancelRequested = true
            record.sleeping = false
        }
        return Future(value: ())
    }

    public func claimSleeping(through: Timestamp, limit: Int) -> Future<[StoredJob]> {
        Future(
            value: self.state.withLock { state in
                var jobs: [StoredJob] = []
                var taken = 0
                for entry in state.sleeping {
                    guard jobs.count < limit, entry.runAt <= through else { break }
                    taken += 1
                    // An entry whose job stopped sleeping (a cancellation woke it) just goes.
                    guard let record = state.records[entry.id]?.record, record.sleeping else { continue }
                    record.sleeping = false
                    jobs.append(record.stored)
                }
                state.sleeping.removeFirst(taken)
                return jobs
            }
        )
    }

    public func job(_ id: String) -> Future<StoredJob?> {
        let key = JobIDKey(id)
        return Future(
            value: self.state.withLock { state in
                state.records[key]?.record?.stored
            }
        )
    }

    public func list(_ query: JobQuery) -> Future<JobPage> {
        let found: [(position: UInt64, snapshot: JobSnapshot)] = self.state.withLock { state in
            var found: [(position: UInt64, snapshot: JobSnapshot)] = []
            // Binary search for the first position at or after the cursor, then walk back.
            var end = state.order.count
            if let before = query.before {
                var low = 0
                var high = state.order.count
                while low < high {
                    let mid = (low + high) / 2
                    if state.order[mid].position < before { low = mid + 1 } else { high = mid }
                }
                end = low
            }
            var index = end - 1
            // One more match than the page holds: there is a next page, starting below the last item.
            while index >= 0, found.count <= query.limit {
                let slot = state.order[index]
                index -= 1
                guard let record = slot.record else { continue }
                // Unfinished jobs match both unfinished states: the service shows them as they are
                // now, and keeps those in the state asked for.
                if let wanted = query.state, record.state != wanted,
                    wanted.isTerminal || record.state.isTerminal
                {
                    continue
                }
                if query.labels.contains(where: { record.labels[$0.key] != $0.value }) { continue }
                if let definition = query.definition, record.spec?.definition?.name != definition { continue }
                if let after = query.createdAfter, record.createdAt < after { continue }
                if let before = query.createdBefore, record.createdAt >= before { continue }
                if query.finishedAfter != nil || query.finishedBefore != nil {
                    guard let finished = record.ended?.snapshot.finishedAt else { continue }
                    if let after = query.finishedAfter, finished < after { continue }
                    if let before = query.finishedBefore, finished >= before { continue }
                }
                found.append((record.position, record.snapshot))
            }
            return found
        }
        let more = found.count > query.limit
        let page = found.prefix(query.limit)
        return Future(value: JobPage(items: page.map(\.snapshot), next: more ? page.last?.position : nil))
    }

    public func delete(_ id: String) -> Future<DeleteResult> {
        let key = JobIDKey(id)
        // The record is freed after the lock is released (see `append`).
        let (result, removed) = self.state.withLock { state -> (DeleteResult, (EndedJob?, [Delivery])?) in
            guard let record = state.records[key]?.record else { return (.notFound, nil) }
            guard record.ended != nil else { return (.notTerminal, nil) }
            return (.deleted, Self.remove(key, from: &state))
        }
        withExtendedLifetime(removed) {}
        return Future(value: result)
    }

    public func reopen(_ id: String, startingAt now: Timestamp) -> Future<StoredJob?> {
        let key = JobIDKey(id)
        return Future(
            value: self.state.withLock { state -> StoredJob? in
                guard let record = state.records[key]?.record, let ended = record.ended,
                    ended.snapshot.state == .failed || ended.snapshot.state == .cancelled
                else { return nil }
                let stored = record.stored
                record.ended = nil
                record.state = .running
                record.startedAt = ended.snapshot.startedAt ?? now
                record.cancelRequested = false
                // Its place in `finished` is left behind; eviction skips a job that is running again.
                return stored
            }
        )
    }

    public func claimUnfinished(excluding live: Set<String>) -> Future<[StoredJob]> {
        Future(
            value: self.state.withLock { state in
                state.order.compactMap { slot in
                    guard let record = slot.record, record.ended == nil, !record.sleeping, !live.contains(record.id)
                    else {
                        return nil
                    }
                    return record.stored
                }
            }
        )
    }

    public func count() -> Future<Int> { Future(value: self.state.withLock { $0.records.count }) }

    @discardableResult
    public func close() -> Future<Void> { Future(value: ()) }

    // MARK: - LeaseJournal: leases live in the external pools' memory only, like everything else here.

    public func recordLeases(_ leases: [StoredLease]) -> Future<Void> { Future(value: ()) }
    public func removeLeases(_ hashes: [String]) {}
    public func storedLeases() -> Future<[StoredLease]> { Future(value: []) }

    // MARK: - DefinitionStore: in memory only, like everything else here.

    public func putDefinition(_ name: String, body: JSONValue, at: Timestamp) -> Future<DefinitionPut> {
        Future(value: self.definitions.withLock { $0.put(name, body: body, at: at) })
    }

    public func retireDefinition(_ name: String, at: Timestamp) -> Future<Bool> {
        Future(value: self.definitions.withLock { $0.retire(name, at: at) })
    }

    public func storedDefinition(_ name: String, version: Int?) -> Future<StoredDefinition?> {
        Future(value: self.definitions.withLock { $0.definition(name, version: version) })
    }

    public func storedDefinitions(limit: Int, after: String?) -> Future<[StoredDefinition]> {
        Future(value: self.definitions.withLock { $0.definitions(limit: limit, after: after) })
    }

    public func storedDefinitionVersions(_ name: String, limit: Int, before: Int?) -> Future<[StoredDefinition]> {
        Future(value: self.definitions.withLock { $0.versions(name, limit: limit, before: before) })
    }

    // MARK: - ScheduleStore: schedules live in memory only, like everything else here.

    public func putSchedule(_ schedule: StoredSchedule) -> Future<Void> {
        self.schedules.withLock { $0[schedule.id] = schedule }
        return Future(value: ())
    }

    public func deleteSchedule(_ id: String) -> Future<Bool> {
        Future(value: self.schedules.withLock { $0.removeValue(forKey: id) != nil })
    }

    public func storedSchedules() -> Future<[StoredSchedule]> {
        Future(value: self.schedules.withLock { $0.values.sorted { $0.id < $1.id } })
    }

    public func recordFire(_ id: String, at: Timestamp?, jobID: String?) -> Future<Void> {
        self.schedules.withLock { schedules in
            if let at { schedules[id]?.lastFireAt = at }
            if let jobID { schedules[id]?.lastJobID = jobID }
        }
        return Future(value: ())
    }

    // MARK: - DeliveryStore

    public func update(_ delivery: Delivery) -> Future<Void> {
        let key = JobIDKey(delivery.jobID)
        self.state.withLock { state in
            guard let record = state.records[key]?.record,
                let index = record.deliveries.firstIndex(where: { $0.id == delivery.id })
            else { return }
            record.deliveries[index] = delivery
            // The claim is released: a delivery still pending can be claimed again when due.
            state.unclaimed[delivery.id] = delivery.state == .pending ? key : nil
        }
        return Future(value: ())
    }

    public func claimDue(at now: Timestamp, limit: Int) -> Future<(deliveries: [Delivery], next: Timestamp?)> {
        let claimed: (deliveries: [Delivery], next: Timestamp?) = self.state.withLock { state in
            var due: [Delivery] = []
            var next: Timestamp?
            for (id, key) in state.unclaimed {
                guard let delivery = state.records[key]?.record?.deliveries.first(where: { $0.id == id }) else {
                    continue
                }
                if delivery.nextAttemptAt <= now {
                    due.append(delivery)
                } else if next.map({ delivery.nextAttemptAt < $0 }) ?? true {
                    next = delivery.nextAttemptAt
                }
            }
            due.sort { ($0.nextAttemptAt, $0.id) < ($1.nextAttemptAt, $1.id) }
            if due.count > limit { due.removeLast(due.count - limit) }
            for delivery in due { state.unclaimed[delivery.id] = nil }
            return (due, next)
        }
        return Future(value: claimed)
    }

    public func deliveries(jobID: String) -> Future<[Delivery]> {
        let key = JobIDKey(jobID)
        let list = self.state.withLock { $0.records[key]?.record?.deliveries ?? [] }
        return Future(value: list.sorted { ($0.seq, $0.id) < ($1.seq, $1.id) })
    }

    /// Entries of the insertion order, stale ones included (tests check it is compacted).
    var orderCount: Int { self.state.withLock { $0.order.count } }
}
