import TestSupport
import Testing

@testable import TaskCore

struct RetryTests {
    // MARK: - RetryPolicy delays

    @Test(arguments: [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1_600), (10, 51_200)])
    func delaysGrowExponentially(attempt: Int, milliseconds: Int) {
        let policy = RetryPolicy(maxAttempts: 20, initialDelay: .milliseconds(100), backoff: 2)
        #expect(policy.delay(afterAttempt: attempt) == .milliseconds(milliseconds))
    }

    @Test(arguments: [(1, 100), (2, 300), (3, 900), (4, 2_000), (8, 2_000), (60, 2_000)])
    func delaysAreCappedByMaxDelay(attempt: Int, milliseconds: Int) {
        let policy = RetryPolicy(
            maxAttempts: 100,
            initialDelay: .milliseconds(100),
            backoff: 3,
            maxDelay: .seconds(2)
        )
        #expect(policy.delay(afterAttempt: attempt) == .milliseconds(milliseconds))
    }

    @Test func hugeExponentsStayFinite() {
        let policy = RetryPolicy(maxAttempts: 10_000, initialDelay: .seconds(1), backoff: 10)
        let delay = policy.delay(afterAttempt: 5_000)
        #expect(delay > .zero)
        #expect(delay <= .seconds(86_400_000))
    }

    @Test func jitteredDelaysStayWithinHalfToFullOfTheSchedule() {
        let plain = RetryPolicy(maxAttempts: 50, initialDelay: .milliseconds(100), backoff: 2, maxDelay: .seconds(30))
        var jittered = plain
        jittered.jitter = true
        var generator = SplitMix64(seed: 42)
        var distinct = Set<Duration>()
        for round in 0..<200 {
            let attempt = round % 12 + 1
            let full = plain.delay(afterAttempt: attempt)
            let delay = jittered.delay(afterAttempt: attempt, using: &generator)
            #expect(delay >= full / 2, "attempt \(attempt): \(delay) < \(full / 2)")
            #expect(delay <= full, "attempt \(attempt): \(delay) > \(full)")
            distinct.insert(delay)
        }
        // Jitter really randomises: 200 draws are not a handful of fixed values.
        #expect(distinct.count > 100)
    }

    @Test func jitterIsReproducibleWithTheSameSeed() {
        let policy = RetryPolicy(maxAttempts: 10, initialDelay: .seconds(1), jitter: true)
        var first = SplitMix64(seed: 7)
        var second = SplitMix64(seed: 7)
        var other = SplitMix64(seed: 8)
        let a = (1...8).map { policy.delay(afterAttempt: $0, using: &first) }
        let b = (1...8).map { policy.delay(afterAttempt: $0, using: &second) }
        let c = (1...8).map { policy.delay(afterAttempt: $0, using: &other) }
        #expect(a == b)
        #expect(a != c)
    }

    @Test func zeroDelayStaysZeroWithJitter() {
        var generator = SplitMix64(seed: 1)
        let policy = RetryPolicy(maxAttempts: 3, initialDelay: .zero, jitter: true)
        #expect(policy.delay(afterAttempt: 1, using: &generator) == .zero)
    }

    @Test func policyClampsNonsensicalSettings() {
        let policy = RetryPolicy(maxAttempts: 0, initialDelay: .milliseconds(10), backoff: 0.5)
        #expect(policy.maxAttempts == 1)
        #expect(policy.backoff == 1)
        #expect(policy.delay(afterAttempt: 5) == .milliseconds(10))
        #expect(RetryPolicy(maxAttempts: -3).maxAttempts == 1)
    }

    @Test func negativeInitialDelayMeansNoWait() {
        let policy = RetryPolicy(maxAttempts: 3, initialDelay: .milliseconds(-250))
        #expect(policy.delay(afterAttempt: 1) == .zero)
    }

    // MARK: - Future.retrying

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func retryingSucceedsOnALaterAttempt() async throws {
        let attempts = Locked<[Int]>([])
        let retries = Locked<[Int]>([])
        let result = Future<String>.retrying(
            RetryPolicy(maxAttempts: 5, initialDelay: .milliseconds(1)),
            onRetry: { attempt, error, delay in
                retries.append(attempt)
                #expect((error as? TestError) == .code(attempt))
                #expect(delay == .milliseconds(1 << (attempt - 1)))
            }
        ) { attempt in
            attempts.append(attempt)
            return attempt < 3 ? Future(error: TestError.code(attempt)) : Future(value: "ok on \(attempt)")
        }
        #expect(try await result.value == "ok on 3")
        #expect(attempts.value == [1, 2, 3])
        #expect(retries.value == [1, 2])
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func retryingStopsAfterMaxAttemptsWithTheLastError() async {
        let calls = Counter()
        let retries = Locked<[Int]>([])
        let result = Future<Int>.retrying(
            RetryPolicy(maxAttempts: 4, initialDelay: .zero),
            onRetry: { attempt, _, _ in retries.append(attempt) }
        ) { attempt in
            calls.increment()
            return TestPools.shared.submit { throw TestError.code(attempt) }
        }
        let outcome = await result.settled()
        #expect((outcome.error as? TestError) == .code(4))
        #expect(calls.value == 4)
        #expect(retries.value == [1, 2, 3])
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func aRejectedErrorIsNotRetried() async {
        let calls = Counter()
        let retried = Counter()
        let result = Future<Int>.retrying(
            RetryPolicy(maxAttempts: 10, initialDelay: .zero),
            shouldRetry: { error in (error as? TestError) != .boom },
            onRetry: { _, _, _ in retried.increment() }
        ) { attempt in
            calls.increment()
            return Future(error: attempt == 1 ? TestError.code(1) : TestError.boom)
        }
        #expect((await result.settled().error as? TestError) == .boom)
        #expect(calls.value == 2)
        #expect(retried.value == 1)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func aCancelledAttemptIsNeverRetried() async {
        let calls = Counter()
        let result = Future<Int>.retrying(RetryPolicy(maxAttempts: 5)) { _ in
            calls.increment()
            return .cancelled()
        }
        #expect(await result.settled().isCancelled)
        #expect(calls.value == 1)
    }

    @Test func oneAttemptPolicyDoesNotRetry() {
        let calls = Counter()
        let result = Future<Int>.retrying(RetryPolicy()) { _ in
            calls.increment()
            return Future(error: TestError.boom)
        }
        #expect(result.testError == .boom)
        #expect(calls.value == 1)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func cancellingDuringTheWaitCancelsAtOnce() async {
        let source = CancellationTokenSource()
        let waiting = Promise<Duration>()
        let calls = Counter()
        let result = Future<Int>.retrying(
            RetryPolicy(maxAttempts: 3, initialDelay: .seconds(3600)),
            cancellationToken: source.token,
            onRetry: { _, _, delay in waiting.trySucceed(delay) }
        ) { _ in
            calls.increment()
            return Future(error: TestError.boom)
        }
        let delay = await waiting.future.settled()
        #expect(delay.value == .seconds(3600))
        let start = ContinuousClock.now
        source.cancel()
        #expect(await result.settled().isCancelled)
        #expect(ContinuousClock.now - start < promptly)
        #expect(calls.value == 1)
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test func alreadyCancelledTokenRunsNoAttempt() {
        let source = CancellationTokenSource()
        source.cancel()
        let calls = Counter()
        let result = Future<Int>.retrying(RetryPolicy(maxAttempts: 3), cancellationToken: source.token) { _ in
            Future(value: calls.increment())
        }
        #expect(result.isCancelled)
        #expect(calls.value == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func retryingWaitsTheScheduledDelays() async throws {
        let start = ContinuousClock.now
        let policy = RetryPolicy(maxAttempts: 3, initialDelay: .milliseconds(20), backoff: 2)
        let result = Future<Int>.retrying(policy) { attempt in
            attempt < 3 ? Future(error: TestError.code(attempt)) : Future(value: attempt)
        }
        #expect(try await result.value == 3)
        // 20 ms + 40 ms of back-off.
        #expect(ContinuousClock.now - start >= .milliseconds(60))
    }
}
