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
/// queue's discipline: by the job's priority, then first in first out (`PriorityReadyQueue`, SPEC
/// §8). Concurrency keys are held before an attempt is queued here (an attempt waiting for its key
/// is not ready), so the queue needs no key of its own. A PostgreSQL store will express the same
/// discipline as the `ORDER BY priority DESC, position … FOR UPDATE SKIP LOCKED` of its claim query.
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

/// Ten FIFO lanes, one per priority: claims take from the highest non-empty lane first.
struct PriorityReadyQueue: ReadyQueue {
    private var lanes = [FIFOReadyQueue](repeating: FIFOReadyQueue(), count: 10)
    /// Bit `p` is set while lane `p` may hold a live attempt.
    private var occupied: UInt16 = 0
    private(set) var count = 0

    private static func lane(_ attempt: ReadyAttempt) -> Int { min(max(attempt.task.priority, 0), 9) }

    mutating func push(_ attempt: ReadyAttempt) {
        let lane = Self.lane(attempt)
        self.lanes[lane].push(attempt)
        self.occupied |= 1 << UInt16(lane)
        self.count += 1
    }

    mutating func pop(max: Int, accepting: ((ReadyAttempt) -> Bool)?) -> [ReadyAttempt] {
        // One lane (every job at one priority, the usual case): its pick is the answer.
        if self.occupied.nonzeroBitCount == 1 {
            let lane = self.occupied.trailingZeroBitCount
            let picked = self.lanes[lane].pop(max: max, accepting: accepting)
            self.settle(lane, took: picked.count)
            return picked
        }
        var picked: [ReadyAttempt] = []
        var lanes = self.occupied
        while picked.count < max, lanes != 0 {
            let lane = 15 - lanes.leadingZeroBitCount
            lanes &= ~(1 << UInt16(lane))
            let taken = self.lanes[lane].pop(max: max - picked.count, accepting: accepting)
            self.settle(lane, took: taken.count)
            picked += taken
        }
        return picked
    }

    private mutating func settle(_ lane: Int, took: Int) {
        self.count -= took
        if self.lanes[lane].count == 0 { self.occupied &= ~(1 << UInt16(lane)) }
    }

    mutating func remove(_ attempt: ReadyAttempt) {
        let lane = Self.lane(attempt)
        self.lanes[lane].remove(attempt)
        self.settle(lane, took: 1)
    }

    /// Live attempts queued per priority, index 0…9.
    var countsByPriority: [Int] { self.lanes.map(\.count) }
}

/// First in, first out (a lane of `PriorityReadyQueue`).
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
