#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// Time as the package counts it, in one place: a monotonic clock for deadlines and durations, and
// `Duration` in whole units. `package`, not `public`: every module of TaskServer uses them, users
// of TaskCore have `ContinuousClock`.

/// Monotonic time in nanoseconds (CLOCK_MONOTONIC): the clock of `ConditionLock`, the timer queue,
/// request and transfer timings. A bare `clock_gettime`, cheaper than `ContinuousClock.now`.
@inline(__always) package func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

extension Duration {
    /// The duration in whole nanoseconds, clamped at zero and at about 292 years.
    package var clampedNanoseconds: UInt64 {
        let (seconds, attoseconds) = self.components
        // Both components carry the sign: -0.5 s is (0, -5e17), so `seconds` alone is not enough.
        if seconds < 0 || attoseconds < 0 { return 0 }
        if seconds >= 9_000_000_000 { return UInt64(Int64.max) }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }

    /// The duration in whole nanoseconds (truncated toward zero), saturating at `Int64`'s bounds.
    package var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return whole.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }

    /// The duration in whole milliseconds (truncated toward zero), saturating.
    package var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? .min : .max }
        return whole.addingReportingOverflow(attoseconds / 1_000_000_000_000_000).partialValue
    }
}
