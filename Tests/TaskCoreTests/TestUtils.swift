import Dispatch
import Synchronization
import TestSupport
import Testing

@testable import TaskCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Errors and values

/// The error the tests fail futures with; equatable so assertions can name the exact error.
enum TestError: Error, Equatable, Sendable {
    case boom
    case code(Int)
}

/// An object whose lifetime the memory tests observe through weak references.
final class Canary: Sendable {
    let name: String
    init(_ name: String = "canary") { self.name = name }
}

extension Outcome where Value: Equatable {
    /// Whether two outcomes are the same: equal values, `TestError`s that compare equal, or both cancelled.
    func isSame(as other: Outcome<Value>) -> Bool {
        switch (self, other) {
        case (.success(let a), .success(let b)): return a == b
        case (.failure(let a), .failure(let b)):
            guard let a = a as? TestError, let b = b as? TestError else { return false }
            return a == b
        case (.cancelled, .cancelled): return true
        default: return false
        }
    }
}

extension Future {
    /// The error as a `TestError`, for exact assertions.
    var testError: TestError? { self.error as? TestError }

    /// The outcome once the future completes, awaited (never throws). If the awaiting task is
    /// cancelled first (a test's time limit), the result is a failure with `CancellationError`,
    /// which no assertion expects.
    func settled() async -> Outcome<Value> {
        do { return .success(try await self.value) } catch is CancellationError {
            return self.isCancelled ? .cancelled : .failure(CancellationError())
        } catch { return .failure(error) }
    }
}

// MARK: - Shared state for @Sendable closures

/// A value behind a lock, shared between threads (a `Mutex`: the TSan-visible one in the TSan run).
final class Locked<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ value: Value) { self.storage = Mutex(value) }

    var value: Value { self.storage.withLock { $0 } }

    @discardableResult
    func withLock<R: Sendable>(_ body: (inout Value) -> R) -> R {
        self.storage.withLock { body(&$0) }
    }
}

extension Locked where Value: RangeReplaceableCollection, Value.Element: Sendable {
    func append(_ element: Value.Element) {
        self.withLock { $0.append(element) }
    }
}

/// An atomic counter.
final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)
    init() {}

    @discardableResult
    func increment() -> Int { self.atomic.add(1, ordering: .sequentiallyConsistent).newValue }

    @discardableResult
    func decrement() -> Int { self.atomic.subtract(1, ordering: .sequentiallyConsistent).newValue }

    var value: Int { self.atomic.load(ordering: .sequentiallyConsistent) }
}

/// Counts how many things are in progress at once and remembers the highest count seen.
final class ConcurrencyGauge: Sendable {
    private let current = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)
    init() {}

    func enter() {
        let now = self.current.add(1, ordering: .sequentiallyConsistent).newValue
        var seen = self.highest.load(ordering: .sequentiallyConsistent)
        while now > seen {
            let (exchanged, original) = self.highest.compareExchange(
                expected: seen,
                desired: now,
                ordering: .sequentiallyConsistent
            )
            if exchanged { break }
            seen = original
        }
    }

    func leave() { self.current.subtract(1, ordering: .sequentiallyConsistent) }

    var inProgress: Int { self.current.load(ordering: .sequentiallyConsistent) }
    var maximum: Int { self.highest.load(ordering: .sequentiallyConsistent) }
}

/// A one-shot gate that blocking work waits on (only in pool threads, never in async code).
final class Gate: Sendable {
    private let promise = Promise<Void>()
    init() {}

    func open() { self.promise.trySucceed(()) }

    /// Blocks until the gate opens or `timeout` passes; returns whether it opened. The timeout is
    /// only a backstop against a hung test: a gate that must hold under TSan on a loaded 2-core
    /// machine must not give way early, so it is longer than any test's time limit.
    @discardableResult
    func pass(timeout: Duration = .seconds(120)) -> Bool {
        blockingOutcome(of: self.promise.future, timeout: timeout) != nil
    }
}

// MARK: - Threads

/// The calling thread's identity.
func currentThread() -> pthread_t { pthread_self() }

func isSameThread(_ a: pthread_t, _ b: pthread_t) -> Bool { pthread_equal(a, b) != 0 }

/// Runs `body` on a new, detached thread with a stack of `stackSize` bytes (default 8 MiB, the
/// main thread's default on Linux), so stack-depth tests do not depend on the test runner's threads.
func runOnThread(stackSize: Int = 8 << 20, _ body: @escaping @Sendable () -> Void) {
    final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    // Allocated rather than `pthread_attr_t()`: with MemberImportVisibility the zero initializer is
    // attributed to CDispatch, which tests cannot import.
    let attributes = UnsafeMutablePointer<pthread_attr_t>.allocate(capacity: 1)
    defer { attributes.deallocate() }
    pthread_attr_init(attributes)
    pthread_attr_setstacksize(attributes, stackSize)
    var thread: pthread_t = 0
    let box = Unmanaged.passRetained(Box(body))
    let status = pthread_create(
        &thread,
        attributes,
        { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            box.body()
            return nil
        },
        box.toOpaque()
    )
    pthread_attr_destroy(attributes)
    precondition(status == 0, "cannot start a test thread (\(status))")
    pthread_detach(thread)
}

// MARK: - Waiting without sleeping for results

/// Blocks until `future` completes or `timeout` passes; `nil` on timeout. For non-async tests and
/// for work running on pool threads; unlike `wait()` it cannot hang a test forever.
func blockingOutcome<Value>(of future: Future<Value>, timeout: Duration = .seconds(20)) -> Outcome<Value>? {
    let lock = ConditionLock()
    let box = Locked<Outcome<Value>?>(nil)
    future.whenComplete { outcome in
        lock.withLock {
            box.withLock { $0 = outcome }
            lock.broadcast()
        }
    }
    let deadline = monotonicNanoseconds() + timeout.clampedNanoseconds
    lock.lock()
    defer { lock.unlock() }
    while box.value == nil {
        if monotonicNanoseconds() >= deadline { return nil }
        lock.wait(untilNanoseconds: deadline)
    }
    return box.value
}

/// Polls `condition` until it holds or `timeout` passes, for state that has no completion event
/// of its own (pool counters, the timer queue's size, weak references cleared on another thread).
/// Returns whether the condition held.
@discardableResult
func eventually(timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        usleep(200)
    }
    return true
}

/// The async form of `eventually`.
@discardableResult
func eventuallyAsync(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: .microseconds(200))
    }
    return true
}

/// Whether the tests run under ThreadSanitizer (its runtime is linked into the test binary). TSan
/// makes every memory access an order of magnitude slower, so the long-chain and stress tests use
/// smaller counts there (`scaledForSanitizer`); the plain run keeps the full counts, and with them
/// the stack-depth guarantees.
let isRunningUnderThreadSanitizer: Bool = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil

/// `count`, or `count / divisor` under ThreadSanitizer.
func scaledForSanitizer(_ count: Int, divisor: Int = 10) -> Int {
    isRunningUnderThreadSanitizer ? Swift.max(1, count / divisor) : count
}

/// The upper bound for "promptly" in timing assertions: far below the hour-long delays that the
/// tests cancel, far above any scheduling delay, even on a loaded two-core CI machine under TSan.
let promptly: Duration = .seconds(30)

/// How long `body` takes.
func elapsed(_ body: () throws -> Void) rethrows -> Duration {
    let start = ContinuousClock.now
    try body()
    return ContinuousClock.now - start
}

// MARK: - Executors

/// A shared pool for tests that need a real multi-threaded executor (never shut down).
enum TestPools {
    static let shared = WorkerPool(name: "tests", size: 4)
}

/// The executors continuations are tested on.
enum ExecutorKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case immediate
    case `default`
    case dispatchQueue
    case serialQueue
    case workerPool

    var testDescription: String { self.rawValue }

    func make() -> any Executor {
        switch self {
        case .immediate: return ImmediateExecutor()
        case .default: return DefaultExecutor()
        case .dispatchQueue: return DispatchQueue(label: "tests.executor")
        case .serialQueue: return SerialQueue()
        case .workerPool: return TestPools.shared
        }
    }
}

/// An executor that names itself in a task-local while its work runs and counts what it ran, so a
/// test can tell that a continuation ran on it.
final class MarkingExecutor: Executor {
    @TaskLocal static var current: String?

    let name: String
    private let target: any Executor
    private let counter = Counter()

    init(name: String, target: any Executor = DispatchQueue.global()) {
        self.name = name
        self.target = target
    }

    var executed: Int { self.counter.value }

    func execute(_ work: @escaping @Sendable () -> Void) {
        self.counter.increment()
        let name = self.name
        self.target.execute {
            MarkingExecutor.$current.withValue(name) { work() }
        }
    }
}

/// An executor that holds work until the test runs it, for deterministic ordering tests.
final class ManualExecutor: Executor {
    private let queue = Locked<[@Sendable () -> Void]>([])
    init() {}

    func execute(_ work: @escaping @Sendable () -> Void) { self.queue.append(work) }

    var pendingCount: Int { self.queue.value.count }

    /// Runs the work queued so far (and work queued while running); returns how many ran.
    @discardableResult
    func runAll() -> Int {
        var ran = 0
        while true {
            let batch = self.queue.withLock { queue -> [@Sendable () -> Void] in
                defer { queue.removeAll() }
                return queue
            }
            if batch.isEmpty { return ran }
            for work in batch { work() }
            ran += batch.count
        }
    }
}
