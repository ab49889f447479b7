import Synchronization

/// The result of an asynchronous operation that may not have finished yet — Bolts' `BFTask`.
///
/// A future is pending until it completes exactly once with a value, an error, or cancellation
/// (`Outcome`). Work is chained onto it with the `continueWith` family, which returns new futures,
/// and futures are combined with `whenAll` / `whenAny`. Futures are created completed by the
/// factories (`Future(value:)`, `Future(error:)`, `Future.cancelled()`) or pending through a
/// `Promise` (Bolts' `TaskCompletionSource`).
///
/// ```swift
/// let saved = fetchUser(id: 7)
///     .continueOnSuccessWith { user in user.renamed("Ada") }
///     .continueOnSuccessWithTask { user in save(user) }
///     .continueOnErrorWith { error in fallbackUser }
/// ```
///
/// - Note: A future is safe to use from any thread. Callbacks never run under its lock, and a
///   completed future drops its callbacks, so nothing keeps a finished chain alive.
// Not final: `ContinuationFuture` (internal; the class cannot be subclassed outside TaskCore) adds
// the body of a continuation, which saves an allocation per link of a chain.
// @unchecked Sendable only because a non-final class cannot be checked `Sendable`: the one stored
// property is a `let` `Mutex`, which is `Sendable`.
public class Future<Value: Sendable>: @unchecked Sendable {
    // The state is type-erased on purpose. A generic stored property (say `Mutex<State<Value>>`)
    // makes the class's destroyer, which is never specialized, look up generic metadata on every
    // deinit: profiling showed 40% of a continuation chain's time in those lookups. The erased
    // state has concrete types, and the typed API converts at the edges (`as!` of a value this
    // future itself stored, so the cast cannot fail).
    final let state: Mutex<ErasedState>

    /// A pending future; only `Promise` creates these.
    init() {
        self.state = Mutex(.pending(.none))
    }

    deinit {
        // An abandoned pending future still holds its callbacks, which hold the futures they would
        // have completed, which hold theirs: releasing a long abandoned chain would recurse once per
        // link and overflow the stack. The thread's context releases them iteratively instead.
        let callbacks: ErasedCallbackList = self.state.withLock { state in
            guard case .pending(let callbacks) = state, !callbacks.isEmpty else { return .none }
            state = .pending(.none)
            return callbacks
        }
        if !callbacks.isEmpty { ThreadContext.current.release(consume callbacks) }
    }

    /// A future that is already complete with `outcome`.
    public init(outcome: Outcome<Value>) {
        self.state = Mutex(.completed(ErasedOutcome(outcome)))
    }

    /// A future that already succeeded with `value`.
    public convenience init(value: Value) {
        self.init(outcome: .success(value))
    }

    /// A future that already failed with `error`.
    public convenience init(error: any Error) {
        self.init(outcome: .failure(error))
    }

    /// A future that is already cancelled.
    public static func cancelled() -> Future<Value> {
        Future(outcome: .cancelled)
    }

    // MARK: - State

    /// The outcome, or `nil` while the future is pending.
    public final var outcome: Outcome<Value>? {
        let erased: ErasedOutcome? = self.state.withLock { state in
            if case .completed(let outcome) = state { return outcome }
            return nil
        }
        return erased.map(Outcome.init(erased:))
    }

    /// `true` once the future has completed in any way.
    public final var isCompleted: Bool {
        self.state.withLock { state in
            if case .completed = state { return true }
            return false
        }
    }

    /// `true` when the future completed by cancellation.
    public final var isCancelled: Bool { self.outcome?.isCancelled ?? false }

    /// `true` when the future completed with an error.
    public final var isFaulted: Bool { self.outcome?.error != nil }

    /// `true` when the future completed with a value.
    public final var isSucceeded: Bool { self.outcome?.value != nil }

    /// The value, when the future succeeded (Bolts' `result`).
    public final var result: Value? { self.outcome?.value }

    /// The error, when the future failed.
    public final var error: (any Error)? { self.outcome?.error }

    // MARK: - Completion

    /// Completes the future unless it already is; returns whether this call completed it.
    @discardableResult
    final func tryComplete(_ outcome: Outcome<Value>) -> Bool {
        self.tryComplete(erased: ErasedOutcome(outcome))
    }

    /// Completes the future unless it already is; returns whether this call completed it.
    ///
    /// The callbacks run after the lock is released. A completion that happens while this thread is
    /// already running callbacks is queued on the thread's trampoline (see `ThreadContext`), which
    /// keeps long chains iterative.
    @discardableResult
    final func tryComplete(erased outcome: ErasedOutcome) -> Bool {
        let callbacks: ErasedCallbackList? = self.state.withLock { state in
            guard case .pending = state else { return nil }
            // Swap the list out rather than bind a copy of it: a copy costs a retain here and a
            // release when the state is overwritten, on every link of a chain.
            var taken = ErasedState.completed(outcome)
            swap(&state, &taken)
            guard case .pending(let callbacks) = consume taken else { return nil }
            return callbacks
        }
        guard let callbacks else { return false }
        if callbacks.isEmpty { return true }
        let context = ThreadContext.current
        if context.isDraining {
            context.enqueueDeferred(callbacks, outcome, self)
        } else {
            context.isDraining = true
            callbacks.run(outcome, self)
            context.finishDraining()
        }
        return true
    }

    /// Calls `callback` with the erased outcome and this future once the future completes (at once if
    /// it has).
    ///
    /// The callback gets the future as an argument so that it need not capture it: a callback stored
    /// in this future's own list that captured it strongly would be a retain cycle, and an unowned
    /// capture costs three atomic unowned-count updates per continuation.
    final func whenCompleteErased(_ callback: @escaping ErasedCallback) {
        let outcome: ErasedOutcome? = self.state.withLock { state in
            switch state {
            case .completed(let outcome):
                return outcome
            case .pending(var callbacks):
                state = .pending(.none)
                callbacks.append(callback)
                state = .pending(callbacks)
                return nil
            }
        }
        if let outcome { callback(outcome, self) }
    }

    /// Runs the continuation `node` (see `ContinuationFuture`) with `invoke` once this future
    /// completes (at once if it has): stored as the list's `.continuation` case, with no closure.
    final func whenCompleteContinuation(_ invoke: @escaping ContinuationInvoker, _ node: any AnyObject & Sendable) {
        let outcome: ErasedOutcome? = self.state.withLock { state in
            switch state {
            case .completed(let outcome):
                return outcome
            case .pending(var callbacks):
                state = .pending(.none)
                callbacks.append(invoke, node)
                state = .pending(callbacks)
                return nil
            }
        }
        if let outcome { invoke(node, outcome, self) }
    }

    /// Calls `callback` with the outcome once the future completes — at once, on this thread, when it
    /// already has.
    ///
    /// This is the primitive under every continuation; it runs the callback inline (on the thread
    /// that completes the future), so the callback must be short and must not block. Use a
    /// continuation with an executor to run real work.
    public final func whenComplete(_ callback: @escaping @Sendable (Outcome<Value>) -> Void) {
        self.whenCompleteErased({ erased, _ in callback(Outcome(erased: erased)) })
    }
}

// MARK: - Type-erased state

/// An outcome whose value is boxed in a `ValueBox` (see the comment on `Future.state`).
enum ErasedOutcome: Sendable {
    case success(AnyValueBox)
    /// A success whose value is plain data of at most 16 bytes (`Void`, `Int`, `Bool`, …), stored
    /// inline to save the box's allocation.
    case successInline(InlineBits)
    case failure(any Error)
    case cancelled

    @inline(__always) init<Value>(_ outcome: Outcome<Value>) {
        switch outcome {
        case .success(let value):
            if InlineBits.fits(Value.self) {
                self = .successInline(InlineBits(value))
            } else {
                self = .success(ValueBox(value))
            }
        case .failure(let error): self = .failure(error)
        case .cancelled: self = .cancelled
        }
    }

}

/// Sixteen bytes that hold a trivial value of at most that size.
struct InlineBits: Sendable {
    var low: UInt64 = 0
    var high: UInt64 = 0

    /// Whether values of `type` can be stored inline: trivial (no references to count), small, and
    /// no more aligned than the storage. A constant in specialized code.
    @inline(__always) static func fits<Value>(_ type: Value.Type) -> Bool {
        _isPOD(Value.self) && MemoryLayout<Value>.size <= 16 && MemoryLayout<Value>.alignment <= 8
    }

    @inline(__always) init<Value>(_ value: Value) {
        withUnsafeMutableBytes(of: &self) { raw in raw.storeBytes(of: value, as: Value.self) }
    }

    @inline(__always) func load<Value>(as type: Value.Type) -> Value {
        withUnsafeBytes(of: self) { raw in raw.load(as: Value.self) }
    }
}

/// The non-generic base of `ValueBox`, so the erased state has a concrete type.
class AnyValueBox: @unchecked Sendable {}

/// A completed future's value.
///
/// A class whose only generic field has the type `Value` itself: its destroyer finds `Value`'s
/// metadata in the class metadata, with no lookup, and the typed side reads it back with an
/// unchecked downcast instead of a dynamic cast from an existential.
// @unchecked Sendable: `value` is immutable and `Value: Sendable` is enforced by `init`'s callers
// (every `Future<Value>` requires it).
final class ValueBox<Value>: AnyValueBox, @unchecked Sendable {
    let value: Value
    @inline(__always) init(_ value: Value) { self.value = value }
}

extension Outcome {
    /// The typed outcome of an erased one that a `Future<Value>` stored.
    @inline(__always) init(erased: ErasedOutcome) {
        switch erased {
        // The box was made by a Future<Value> from a Value, so the unchecked downcast is exact.
        case .success(let box): self = .success(unsafeDowncast(box, to: ValueBox<Value>.self).value)
        case .successInline(let bits): self = .success(bits.load(as: Value.self))
        case .failure(let error): self = .failure(error)
        case .cancelled: self = .cancelled
        }
    }
}

/// A callback of a pending future: it gets the outcome and the future that completed (always a
/// `Future<Value>` for the `Value` the callback was registered with, so `unsafeDowncast` is exact).
typealias ErasedCallback = @Sendable (ErasedOutcome, any AnyObject & Sendable) -> Void

/// Runs the continuation future `node` (first argument) with the outcome of its antecedent (third
/// argument). Created in code specialized for the types of both futures, so it captures nothing
/// and storing it allocates nothing.
typealias ContinuationInvoker = @Sendable (any AnyObject & Sendable, ErasedOutcome, any AnyObject & Sendable) -> Void

enum ErasedState {
    case pending(ErasedCallbackList)
    case completed(ErasedOutcome)
}

/// Callbacks of a pending future; the first one is stored without an array allocation.
enum ErasedCallbackList {
    case none
    case one(ErasedCallback)
    /// A lone continuation future and the function that runs it: no closure context to allocate.
    case continuation(ContinuationInvoker, any AnyObject & Sendable)
    case many([ErasedCallback])

    mutating func append(_ invoke: @escaping ContinuationInvoker, _ node: any AnyObject & Sendable) {
        if case .none = self {
            self = .continuation(invoke, node)
        } else {
            self.append({ outcome, antecedent in invoke(node, outcome, antecedent) })
        }
    }

    mutating func append(_ callback: @escaping ErasedCallback) {
        switch self {
        case .none: self = .one(callback)
        case .one(let first): self = .many([first, callback])
        case .continuation(let invoke, let node):
            self = .many([{ outcome, antecedent in invoke(node, outcome, antecedent) }, callback])
        case .many(var all):
            self = .none  // drop the enum's reference so `all` is uniquely owned and grows in place
            all.append(callback)
            self = .many(all)
        }
    }

    var isEmpty: Bool {
        if case .none = self { return true }
        return false
    }

    func run(_ outcome: ErasedOutcome, _ future: any AnyObject & Sendable) {
        switch self {
        case .none: break
        case .one(let callback): callback(outcome, future)
        case .continuation(let invoke, let node): invoke(node, outcome, future)
        case .many(let all): for callback in all { callback(outcome, future) }
        }
    }
}
