import Dispatch
import TestSupport
import Testing

@testable import TaskCore

/// Races between threads, and chains far longer than any stack could recurse through.
struct StressTests {
    // MARK: - Races on one promise

    /// Many threads race to complete one promise: exactly one `trySucceed` wins, and every
    /// continuation sees the winner's value.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func manyThreadsCompletingOnePromiseHaveExactlyOneWinner() async throws {
        for round in 0..<scaledForSanitizer(200, divisor: 4) {
            let promise = Promise<Int>()
            let seen = Locked<[Int]>([])
            for _ in 0..<4 {
                promise.future.whenComplete { seen.append($0.value ?? -1) }
            }
            let winners = Counter()
            let start = Gate()
            let racers = (0..<8).map { racer in
                TestPools.shared.submit {
                    start.pass()
                    let won =
                        switch racer % 3 {
                        case 0: promise.trySucceed(racer)
                        case 1: promise.tryFail(TestError.code(racer))
                        default: promise.tryCancel()
                        }
                    if won { winners.increment() }
                }
            }
            start.open()
            _ = try await Future.whenAll(racers).value
            let outcome = try #require(promise.future.outcome)
            for _ in 0..<4 {
                promise.future.whenComplete { seen.append($0.value ?? -1) }
            }
            let values = seen.value
            #expect(values.count == 8)
            #expect(Set(values).count == 1, "round \(round): continuations disagree: \(values)")
            #expect(values.first == (outcome.value ?? -1))
            #expect(winners.value == 1, "round \(round)")
        }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func exactlyOneOfManyTrySucceedCallsReturnsTrue() async throws {
        let promise = Promise<Int>()
        let winners = Locked<[Int]>([])
        let racers = (0..<scaledForSanitizer(10_000, divisor: 5)).map { index in
            TestPools.shared.submit {
                if promise.trySucceed(index) { winners.append(index) }
            }
        }
        _ = try await Future.whenAll(racers).value
        #expect(winners.value.count == 1)
        #expect(promise.future.result == winners.value.first)
    }

    /// Threads keep registering continuations while another completes the future: every
    /// continuation runs exactly once, whether registered before or after the completion.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func continuationsRegisteredDuringCompletionEachRunOnce() async throws {
        for _ in 0..<scaledForSanitizer(20, divisor: 4) {
            let promise = Promise<Int>()
            let runs = Counter()
            let registered = Counter()
            let registrars = (0..<4).map { _ in
                TestPools.shared.submit { () -> [Future<Int>] in
                    (0..<250).map { _ in
                        registered.increment()
                        return promise.future.continueWith(on: .immediate) { future -> Int in
                            runs.increment()
                            return future.result!
                        }
                    }
                }
            }
            let completer = TestPools.shared.submit { promise.succeed(9) }
            let futures = try await Future.whenAll(registrars).value.flatMap { $0 }
            _ = try await completer.value
            let values = try await Future.whenAll(futures).value
            #expect(values.count == 1_000)
            #expect(values.allSatisfy { $0 == 9 })
            #expect(runs.value == 1_000)
            #expect(registered.value == 1_000)
        }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func continuationsOnEveryExecutorRunOnceUnderContention(executorKind: ExecutorKind) async throws {
        let executor = executorKind.make()
        let promises = (0..<200).map { _ in Promise<Int>() }
        let runs = Counter()
        let futures = promises.flatMap { promise in
            (0..<5).map { offset in
                promise.future.continueOnSuccessWith(on: executor) { value -> Int in
                    runs.increment()
                    return value + offset
                }
            }
        }
        let completers = promises.enumerated().map { index, promise in
            TestPools.shared.submit { promise.succeed(index * 10) }
        }
        _ = try await Future.whenAll(completers).value
        let values = try await Future.whenAll(futures).value
        let expected: [Int] = (0..<200).flatMap { index in (0..<5).map { offset in index * 10 + offset } }
        #expect(values == expected)
        #expect(runs.value == 1_000)
    }

    // MARK: - Races on cancellation tokens

    /// Handlers registered while another thread cancels: each runs exactly once — or never, when
    /// its registration was disposed before the cancellation.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func handlersRegisteredDuringCancellationRunOnceOrAreDisposed() async throws {
        for _ in 0..<scaledForSanitizer(20, divisor: 4) {
            let source = CancellationTokenSource()
            let perHandler = (0..<1_000).map { _ in Counter() }
            let disposedBeforeCancel = Locked<Set<Int>>([])
            let start = Gate()
            let registrars = (0..<4).map { registrar in
                TestPools.shared.submit {
                    start.pass()
                    for index in stride(from: registrar, to: 1_000, by: 4) {
                        let registration = source.token.register { perHandler[index].increment() }
                        if index % 10 == 0 {
                            registration.dispose()
                            if !source.isCancellationRequested {
                                disposedBeforeCancel.withLock { _ = $0.insert(index) }
                            }
                        }
                    }
                }
            }
            let canceller = TestPools.shared.submit {
                start.pass()
                source.cancel()
            }
            start.open()
            _ = try await Future.whenAll(registrars + [canceller]).value
            for (index, counter) in perHandler.enumerated() {
                if disposedBeforeCancel.value.contains(index) {
                    #expect(counter.value == 0, "handler \(index) ran after being disposed")
                } else if index % 10 == 0 {
                    #expect(counter.value <= 1, "handler \(index) ran \(counter.value) times")
                } else {
                    #expect(counter.value == 1, "handler \(index) ran \(counter.value) times")
                }
            }
            #expect(source.token.registeredHandlerCount == 0)
        }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func concurrentCancelCallsRunEachHandlerOnce() async throws {
        let source = CancellationTokenSource()
        let runs = Counter()
        for _ in 0..<1_000 { source.token.register { runs.increment() } }
        let cancellers = (0..<8).map { _ in TestPools.shared.submit { source.cancel() } }
        _ = try await Future.whenAll(cancellers).value
        #expect(runs.value == 1_000)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func delaysCancelledWhileOthersAreScheduledAllSettle() async throws {
        let source = CancellationTokenSource()
        let delays = Locked<[Future<Void>]>([])
        let schedulers = (0..<4).map { _ in
            TestPools.shared.submit {
                for _ in 0..<500 { delays.append(Future.delay(.seconds(3600), token: source.token)) }
            }
        }
        let canceller = TestPools.shared.submit { source.cancel() }
        _ = try await Future.whenAll(schedulers + [canceller]).value
        let all = delays.value
        #expect(all.count == 2_000)
        #expect(all.allSatisfy { $0.isCancelled })
        #expect(source.token.registeredHandlerCount == 0)
    }

    // MARK: - Worker pool under many submitters

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func workerPoolWithManySubmittersRunsEverythingBounded() async throws {
        let pool = WorkerPool(name: "stress", size: 3)
        defer { pool.shutdown() }
        let gauge = ConcurrencyGauge()
        let total = Counter()
        let submitters = (0..<4).map { submitter in
            Future<[Future<Int>]> {
                (0..<2_000).map { index in
                    pool.submit {
                        gauge.enter()
                        defer { gauge.leave() }
                        total.increment()
                        return submitter * 100_000 + index
                    }
                }
            }
        }
        let futures = try await Future.whenAll(submitters).value.flatMap { $0 }
        let values = try await Future.whenAll(futures).value
        #expect(values.count == 8_000)
        #expect(Set(values).count == 8_000)
        #expect(total.value == 8_000)
        #expect(gauge.maximum <= 3)
        #expect(await eventuallyAsync { pool.statistics.completed == 8_000 })
        #expect(pool.statistics.running == 0)
        #expect(pool.statistics.queued == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func slotsAndWorkInterleaveUnderContention() async throws {
        let pool = WorkerPool(name: "slots-stress", size: 2)
        defer { pool.shutdown() }
        let gauge = ConcurrencyGauge()
        let futures = (0..<2_000).map { index -> Future<Int> in
            if index % 2 == 0 {
                return pool.submit {
                    gauge.enter()
                    gauge.leave()
                    return index
                }
            }
            return pool.acquireSlot().continueOnSuccessWith(on: .immediate) { slot -> Int in
                gauge.enter()
                gauge.leave()
                slot.release()
                return index
            }
        }
        #expect(try await Future.whenAll(futures).value == Array(0..<2_000))
        #expect(gauge.maximum <= 2)
        #expect(await eventuallyAsync { pool.statistics.completed == 2_000 })
        #expect(pool.statistics.running == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func slotRequestsCancelledWhileSlotsAreReleasedNeverLeakASlot() async throws {
        let pool = WorkerPool(name: "slot-cancel-stress", size: 2)
        defer { pool.shutdown() }
        for _ in 0..<scaledForSanitizer(200, divisor: 4) {
            let held = try await pool.acquireSlot().value
            let source = CancellationTokenSource()
            let requests = (0..<4).map { _ in pool.acquireSlot(cancellationToken: source.token) }
            let canceller = TestPools.shared.submit { source.cancel() }
            let releaser = TestPools.shared.submit { held.release() }
            _ = try await Future.whenAll([canceller, releaser]).value
            for request in requests {
                let outcome = await request.settled()
                if let slot = outcome.value { slot.release() } else { #expect(outcome.isCancelled) }
            }
        }
        #expect(pool.statistics.running == 0)
        #expect(pool.statistics.queued == 0)
        // Every slot is free again: two blocking jobs run at once.
        let gate = Gate()
        let both = Counter()
        let jobs = (0..<2).map { _ in
            pool.submit { () -> Bool in
                both.increment()
                if both.value == 2 { gate.open() }
                return gate.pass(timeout: .seconds(20))
            }
        }
        #expect(try await Future.whenAll(jobs).value == [true, true])
    }

    // MARK: - Long chains

    /// A million `continueWith(on: .immediate)` links attached to a pending future, then completed:
    /// propagation is iterative, so it finishes on an ordinary 8 MiB stack.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func millionLinkImmediateChainCompletesWithoutStackOverflow() async throws {
        let links = scaledForSanitizer(1_000_000)
        let result = Promise<Int>()
        runOnThread(stackSize: 8 << 20) {
            let head = Promise<Int>()
            var future = head.future
            for _ in 0..<links {
                future = future.continueWith(on: .immediate) { $0.result! + 1 }
            }
            #expect(!future.isCompleted)
            head.succeed(0)
            result.completeWith(future)
        }
        #expect(try await result.future.value == links)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func hundredThousandLinkDefaultExecutorChainCompletes() async throws {
        let links = scaledForSanitizer(100_000)
        let result = Promise<Int>()
        runOnThread(stackSize: 8 << 20) {
            let head = Promise<Int>()
            var future = head.future
            for index in 0..<links {
                // Mix the family: every member must propagate iteratively.
                switch index % 4 {
                case 0: future = future.continueWith { $0.result! + 1 }
                case 1: future = future.continueOnSuccessWith { $0 + 1 }
                case 2: future = future.continueOnSuccessWithTask { Future(value: $0 + 1) }
                default: future = future.continueWithTask { Future(value: $0.result! + 1) }
                }
            }
            head.succeed(0)
            result.completeWith(future)
        }
        #expect(try await result.future.value == links)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func longChainOfPendingInnerFuturesCompletesWithoutStackOverflow() async throws {
        // Each link's inner future is itself pending until the previous one completes it.
        let links = scaledForSanitizer(100_000)
        let result = Promise<Int>()
        runOnThread(stackSize: 8 << 20) {
            let head = Promise<Int>()
            var future = head.future
            for _ in 0..<links {
                future = future.flatMap { value in
                    let inner = Promise<Int>()
                    inner.succeed(value + 1)
                    return inner.future
                }
            }
            head.succeed(0)
            result.completeWith(future)
        }
        #expect(try await result.future.value == links)
    }

    /// A chain whose head promise is dropped without ever completing is destroyed link by link:
    /// each pending future owns the next one through its callback list, so a recursive release
    /// overflows the stack (in a debug build from about 50,000 links on an 8 MiB stack). Run in a
    /// child process, as the failure is a crash. Not under ThreadSanitizer, whose handler for the
    /// crash spends minutes on a stack of a hundred thousand frames.
    @Test(
        .timeLimit(.minutes(1 * TestTiming.slowdown)),
        .disabled(if: isRunningUnderThreadSanitizer, "a stack overflow under TSan takes minutes to report")
    )
    func droppingAnAbandonedPendingChainDoesNotOverflowTheStack() async {
        await #expect(processExitsWith: .success) {
            let links = 1_000_000
            let dropped = Promise<Void>()
            runOnThread(stackSize: 8 << 20) {
                do {
                    let head = Promise<Int>()
                    var future = head.future
                    for _ in 0..<links { future = future.map { $0 + 1 } }
                }
                dropped.succeed(())
            }
            _ = blockingOutcome(of: dropped.future, timeout: .seconds(50))
        }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func longFailingChainPropagatesTheErrorWithoutStackOverflow() async {
        let links = scaledForSanitizer(100_000)
        let result = Promise<Int>()
        runOnThread(stackSize: 8 << 20) {
            let head = Promise<Int>()
            var future = head.future
            for _ in 0..<links { future = future.map { $0 + 1 } }
            head.fail(TestError.code(1))
            result.completeWith(future)
        }
        #expect((await result.future.settled().error as? TestError) == .code(1))
    }
}
