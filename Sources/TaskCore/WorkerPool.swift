import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A named pool of `size` slots: at most `size` pieces of work run at once, the rest wait by
/// priority (0…9, higher first), first in first out within a priority.
///
/// Work submitted with `execute(_:)` takes a slot and a thread (threads are started on demand, at
/// most `size`). Asynchronous work that waits on I/O takes a slot without a thread through
/// `acquireSlot(cancellationToken:)` and gives it back with `Slot.release()`. Both kinds share one
/// queue, so the pool bounds how much work is in progress, whatever its kind.
///
/// With a `RateLimit`, a waiter also needs a token to start (SPEC §8): work that waits for a token
/// holds no slot and no thread, and a timer wakes the queue when the next token accrues.
///
/// ```swift
/// let io = WorkerPool(name: "io", size: 64)
/// let page = previous.continueOnSuccessWith(on: io) { url in try fetch(url) }
/// ```
///
/// - Note: Call `shutdown()` when the pool is no longer needed; its threads keep it alive until then.
// @unchecked Sendable: every mutable field below `lock` is read and written only while `lock` is
// held; `name` and `size` are immutable.
public final class WorkerPool: Executor, @unchecked Sendable {
    /// A snapshot of a pool's counters.
    public struct Statistics: Sendable, Equatable {
        /// The number of slots.
        public var size: Int
        /// Work running on a thread plus slots held by asynchronous work.
        public var running: Int
        /// Work and slot requests waiting for a slot.
        public var queued: Int
        /// Work items finished and slots released since the pool started.
        public var completed: Int
        /// `queued` by priority, index 0…9.
        public var queuedByPriority: [Int]
        /// The pool's rate limit, if it has one.
        public var rate: RateLimit?
        /// Tokens in the rate limit's bucket now (fractional while one accrues).
        public var tokens: Double?
        /// The share of `rate` given out (`setRateShare`).
        public var rateShare: Double = 1

        public init(
            size: Int,
            running: Int,
            queued: Int,
            completed: Int,
            queuedByPriority: [Int] = Array(repeating: 0, count: 10),
            rate: RateLimit? = nil,
            tokens: Double? = nil,
            rateShare: Double = 1
        ) {
            self.size = size
            self.running = running
            self.queued = queued
            self.completed = completed
            self.queuedByPriority = queuedByPriority
            self.rate = rate
            self.tokens = tokens
            self.rateShare = rateShare
        }
    }

    /// One slot of a pool held by asynchronous work; `release()` gives it back (also done on deinit
    /// as a safety net, so a forgotten slot cannot shrink the pool forever).
    public final class Slot: Sendable {
        private let pool: WorkerPool
        private let isReleased = Atomic<Bool>(false)

        init(pool: WorkerPool) { self.pool = pool }

        /// Returns the slot to its pool; later calls do nothing.
        public func release() {
            if self.isReleased.exchange(true, ordering: .acquiringAndReleasing) == false {
                self.pool.releaseSlot()
            }
        }

        deinit { self.release() }
    }

    private enum Waiter {
        case work(@Sendable () -> Void)
        case slot(id: UInt64, Promise<Slot>)
    }

    /// The pool's name, as configured (`--executor io=64`).
    public let name: String
    /// The number of slots.
    public let size: Int
    /// How many may start per period, if limited.
    public let rate: RateLimit?

    private let lock = ConditionLock()
    private var freeSlots: Int
    private var waiting = PriorityFIFO<Waiter>()
    /// The rate limit's tokens (nil without one).
    private var bucket: TokenBucket?
    /// Whether a timer will grant waiters when the next token accrues.
    private var isRefillScheduled = false
    private var ready = RingBuffer<@Sendable () -> Void>()
    private var threads = 0
    private var idleThreads = 0
    private var runningWork = 0
    private var heldSlots = 0
    private var completed = 0
    private var nextSlotRequestID: UInt64 = 0
    private var isShutdown = false

    /// The priority of work that names none (`execute(_:)`, a job without `priority`).
    public static let defaultPriority = 5

    /// A pool named `name` with `size` slots (at least 1), starting at most `rate` per period.
    public init(name: String, size: Int, rate: RateLimit? = nil) {
        precondition(size >= 1, "WorkerPool \(name): size must be at least 1, got \(size)")
        self.name = name
        self.size = size
        self.rate = rate
        self.bucket = rate.map { TokenBucket($0) }
        self.freeSlots = size
    }

    /// Gives out `share` (0 < share ≤ 1) of `rate` from now on: a cluster's servers divide one
    /// rate among them (SPEC §9). Tokens held beyond the smaller burst are dropped. No rate: nothing.
    public func setRateShare(_ share: Double) {
        self.lock.withLock { self.bucket?.setShare(share) }
    }

    /// The share of `rate` given out (`setRateShare`; 1 without a rate).
    public var rateShare: Double { self.lock.withLock { self.bucket?.share ?? 1 } }

    /// The pool's counters now.
    public var statistics: Statistics {
        self.lock.withLock {
            Statistics(
                size: self.size,
                running: self.runningWork + self.heldSlots + self.ready.count,
                queued: self.waiting.count,
                completed: self.completed,
                queuedByPriority: self.waiting.countsByPriority,
                rate: self.rate,
                tokens: self.bucket?.available(),
                rateShare: self.bucket?.share ?? 1
            )
        }
    }

    // MARK: - Work on threads

    /// Runs `work` on one of the pool's threads once a slot is free (at the default priority).
    public func execute(_ work: @escaping @Sendable () -> Void) {
        self.lock.lock()
        if self.bucket != nil {
            self.waiting.append(.work(work), priority: Self.defaultPriority)
            let granted = self.grantLocked()
            self.lock.unlock()
            for promise in granted { promise.succeed(Slot(pool: self)) }
            return
        }
        if self.freeSlots > 0 {
            self.freeSlots -= 1
            self.makeReadyLocked(work)
        } else {
            self.waiting.append(.work(work), priority: Self.defaultPriority)
        }
        self.lock.unlock()
    }

    /// Runs `body` on the pool and returns a future of its result; a thrown `CancellationError`
    /// cancels the future.
    public func submit<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) -> Future<Value> {
        let promise = Promise<Value>()
        self.execute { promise.tryComplete(with: Outcome(catching: body)) }
        return promise.future
    }

    private func makeReadyLocked(_ work: @escaping @Sendable () -> Void) {
        self.ready.append(work)
        // Each ready item needs a thread of its own. A thread that was signalled but has not woken
        // yet still counts in `idleThreads`, so an idle thread only covers the item if idle threads
        // are at least as many as ready items; otherwise start a thread (while under `size`), or
        // two items submitted back to back to a warm pool would run one after the other on it.
        if self.idleThreads < self.ready.count, self.threads < self.size {
            self.threads += 1
            self.startThread()
        } else if self.idleThreads > 0 {
            self.lock.signal()
        }
    }

    private func startThread() {
        startDetachedThread("a thread of WorkerPool \(self.name)") { self.threadMain() }
    }

    private func threadMain() {
        #if os(Linux)
        // Named after the pool (Linux keeps 15 bytes), so `top -H`, perf and the benchmarks that
        // read /proc/PID/task/*/comm can tell the store's writer from an executor's threads.
        // (pthread_setname_np is not visible to Swift without _GNU_SOURCE; /proc/thread-self is.)
        let fd = open("/proc/thread-self/comm", O_WRONLY)
        if fd >= 0 {
            let name = Array(self.name.utf8.prefix(15))
            _ = name.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
        #endif
        self.lock.lock()
        while true {
            if let work = self.ready.popFirst() {
                self.runningWork += 1
                self.lock.unlock()
                work()
                self.lock.lock()
                self.runningWork -= 1
                self.completed += 1
                let (handOff, more) = self.passSlotLocked()
                if handOff != nil || !more.isEmpty {
                    self.lock.unlock()
                    handOff?.succeed(Slot(pool: self))
                    for promise in more { promise.succeed(Slot(pool: self)) }
                    self.lock.lock()
                }
                continue
            }
            if self.isShutdown { break }
            self.idleThreads += 1
            self.lock.wait()
            self.idleThreads -= 1
        }
        self.threads -= 1
        self.lock.unlock()
    }

    /// Gives a freed slot to the first waiter: queued work becomes ready; slot requests are
    /// returned so the caller completes their promises after unlocking. With no waiter (or, under a
    /// rate limit, no token) the slot becomes free.
    /// (Two results, so that the common case — no rate limit, one waiter — allocates no array.)
    private func passSlotLocked() -> (Promise<Slot>?, [Promise<Slot>]) {
        if self.bucket != nil {
            self.freeSlots += 1
            return (nil, self.grantLocked())
        }
        switch self.waiting.popFirst() {
        case .work(let work)?:
            self.makeReadyLocked(work)
            return (nil, [])
        case .slot(_, let promise)?:
            self.heldSlots += 1
            return (promise, [])
        case nil:
            self.freeSlots += 1
            return (nil, [])
        }
    }

    /// Under a rate limit: starts waiters in order while there are a free slot and a token; when
    /// waiters remain for want of a token, makes sure a timer comes back when the next accrues.
    /// Returns the slot requests granted, to complete after unlocking.
    private func grantLocked() -> [Promise<Slot>] {
        var granted: [Promise<Slot>] = []
        let now = monotonicNanoseconds()
        while self.freeSlots > 0, !self.waiting.isEmpty, self.bucket!.take(now: now) {
            self.freeSlots -= 1
            switch self.waiting.popFirst()! {
            case .work(let work): self.makeReadyLocked(work)
            case .slot(_, let promise):
                self.heldSlots += 1
                granted.append(promise)
            }
        }
        if self.freeSlots > 0, !self.waiting.isEmpty, !self.isRefillScheduled {
            self.isRefillScheduled = true
            let wait = self.bucket!.nanosecondsUntilToken(now: now)
            TimerQueue.shared.schedule(after: .nanoseconds(Int64(clamping: wait))) { [weak self] in
                self?.refill()
            }
        }
        return granted
    }

    /// The refill timer: grants what the new tokens allow.
    private func refill() {
        self.lock.lock()
        self.isRefillScheduled = false
        let granted = self.grantLocked()
        self.lock.unlock()
        for promise in granted { promise.succeed(Slot(pool: self)) }
    }

    /// Why a request that did not get a slot at once waits: `.rate` when slots are free but the
    /// rate limit has no token, `.slot` otherwise. (A hint for people: it may change at once.)
    public var waitReason: WaitReason {
        self.lock.withLock { self.freeSlots > 0 && self.bucket != nil ? .rate : .slot }
    }

    /// What a pool's waiter waits for.
    public enum WaitReason: String, Sendable {
        /// Every slot is taken.
        case slot
        /// A slot is free but the rate limit has no token.
        case rate
    }

    // MARK: - Slots for asynchronous work

    /// A future of a slot for asynchronous work, granted by `priority` (0…9, higher first), first
    /// in first out within a priority, with the pool's other work.
    ///
    /// If `token` is cancelled while the request waits, it leaves the queue and the future is
    /// cancelled. The holder must call `release()` when its work ends.
    public func acquireSlot(
        priority: Int = WorkerPool.defaultPriority,
        cancellationToken token: CancellationToken? = nil
    ) -> Future<Slot> {
        if token?.isCancellationRequested == true { return .cancelled() }
        self.lock.lock()
        if self.freeSlots > 0, self.bucket == nil {
            self.freeSlots -= 1
            self.heldSlots += 1
            self.lock.unlock()
            return Future(value: Slot(pool: self))
        }
        let promise = Promise<Slot>()
        self.nextSlotRequestID += 1
        let id = self.nextSlotRequestID
        self.waiting.append(.slot(id: id, promise), priority: priority)
        if self.bucket != nil {
            let granted = self.grantLocked()
            self.lock.unlock()
            for other in granted { other.succeed(Slot(pool: self)) }
            if promise.future.isCompleted { return promise.future }
        } else {
            self.lock.unlock()
        }
        if let token {
            let registration = token.register { [weak self] in
                guard let self else { return }
                let removed = self.lock.withLock {
                    self.waiting.removeFirst(priority: priority) { waiter in
                        if case .slot(let other, _) = waiter { return other == id }
                        return false
                    }
                }
                if removed { promise.tryCancel() }
            }
            promise.future.whenComplete { _ in registration.dispose() }
        }
        return promise.future
    }

    fileprivate func releaseSlot() {
        self.lock.lock()
        self.heldSlots -= 1
        self.completed += 1
        let (handOff, more) = self.passSlotLocked()
        self.lock.unlock()
        handOff?.succeed(Slot(pool: self))
        for promise in more { promise.succeed(Slot(pool: self)) }
    }

    // MARK: - Lifecycle

    /// Lets the threads exit once the work already queued has run. Work submitted afterwards still
    /// runs (a thread is started for it), so shutting down never strands a continuation.
    public func shutdown() {
        self.lock.withLock {
            self.isShutdown = true
            self.lock.broadcast()
        }
    }
}

extension WorkerPool: CustomStringConvertible {
    public var description: String {
        "WorkerPool(\(self.name), size: \(self.size)\(self.rate.map { ", rate: \($0)" } ?? ""))"
    }
}
