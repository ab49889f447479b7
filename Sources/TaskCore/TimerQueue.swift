#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One background thread that fires scheduled work at its deadline.
///
/// Every wait in TaskCore (`Future.delay`, timeouts, retry back-off, `cancel(after:)`) is an entry
/// here, not a sleeping thread: ten thousand pending delays cost ten thousand heap entries. Work
/// runs on the timer thread and must be short (completing a promise); longer work belongs on an
/// executor.
public final class TimerQueue: Sendable {
    /// The identity of a scheduled timer, for `cancel(_:)`.
    public struct ID: Hashable, Sendable {
        package let value: UInt64
        package init(value: UInt64) { self.value = value }
    }

    /// The process-wide timer queue.
    public static let shared = TimerQueue()

    private let lock = ConditionLock()
    // Guarded by `lock` (the type is Sendable through the lock; see `Storage`).
    private let storage = Storage()

    /// Mutable state, accessed only while `TimerQueue.lock` is held.
    // @unchecked Sendable: every access to the fields happens between lock() and unlock() of the
    // owning TimerQueue's `lock`.
    private final class Storage: @unchecked Sendable {
        var heap: [(deadline: UInt64, id: UInt64)] = []
        var work: [UInt64: @Sendable () -> Void] = [:]
        var nextID: UInt64 = 0
        var threadStarted = false
    }

    init() {}

    /// Runs `work` on the timer thread after `delay` (at once, on the timer thread, if it is not positive).
    @discardableResult
    public func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> ID {
        let deadline = monotonicNanoseconds() &+ delay.clampedNanoseconds
        return self.schedule(atNanoseconds: deadline, work)
    }

    func schedule(atNanoseconds deadline: UInt64, _ work: @escaping @Sendable () -> Void) -> ID {
        self.lock.lock()
        let storage = self.storage
        storage.nextID += 1
        let id = storage.nextID
        storage.work[id] = work
        Self.push(&storage.heap, (deadline, id))
        let startThread = !storage.threadStarted
        storage.threadStarted = true
        let isEarliest = storage.heap[0].id == id
        self.lock.unlock()
        if startThread { self.startThread() } else if isEarliest { self.lock.withLock { self.lock.signal() } }
        return ID(value: id)
    }

    /// Cancels a timer that has not fired; its work is released at once. Returns whether it was pending.
    @discardableResult
    public func cancel(_ id: ID) -> Bool {
        // The heap entry stays until its deadline (removing from the middle of a heap costs more than
        // skipping it); the closure and what it captures are released now.
        self.lock.withLock {
            let storage = self.storage
            let removed = storage.work.removeValue(forKey: id.value) != nil
            // Compact when cancelled entries dominate, so cancelled long delays do not pile up.
            if storage.heap.count > 1024, storage.heap.count > 4 * storage.work.count {
                let live = storage.heap.filter { storage.work[$0.id] != nil }
                storage.heap.removeAll(keepingCapacity: true)
                for entry in live { Self.push(&storage.heap, entry) }
            }
            return removed
        }
    }

    /// How many timers are pending.
    public var pendingCount: Int { self.lock.withLock { self.storage.work.count } }

    private func startThread() {
        startDetachedThread("the timer thread") { self.run() }
    }

    private func run() {
        var due: [@Sendable () -> Void] = []
        self.lock.lock()
        while true {
            let storage = self.storage
            let now = monotonicNanoseconds()
            while let top = storage.heap.first, top.deadline <= now {
                _ = Self.pop(&storage.heap)
                if let work = storage.work.removeValue(forKey: top.id) { due.append(work) }
            }
            if !due.isEmpty {
                self.lock.unlock()
                for work in due { work() }
                due.removeAll(keepingCapacity: true)
                self.lock.lock()
                continue
            }
            // Drop cancelled entries from the top so an idle queue sleeps until a live deadline.
            while let top = storage.heap.first, storage.work[top.id] == nil { _ = Self.pop(&storage.heap) }
            if let top = storage.heap.first {
                self.lock.wait(untilNanoseconds: top.deadline)
            } else {
                self.lock.wait()
            }
        }
    }

    // MARK: - Binary min-heap on (deadline, id)

    private static func less(_ a: (deadline: UInt64, id: UInt64), _ b: (deadline: UInt64, id: UInt64)) -> Bool {
        a.deadline != b.deadline ? a.deadline < b.deadline : a.id < b.id
    }

    private static func push(_ heap: inout [(deadline: UInt64, id: UInt64)], _ entry: (deadline: UInt64, id: UInt64)) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard less(heap[child], heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private static func pop(_ heap: inout [(deadline: UInt64, id: UInt64)]) -> (deadline: UInt64, id: UInt64)? {
        guard !heap.isEmpty else { return nil }
        heap.swapAt(0, heap.count - 1)
        let top = heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count, less(heap[left], heap[smallest]) { smallest = left }
            if right < heap.count, less(heap[right], heap[smallest]) { smallest = right }
            if smallest == parent { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
        return top
    }
}
