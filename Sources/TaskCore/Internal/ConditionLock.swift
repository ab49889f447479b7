#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A pthread mutex with a condition variable on the monotonic clock.
///
/// `Mutex` from Synchronization has no condition variable; worker pools and the timer thread need
/// one to sleep without spinning.
// @unchecked Sendable: the two pthread objects are allocated once in `init`, never reassigned, and
// pthread mutexes and condition variables are made to be used from any thread.
final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>

    init() {
        self.mutex = .allocate(capacity: 1)
        self.cond = .allocate(capacity: 1)
        pthread_mutex_init(self.mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        #if !canImport(Darwin)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        #endif
        pthread_cond_init(self.cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(self.cond)
        pthread_mutex_destroy(self.mutex)
        self.cond.deallocate()
        self.mutex.deallocate()
    }

    @inline(__always) func lock() { pthread_mutex_lock(self.mutex) }
    @inline(__always) func unlock() { pthread_mutex_unlock(self.mutex) }

    @inline(__always) func withLock<R>(_ body: () throws -> R) rethrows -> R {
        self.lock()
        defer { self.unlock() }
        return try body()
    }

    /// Waits for a signal; the lock must be held.
    func wait() { pthread_cond_wait(self.cond, self.mutex) }

    /// Waits for a signal or until `deadline` (monotonic nanoseconds); the lock must be held.
    func wait(untilNanoseconds deadline: UInt64) {
        var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        pthread_cond_timedwait(self.cond, self.mutex, &ts)
    }

    func signal() { pthread_cond_signal(self.cond) }
    func broadcast() { pthread_cond_broadcast(self.cond) }
}

/// Monotonic time in nanoseconds (CLOCK_MONOTONIC), the clock of `ConditionLock` and the timer queue.
@inline(__always) func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

extension Duration {
    /// The duration in whole nanoseconds, clamped at zero and at about 292 years.
    var clampedNanoseconds: UInt64 {
        let (seconds, attoseconds) = self.components
        // Both components carry the sign: -0.5 s is (0, -5e17), so `seconds` alone is not enough.
        if seconds < 0 || attoseconds < 0 { return 0 }
        if seconds >= 9_000_000_000 { return UInt64(Int64.max) }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}
