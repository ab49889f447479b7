import TestSupport
import Testing

@testable import TaskCore

struct PromiseTests {
    @Test func succeedCompletesWithTheValue() {
        let promise = Promise<String>()
        promise.succeed("saved")
        #expect(promise.future.result == "saved")
    }

    @Test func failCompletesWithTheError() {
        let promise = Promise<String>()
        promise.fail(TestError.code(404))
        #expect(promise.future.testError == .code(404))
    }

    @Test func cancelCompletesAsCancelled() {
        let promise = Promise<String>()
        promise.cancel()
        #expect(promise.future.isCancelled)
    }

    @Test func completeWithOutcomeCompletes() {
        let promise = Promise<Int>()
        promise.complete(with: .failure(TestError.boom))
        #expect(promise.future.testError == .boom)
    }

    @Test func copiesOfAPromiseShareOneFuture() {
        let promise = Promise<Int>()
        let copy = promise
        copy.succeed(9)
        #expect(promise.future === copy.future)
        #expect(promise.future.result == 9)
    }

    // MARK: - try variants: the first completion wins

    enum Completion: String, CaseIterable, Sendable {
        case succeed, fail, cancel
    }

    @Test(arguments: Completion.allCases, Completion.allCases)
    func firstTryCompletionWinsAndLaterOnesReturnFalse(first: Completion, second: Completion) {
        let promise = Promise<Int>()
        func attempt(_ completion: Completion, _ value: Int) -> Bool {
            switch completion {
            case .succeed: return promise.trySucceed(value)
            case .fail: return promise.tryFail(TestError.code(value))
            case .cancel: return promise.tryCancel()
            }
        }
        #expect(attempt(first, 1) == true)
        #expect(attempt(second, 2) == false)
        #expect(promise.tryComplete(with: .success(3)) == false)
        let future = promise.future
        switch first {
        case .succeed: #expect(future.result == 1)
        case .fail: #expect(future.testError == .code(1))
        case .cancel: #expect(future.isCancelled)
        }
    }

    @Test func tryAfterAPlainCompletionReturnsFalseAndKeepsTheOutcome() {
        let promise = Promise<Int>()
        promise.succeed(1)
        #expect(promise.trySucceed(2) == false)
        #expect(promise.tryFail(TestError.boom) == false)
        #expect(promise.tryCancel() == false)
        #expect(promise.future.result == 1)
    }

    @Test func completeWithFollowsAnotherFuture() {
        let source = Promise<Int>()
        let promise = Promise<Int>()
        promise.completeWith(source.future)
        #expect(!promise.future.isCompleted)
        source.succeed(11)
        #expect(promise.future.result == 11)

        let failing = Promise<Int>()
        failing.completeWith(Future(error: TestError.boom))
        #expect(failing.future.testError == .boom)

        let cancelled = Promise<Int>()
        cancelled.completeWith(.cancelled())
        #expect(cancelled.future.isCancelled)
    }

    @Test func completeWithLosesToAnEarlierCompletion() {
        let source = Promise<Int>()
        let promise = Promise<Int>()
        promise.completeWith(source.future)
        promise.succeed(1)
        source.succeed(2)
        #expect(promise.future.result == 1)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func completionFromACallbackOnAnotherThreadReachesTheAwaiter() async throws {
        let promise = Promise<[Int]>()
        runOnThread { promise.succeed([1, 2, 3]) }
        #expect(try await promise.future.value == [1, 2, 3])
    }

    // MARK: - Double completion is a programmer error

    /// A second plain `succeed` stops the process with a message naming both outcomes. The message
    /// must survive release builds too (`swift test -c release`), where `preconditionFailure` drops it.
    @Test func secondSucceedStopsTheProcessWithAClearMessage() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let promise = Promise<Int>()
            promise.succeed(1)
            promise.succeed(2)
        }
        let stderr = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(stderr.contains("Promise<Int> completed twice"))
        #expect(stderr.contains("success(1)"))
        #expect(stderr.contains("success(2)"))
        #expect(stderr.contains("trySucceed"))
    }

    @Test func failAfterCancelStopsTheProcess() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let promise = Promise<String>()
            promise.cancel()
            promise.fail(TestError.boom)
        }
        let stderr = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(stderr.contains("Promise<String> completed twice"))
        #expect(stderr.contains("cancelled"))
        #expect(stderr.contains("boom"))
    }

    @Test func cancelAfterTrySucceedStopsTheProcess() async {
        await #expect(processExitsWith: .failure) {
            let promise = Promise<Int>()
            promise.trySucceed(1)
            promise.cancel()
        }
    }
}
