import Testing

@testable import TaskCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct FutureTests {
    // MARK: - Factories and state

    @Test func valueFactoryIsSucceeded() {
        let future = Future(value: 42)
        #expect(future.isCompleted)
        #expect(future.isSucceeded)
        #expect(!future.isFaulted)
        #expect(!future.isCancelled)
        #expect(future.result == 42)
        #expect(future.error == nil)
        #expect(future.outcome?.isSame(as: .success(42)) == true)
    }

    @Test func errorFactoryIsFaulted() {
        let future = Future<Int>(error: TestError.code(7))
        #expect(future.isCompleted)
        #expect(future.isFaulted)
        #expect(!future.isSucceeded)
        #expect(!future.isCancelled)
        #expect(future.result == nil)
        #expect(future.testError == .code(7))
    }

    @Test func cancelledFactoryIsCancelled() {
        let future = Future<Int>.cancelled()
        #expect(future.isCompleted)
        #expect(future.isCancelled)
        #expect(!future.isFaulted)
        #expect(!future.isSucceeded)
        #expect(future.result == nil)
        #expect(future.error == nil)
        #expect(future.outcome?.isCancelled == true)
    }

    @Test func outcomeFactoryKeepsTheOutcome() {
        #expect(Future<String>(outcome: .success("a")).result == "a")
        #expect(Future<String>(outcome: .failure(TestError.boom)).testError == .boom)
        #expect(Future<String>(outcome: .cancelled).isCancelled)
    }

    @Test func promiseFutureStartsPending() {
        let promise = Promise<Int>()
        let future = promise.future
        #expect(!future.isCompleted)
        #expect(!future.isSucceeded)
        #expect(!future.isFaulted)
        #expect(!future.isCancelled)
        #expect(future.outcome == nil)
        #expect(future.result == nil)
        #expect(future.error == nil)
    }

    /// Values of every storage kind survive the round trip: inline trivial values (`Int`, `Bool`,
    /// `Void`, a 16-byte struct) and boxed ones (strings, arrays, classes, a 17-byte struct).
    @Test func valuesOfEveryLayoutRoundTrip() {
        struct Sixteen: Equatable, Sendable {
            var a: Int64
            var b: Int64
        }
        struct Seventeen: Equatable, Sendable {
            var a: Int64
            var b: Int64
            var c: Int8
        }
        #expect(Future(value: Int.min).result == Int.min)
        #expect(Future(value: true).result == true)
        #expect(Future(value: UInt8(200)).result == 200)
        #expect(Future(value: 3.5).result == 3.5)
        #expect(Future(value: Sixteen(a: -1, b: .max)).result == Sixteen(a: -1, b: .max))
        #expect(Future(value: Seventeen(a: 1, b: 2, c: 3)).result == Seventeen(a: 1, b: 2, c: 3))
        let long = "a string long enough to live on the heap"
        #expect(Future(value: long).result == long)
        #expect(Future(value: [1, 2, 3]).result == [1, 2, 3])
        #expect(Future<Int?>(value: nil).isSucceeded)
        #expect(Future<Int?>(value: nil).result == .some(nil))
        let canary = Canary("boxed")
        let boxed = Future(value: canary).result
        #expect(boxed.map { $0 === canary } == true)
        let void = Future(value: ())
        #expect(void.isSucceeded)
    }

    // MARK: - Completion through a promise

    @Test(arguments: [0, 1, 2])
    func completingAPromiseMovesTheStateOnce(kind: Int) {
        let promise = Promise<String>()
        switch kind {
        case 0: promise.succeed("done")
        case 1: promise.fail(TestError.code(1))
        default: promise.cancel()
        }
        let future = promise.future
        #expect(future.isCompleted)
        #expect(future.isSucceeded == (kind == 0))
        #expect(future.isFaulted == (kind == 1))
        #expect(future.isCancelled == (kind == 2))
        #expect(future.result == (kind == 0 ? "done" : nil))
        #expect(future.testError == (kind == 1 ? .code(1) : nil))
    }

    // MARK: - whenComplete

    @Test func whenCompleteOnACompletedFutureRunsAtOnceOnThisThread() {
        let thread = currentThread()
        let seen = Locked<[Int]>([])
        let ranOn = Locked<pthread_t?>(nil)
        Future(value: 5).whenComplete { outcome in
            seen.append(outcome.value ?? -1)
            ranOn.withLock { $0 = currentThread() }
        }
        #expect(seen.value == [5])
        #expect(isSameThread(ranOn.value!, thread))
    }

    @Test func whenCompleteOnAPendingFutureRunsWhenItCompletes() {
        let promise = Promise<Int>()
        let seen = Locked<[Int]>([])
        promise.future.whenComplete { seen.append($0.value ?? -1) }
        promise.future.whenComplete { seen.append(($0.value ?? -1) * 10) }
        promise.future.whenComplete { seen.append(($0.value ?? -1) * 100) }
        #expect(seen.value.isEmpty)
        promise.succeed(3)
        #expect(seen.value == [3, 30, 300])
        promise.trySucceed(4)
        #expect(seen.value == [3, 30, 300])
    }

    @Test func whenCompleteSeesFailureAndCancellation() {
        let failed = Promise<Int>()
        let cancelled = Promise<Int>()
        let outcomes = Locked<[String]>([])
        failed.future.whenComplete { outcome in
            outcomes.append((outcome.error as? TestError) == .boom ? "boom" : "?")
        }
        cancelled.future.whenComplete { outcome in outcomes.append(outcome.isCancelled ? "cancelled" : "?") }
        failed.fail(TestError.boom)
        cancelled.cancel()
        #expect(outcomes.value == ["boom", "cancelled"])
    }

    // MARK: - Outcome

    @Test func outcomeGetThrowsCancellationErrorForCancelled() throws {
        #expect(try Outcome<Int>.success(1).get() == 1)
        #expect(throws: TestError.boom) { try Outcome<Int>.failure(TestError.boom).get() }
        #expect(throws: CancellationError.self) { try Outcome<Int>.cancelled.get() }
    }

    @Test func outcomeMapTransformsOnlySuccess() {
        #expect(Outcome<Int>.success(2).map { $0 * 3 }.value == 6)
        #expect((Outcome<Int>.failure(TestError.boom).map { $0 * 3 }.error as? TestError) == .boom)
        #expect(Outcome<Int>.cancelled.map { $0 * 3 }.isCancelled)
        #expect((Outcome<Int>.success(2).map { _ -> Int in throw TestError.code(9) }.error as? TestError) == .code(9))
        #expect(Outcome<Int>.success(2).map { _ -> Int in throw CancellationError() }.isCancelled)
    }

    @Test func outcomeCatchingTurnsCancellationErrorIntoCancelled() {
        #expect(Outcome { 4 }.value == 4)
        #expect((Outcome<Int> { throw TestError.boom }.error as? TestError) == .boom)
        #expect(Outcome<Int> { throw CancellationError() }.isCancelled)
    }

    @Test func aggregateErrorDescribesItsErrorsInOrder() {
        let error = AggregateError(errors: [(0, TestError.boom), (2, TestError.code(3))], cancelledCount: 1)
        #expect(error.errors.map(\.index) == [0, 2])
        #expect(error.cancelledCount == 1)
        #expect(error.description == "AggregateError(2 errors, 1 cancelled: [0] boom; [2] code(3))")
        #expect(TimeoutError(duration: .seconds(2)) == TimeoutError(duration: .seconds(2)))
        #expect(TimeoutError(duration: .seconds(2)).description == "timed out after 2.0 seconds")
    }
}
