import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Keeps every job in memory (`--memory`): fast, and gone when the process stops.
public final class MemoryJobStore: JobStore {
    private struct State {
        var runs: [String: (position: UInt64, run: JobRun)] = [:]
        /// Insertion order (position, id); deleted ids are skipped when listing.
        var order: [(position: UInt64, id: String)] = []
        var idempotency: [String: (bodyHash: UInt64, id: String)] = [:]
        var nextPosition: UInt64 = 1
    }

    private let state = Mutex(State())

    public init() {}

    public func insert(_ run: JobRun, document: ByteBuffer, idempotency: IdempotencyKey?) -> Future<InsertResult> {
        let result: InsertResult = self.state.withLock { state in
            if let idempotency, let seen = state.idempotency[idempotency.key] {
                guard seen.bodyHash == idempotency.bodyHash else { return .mismatch }
                if let existing = state.runs[seen.id] { return .existing(existing.run) }
            }
            let position = state.nextPosition
            state.nextPosition += 1
            state.runs[run.id] = (position, run)
            state.order.append((position, run.id))
            if let idempotency { state.idempotency[idempotency.key] = (idempotency.bodyHash, run.id) }
            return .inserted
        }
        return Future(value: result)
    }

    public func run(_ id: String) -> Future<JobRun?> {
        Future(value: self.state.withLock { $0.runs[id]?.run })
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
                let entry = state.order[index]
                index -= 1
                guard let run = state.runs[entry.id]?.run else { continue }
                if query.labels.contains(where: { run.spec.labels[$0.key] != $0.value }) { continue }
                found.append((entry.position, run))
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
        Future(value: self.state.withLock { state -> DeleteResult in
            guard let entry = state.runs[id] else { return .notFound }
            guard entry.run.snapshot.state.isTerminal else { return .notTerminal }
            state.runs[id] = nil
            return .deleted
        })
    }

    public func flush() -> Future<Void> { Future(value: ()) }
    public func noteCancelRequested(_ run: JobRun) {}
    public func recoverUnfinished() -> [JobRun] { [] }
    @discardableResult
    public func close() -> Future<Void> { Future(value: ()) }

    public var count: Int { self.state.withLock { $0.runs.count } }
}
