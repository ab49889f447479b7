import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// Debug builds only (SwiftPM passes -DDEBUG; `swift test --sanitize=thread` is a debug build).
// Release builds keep `Synchronization.Mutex`: this lock costs ~35% on the continuation-chain
// benchmarks (continue_1m 88 -> 123-131 ms, pending_chain_1m 474-528 -> 585-726 ms, measured here).
#if DEBUG
/// A mutual-exclusion lock around a value, with the API of `Synchronization.Mutex`, built on a
/// pthread mutex so that ThreadSanitizer sees it.
///
/// In debug builds it shadows `Synchronization.Mutex` inside TaskCore (the module's own declaration
/// wins name lookup), so the call sites are unchanged and behave the same in both configurations.
///
/// Why not the standard one: on Linux, `Synchronization.Mutex` takes and releases a contended lock
/// through a priority-inheritance futex in the uninstrumented standard library, so ThreadSanitizer
/// never learns that the lock orders the critical sections, and reports every contended `withLock`
/// as a data race (checked with Swift 6.3.1: two threads appending to a `Mutex<[Int]>` are
/// reported). TSan intercepts `pthread_mutex_lock`, so this lock keeps `swift test
/// --sanitize=thread` meaningful.
///
/// Cost: about 10 ns per uncontended lock/unlock pair instead of 6 ns, and 40 bytes of
/// `pthread_mutex_t` instead of a 4-byte futex word — which is why it exists in debug builds only.
///
/// The lock and the value live on the heap (stable addresses: a pthread mutex must not move once
/// in use). Not in `Synchronization._Cell`s: a struct with its own `deinit` around a `_Cell` did not
/// always destroy the cell's value in debug builds (seen with Swift 6.3.1: a fresh build leaked every
/// future's value, an incremental one did not), so this type owns and frees both explicitly.
struct Mutex<Value: ~Copyable>: ~Copyable {
    private let lock: UnsafeMutablePointer<pthread_mutex_t>
    private let value: UnsafeMutablePointer<Value>

    init(_ initialValue: consuming sending Value) {
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
    borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(self.lock)
        defer { pthread_mutex_unlock(self.lock) }
        return try body(&self.value.pointee)
    }
}

// @unchecked Sendable, as `Synchronization.Mutex`: the value is only reached inside `withLock`,
// under the pthread mutex, which serialises every access whatever thread makes it.
extension Mutex: @unchecked Sendable where Value: ~Copyable {}
#endif
