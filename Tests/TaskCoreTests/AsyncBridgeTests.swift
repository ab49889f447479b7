import TestSupport
import Testing

@testable import TaskCore

/// `try await future.value`, `Future(cancellationToken:operation:)` and the blocking `wait()`.
struct AsyncBridgeTests {
    // MARK: - value

    @Test func valueOfACompletedFuture() async throws {
        #expect(try await Future(value: "v").value == "v")
        await #expect(throws: TestError.code(2)) { try await Future<Int>(error: TestError.code(2)).value }
        await #expect(throws: CancellationError.self) { try await Future<Int>.cancelled().value }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: AntecedentOutcome.allCases)
    func valueOfAFutureCompletedLaterOnAnotherThread(outcome: AntecedentOutcome) async {
        let promise = Promise<Int>()
        runOnThread { promise.complete(with: outcome.outcome) }
        let result: Outcome<Int>
        do { result = .success(try await promise.future.value) } catch is CancellationError {
            result = .cancelled
        } catch { result = .failure(error) }
        #expect(result.isSame(as: outcome.outcome))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func manyTasksAwaitOneFuture() async throws {
        let promise = Promise<Int>()
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<100 { group.addTask { try await promise.future.value } }
            promise.succeed(8)
            var total = 0
            for try await value in group { total += value }
            #expect(total == 800)
        }
    }

    /// A task awaiting a future that never completes stops waiting as soon as it is cancelled.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func awaitingHonoursTaskCancellation() async throws {
        let never = Promise<Int>()
        let awaiting = Promise<Void>()
        let task = Task {
            awaiting.succeed(())
            return try await never.future.value
        }
        _ = await awaiting.future.settled()
        let start = ContinuousClock.now
        task.cancel()
        let result = await task.result
        #expect(throws: CancellationError.self) { try result.get() }
        #expect(ContinuousClock.now - start < promptly)
        // The future itself is left alone: others may still wait on it.
        #expect(!never.future.isCompleted)
        never.succeed(1)
        #expect(try await never.future.value == 1)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func awaitingInAnAlreadyCancelledTaskThrowsAtOnce() async {
        let never = Promise<Int>()
        let gate = Promise<Void>()
        let task = Task {
            _ = await gate.future.settled()
            return try await never.future.value
        }
        task.cancel()
        gate.succeed(())
        await #expect(throws: CancellationError.self) { try await task.value }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func aCancelledTaskStillGetsACompletedFuturesValue() async throws {
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await Future(value: 5).value
        }
        #expect(try await task.value == 5)
    }

    // MARK: - Future from an async operation

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func futureFromAnAsyncOperationSucceeds() async throws {
        let future = Future<Int> {
            await Task.yield()
            return 21 * 2
        }
        #expect(try await future.value == 42)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func futureFromAThrowingOperationFails() async {
        let future = Future<Int> { throw TestError.code(5) }
        #expect((await future.settled().error as? TestError) == .code(5))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func operationThrowingCancellationErrorCancelsTheFuture() async {
        let future = Future<Int> { throw CancellationError() }
        #expect(await future.settled().isCancelled)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func tokenCancelsTheOperationsTask() async throws {
        let source = CancellationTokenSource()
        let started = Promise<Void>()
        let sawCancellation = Promise<Bool>()
        let future = Future<Int>(cancellationToken: source.token) {
            started.succeed(())
            do {
                try await Task.sleep(for: .seconds(3600))
            } catch {
                sawCancellation.succeed(Task.isCancelled)
                throw error
            }
            return 1
        }
        _ = await started.future.settled()
        let start = ContinuousClock.now
        source.cancel()
        #expect(await future.settled().isCancelled)
        #expect(ContinuousClock.now - start < promptly)
        #expect(try await sawCancellation.future.value == true)
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func alreadyCancelledTokenCancelsTheOperationFromTheStart() async {
        let source = CancellationTokenSource()
        source.cancel()
        let future = Future<Int>(cancellationToken: source.token) {
            try Task.checkCancellation()
            return 1
        }
        #expect(await future.settled().isCancelled)
    }

    /// An operation that ignores cancellation: with its token cancelled before the future is made,
    /// it never runs, and the future is cancelled at once (a Bolts user's expectation, #43).
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func alreadyCancelledTokenNeverRunsTheOperation() async {
        let source = CancellationTokenSource()
        source.cancel()
        let ran = Promise<Void>()
        let future = Future<Int>(cancellationToken: source.token) {
            ran.succeed(())
            return 1
        }
        #expect(future.isCompleted, "cancelled at once")
        #expect(await future.settled().isCancelled)
        #expect(!ran.future.isCompleted, "the operation did not run")
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func operationThatFinishesReleasesItsTokenRegistration() async throws {
        let source = CancellationTokenSource()
        let future = Future<Int>(cancellationToken: source.token) { 3 }
        #expect(try await future.value == 3)
        #expect(source.token.registeredHandlerCount == 0)
        source.cancel()
        #expect(future.result == 3)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func operationCanAwaitOtherFutures() async throws {
        let first = TestPools.shared.submit { 20 }
        let second = Future.delay(.milliseconds(1)).map { 22 }
        let sum = Future<Int> { try await first.value + second.value }
        #expect(try await sum.value == 42)
    }

    // MARK: - wait() (blocking; only from non-async tests)

    @Test func waitReturnsTheValueOfACompletedFuture() throws {
        #expect(try Future(value: 4).wait() == 4)
    }

    @Test func waitThrowsTheErrorOrCancellationError() {
        #expect(throws: TestError.boom) { try Future<Int>(error: TestError.boom).wait() }
        #expect(throws: CancellationError.self) { try Future<Int>.cancelled().wait() }
    }

    @Test func waitBlocksUntilAnotherThreadCompletes() throws {
        let promise = Promise<String>()
        runOnThread { promise.succeed("from another thread") }
        #expect(try promise.future.wait() == "from another thread")
    }

    @Test func waitForPoolWork() throws {
        let chain = TestPools.shared.submit { 1 }
            .continueOnSuccessWith(on: TestPools.shared) { $0 + 1 }
            .continueOnSuccessWithTask { value in Future.delay(.milliseconds(1)).map { value + 1 } }
        #expect(try chain.wait() == 3)
    }
}
