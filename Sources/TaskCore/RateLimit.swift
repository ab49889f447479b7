/// How many pieces of work may start per period on a pool (SPEC §8: `--executor io=64,rate=100/s`).
///
/// Enforced as a token bucket: it holds at most `burst` tokens, gains `count` tokens per `period`
/// continuously (100/s is one every 10 ms, not 100 at each second's start), and each start takes
/// one. It starts full, so an idle pool may start `burst` at once; over any window of length `t`
/// at most `burst + count × t / period` start.
public struct RateLimit: Sendable, Equatable, CustomStringConvertible {
    /// Starts per period (at least 1).
    public var count: Int
    /// The period: one second or one minute in the server's syntax.
    public var period: Duration
    /// The most that may start at once after an idle spell (at least 1).
    public var burst: Int

    /// The default burst: a tenth of a period's starts, at least 1 — small enough that a 100/s
    /// limit stays within 1% over ten seconds, large enough to absorb a timer's lateness.
    public static func defaultBurst(count: Int) -> Int { Swift.max(1, count / 10) }

    public init(count: Int, period: Duration, burst: Int? = nil) {
        precondition(count >= 1 && period > .zero, "RateLimit: count and period must be positive")
        self.count = count
        self.period = period
        self.burst = Swift.max(1, burst ?? Self.defaultBurst(count: count))
    }

    /// `100/s`, `600/m` (with `,burst=N` when not the default).
    public var description: String {
        let unit = self.period == .seconds(60) ? "m" : self.period == .seconds(1) ? "s" : "\(self.period)"
        let burst = self.burst == Self.defaultBurst(count: self.count) ? "" : ",burst=\(self.burst)"
        return "\(self.count)/\(unit)\(burst)"
    }
}

/// The state of a `RateLimit`: tokens now, refilled lazily from the monotonic clock.
package struct TokenBucket: Sendable {
    package let limit: RateLimit
    private var nanosecondsPerToken: Double
    private var burst: Double
    private var tokens: Double
    private var refilledAt: UInt64
    /// The part of `limit` this bucket gives out (`share`).
    package private(set) var share = 1.0

    package init(_ limit: RateLimit, now: UInt64 = monotonicNanoseconds()) {
        self.limit = limit
        self.nanosecondsPerToken = Double(limit.period.clampedNanoseconds) / Double(limit.count)
        self.burst = Double(limit.burst)
        self.tokens = Double(limit.burst)
        self.refilledAt = now
    }

    /// Gives out `share` (0 < share ≤ 1) of the limit from now on: tokens accrue `share` times as
    /// fast and the bucket holds `share` of the burst (at least one token).
    package mutating func setShare(_ share: Double, now: UInt64 = monotonicNanoseconds()) {
        let share = Swift.min(1, Swift.max(share, 0.0001))
        self.refill(now)
        self.share = share
        self.nanosecondsPerToken = Double(self.limit.period.clampedNanoseconds) / Double(self.limit.count) / share
        self.burst = Swift.max(1, Double(self.limit.burst) * share)
        self.tokens = Swift.min(self.tokens, self.burst)
    }

    private mutating func refill(_ now: UInt64) {
        guard now > self.refilledAt else { return }
        let gained = Double(now - self.refilledAt) / self.nanosecondsPerToken
        self.tokens = Swift.min(self.burst, self.tokens + gained)
        self.refilledAt = now
    }

    /// Takes a token if there is one.
    package mutating func take(now: UInt64 = monotonicNanoseconds()) -> Bool {
        self.refill(now)
        guard self.tokens >= 1 else { return false }
        self.tokens -= 1
        return true
    }

    /// Tokens now (fractional while one accrues).
    package mutating func available(now: UInt64 = monotonicNanoseconds()) -> Double {
        self.refill(now)
        return self.tokens
    }

    /// Nanoseconds until a whole token is available (0 when one is).
    package mutating func nanosecondsUntilToken(now: UInt64 = monotonicNanoseconds()) -> UInt64 {
        self.refill(now)
        if self.tokens >= 1 { return 0 }
        return UInt64(((1 - self.tokens) * self.nanosecondsPerToken).rounded(.up))
    }
}
