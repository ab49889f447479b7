import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Keeps jobs in memory (`--memory`): fast, and gone when the process stops.
///
/// Bounded: finished jobs are evicted oldest-finished first once there are more than
/// `maxFinishedJobs` of them, or once they finished longer than `retention` ago (checked as jobs
/// finish, so an idle server keeps its last jobs). Running jobs are never evicted. It learns of
/// finished jobs as a `JobObserver` of the engine, so eviction costs O(1) per job, with no scan.
public final class MemoryJobStore: JobStore, JobObserver {
    /// A job's place in the insertion order; `run` is nil once the job is deleted or evicted.
    /// A class, so that removing a job clears its place without a search and compacting the order
    /// tests a pointer per entry rather than hashing an id (that took ~20 ms under the lock at
    /// 200,000 entries, which showed as a p99 spike).
    private final class Slot {
        let position: UInt64
        var run: JobRun?

        init(position: UInt64, run: JobRun) {
            self.position = position
            self.run = run
        }
    }

    private struct Entry {
        var slot: Slot
        var idempotencyKey: String?
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
        var runs: [Key: Entry] = [:]
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

    public func insert(_ run: JobRun, document: ByteBuffer, idempotency: IdempotencyKey?) -> Future<InsertResult> {
        let key = Key(run.id)
        let result: InsertResult = self.state.withLock { state in
            if let idempotency, let seen = state.idempotency[idempotency.key] {
                guard seen.bodyHash == idempotency.bodyHash else { return .mismatch }
                if let existing = state.runs[seen.id]?.slot.run { return .existing(existing) }
            }
            let slot = Slot(position: state.nextPosition, run: run)
            state.nextPosition += 1
            state.runs[key] = Entry(slot: slot, idempotencyKey: idempotency?.key)
            state.order.append(slot)
            if let idempotency { state.idempotency[idempotency.key] = (idempotency.bodyHash, key) }
            return .inserted
        }
        return Future(value: result)
    }

    public func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        guard let last = events.last,
            last.type == .jobSucceeded || last.type == .jobFailed || last.type == .jobCancelled
        else { return }
        // Usually one job; freed after the lock is released, so the other event loop's inserts do
        // not wait while its memory (cold by now) is released.
        let key = Key(run.id)
        let evicted: (first: JobRun?, more: [JobRun]) = self.state.withLock { state in
            guard state.runs[key] != nil else { return (nil, []) }
            state.finished.append((key, last.time))
            let expired = self.retention.map { Timestamp(milliseconds: last.time.milliseconds - $0.wholeMilliseconds) }
            var evicted: (first: JobRun?, more: [JobRun]) = (nil, [])
            while let (id, at) = state.finished.first,
                state.finished.count > self.maxFinishedJobs || expired.map({ at < $0 }) == true
            {
                _ = state.finished.popFirst()
                guard let run = Self.remove(id, from: &state) else { continue }
                if evicted.first == nil { evicted.first = run } else { evicted.more.append(run) }
            }
            return evicted
        }
        withExtendedLifetime(evicted) {}
    }

    /// Forgets job `id` and returns it (nil when it is gone already); compacts the insertion order
    /// when half of it is stale.
    private static func remove(_ id: Key, from state: inout State) -> JobRun? {
        guard let entry = state.runs.removeValue(forKey: id) else { return nil }
        let run = entry.slot.run
        entry.slot.run = nil
        if let key = entry.idempotencyKey, state.idempotency[key]?.id == id { state.idempotency[key] = nil }
        state.removedSinceCompaction += 1
        if state.removedSinceCompaction * 2 > state.order.count {
            state.order.removeAll { $0.run == nil }
            state.removedSinceCompaction = 0
        }
        return run
    }

    public func run(_ id: String) -> Future<JobRun?> {
        let key = Key(id)
        return Future(value: self.state.withLock { $0.runs[key]?.slot.run })
    }

    public func list(_ query: JobQuery) -> Future<JobPage> {
        Future(value: self.page(query))
    }

    private func page(_ query: JobQuery) -> JobPage {
        let candidates: [(UInt64, JobRun)] = self.state.withLock { state in
            var found: [(UInt64, JobRun)] = []
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
            // Collect more than a page when filtering by state (snapshots are read outside the lock).
            let want = query.state == nil ? query.limit + 1 : Int.max
            while index >= 0, found.count < want {
                let slot = state.order[index]
                index -= 1
                guard let run = slot.run else { continue }
                if query.labels.contains(where: { run.spec.labels[$0.key] != $0.value }) { continue }
                found.append((slot.position, run))
            }
            return found
        }
        var items: [JobSnapshot] = []
        var lastPosition: UInt64 = 0
        for (position, run) in candidates {
            let snapshot = run.snapshot
            if let state = query.state, snapshot.state != state { continue }
            // One more match than the page holds: there is a next page, starting below the last item.
            if items.count == query.limit { return JobPage(items: items, next: lastPosition) }
            items.append(snapshot)
            lastPosition = position
        }
        return JobPage(items: items, next: nil)
    }

    public func delete(_ id: String) -> Future<DeleteResult> {
        let key = Key(id)
        // The job is freed after the lock is released (see `job(_:appended:)`).
        let (result, removed) = self.state.withLock { state -> (DeleteResult, JobRun?) in
            guard let run = state.runs[key]?.slot.run else { return (.notFound, nil) }
            guard run.snapshot.state.isTerminal else { return (.notTerminal, nil) }
            return (.deleted, Self.remove(key, from: &state))
        }
        withExtendedLifetime(removed) {}
        return Future(value: result)
    }

    public func flush() -> Future<Void> { Future(value: ()) }
    public func noteCancelRequested(_ run: JobRun) {}
    // Leases live in the worker hub's memory only, like everything else here.
    public func recordLeases(_ leases: [StoredLease]) -> Future<Void> { Future(value: ()) }
    public func removeLeases(_ hashes: [String]) {}
    public func storedLeases() throws -> [StoredLease] { [] }
    public func recoverUnfinished() -> [JobRun] { [] }
    @discardableResult
    public func close() -> Future<Void> { Future(value: ()) }

    public var count: Int { self.state.withLock { $0.runs.count } }

    /// Entries of the insertion order, stale ones included (tests check it is compacted).
    var orderCount: Int { self.state.withLock { $0.order.count } }
}
