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
    /// A callback list (with its outcome and its future) of a future that completed while this
    /// thread was already draining; stored as a value, not a closure, to save an allocation per link.
    struct Deferred {
        var callbacks: ErasedCallbackList
        var outcome: ErasedOutcome
        var future: any AnyObject & Sendable
    }
    /// The deferred queue is `deferredFirst` followed by `deferredRest` (FIFO). A chain defers one
    /// list at a time, so the common case stays in the single slot and skips the ring buffer's
    /// bookkeeping; `deferredFirst` is only filled when the whole queue is empty, which keeps order.
    @exclusivity(unchecked) var deferredFirst: Deferred? = nil
    @exclusivity(unchecked) var deferredRest = RingBuffer<Deferred>(capacity: 16)
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
        while let next = self.dequeueDeferred() {
            // The future rides along: its callbacks get it as an argument.
            next.callbacks.run(next.outcome, next.future)
        }
        self.isDraining = false
    }

    /// Queues a completed future's callbacks behind the ones already deferred.
    @inline(__always) func enqueueDeferred(
        _ callbacks: consuming ErasedCallbackList,
        _ outcome: ErasedOutcome,
        _ future: any AnyObject & Sendable
    ) {
        let deferred = Deferred(callbacks: callbacks, outcome: outcome, future: future)
        if case .none = self.deferredFirst, self.deferredRest.isEmpty {
            self.deferredFirst = deferred
        } else {
            self.deferredRest.append(deferred)
        }
    }

    /// The oldest deferred entry, removed from the queue.
    @inline(__always) func dequeueDeferred() -> Deferred? {
        if let first = self.deferredFirst.take() { return first }
        return self.deferredRest.popFirst()
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
