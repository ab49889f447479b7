#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Per-thread state of TaskCore: the trampoline that keeps completion propagation iterative, and
/// the inline-depth counter of the default executor.
///
/// Its fields skip Swift's dynamic exclusivity checks (`@exclusivity(unchecked)`): a context is
/// only ever touched by its own thread, so accesses cannot overlap, and the checks cost ~7% of a
/// continuation chain.
///
/// Looked up through a pthread key (a few nanoseconds), not `Thread.threadDictionary` (~5 µs on Linux).
final class ThreadContext {
    /// True while this thread is running the callbacks of a completed future.
    @exclusivity(unchecked) var isDraining = false
    /// Callback lists (with their outcome and their future) of futures that completed while this
    /// thread was already draining; stored as values, not closures, to save an allocation per link.
    @exclusivity(unchecked) var deferred = RingBuffer<(ErasedCallbackList, ErasedOutcome, any AnyObject & Sendable)>(capacity: 16)
    /// How many default-executor continuations are running inline, nested, on this thread.
    @exclusivity(unchecked) var inlineDepth = 0

    /// The calling thread's context, created on first use and released when the thread exits.
    static var current: ThreadContext {
        @inline(__always) get {
            if let raw = pthread_getspecific(threadContextKey) {
                return Unmanaged<ThreadContext>.fromOpaque(raw).takeUnretainedValue()
            }
            let context = ThreadContext()
            pthread_setspecific(threadContextKey, Unmanaged.passRetained(context).toOpaque())
            return context
        }
    }

    /// Callback lists of abandoned pending futures waiting to be released (see `Future.deinit`).
    @exclusivity(unchecked) var graveyard: [ErasedCallbackList] = []
    @exclusivity(unchecked) var isReleasing = false

    /// Releases `callbacks` here, or — when this thread is already releasing an abandoned chain —
    /// queues them for the outer loop, so that releasing a chain takes constant stack.
    func release(_ callbacks: consuming ErasedCallbackList) {
        self.graveyard.append(callbacks)
        if self.isReleasing { return }
        self.isReleasing = true
        while let next = self.graveyard.popLast() { _ = consume next }
        self.isReleasing = false
    }

    /// Runs the deferred work queued while this thread was draining, then leaves draining mode.
    ///
    /// The completion path of `Future` sets `isDraining` before it runs a callback list; a future
    /// completed by one of those callbacks queues its own list in `deferred` instead of running it
    /// recursively. The outermost completion drains the queue here, so a chain of a million
    /// continuations completes in constant stack space (Bolts-Swift overflows at ~10,000 links).
    @inline(__always) func finishDraining() {
        while let (callbacks, outcome, future) = self.deferred.popFirst() {
            // The future rides along: its callbacks get it as an argument.
            callbacks.run(outcome, future)
        }
        self.isDraining = false
    }
}

private let threadContextKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
        guard let raw else { return }
        Unmanaged<ThreadContext>.fromOpaque(raw).release()
    }
    precondition(status == 0, "TaskCore: pthread_key_create failed (\(status))")
    return key
}()
