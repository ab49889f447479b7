import Dispatch
import Synchronization

/// Something that runs work: inline, on a thread pool, one at a time, …
///
/// Every continuation takes an executor that decides where its closure runs — Bolts' `BFExecutor`,
/// made an open protocol so that worker pools, serial queues and test executors can be added
/// without editing a closed enum.
public protocol Executor: Sendable {
    /// Runs `work`, now or later, on some thread. `work` must run exactly once.
    func execute(_ work: @escaping @Sendable () -> Void)

    /// `true` when `execute` always runs its work inline; lets continuations skip the closure that
    /// `execute` needs. Defaults to `false`.
    var isImmediate: Bool { get }
}

extension Executor {
    public var isImmediate: Bool { false }
}

// MARK: - Immediate

/// Runs work inline, on the calling thread (Bolts' `immediateExecutor`).
///
/// Use it for cheap continuations. Completions stay iterative (see `Future`), so long chains on the
/// immediate executor do not grow the stack.
public struct ImmediateExecutor: Executor {
    public init() {}
    @inline(__always) public func execute(_ work: @escaping @Sendable () -> Void) { work() }
    public var isImmediate: Bool { true }
}

extension Executor where Self == ImmediateExecutor {
    /// Runs work inline on the calling thread.
    public static var immediate: ImmediateExecutor { ImmediateExecutor() }
}

// MARK: - Default

/// Runs work inline while the thread's nesting of inline work is shallow, and hops to a background
/// queue beyond that (Bolts' `defaultExecutor`).
///
/// Running inline avoids a thread hop for the common short continuation; the depth limit bounds the
/// stack when continuations nest. The depth is a per-thread counter behind a pthread key.
public struct DefaultExecutor: Executor {
    /// How many inline runs may nest on one thread before work hops to the background queue.
    public static let maxInlineDepth = 16

    public init() {}

    public func execute(_ work: @escaping @Sendable () -> Void) {
        let context = ThreadContext.current
        if context.inlineDepth < Self.maxInlineDepth {
            context.inlineDepth += 1
            work()
            context.inlineDepth -= 1
        } else {
            DispatchQueue.global().async(execute: work)
        }
    }
}

extension Executor where Self == DefaultExecutor {
    /// Runs inline up to a small nesting depth, then on a background queue.
    public static var `default`: DefaultExecutor { DefaultExecutor() }
}

// MARK: - Dispatch

extension DispatchQueue: Executor {
    public func execute(_ work: @escaping @Sendable () -> Void) {
        self.async(execute: work)
    }
}

// MARK: - Serial

/// Runs work one item at a time, in submission order, on an underlying executor.
///
/// Useful to confine state to one logical thread without owning a thread: the queue occupies the
/// underlying executor only while it has work.
public final class SerialQueue: Executor {
    private struct State {
        var queue = RingBuffer<@Sendable () -> Void>()
        var isRunning = false
    }

    private let state = Mutex(State())
    private let target: any Executor

    /// A serial queue whose work runs on `target` (default: a background dispatch queue).
    public init(target: any Executor = DispatchQueue.global()) {
        self.target = target
    }

    public func execute(_ work: @escaping @Sendable () -> Void) {
        let shouldStart = self.state.withLock { state in
            state.queue.append(work)
            if state.isRunning { return false }
            state.isRunning = true
            return true
        }
        if shouldStart { self.target.execute { self.drain() } }
    }

    private func drain() {
        while true {
            let next: (@Sendable () -> Void)? = self.state.withLock { state in
                if let next = state.queue.popFirst() { return next }
                state.isRunning = false
                return nil
            }
            guard let next else { return }
            next()
        }
    }
}
