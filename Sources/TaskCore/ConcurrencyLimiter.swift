import Synchronization

/// At most `max` holders per key at once; the others wait by priority (0…9, higher first), then
/// in the order they asked, holding nothing meanwhile (SPEC §8 concurrency keys).
///
/// A key exists only while it has holders or waiters, so memory follows the keys in use, not the
/// keys ever seen. Each request names its own `max`: a waiter is let in when fewer than its `max`
/// hold the key (requests of one key normally agree; when they do not, each is judged by its own).
///
/// ```swift
/// let limiter = ConcurrencyLimiter()
/// limiter.acquire(key: "customer-42", max: 1).continueOnSuccessWithTask { permit in
///     importFor(customer: 42).continueWith { _ in permit.release() }
/// }
/// ```
public final class ConcurrencyLimiter: Sendable {
    /// A held place under a key; `release()` gives it back (also on deinit, as a safety net).
    public final class Permit: Sendable {
        private let limiter: ConcurrencyLimiter
        public let key: String
        private let isReleased = Atomic<Bool>(false)

        init(limiter: ConcurrencyLimiter, key: String) {
            self.limiter = limiter
            self.key = key
        }

        /// Returns the place; later calls do nothing.
        public func release() {
            if self.isReleased.exchange(true, ordering: .acquiringAndReleasing) == false {
                self.limiter.release(key: self.key)
            }
        }

        deinit { self.release() }
    }

    /// The limiter's counters.
    public struct Statistics: Sendable, Equatable {
        /// Keys with a holder or a waiter.
        public var keys: Int
        public var holders: Int
        public var waiting: Int

        public init(keys: Int, holders: Int, waiting: Int) {
            self.keys = keys
            self.holders = holders
            self.waiting = waiting
        }
    }

    private struct Waiter {
        var id: UInt64
        var max: Int
        var promise: Promise<Permit>
    }

    private struct Key {
        var holders = 0
        var waiters = PriorityFIFO<Waiter>()
    }

    private struct State {
        var keys: [String: Key] = [:]
        var holders = 0
        var waiting = 0
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    public var statistics: Statistics {
        self.state.withLock { Statistics(keys: $0.keys.count, holders: $0.holders, waiting: $0.waiting) }
    }

    /// A place under `key` now, if fewer than `max` hold it and nobody waits for it; nil
    /// otherwise (then `acquire` lines up). The fast path: no promise, no future.
    public func tryAcquire(key: String, max: Int) -> Permit? {
        let admitted = self.state.withLock { state in
            // One hash of the key, in place (an absent key is made with no holder, and admits).
            guard Self.tryAdmit(&state.keys[key, default: Key()], max: max) else { return false }
            state.holders += 1
            return true
        }
        return admitted ? Permit(limiter: self, key: key) : nil
    }

    /// A future of a place under `key`: at once when fewer than `max` hold it and nobody waits
    /// for it, otherwise once the waiters before it got theirs and a place frees up. If `token` is
    /// cancelled while the request waits, it leaves the queue at once and the future is cancelled.
    public func acquire(
        key: String,
        max: Int,
        priority: Int = WorkerPool.defaultPriority,
        cancellationToken token: CancellationToken? = nil
    ) -> Future<Permit> {
        if token?.isCancellationRequested == true { return .cancelled() }
        let waiting: (id: UInt64, promise: Promise<Permit>)? = self.state.withLock { state in
            state.nextID += 1
            let id = state.nextID
            // One hash of the key, in place: `admit` reads and changes the entry where it lies.
            let admitted = Self.admit(&state.keys[key, default: Key()], max: max, priority: priority) {
                Waiter(id: id, max: Swift.max(1, max), promise: Promise<Permit>())
            }
            switch admitted {
            case nil:
                state.holders += 1
                return nil
            case let waiter?:
                state.waiting += 1
                return (waiter.id, waiter.promise)
            }
        }
        guard let (id, promise) = waiting else { return Future(value: Permit(limiter: self, key: key)) }
        if let token {
            let registration = token.register { [weak self] in
                guard let self else { return }
                let (removed, granted) = self.state.withLock { state -> (Bool, [Promise<Permit>]) in
                    guard var entry = state.keys.removeValue(forKey: key) else { return (false, []) }
                    let removed = entry.waiters.removeFirst(priority: priority) { $0.id == id }
                    if removed { state.waiting -= 1 }
                    // The one that left may have been all that held back those behind it.
                    let granted = Self.grant(&entry, holders: &state.holders, waiting: &state.waiting)
                    if entry.holders > 0 || !entry.waiters.isEmpty { state.keys[key] = entry }
                    return (removed, granted)
                }
                if removed { promise.tryCancel() }
                for other in granted { other.succeed(Permit(limiter: self, key: key)) }
            }
            promise.future.whenComplete { _ in registration.dispose() }
        }
        return promise.future
    }

    /// Takes a place under the key if there is room and nobody waits before it.
    private static func tryAdmit(_ entry: inout Key, max: Int) -> Bool {
        guard entry.waiters.isEmpty, entry.holders < max else { return false }
        entry.holders += 1
        return true
    }

    /// Takes a place under the key, or lines up the waiter `makeWaiter` makes and returns it.
    private static func admit(
        _ entry: inout Key,
        max: Int,
        priority: Int,
        makeWaiter: () -> Waiter
    ) -> Waiter? {
        if Self.tryAdmit(&entry, max: max) { return nil }
        let waiter = makeWaiter()
        entry.waiters.append(waiter, priority: priority)
        return waiter
    }

    private func release(key: String) {
        let granted = self.state.withLock { state -> [Promise<Permit>] in
            guard let index = state.keys.index(forKey: key) else { return [] }
            state.holders -= 1
            state.keys.values[index].holders -= 1
            // The usual case, nobody waiting: the key is forgotten (the index found it: no second hash).
            if state.keys.values[index].waiters.isEmpty {
                if state.keys.values[index].holders == 0 { state.keys.remove(at: index) }
                return []
            }
            return Self.grant(&state.keys.values[index], holders: &state.holders, waiting: &state.waiting)
        }
        for promise in granted { promise.succeed(Permit(limiter: self, key: key)) }
    }

    /// Lets in the waiters at the head of `entry` while there is room for them.
    private static func grant(_ entry: inout Key, holders: inout Int, waiting: inout Int) -> [Promise<Permit>] {
        var granted: [Promise<Permit>] = []
        while let head = entry.waiters.first, entry.holders < head.max {
            _ = entry.waiters.popFirst()
            entry.holders += 1
            holders += 1
            waiting -= 1
            granted.append(head.promise)
        }
        return granted
    }
}
