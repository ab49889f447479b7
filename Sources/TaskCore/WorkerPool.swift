import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A named pool of `size` slots: at most `size` pieces of work run at once, the rest wait in FIFO order.
///
/// Work submitted with `execute(_:)` takes a slot and a thread (threads are started on demand, at
/// most `size`). Asynchronous work that waits on I/O takes a slot without a thread through
/// `acquireSlot(cancellationToken:)` and gives it back with `Slot.release()`. Both kinds share one
/// FIFO queue, so the pool bounds how much work is in progress, whatever its kind.
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

        public init(size: Int, running: Int, queued: Int, completed: Int) {
            self.size = size
            self.running = running
            self.queued = queued
            self.completed = completed
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

    private let lock = ConditionLock()
    private var freeSlots: Int
    private var waiting = RingBuffer<Waiter>()
    private var ready = RingBuffer<@Sendable () -> Void>()
    private var threads = 0
    private var idleThreads = 0
    private var runningWork = 0
    private var heldSlots = 0
    private var completed = 0
    private var nextSlotRequestID: UInt64 = 0
    private var isShutdown = false

    /// A pool named `name` with `size` slots (at least 1).
    public init(name: String, size: Int) {
        precondition(size >= 1, "WorkerPool \(name): size must be at least 1, got \(size)")
        self.name = name
        self.size = size
        self.freeSlots = size
    }

    /// The pool's counters now.
    public var statistics: Statistics {
        self.lock.withLock {
            Statistics(
                size: self.size,
                running: self.runningWork + self.heldSlots + self.ready.count,
                queued: self.waiting.count,
                completed: self.completed
            )
        }
    }

    // MARK: - Work on threads

    /// Runs `work` on one of the pool's threads once a slot is free (FIFO).
    public func execute(_ work: @escaping @Sendable () -> Void) {
        self.lock.lock()
        if self.freeSlots > 0 {
            self.freeSlots -= 1
            self.makeReadyLocked(work)
        } else {
            self.waiting.append(.work(work))
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
                if let handOff = self.passSlotLocked() {
                    self.lock.unlock()
                    handOff.succeed(Slot(pool: self))
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

    /// Gives a freed slot to the first waiter: queued work becomes ready; a slot request is returned
    /// so the caller completes its promise after unlocking. With no waiter the slot becomes free.
    private func passSlotLocked() -> Promise<Slot>? {
        switch self.waiting.popFirst() {
        case .work(let work)?:
            self.makeReadyLocked(work)
            return nil
        case .slot(_, let promise)?:
            self.heldSlots += 1
            return promise
        case nil:
            self.freeSlots += 1
            return nil
        }
    }

    // MARK: - Slots for asynchronous work

    /// A future of a slot for asynchronous work, granted in FIFO order with the pool's other work.
    ///
    /// If `token` is cancelled while the request waits, it leaves the queue and the future is
    /// cancelled. The holder must call `release()` when its work ends.
    public func acquireSlot(cancellationToken token: CancellationToken? = nil) -> Future<Slot> {
        if token?.isCancellationRequested == true { return .cancelled() }
        self.lock.lock()
        if self.freeSlots > 0 {
            self.freeSlots -= 1
            self.heldSlots += 1
            self.lock.unlock()
            return Future(value: Slot(pool: self))
        }
        let promise = Promise<Slot>()
        self.nextSlotRequestID += 1
        let id = self.nextSlotRequestID
        self.waiting.append(.slot(id: id, promise))
        self.lock.unlock()
        if let token {
            let registration = token.register { [weak self] in
                guard let self else { return }
                var removed = false
                self.lock.withLock {
                    self.waiting.removeAll { waiter in
                        if case .slot(let other, _) = waiter, other == id {
                            removed = true
                            return true
                        }
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
        let handOff = self.passSlotLocked()
        self.lock.unlock()
        handOff?.succeed(Slot(pool: self))
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
    public var description: String { "WorkerPool(\(self.name), size: \(self.size))" }
}
