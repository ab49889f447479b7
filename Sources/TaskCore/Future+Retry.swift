// MARK: - Retry with exponential back-off

/// When and how long to wait before trying a failed operation again.
///
/// The delay before attempt *n + 1* is `initialDelay × backoff^(n − 1)`, capped at `maxDelay`.
/// With `jitter`, each delay is drawn uniformly from [delay / 2, delay] ("equal jitter"): retries of
/// many clients spread out, yet none retries much sooner than the schedule says.
public struct RetryPolicy: Sendable, Equatable {
    /// Total attempts, the first included (1 = no retry).
    public var maxAttempts: Int
    /// The delay before the second attempt.
    public var initialDelay: Duration
    /// The factor by which each delay grows (≥ 1).
    public var backoff: Double
    /// The longest delay, if any.
    public var maxDelay: Duration?
    /// Whether delays are randomised (see the type's documentation).
    public var jitter: Bool

    public init(
        maxAttempts: Int = 1,
        initialDelay: Duration = .zero,
        backoff: Double = 2,
        maxDelay: Duration? = nil,
        jitter: Bool = false
    ) {
        self.maxAttempts = Swift.max(1, maxAttempts)
        self.initialDelay = initialDelay
        self.backoff = Swift.max(1, backoff)
        self.maxDelay = maxDelay
        self.jitter = jitter
    }

    /// The delay after failed attempt `attempt` (1-based) before the next one.
    public func delay(afterAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let base = Double(self.initialDelay.clampedNanoseconds)
        var nanoseconds = base * pow(self.backoff, Double(Swift.max(0, attempt - 1)))
        if let maxDelay { nanoseconds = Swift.min(nanoseconds, Double(maxDelay.clampedNanoseconds)) }
        nanoseconds = Swift.min(nanoseconds, 8.64e16)  // one thousand days: beyond any sane schedule
        if self.jitter, nanoseconds > 0 {
            nanoseconds = Double.random(in: (nanoseconds / 2)...nanoseconds, using: &generator)
        }
        return .nanoseconds(Int64(nanoseconds))
    }

    /// The delay after failed attempt `attempt`, with the system's random generator for jitter.
    public func delay(afterAttempt attempt: Int) -> Duration {
        var generator = SystemRandomNumberGenerator()
        return self.delay(afterAttempt: attempt, using: &generator)
    }
}

extension Future {
    /// Runs `operation(attempt)` (attempt counts from 1) until it succeeds, is cancelled, or fails
    /// with an error `shouldRetry` rejects, waiting by `policy` between attempts without holding a
    /// thread. Cancelling `token` stops the waiting at once; a cancellation is never retried.
    ///
    /// - Parameters:
    ///   - onRetry: called before each wait with the failed attempt's number, its error and the delay.
    public static func retrying(
        _ policy: RetryPolicy,
        cancellationToken token: CancellationToken? = nil,
        shouldRetry: @escaping @Sendable (any Error) -> Bool = { _ in true },
        onRetry: @escaping @Sendable (_ attempt: Int, _ error: any Error, _ delay: Duration) -> Void = { _, _, _ in },
        _ operation: @escaping @Sendable (_ attempt: Int) -> Future<Value>
    ) -> Future<Value> {
        let promise = Promise<Value>()
        @Sendable func attempt(_ number: Int) {
            if token?.isCancellationRequested == true {
                promise.tryCancel()
                return
            }
            operation(number).whenComplete { outcome in
                guard case .failure(let error) = outcome, number < policy.maxAttempts, shouldRetry(error),
                    token?.isCancellationRequested != true
                else {
                    promise.tryComplete(with: outcome)
                    return
                }
                let delay = policy.delay(afterAttempt: number)
                onRetry(number, error, delay)
                Future<Void>.delay(delay, token: token).whenComplete { waited in
                    if waited.isCancelled { promise.tryCancel() } else { attempt(number + 1) }
                }
            }
        }
        attempt(1)
        return promise.future
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
