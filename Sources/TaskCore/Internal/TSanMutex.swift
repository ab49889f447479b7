#if TASKSERVER_TSAN
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutual-exclusion lock around a value, with the API of `Synchronization.Mutex`, built on a
/// pthread mutex so that ThreadSanitizer sees it. It exists only when the ThreadSanitizer run
/// defines `TASKSERVER_TSAN` (`swift test --sanitize=thread -Xswiftc -DTASKSERVER_TSAN`).
///
/// Every module of the package (TaskCore, TaskGraph, TaskServer and their tests) then declares
/// `typealias Mutex = TSanMutex` in a file of its own; a module's own declaration wins name lookup
/// over the imported `Synchronization.Mutex`, so call sites are unchanged. Every other build —
/// plain `swift test` included — runs the shipped `Synchronization.Mutex`. (An earlier version
/// swapped the lock in every debug build; that hid a leak of the shipped lock's path once.)
///
/// Why not the standard one under TSan: on Linux, `Synchronization.Mutex` takes and releases a
/// contended lock through a priority-inheritance futex in the uninstrumented standard library, so
/// ThreadSanitizer never learns that the lock orders the critical sections, and reports every
/// contended `withLock` as a data race (checked with Swift 6.3.1: two threads appending to a
/// `Mutex<[Int]>` are reported). TSan intercepts `pthread_mutex_lock`.
///
/// The lock and the value live on the heap (stable addresses: a pthread mutex must not move once
/// in use). Not in `Synchronization._Cell`s: a struct with its own `deinit` around a `_Cell` did not
/// always destroy the cell's value in debug builds (seen with Swift 6.3.1), so this type owns and
/// frees both explicitly.
package struct TSanMutex<Value: ~Copyable>: ~Copyable {
    private let lock: UnsafeMutablePointer<pthread_mutex_t>
    private let value: UnsafeMutablePointer<Value>

    package init(_ initialValue: consuming sending Value) {
        self.lock = .allocate(capacity: 1)
        self.lock.initialize(to: pthread_mutex_t())
        pthread_mutex_init(self.lock, nil)
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: initialValue)
    }

    deinit {
        pthread_mutex_destroy(self.lock)
        self.lock.deallocate()
        self.value.deinitialize(count: 1)
        self.value.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(self.lock)
        defer { pthread_mutex_unlock(self.lock) }
        return try body(&self.value.pointee)
    }
}

// @unchecked Sendable, as `Synchronization.Mutex`: the value is only reached inside `withLock`,
// under the pthread mutex, which serialises every access whatever thread makes it.
extension TSanMutex: @unchecked Sendable where Value: ~Copyable {}

/// Under ThreadSanitizer, TaskCore's locks are pthread mutexes (see `TSanMutex`).
typealias Mutex<Value: ~Copyable> = TSanMutex<Value>
#endif
