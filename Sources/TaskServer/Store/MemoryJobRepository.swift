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
    /// A class, so that removing a job clears its place without a search and compacting the order
    /// tests a pointer per entry rather than hashing an id (that took ~20 ms under the lock at
    /// 200,000 entries, which showed as a p99 spike).
    private final class Slot {
        let position: UInt64
        var record: Record?

        init(position: UInt64, record: Record) {
            self.position = position
            self.record = record
        }
    }

    private struct Record {
        let id: String
        let name: String?
        let labels: [String: String]
        let createdAt: Timestamp
        let spec: JobSpec?
        var state = JobState.pending
        var startedAt: Timestamp?
        var cancelRequested = false
        var ended: EndedJob?
        var deliveries: [Delivery] = []
        let idempotencyKey: String?

        func stored(key: JobKey) -> StoredJob {
            StoredJob(
                id: self.id,
                key: key,
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
                lastEventSeq: 0
            )
        }
    }

    /// A job id as a dictionary key: up to 31 bytes (every id this server issues has 26) held
    /// inline with their count, so that hashing and comparing keys never reads a string's storage.
    /// With 100,000 jobs held that storage is cold: every insert and eviction paid cache misses for
    /// the keys it probed or moved. Longer ids stay strings.
    private enum Key: Hashable {
        case inline(UInt64, UInt64, UInt64, UInt64)
        case other(String)

        init(_ id: String) {
            var id = id
            let count = id.utf8.count
            guard count < 32 else {
                self = .other(id)
                return
            }
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &words) { raw in
                id.withUTF8 { bytes in raw.copyMemory(from: UnsafeRawBufferPointer(bytes)) }
                raw[31] = UInt8(count)
            }
            self = .inline(words.0, words.1, words.2, words.3)
        }
    }

    private struct State {
        var slots: [Key: Slot] = [:]
        /// Insertion order; places of jobs deleted or evicted since are skipped when listing and
        /// dropped when they make up half of it.
        var order: [Slot] = []
        var removedSinceCompaction = 0
        var idempotency: [String: (bodyHash: UInt64, id: Key)] = [:]
        var nextPosition: UInt64 = 1
        /// Finished jobs in the order they finished, with when.
        var finished = CircularBuffer<(id: Key, at: Timestamp)>()
    }

    private let state = Mutex(State())
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
        let key = Key(job.id)
        let outcome: InsertOutcome = self.state.withLock { state in
            if let idempotency = job.idempotency, let seen = state.idempotency[idempotency.key] {
                guard seen.bodyHash == idempotency.bodyHash else { return .mismatch }
                if let existing = state.slots[seen.id]?.record { return .existing(id: existing.id) }
            }
            let record = Record(
                id: job.id,
                name: job.name,
                labels: job.labels,
                createdAt: job.createdAt,
                spec: job.spec,
                idempotencyKey: job.idempotency?.key
            )
            let position = state.nextPosition
            let slot = Slot(position: position, record: record)
            state.nextPosition += 1
            state.slots[key] = slot
            state.order.append(slot)
            if let idempotency = job.idempotency { state.idempotency[idempotency.key] = (idempotency.bodyHash, key) }
            return .inserted(JobKey(position))
        }
        return Future(value: outcome)
    }

    public func append(_ batch: JournalBatch) {
        let key = Key(batch.id)
        // Usually nothing; freed after the lock is released, so the other event loop's inserts do
        // not wait while their memory (cold by now) is released.
        let evicted: [Record] = self.state.withLock { state in
            guard let slot = state.slots[key], slot.record != nil else { return [] }
            if !batch.deliveries.isEmpty { slot.record!.deliveries += batch.deliveries }
            if let startedAt = batch.startedAt, slot.record!.state == .pending {
                slot.record!.state = .running
                slot.record!.startedAt = startedAt
            }
            guard let ended = batch.ended else { return [] }
            slot.record!.state = ended.snapshot.state
            slot.record!.ended = ended
            let at = ended.snapshot.finishedAt ?? .now()
            state.finished.append((key, at))
            let expired = self.retention.map { Timestamp(milliseconds: at.milliseconds - $0.wholeMilliseconds) }
            var evicted: [Record] = []
            while let (id, at) = state.finished.first,
                state.finished.count > self.maxFinishedJobs || expired.map({ at < $0 }) == true
            {
                _ = state.finished.popFirst()
                if let record = Self.remove(id, from: &state) { evicted.append(record) }
            }
            return evicted
        }
        batch.committed?(true)
        withExtendedLifetime(evicted) {}
    }

    /// Forgets job `id` and returns its record (nil when it is gone already); compacts the
    /// insertion order when half of it is stale.
    private static func remove(_ id: Key, from state: inout State) -> Record? {
        guard let slot = state.slots.removeValue(forKey: id) else { return nil }
        let record = slot.record
        slot.record = nil
        if let key = record?.idempotencyKey, state.idempotency[key]?.id == id { state.idempotency[key] = nil }
        state.removedSinceCompaction += 1
        if state.removedSinceCompaction * 2 > state.order.count {
            state.order.removeAll { $0.record == nil }
            state.removedSinceCompaction = 0
        }
        return record
    }

    public func requestCancel(_ id: String) -> Future<Void> {
        let key = Key(id)
        self.state.withLock { state in state.slots[key]?.record?.cancelRequested = true }
        return Future(value: ())
    }

    public func job(_ id: String) -> Future<StoredJob?> {
        let key = Key(id)
        return Future(
            value: self.state.withLock { state in
                state.slots[key].flatMap { slot in slot.record?.stored(key: JobKey(slot.position)) }
            }
        )
    }

    public func list(_ query: JobQuery) -> Future<JobPage> {
        let found: [(UInt64, Record)] = self.state.withLock { state in
            var found: [(UInt64, Record)] = []
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
                if let wanted = query.state, record.state != wanted { continue }
                if query.labels.contains(where: { record.labels[$0.key] != $0.value }) { continue }
                found.append((slot.position, record))
            }
            return found
        }
        let more = found.count > query.limit
        let page = found.prefix(query.limit)
        return Future(value: JobPage(items: page.map(\.1.snapshot), next: more ? page.last?.0 : nil))
    }

    public func delete(_ id: String) -> Future<DeleteResult> {
        let key = Key(id)
        // The record is freed after the lock is released (see `append`).
        let (result, removed) = self.state.withLock { state -> (DeleteResult, Record?) in
            guard let record = state.slots[key]?.record else { return (.notFound, nil) }
            guard record.ended != nil else { return (.notTerminal, nil) }
            return (.deleted, Self.remove(key, from: &state))
        }
        withExtendedLifetime(removed) {}
        return Future(value: result)
    }

    public func claimUnfinished(excluding live: Set<String>) -> Future<[StoredJob]> {
        Future(
            value: self.state.withLock { state in
                state.order.compactMap { slot in
                    guard let record = slot.record, record.ended == nil, !live.contains(record.id) else { return nil }
                    return record.stored(key: JobKey(slot.position))
                }
            }
        )
    }

    public func count() -> Future<Int> { Future(value: self.state.withLock { $0.slots.count }) }

    @discardableResult
    public func close() -> Future<Void> { Future(value: ()) }

    // MARK: - LeaseJournal: leases live in the external pools' memory only, like everything else here.

    public func recordLeases(_ leases: [StoredLease]) -> Future<Void> { Future(value: ()) }
    public func removeLeases(_ hashes: [String]) {}
    public func storedLeases() -> Future<[StoredLease]> { Future(value: []) }

    // MARK: - DeliveryStore

    public func update(_ delivery: Delivery) {
        let key = Key(delivery.jobID)
        self.state.withLock { state in
            guard let slot = state.slots[key], slot.record != nil,
                let index = slot.record!.deliveries.firstIndex(where: { $0.id == delivery.id })
            else { return }
            slot.record!.deliveries[index] = delivery
        }
    }

    public func deliveries(jobID: String) -> Future<[Delivery]> {
        let key = Key(jobID)
        let list = self.state.withLock { $0.slots[key]?.record?.deliveries ?? [] }
        return Future(value: list.sorted { ($0.seq, $0.id) < ($1.seq, $1.id) })
    }

    public func pending() -> Future<[Delivery]> {
        Future(
            value: self.state.withLock { state in
                state.order.flatMap { $0.record?.deliveries.filter { $0.state == .pending } ?? [] }
            }
        )
    }

    /// Entries of the insertion order, stale ones included (tests check it is compacted).
    var orderCount: Int { self.state.withLock { $0.order.count } }
}
