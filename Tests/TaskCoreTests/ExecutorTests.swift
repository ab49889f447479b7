import Dispatch
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

/// `ImmediateExecutor`, `DefaultExecutor`, the `DispatchQueue` conformance and `SerialQueue`.
struct ExecutorTests {
    // MARK: - Immediate

    @Test func immediateRunsInlineBeforeReturning() {
        let thread = currentThread()
        let ranOn = Locked<pthread_t?>(nil)
        ImmediateExecutor().execute { ranOn.withLock { $0 = currentThread() } }
        #expect(ranOn.value.map { isSameThread($0, thread) } == true)
        #expect(ImmediateExecutor().isImmediate)
        #expect(!DefaultExecutor().isImmediate)
        #expect(!SerialQueue().isImmediate)
        #expect(!DispatchQueue.global().isImmediate)
    }

    // MARK: - Default

    @Test func defaultRunsInlineWhenShallow() {
        let thread = currentThread()
        let ranOn = Locked<pthread_t?>(nil)
        DefaultExecutor().execute { ranOn.withLock { $0 = currentThread() } }
        #expect(ranOn.value.map { isSameThread($0, thread) } == true)
    }

    /// Nested `execute` calls run inline up to `maxInlineDepth` levels; the next level hops to
    /// another thread (where nesting starts again from zero).
    @Test func defaultHopsToAnotherThreadBeyondMaxInlineDepth() throws {
        let levels = DefaultExecutor.maxInlineDepth * 3
        let threads = Locked<[pthread_t]>([])
        let depths = Locked<[Int]>([])
        let done = Promise<Void>()
        @Sendable func nest(_ level: Int) {
            threads.append(currentThread())
            depths.append(ThreadContext.current.inlineDepth)
            if level == levels {
                done.succeed(())
                return
            }
            DefaultExecutor().execute { nest(level + 1) }
        }
        let testThread = currentThread()
        DefaultExecutor().execute { nest(1) }
        #expect(blockingOutcome(of: done.future) != nil)

        let seen = threads.value
        try #require(seen.count == levels)
        let maxDepth = DefaultExecutor.maxInlineDepth
        // Levels 1...maxDepth ran inline on the test thread, each one level deeper.
        for level in 1...maxDepth {
            #expect(isSameThread(seen[level - 1], testThread), "level \(level)")
        }
        #expect(Array(depths.value[0..<maxDepth]) == Array(1...maxDepth))
        // The next level hopped: another thread, with no inline nesting of its own.
        #expect(!isSameThread(seen[maxDepth], testThread))
        #expect(depths.value[maxDepth] == 0)
        // …where nesting starts again, inline on that thread.
        #expect(isSameThread(seen[maxDepth + 1], seen[maxDepth]))
        #expect(depths.value[maxDepth + 1] == 1)
        // The test thread's depth counter is back to zero.
        #expect(ThreadContext.current.inlineDepth == 0)
    }

    /// Deep recursion through the default executor never overflows the stack: every
    /// `maxInlineDepth` levels it continues on a fresh stack.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func deepNestingThroughTheDefaultExecutorDoesNotOverflow() async throws {
        let levels = 20_000
        let done = Promise<Int>()
        @Sendable func nest(_ level: Int) {
            if level == levels {
                done.succeed(level)
                return
            }
            DefaultExecutor().execute { nest(level + 1) }
        }
        runOnThread(stackSize: 256 << 10) { nest(0) }
        #expect(try await done.future.value == levels)
    }

    @Test func defaultExecutorContinuationChainsStayInlineAndShallow() {
        // Completion propagation is iterative, so a chain on the default executor never nests
        // executor calls and never hops: the whole chain runs on the completing thread.
        let promise = Promise<Int>()
        let thread = currentThread()
        let offThread = Counter()
        var future = promise.future
        for _ in 0..<1_000 {
            future = future.continueOnSuccessWith(on: .default) { value in
                if !isSameThread(currentThread(), thread) { offThread.increment() }
                return value + 1
            }
        }
        promise.succeed(0)
        #expect(future.result == 1_000)
        #expect(offThread.value == 0)
    }

    // MARK: - DispatchQueue

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func dispatchQueueExecutesAsynchronouslyOnTheQueue() async throws {
        let queue = DispatchQueue(label: "tests.executor.dispatch")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 17)
        let ran = Promise<Int?>()
        let gate = Gate()
        queue.execute {
            gate.pass()
            ran.succeed(DispatchQueue.getSpecific(key: key))
        }
        // Not run inline: the work is still waiting on the gate when execute returns.
        #expect(!ran.future.isCompleted)
        gate.open()
        #expect(try await ran.future.value == 17)
    }

    // MARK: - SerialQueue

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ["global", "pool", "immediate"])
    func serialQueueRunsOneAtATimeInFIFOOrder(target: String) async throws {
        let pool = WorkerPool(name: "serial-target", size: 4)
        defer { pool.shutdown() }
        let queue: SerialQueue
        switch target {
        case "pool": queue = SerialQueue(target: pool)
        case "immediate": queue = SerialQueue(target: ImmediateExecutor())
        default: queue = SerialQueue()
        }
        let gauge = ConcurrencyGauge()
        let order = Locked<[Int]>([])
        let done = Promise<Void>()
        let count = 2_000
        // Submitted from several threads at once; each submitter's items must keep their order.
        let submitted = (0..<4).map { submitter in
            TestPools.shared.submit {
                for index in 0..<(count / 4) {
                    let item = submitter * 10_000 + index
                    queue.execute {
                        gauge.enter()
                        order.append(item)
                        gauge.leave()
                        if order.value.count == count { done.succeed(()) }
                    }
                }
            }
        }
        _ = try await Future.whenAll(submitted).value
        try await done.future.value
        #expect(gauge.maximum == 1)
        let all = order.value
        #expect(all.count == count)
        for submitter in 0..<4 {
            let mine = all.filter { $0 / 10_000 == submitter }
            #expect(mine == (0..<(count / 4)).map { submitter * 10_000 + $0 })
        }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func serialQueueKeepsExactSubmissionOrder() async throws {
        let queue = SerialQueue()
        let order = Locked<[Int]>([])
        let futures = (0..<1_000).map { index in
            Future(value: index).continueOnSuccessWith(on: queue) { value in order.append(value) }
        }
        _ = try await Future.whenAll(futures).value
        #expect(order.value == Array(0..<1_000))
    }

    @Test func serialQueueWorkSubmittedFromItsOwnWorkRunsAfterIt() {
        let queue = SerialQueue(target: ImmediateExecutor())
        let order = Locked<[String]>([])
        queue.execute {
            order.append("outer start")
            queue.execute { order.append("inner") }
            order.append("outer end")
        }
        #expect(order.value == ["outer start", "outer end", "inner"])
    }

    @Test func serialQueueOccupiesItsTargetOnlyWhileItHasWork() {
        let target = ManualExecutor()
        let queue = SerialQueue(target: target)
        let ran = Locked<[Int]>([])
        queue.execute { ran.append(1) }
        queue.execute { ran.append(2) }
        // One drain was scheduled on the target for both items.
        #expect(target.pendingCount == 1)
        #expect(target.runAll() == 1)
        #expect(ran.value == [1, 2])
        queue.execute { ran.append(3) }
        #expect(target.pendingCount == 1)
        target.runAll()
        #expect(ran.value == [1, 2, 3])
    }
}
