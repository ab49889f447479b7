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
/// The lock and the value live in `_Cell`s (raw storage with a stable address, as in the standard
/// `Mutex`): a pthread mutex must not move once in use. Like the standard one, keep it in a `let`
/// of a class (or a global), never in a `var` that could be moved.
struct Mutex<Value: ~Copyable>: ~Copyable {
    private let lock: Synchronization._Cell<pthread_mutex_t>
    private let cell: Synchronization._Cell<Value>

    init(_ initialValue: consuming sending Value) {
        self.lock = Synchronization._Cell(pthread_mutex_t())
        pthread_mutex_init(self.lock._address, nil)
        self.cell = Synchronization._Cell(initialValue)
    }

    deinit {
        pthread_mutex_destroy(self.lock._address)
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(self.lock._address)
        defer { pthread_mutex_unlock(self.lock._address) }
        return try body(&self.cell._address.pointee)
    }
}

// @unchecked Sendable, as `Synchronization.Mutex`: the value is only reached inside `withLock`,
// under the pthread mutex, which serialises every access whatever thread makes it.
extension Mutex: @unchecked Sendable where Value: ~Copyable {}
#endif
