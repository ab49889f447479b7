import Dispatch
import TestSupport
import Testing

@testable import TaskCore

/// Leak checks with weak references: completed futures drop their callbacks, finished chains are
/// not retained, and registrations and timers release their closures.
struct MemoryTests {
    // MARK: - Continuations are released on completion

    @Test(arguments: ContinuationKind.allCases, [ExecutorKind.immediate, .default])
    func completedFutureReleasesItsContinuations(kind: ContinuationKind, executorKind: ExecutorKind) {
        for antecedent in AntecedentOutcome.allCases {
            let promise = Promise<Int>()
            weak var weakCanary: Canary?
            weak var weakNext: Future<Int>?
            do {
                let canary = Canary()
                weakCanary = canary
                let next = kind.attach(to: promise.future, on: executorKind.make(), token: nil, ran: Counter())
                    .continueWith(on: executorKind.make()) { future -> Int in
                        withExtendedLifetime(canary) {}
                        return future.result ?? 0
                    }
                weakNext = next
            }
            #expect(weakCanary != nil, "a pending future keeps its continuations")
            promise.complete(with: antecedent.outcome)
            #expect(weakCanary == nil, "\(antecedent): the continuation was not released")
            #expect(weakNext == nil, "\(antecedent): the continuation's future was not released")
        }
    }

    @Test func completedFutureReleasesWhenCompleteCallbacks() {
        let promise = Promise<Int>()
        weak var weakCanary: Canary?
        do {
            let canary = Canary()
            weakCanary = canary
            for _ in 0..<3 { promise.future.whenComplete { _ in withExtendedLifetime(canary) {} } }
        }
        #expect(weakCanary != nil)
        promise.succeed(1)
        #expect(weakCanary == nil)
    }

    @Test(
        .timeLimit(.minutes(1 * TestTiming.slowdown)),
        arguments: [ExecutorKind.dispatchQueue, .serialQueue, .workerPool]
    )
    func continuationOnAHoppingExecutorIsReleasedAfterItRuns(executorKind: ExecutorKind) async throws {
        let promise = Promise<Int>()
        weak var weakCanary: Canary?
        let next: Future<Int>
        do {
            let canary = Canary()
            weakCanary = canary
            next = promise.future.continueWith(on: executorKind.make()) { future -> Int in
                withExtendedLifetime(canary) {}
                return future.result! * 2
            }
        }
        #expect(weakCanary != nil)
        promise.succeed(4)
        #expect(try await next.value == 8)
        // The executor drops the work item just after it has completed the future.
        #expect(await eventuallyAsync { weakCanary == nil })
    }

    /// An immediate `continueWith` on a pending future stores its body in the future it returns
    /// (`ContinuationFuture`); that future must drop the body once it ran, even while it is kept.
    @Test func keptContinuationFutureReleasesItsBodyOnceItRan() {
        let promise = Promise<Int>()
        weak var weakCanary: Canary?
        let next: Future<Int>
        do {
            let canary = Canary()
            weakCanary = canary
            next = promise.future.continueWith(on: .immediate) { future in
                withExtendedLifetime(canary) {}
                return future.result! + 1
            }
        }
        #expect(weakCanary != nil, "a pending continuation keeps its body")
        promise.succeed(1)
        #expect(next.result == 2)
        #expect(weakCanary == nil, "the completed continuation future still holds its body")
    }

    @Test func continuationOnACompletedFutureIsReleasedOnceItRan() {
        weak var weakCanary: Canary?
        let next: Future<Int>
        do {
            let canary = Canary()
            weakCanary = canary
            next = Future(value: 1).continueWith(on: .default) { _ in
                withExtendedLifetime(canary) {}
                return 2
            }
        }
        #expect(next.result == 2)
        #expect(weakCanary == nil)
    }

    // MARK: - Finished chains

    @Test func nothingRetainsAFinishedChain() {
        let head = Promise<Int>()
        var weakLinks: [WeakFuture<Int>] = []
        var last: Future<Int>? = nil
        do {
            var future = head.future
            for index in 0..<100 {
                switch index % 5 {
                case 0: future = future.continueWith { $0.result! + 1 }
                case 1: future = future.continueOnSuccessWith(on: .immediate) { $0 + 1 }
                case 2: future = future.continueOnSuccessWithTask { Future(value: $0 + 1) }
                case 3: future = future.continueOnErrorWith { _ in 0 }.map { $0 + 1 }
                default: future = future.continueWithTask(on: .immediate) { Future(value: $0.result! + 1) }
                }
                weakLinks.append(WeakFuture(future))
            }
            last = future
        }
        // While pending, each link is kept alive by its antecedent's callback list.
        #expect(weakLinks.allSatisfy { $0.future != nil })
        head.succeed(0)
        #expect(last?.result == 100)
        // Once finished, only the last future (held here) is alive: no link retains its antecedent.
        #expect(weakLinks.dropLast().allSatisfy { $0.future == nil })
        #expect(weakLinks.last?.future != nil)
        last = nil
        #expect(weakLinks.last?.future == nil)
    }

    @Test func noRetainCycleBetweenACompletedFutureAndItsContinuation() {
        weak var weakAntecedent: Future<Int>?
        weak var weakContinuation: Future<String>?
        do {
            let promise = Promise<Int>()
            let continuation = promise.future.continueWith { future in "\(future.result!)" }
            weakAntecedent = promise.future
            weakContinuation = continuation
            promise.succeed(1)
            #expect(continuation.result == "1")
        }
        #expect(weakAntecedent == nil)
        #expect(weakContinuation == nil)
    }

    /// A promise that is dropped without ever completing must not leave its future and its
    /// continuations alive in a cycle: nothing can complete them any more.
    @Test(arguments: ContinuationKind.allCases)
    func abandonedPendingFutureAndItsContinuationAreReleased(kind: ContinuationKind) {
        weak var weakAntecedent: Future<Int>?
        weak var weakContinuation: Future<Int>?
        do {
            let promise = Promise<Int>()
            let continuation = kind.attach(to: promise.future, on: .immediate, token: nil, ran: Counter())
            weakAntecedent = promise.future
            weakContinuation = continuation
        }
        #expect(weakAntecedent == nil, "the pending future is kept alive by its own continuation")
        #expect(weakContinuation == nil)
    }

    @Test func abandonedPendingFutureReleasesItsCallbacks() {
        weak var weakCanary: Canary?
        do {
            let promise = Promise<Int>()
            let canary = Canary()
            weakCanary = canary
            promise.future.whenComplete { _ in withExtendedLifetime(canary) {} }
        }
        #expect(weakCanary == nil)
    }

    @Test func whenAllDoesNotRetainItsFinishedInputs() {
        var weakInputs: [WeakFuture<Int>] = []
        let all: Future<[Int]>
        do {
            let promises = (0..<10).map { _ in Promise<Int>() }
            weakInputs = promises.map { WeakFuture($0.future) }
            all = Future.whenAll(promises.map(\.future))
            for (index, promise) in promises.enumerated() { promise.succeed(index) }
        }
        #expect(all.result == Array(0..<10))
        #expect(weakInputs.allSatisfy { $0.future == nil })
    }

    // MARK: - Cancellation registrations

    @Test func disposedRegistrationReleasesItsHandler() {
        let source = CancellationTokenSource()
        weak var weakCanary: Canary?
        let registration: CancellationRegistration
        do {
            let canary = Canary()
            weakCanary = canary
            registration = source.token.register { withExtendedLifetime(canary) {} }
        }
        #expect(weakCanary != nil)
        registration.dispose()
        #expect(weakCanary == nil)
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test func cancelReleasesTheHandlersItRan() {
        let source = CancellationTokenSource()
        weak var weakCanary: Canary?
        do {
            let canary = Canary()
            weakCanary = canary
            source.token.register { withExtendedLifetime(canary) {} }
        }
        source.cancel()
        #expect(weakCanary == nil)
    }

    @Test func handlerRunAtOnceOnACancelledTokenIsNotKept() {
        let source = CancellationTokenSource()
        source.cancel()
        weak var weakCanary: Canary?
        do {
            let canary = Canary()
            weakCanary = canary
            source.token.register { withExtendedLifetime(canary) {} }
        }
        #expect(weakCanary == nil)
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test func droppedSourceIsReleasedAndUnlinked() {
        let parent = CancellationTokenSource()
        weak var weakChild: CancellationTokenSource?
        do {
            let child = CancellationTokenSource(linkedTo: [parent.token])
            weakChild = child
        }
        #expect(weakChild == nil)
        #expect(parent.token.registeredHandlerCount == 0)
    }

    @Test func continuationWithATokenReleasesItsRegistrationsWhenDone() {
        let source = CancellationTokenSource()
        let promise = Promise<Int>()
        let next = promise.future.continueWith(on: .default, cancellationToken: source.token) { $0.result! }
        promise.succeed(3)
        #expect(next.result == 3)
        #expect(source.token.registeredHandlerCount == 0)
    }

    // MARK: - Timers

    @Test func timerCancelReleasesTheClosure() {
        let queue = TimerQueue.shared
        weak var weakCanary: Canary?
        let id: TimerQueue.ID
        do {
            let canary = Canary()
            weakCanary = canary
            id = queue.schedule(after: .seconds(3600)) { withExtendedLifetime(canary) {} }
        }
        #expect(weakCanary != nil)
        #expect(queue.cancel(id))
        #expect(weakCanary == nil)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func firedTimerReleasesTheClosure() async throws {
        let queue = TimerQueue()
        weak var weakCanary: Canary?
        let fired = Promise<Void>()
        do {
            let canary = Canary()
            weakCanary = canary
            queue.schedule(after: .milliseconds(1)) {
                withExtendedLifetime(canary) {}
                fired.succeed(())
            }
        }
        try await fired.future.value
        #expect(await eventuallyAsync { weakCanary == nil })
    }

    @Test func cancelledDelayReleasesItsTimerAndRegistration() {
        let source = CancellationTokenSource()
        weak var weakDelay: Future<Void>?
        do {
            let delay = Future.delay(.seconds(3600), token: source.token)
            weakDelay = delay
            source.cancel()
            #expect(delay.isCancelled)
        }
        // Neither the timer queue nor the token still holds the delay's promise.
        #expect(weakDelay == nil)
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func timeoutThatDidNotFireReleasesItsTimer() async throws {
        weak var weakLimited: Future<Int>?
        let promise = Promise<Int>()
        do {
            let limited = promise.future.timeout(.seconds(3600))
            weakLimited = limited
            promise.succeed(1)
            #expect(limited.result == 1)
        }
        #expect(weakLimited == nil)
    }

    // MARK: - Async bridges

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func futureFromAnOperationReleasesTheOperationWhenDone() async throws {
        weak var weakCanary: Canary?
        let future: Future<Int>
        do {
            let canary = Canary()
            weakCanary = canary
            future = Future {
                withExtendedLifetime(canary) {}
                return 1
            }
        }
        #expect(try await future.value == 1)
        #expect(await eventuallyAsync { weakCanary == nil })
    }
}

/// A weak reference to a future, for lists of weak references.
struct WeakFuture<Value: Sendable> {
    weak var future: Future<Value>?
    init(_ future: Future<Value>) { self.future = future }
}
