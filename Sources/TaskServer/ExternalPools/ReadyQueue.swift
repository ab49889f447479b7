import NIOCore
import TaskGraph

/// One attempt of a task on an external pool, handed to the external pools, with where it is now.
///
/// Its `place` is only read and written under `ExternalPools`'s lock (the invariant behind
/// `@unchecked Sendable`).
final class ReadyAttempt: @unchecked Sendable {
    enum Place {
        case queued
        /// Leased, under this key of the lease table.
        case leased(String)
        case ended
    }

    let task: WorkerTask
    /// The index of the pool in `ExternalPools`.
    let pool: Int
    var place = Place.queued
    /// The `scheduleTimeoutMs` timer, while queued.
    var scheduleTimer: ClockTimer?

    init(task: WorkerTask, pool: Int) {
        self.task = task
        self.pool = pool
    }

    var isQueued: Bool {
        if case .queued = self.place { return true }
        return false
    }
}

/// A pool's ready attempts waiting for a worker. The order in which claims take them is the
/// queue's discipline: first in, first out today (`FIFOReadyQueue`); priorities, concurrency keys
/// and rate limits are disciplines of this seam (a PostgreSQL store will express the same
/// discipline as the `ORDER BY … FOR UPDATE SKIP LOCKED` of its claim query).
///
/// A queue is a value owned by the external pools and used under its lock. An attempt that ends while
/// queued (cancelled, timed out) is marked `.ended` by its owner and `remove`d: the queue may drop
/// it lazily, but never hands it out.
protocol ReadyQueue: Sendable {
    /// Live attempts queued.
    var count: Int { get }
    /// Adds a ready attempt.
    mutating func push(_ attempt: ReadyAttempt)
    /// Takes up to `max` queued attempts that `accepting` accepts (all, when nil), in the
    /// discipline's order; the others keep their places.
    mutating func pop(max: Int, accepting: ((ReadyAttempt) -> Bool)?) -> [ReadyAttempt]
    /// Forgets `attempt`, which ended while queued.
    mutating func remove(_ attempt: ReadyAttempt)
}

/// First in, first out.
struct FIFOReadyQueue: ReadyQueue {
    private var buffer = CircularBuffer<ReadyAttempt>()
    private(set) var count = 0

    mutating func push(_ attempt: ReadyAttempt) {
        self.buffer.append(attempt)
        self.count += 1
    }

    mutating func pop(max: Int, accepting: ((ReadyAttempt) -> Bool)?) -> [ReadyAttempt] {
        var picked: [ReadyAttempt] = []
        if let accepting {
            // By offset: CircularBuffer's indices do not survive a removal.
            var offset = 0
            while picked.count < max, offset < self.buffer.count {
                let index = self.buffer.index(self.buffer.startIndex, offsetBy: offset)
                let attempt = self.buffer[index]
                if attempt.isQueued, !accepting(attempt) {
                    offset += 1
                    continue
                }
                self.buffer.remove(at: index)
                if attempt.isQueued { picked.append(attempt) }
            }
        } else {
            while picked.count < max, let attempt = self.buffer.popFirst() {
                if attempt.isQueued { picked.append(attempt) }
            }
        }
        self.count -= picked.count
        return picked
    }

    mutating func remove(_ attempt: ReadyAttempt) {
        self.count -= 1
        // Drops ended attempts once they outnumber the live ones.
        guard self.buffer.count > 1024, self.buffer.count > 2 * self.count else { return }
        self.buffer = CircularBuffer(self.buffer.filter(\.isQueued))
    }
}
