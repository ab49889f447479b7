import TestSupport
import Testing

@testable import TaskCore

/// `Future.delay`, `timeout` and the `TimerQueue` under them.
///
/// Serialized: two tests count `TimerQueue.shared.pendingCount` around ten thousand timers of their own.
@Suite(.serialized)
struct DelayTests {
    // MARK: - delay

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func delaySucceedsAfterTheDuration() async throws {
        let start = ContinuousClock.now
        try await Future.delay(.milliseconds(50)).value
        let waited = ContinuousClock.now - start
        #expect(waited >= .milliseconds(50))
        #expect(waited < promptly)
    }

    @Test(
        .timeLimit(.minutes(1 * TestTiming.slowdown)),
        arguments: [Duration.zero, .nanoseconds(1), .milliseconds(-5), .seconds(-3)]
    )
    func delayThatIsNotPositiveSucceedsPromptly(duration: Duration) async throws {
        let start = ContinuousClock.now
        try await Future.delay(duration).value
        #expect(ContinuousClock.now - start < promptly)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func delayIsCancelledAtOnceWhenItsTokenFires() async {
        let source = CancellationTokenSource()
        let delay = Future.delay(.seconds(3600), token: source.token)
        #expect(!delay.isCompleted)
        let start = ContinuousClock.now
        source.cancel()
        // Cancellation completes the delay on the cancelling thread, before `cancel()` returns.
        #expect(delay.isCancelled)
        #expect(await delay.settled().isCancelled)
        #expect(ContinuousClock.now - start < promptly)
    }

    @Test func delayWithAnAlreadyCancelledTokenIsCancelledImmediately() {
        let source = CancellationTokenSource()
        source.cancel()
        let delay = Future.delay(.seconds(3600), token: source.token)
        #expect(delay.isCancelled)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func delayCancelledByCancelAfterEndsEarly() async {
        let source = CancellationTokenSource()
        let delay = Future.delay(.seconds(3600), token: source.token)
        let start = ContinuousClock.now
        source.cancel(after: .milliseconds(20))
        #expect(await delay.settled().isCancelled)
        let waited = ContinuousClock.now - start
        #expect(waited >= .milliseconds(20))
        #expect(waited < promptly)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func delayDisposesItsTokenRegistrationWhenItEnds() async throws {
        let source = CancellationTokenSource()
        // Long enough that the delay cannot end before the first check, even on a loaded machine
        // (1 ms once did, in CI).
        let delay = Future.delay(.milliseconds(500), token: source.token)
        #expect(source.token.registeredHandlerCount == 1)
        try await delay.value
        #expect(source.token.registeredHandlerCount == 0)
    }

    /// Ten thousand delays wait at once on the timer queue's one thread; none holds a thread.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func tenThousandConcurrentDelaysCompleteWithoutAThreadEach() async throws {
        let start = ContinuousClock.now
        let delays = (0..<10_000).map { index in Future.delay(.milliseconds(1_000 + index % 50)) }
        // All ten thousand wait at once (unless creating them took longer than the shortest delay,
        // as it can under ThreadSanitizer on a loaded machine).
        if ContinuousClock.now - start < .milliseconds(900) {
            #expect(TimerQueue.shared.pendingCount >= 10_000)
        }
        _ = try await Future.whenAll(delays).value
        #expect(ContinuousClock.now - start < promptly)
        // Other tests may have timers of their own; ours are all gone.
        #expect(TimerQueue.shared.pendingCount < 9_000)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func tenThousandCancelledDelaysLeaveTheTimerQueue() async {
        let queue = TimerQueue.shared
        let source = CancellationTokenSource()
        let delays = (0..<10_000).map { _ in Future.delay(.seconds(3600), token: source.token) }
        #expect(queue.pendingCount >= 10_000)
        source.cancel()
        #expect(delays.allSatisfy { $0.isCancelled })
        #expect(queue.pendingCount < 10_000)
        #expect(source.token.registeredHandlerCount == 0)
    }

    // MARK: - timeout

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func timeoutFailsWithTimeoutErrorWhenTheFutureIsTooSlow() async {
        let never = Promise<Int>()
        let start = ContinuousClock.now
        let outcome = await never.future.timeout(.milliseconds(30)).settled()
        #expect((outcome.error as? TimeoutError) == TimeoutError(duration: .milliseconds(30)))
        #expect(ContinuousClock.now - start >= .milliseconds(30))
        // The original future is left alone.
        #expect(!never.future.isCompleted)
        never.succeed(1)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: AntecedentOutcome.allCases)
    func timeoutKeepsTheOutcomeOfAFutureThatCompletesInTime(outcome: AntecedentOutcome) async {
        let promise = Promise<Int>()
        let limited = promise.future.timeout(.seconds(3600))
        #expect(!limited.isCompleted)
        promise.complete(with: outcome.outcome)
        #expect(await limited.settled().isSame(as: outcome.outcome))
    }

    @Test func timeoutOfACompletedFutureIsTheFutureItself() {
        let done = Future(value: 3)
        #expect(done.timeout(.zero) === done)
    }

    // MARK: - TimerQueue

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func timersFireInDeadlineOrder() async throws {
        let queue = TimerQueue()
        let order = Locked<[Int]>([])
        let done = Promise<Void>()
        for (index, delay) in [(2, 60), (0, 20), (1, 40)] {
            queue.schedule(after: .milliseconds(delay)) {
                order.append(index)
                if index == 2 { done.succeed(()) }
            }
        }
        try await done.future.value
        #expect(order.value == [0, 1, 2])
        #expect(queue.pendingCount == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func cancelledTimerNeverFires() async throws {
        let queue = TimerQueue()
        let fired = Counter()
        let cancelled = queue.schedule(after: .milliseconds(10)) { fired.increment() }
        let later = Promise<Void>()
        queue.schedule(after: .milliseconds(50)) { later.succeed(()) }
        #expect(queue.pendingCount == 2)
        #expect(queue.cancel(cancelled) == true)
        #expect(queue.cancel(cancelled) == false)
        #expect(queue.pendingCount == 1)
        try await later.future.value
        #expect(fired.value == 0)
        #expect(queue.pendingCount == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func cancelAfterTheTimerFiredReturnsFalse() async throws {
        let queue = TimerQueue()
        let fired = Promise<Void>()
        let id = queue.schedule(after: .zero) { fired.succeed(()) }
        try await fired.future.value
        #expect(queue.cancel(id) == false)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func anEarlierTimerScheduledLaterWakesTheQueue() async throws {
        let queue = TimerQueue()
        let late = queue.schedule(after: .seconds(3600)) {}
        let fired = Promise<Void>()
        let start = ContinuousClock.now
        queue.schedule(after: .milliseconds(10)) { fired.succeed(()) }
        try await fired.future.value
        #expect(ContinuousClock.now - start < promptly)
        #expect(queue.cancel(late))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func manyCancelledLongTimersAreCompacted() async throws {
        let queue = TimerQueue()
        let ids = (0..<5_000).map { _ in queue.schedule(after: .seconds(3600)) {} }
        for id in ids { queue.cancel(id) }
        #expect(queue.pendingCount == 0)
        let fired = Promise<Void>()
        queue.schedule(after: .milliseconds(1)) { fired.succeed(()) }
        try await fired.future.value
        #expect(queue.pendingCount == 0)
    }

    @Test func timerIDsAreDistinct() {
        let queue = TimerQueue()
        let a = queue.schedule(after: .seconds(3600)) {}
        let b = queue.schedule(after: .seconds(3600)) {}
        #expect(a != b)
        #expect(queue.cancel(a))
        #expect(queue.cancel(b))
    }
}
