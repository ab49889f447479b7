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
