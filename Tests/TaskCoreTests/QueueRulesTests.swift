import Synchronization
import TestSupport
import Testing

@testable import TaskCore

/// The disciplines of SPEC §8 at the core: priorities in a pool's queue, a pool's rate limit, and
/// concurrency keys. Order and counts only; no assertion depends on how fast the machine is.
struct QueueRulesTests {
    // MARK: - PriorityFIFO

    @Test func priorityLanesGiveHighestFirstAndFIFOWithin() {
        var queue = PriorityFIFO<String>()
        for (item, priority) in [("a5", 5), ("b1", 1), ("c9", 9), ("d5", 5), ("e9", 9), ("f0", 0)] {
            queue.append(item, priority: priority)
        }
        #expect(queue.countsByPriority == [1, 1, 0, 0, 0, 2, 0, 0, 0, 2])
        #expect(queue.first == "c9")
        #expect(queue.removeFirst(priority: 5) { $0 == "d5" })
        #expect(!queue.removeFirst(priority: 5) { $0 == "d5" })
        var order: [String] = []
        while let item = queue.popFirst() { order.append(item) }
        #expect(order == ["c9", "e9", "a5", "b1", "f0"])
        #expect(queue.isEmpty && queue.first == nil)
    }

    // MARK: - Pool priorities

    /// A pool of one slot, held: requests queued at priorities 1, 9, 5, 9 get the slot 9, 9, 5, 1.
    @Test func aPoolGrantsWaitingSlotsByPriorityThenFIFO() async throws {
        let pool = WorkerPool(name: "p", size: 1)
        defer { pool.shutdown() }
        let held = try await pool.acquireSlot().value
        let order = Recorder<String>()
        var grants: [Future<Void>] = []
        for (name, priority) in [("low", 1), ("high-1", 9), ("mid", 5), ("high-2", 9)] {
            grants.append(
                pool.acquireSlot(priority: priority).map { slot in
                    order.append(name)
                    slot.release()
                }
            )
        }
        #expect(pool.statistics.queuedByPriority == [0, 1, 0, 0, 0, 1, 0, 0, 0, 2])
        held.release()
        _ = try await Future.whenAll(grants).value
        #expect(order.values == ["high-1", "high-2", "mid", "low"])
    }

    @Test func aCancelledWaiterLeavesItsLane() async throws {
        let pool = WorkerPool(name: "p", size: 1)
        defer { pool.shutdown() }
        let held = try await pool.acquireSlot().value
        let source = CancellationTokenSource()
        let waiting = pool.acquireSlot(priority: 8, cancellationToken: source.token)
        #expect(pool.statistics.queuedByPriority[8] == 1)
        source.cancel()
        #expect(waiting.isCancelled)
        #expect(pool.statistics.queued == 0)
        held.release()
        #expect(pool.statistics.running == 0)
    }

    // MARK: - Rate limits

    @Test func aRateLimitStartsTheBurstThenWaitsForTokensHoldingNoSlot() async throws {
        // 2 per minute, burst 2: two start at once, the third waits (a token every 30 s), with
        // slots free.
        let pool = WorkerPool(name: "r", size: 8, rate: RateLimit(count: 2, period: .seconds(60), burst: 2))
        defer { pool.shutdown() }
        let first = pool.acquireSlot()
        let second = pool.acquireSlot()
        let third = pool.acquireSlot(priority: 7)
        #expect(first.isCompleted && second.isCompleted)
        #expect(!third.isCompleted)
        #expect(pool.waitReason == .rate)
        let statistics = pool.statistics
        #expect(statistics.running == 2 && statistics.queued == 1 && statistics.queuedByPriority[7] == 1)
        #expect(statistics.rate == RateLimit(count: 2, period: .seconds(60), burst: 2))
        #expect((statistics.tokens ?? 9) < 1)
        // Releasing a slot gives no token: the waiter still waits.
        try await first.value.release()
        #expect(!third.isCompleted)
        #expect(pool.description == "WorkerPool(r, size: 8, rate: 2/m,burst=2)")
    }

    @Test func aRateLimitedPoolStartsAtItsRate() async throws {
        // 50/s with a burst of 1: 6 requests take at least 5 token intervals (100 ms) — a lower
        // bound only, which a slow machine cannot break.
        let pool = WorkerPool(name: "r", size: 8, rate: RateLimit(count: 50, period: .seconds(1), burst: 1))
        defer { pool.shutdown() }
        let start = ContinuousClock.now
        let slots = (0..<6).map { _ in pool.acquireSlot() }
        for slot in slots { try await slot.value.release() }
        #expect(ContinuousClock.now - start >= .milliseconds(95))
        #expect(pool.statistics.completed == 6)
    }

    /// A cluster's servers divide one rate (`setRateShare`): a half share accrues tokens half as
    /// fast and holds half the burst. Counted on a clock given by hand.
    @Test func aShareOfTheRateAccruesThatShareOfTheTokens() {
        var bucket = TokenBucket(RateLimit(count: 100, period: .seconds(1), burst: 10), now: 0)
        bucket.setShare(0.5, now: 0)
        #expect(bucket.available(now: 0) == 5, "the bucket holds half the burst")
        var taken = 0
        for _ in 0..<6 where bucket.take(now: 0) { taken += 1 }
        #expect(taken == 5)
        // 100/s at a half share: a token every 20 ms, not 10.
        let early = bucket.take(now: 19_000_000)
        #expect(!early)
        let due = bucket.take(now: 20_000_000)
        #expect(due)
        // One second: 50 tokens accrue, capped at the half burst.
        #expect(bucket.available(now: 1_020_000_000) == 5)
        // The whole rate again: the full burst refills.
        bucket.setShare(1, now: 1_020_000_000)
        #expect(bucket.available(now: 1_070_000_000) == 10)
    }

    @Test func theDefaultBurstIsATenthOfThePeriodsStarts() {
        #expect(RateLimit(count: 100, period: .seconds(1)).burst == 10)
        #expect(RateLimit(count: 5, period: .seconds(1)).burst == 1)
        #expect(RateLimit(count: 600, period: .seconds(60)).description == "600/m")
    }

    // MARK: - Concurrency keys

    @Test func aKeyAdmitsMaxHoldersAndTheRestWaitByPriority() async throws {
        let limiter = ConcurrencyLimiter()
        let a = try await limiter.acquire(key: "k", max: 2).value
        let b = try await limiter.acquire(key: "k", max: 2).value
        let order = Recorder<String>()
        let waiting = [("low", 2), ("high", 8), ("mid", 5)].map { name, priority in
            limiter.acquire(key: "k", max: 2, priority: priority).map { permit -> ConcurrencyLimiter.Permit in
                order.append(name)
                return permit
            }
        }
        // Another key is not held back.
        let other = limiter.acquire(key: "other", max: 1)
        #expect(other.isCompleted)
        #expect(limiter.statistics == .init(keys: 2, holders: 3, waiting: 3))
        a.release()
        b.release()
        #expect(order.values == ["high", "mid"])
        try await waiting[1].value.release()
        #expect(order.values == ["high", "mid", "low"])
        try await waiting[2].value.release()
        try await waiting[0].value.release()
        try await other.value.release()
        #expect(limiter.statistics == .init(keys: 0, holders: 0, waiting: 0))
    }

    @Test func aCancelledKeyWaiterLeavesAtOnce() async throws {
        let limiter = ConcurrencyLimiter()
        let held = try await limiter.acquire(key: "k", max: 1).value
        let source = CancellationTokenSource()
        let waiting = limiter.acquire(key: "k", max: 1, cancellationToken: source.token)
        let next = limiter.acquire(key: "k", max: 1)
        source.cancel()
        #expect(waiting.isCancelled)
        #expect(limiter.statistics.waiting == 1)
        held.release()
        #expect(next.isCompleted)
        try await next.value.release()
        #expect(limiter.statistics == .init(keys: 0, holders: 0, waiting: 0))
    }
}

/// Values appended from any thread, in order.
final class Recorder<Value: Sendable>: Sendable {
    private let storage = Mutex<[Value]>([])
    func append(_ value: Value) { self.storage.withLock { $0.append(value) } }
    var values: [Value] { self.storage.withLock { $0 } }
}
