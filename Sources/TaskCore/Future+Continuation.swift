import Synchronization

// MARK: - continueWith family

extension Future {
    /// The outcome when a continuation may run right now, inline: the future is complete, the
    /// executor is immediate and there is no token. Continuations then skip their closures and
    /// callbacks entirely (the common case of chaining onto a completed future).
    @inline(__always)
    private func outcomeForInlineRun(on executor: some Executor, token: CancellationToken?) -> Outcome<Value>? {
        guard executor.isImmediate, token == nil else { return nil }
        return self.outcome
    }

    /// Runs `body` with the (erased) outcome and this future on `executor` once this future
    /// completes, unless `token` was cancelled by then (then `promise` is cancelled).
    ///
    /// Bodies take the erased outcome and the future so that, on the immediate executor without a
    /// token, `body` itself is the stored callback: one closure allocation per continuation, and no
    /// capture of this future (see `whenCompleteErased`).
    @inline(__always)
    private func schedule<New>(
        on executor: some Executor,
        token: CancellationToken?,
        promise: Promise<New>,
        _ body: @escaping ErasedCallback
    ) {
        if executor.isImmediate, token == nil {
            self.whenCompleteErased(body)
            return
        }
        self.whenCompleteErased({ erased, antecedent in
            // The closure handed to the executor holds the future strongly: it is not stored in the
            // future's own list, so this is no cycle, and the future lives until `body` has run.
            executor.execute {
                if let token, token.isCancellationRequested {
                    promise.tryCancel()
                    return
                }
                body(erased, antecedent)
            }
        })
    }

    /// Runs `body` after this future completes in any way and returns a future of its result
    /// (Bolts' `continueWith`).
    ///
    /// `body` receives this (completed) future. If it throws, the new future fails with that error;
    /// if it throws `CancellationError`, the new future is cancelled. If `token` is cancelled before
    /// `body` runs, `body` is not run and the new future is cancelled.
    ///
    /// - Parameters:
    ///   - executor: where `body` runs; default `.default` (inline while shallow).
    ///   - token: an optional cancellation token checked just before `body` runs.
    @discardableResult
    public func continueWith<New: Sendable>(
        on executor: some Executor = .default,
        cancellationToken token: CancellationToken? = nil,
        _ body: @escaping @Sendable (Future<Value>) throws -> New
    ) -> Future<New> {
        if executor.isImmediate, token == nil, self.isCompleted {
            return Future<New>(outcome: Outcome { try body(self) })
        }
        if executor.isImmediate, token == nil { return ContinuationFuture.attach(body, to: self) }
        let promise = Promise<New>()
        // The callback lives in this future's own callback list, so it must not capture this
        // future (a strong capture would keep an abandoned pending future and its continuation alive
        // forever); it gets the future as an argument instead.
        self.schedule(on: executor, token: token, promise: promise) { _, antecedent in
            // `antecedent` is this future (see `ErasedCallback`), so the downcast is exact.
            let antecedent = unsafeDowncast(antecedent, to: Future<Value>.self)
            promise.tryComplete(with: Outcome { try body(antecedent) })
        }
        return promise.future
    }

    /// Like `continueWith`, for a `body` that returns a future: the returned future completes with
    /// that future's outcome (Bolts' `continueWithTask`, flattened).
    ///
    /// With a `token`, the token is checked again when that future completes: if cancellation was
    /// requested by then (by the body itself, say), the returned future is cancelled, as in Bolts.
    /// The same holds for `continueOnSuccessWithTask` and `continueOnErrorWithTask`.
    @discardableResult
    public func continueWithTask<New: Sendable>(
        on executor: some Executor = .default,
        cancellationToken token: CancellationToken? = nil,
        _ body: @escaping @Sendable (Future<Value>) throws -> Future<New>
    ) -> Future<New> {
        if executor.isImmediate, token == nil, self.isCompleted {
            return Self.flattened(Outcome { try body(self) })
        }
        let promise = Promise<New>()
        // No capture of this future, for the reason given in `continueWith`.
        self.schedule(on: executor, token: token, promise: promise) { _, antecedent in
            let antecedent = unsafeDowncast(antecedent, to: Future<Value>.self)
            Self.flatten(Outcome { try body(antecedent) }, into: promise, token: token)
        }
        return promise.future
    }

    /// Runs `body` with the value when this future succeeds; an error or a cancellation passes
    /// through to the returned future without running `body` (Bolts' `continueOnSuccessWith`).
    @discardableResult
    public func continueOnSuccessWith<New: Sendable>(
        on executor: some Executor = .default,
        cancellationToken token: CancellationToken? = nil,
        _ body: @escaping @Sendable (Value) throws -> New
    ) -> Future<New> {
        if let outcome = self.outcomeForInlineRun(on: executor, token: token) {
            return Future<New>(outcome: outcome.map(body))
        }
        let promise = Promise<New>()
        self.schedule(on: executor, token: token, promise: promise) { erased, _ in
            let outcome = Outcome<Value>(erased: erased)
            promise.tryComplete(with: outcome.map(body))
        }
        return promise.future
    }

    /// Like `continueOnSuccessWith`, for a `body` that returns a future (flattened)
    /// (Bolts' `continueOnSuccessWithTask`).
    @discardableResult
    public func continueOnSuccessWithTask<New: Sendable>(
        on executor: some Executor = .default,
        cancellationToken token: CancellationToken? = nil,
        _ body: @escaping @Sendable (Value) throws -> Future<New>
    ) -> Future<New> {
        if let outcome = self.outcomeForInlineRun(on: executor, token: token) {
            return Self.flattened(outcome.map(body))
        }
        let promise = Promise<New>()
        self.schedule(on: executor, token: token, promise: promise) { erased, _ in
            let outcome = Outcome<Value>(erased: erased)
            Self.flatten(outcome.map(body), into: promise, token: token)
        }
        return promise.future
    }

    /// Runs `body` with the error when this future fails, and completes the returned future with
    /// its result: a handler that returns a value recovers the error. A success or a cancellation
    /// passes through unchanged without running `body` (Bolts' `continueOnErrorWith`).
    @discardableResult
    public func continueOnErrorWith(
        on executor: some Executor = .default,
        cancellationToken token: CancellationToken? = nil,
        _ body: @escaping @Sendable (any Error) throws -> Value
    ) -> Future<Value> {
        if let outcome = self.outcomeForInlineRun(on: executor, token: token) {
            guard case .failure(let error) = outcome else { return self }
            return Future(outcome: Outcome { try body(error) })
        }
        let promise = Promise<Value>()
        self.schedule(on: executor, token: token, promise: promise) { erased, _ in
            let outcome = Outcome<Value>(erased: erased)
            if case .failure(let error) = outcome {
                promise.tryComplete(with: Outcome { try body(error) })
            } else {
                promise.tryComplete(with: outcome)
            }
        }
        return promise.future
    }

    /// Like `continueOnErrorWith`, for a `body` that returns a future (flattened).
    @discardableResult
    public func continueOnErrorWithTask(
        on executor: some Executor = .default,
        cancellationToken token: CancellationToken? = nil,
        _ body: @escaping @Sendable (any Error) throws -> Future<Value>
    ) -> Future<Value> {
        if let outcome = self.outcomeForInlineRun(on: executor, token: token) {
            guard case .failure(let error) = outcome else { return self }
            return Self.flattened(Outcome { try body(error) })
        }
        let promise = Promise<Value>()
        self.schedule(on: executor, token: token, promise: promise) { erased, _ in
            let outcome = Outcome<Value>(erased: erased)
            if case .failure(let error) = outcome {
                Self.flatten(Outcome { try body(error) }, into: promise, token: token)
            } else {
                promise.tryComplete(with: outcome)
            }
        }
        return promise.future
    }

    /// The future inside `outcome`, or a completed future with `outcome`'s failure or cancellation.
    private static func flattened<New>(_ outcome: Outcome<Future<New>>) -> Future<New> {
        switch outcome {
        case .success(let inner): return inner
        case .failure(let error): return Future<New>(error: error)
        case .cancelled: return .cancelled()
        }
    }

    /// Completes `promise` with the outcome of the future inside `outcome` (or with `outcome`'s own
    /// failure or cancellation).
    ///
    /// With a `token`, the token is checked again when the inner future completes, as Bolts'
    /// `continueWithExecutor:block:cancellationToken:` does: a body that requested cancellation
    /// (or whose token was cancelled while its future ran) ends the continuation cancelled, not
    /// with the inner future's outcome.
    private static func flatten<New>(
        _ outcome: Outcome<Future<New>>,
        into promise: Promise<New>,
        token: CancellationToken?
    ) {
        switch outcome {
        case .success(let inner):
            guard let token else {
                promise.completeWith(inner)
                return
            }
            // The request is recorded as it happens (a flag the token's handler sets), not read
            // from the token later: a caller may cancel and drop its source, and a body may cancel
            // a source nothing else keeps, before the inner future completes. The callback holds
            // the token weakly, only to remove the handler: an abandoned inner future that
            // registered on the same token must not keep the token alive (the two would hold each
            // other).
            let cancelled = CancellationFlag()
            // Owned by the inner future's callback: an inner future dropped before it completes
            // (its promise gone) frees the callback, and with it the handler — a long-lived token
            // does not collect one per abandoned continuation.
            let registration = OwnedRegistration(token.register { cancelled.set() })
            inner.whenComplete { [weak token] outcome in
                registration.dispose()
                // The token too: work the body handed the token to (`delay(_:token:)`) registered
                // its handler first, so its future completes — and this runs — before the flag's
                // handler has (#43). The flag keeps a request whose token is gone by now.
                if cancelled.isSet || token?.isCancellationRequested == true {
                    promise.tryCancel()
                } else {
                    promise.tryComplete(with: outcome)
                }
            }
        case .failure(let error): promise.tryFail(error)
        case .cancelled: promise.tryCancel()
        }
    }
}

/// A token's handler removed when this object goes away (or at `dispose()`); it holds the token
/// weakly, so an abandoned inner future that registered on the same token does not keep it alive.
private final class OwnedRegistration: Sendable {
    private weak let token: CancellationToken?
    private let id: UInt64

    init(_ registration: CancellationRegistration) {
        self.token = registration.token
        self.id = registration.id
    }

    func dispose() { self.token?.unregister(self.id) }

    deinit { self.dispose() }
}

// MARK: - Continuation futures

/// The future of a `continueWith` on the immediate executor without a token: it holds the
/// continuation's body itself, and its antecedent's callback list holds it (with a function that
/// runs it, see `ErasedCallbackList.continuation`), so a link of a chain is one allocation instead
/// of a future plus a closure context that captures the promise and the body.
///
/// The stored property has a fixed-size type (a function), so the class's destroyer needs no generic
/// metadata (see the comment on `Future.state`).
// @unchecked Sendable: `body` is written in `init`, before the future is shared, and then only taken
// by `run`, which runs at most once — the antecedent runs its callback list once, on one thread —
// or dropped by `deinit`, which no other reference can race with.
final class ContinuationFuture<Antecedent: Sendable, Value: Sendable>: Future<Value>, @unchecked Sendable {
    @exclusivity(unchecked) private var body: (@Sendable (Future<Antecedent>) throws -> Value)?

    init(_ body: @escaping @Sendable (Future<Antecedent>) throws -> Value) {
        self.body = body
        super.init()
    }

    /// A continuation future that runs `body` once `antecedent` completes, on the immediate executor.
    ///
    /// Not inlined: it keeps `continueWith` small enough to be inlined on the completed path.
    @inline(never)
    static func attach(
        _ body: @escaping @Sendable (Future<Antecedent>) throws -> Value,
        to antecedent: Future<Antecedent>
    ) -> Future<Value> {
        let node = ContinuationFuture(body)
        // Captures nothing (the types are static), so this closure allocates nothing.
        antecedent.whenCompleteContinuation({ node, erased, antecedent in Self.run(node, erased, antecedent) }, node)
        return node
    }

    /// Runs the body of `node` (a `ContinuationFuture<Antecedent, Value>`) with `antecedent` (a
    /// completed `Future<Antecedent>`) and completes `node` with its result.
    @inline(__always)
    static func run(_ node: any AnyObject & Sendable, _ erased: ErasedOutcome, _ antecedent: any AnyObject & Sendable) {
        // Both downcasts are exact: `continueWith` pairs this function with such a node, and the
        // antecedent passes itself.
        let node = unsafeDowncast(node, to: ContinuationFuture<Antecedent, Value>.self)
        let antecedent = unsafeDowncast(antecedent, to: Future<Antecedent>.self)
        // Taken, not read: the completed future must not keep the body (and what it captures) alive.
        guard let body = node.body.take() else { return }
        node.tryComplete(Outcome { try body(antecedent) })
    }
}

// MARK: - Conveniences

extension Future {
    /// A future of `transform(value)`; the same as `continueOnSuccessWith` on the immediate executor.
    @discardableResult
    public func map<New: Sendable>(_ transform: @escaping @Sendable (Value) throws -> New) -> Future<New> {
        self.continueOnSuccessWith(on: .immediate, transform)
    }

    /// A future of the future `transform` returns; `continueOnSuccessWithTask` on the immediate executor.
    @discardableResult
    public func flatMap<New: Sendable>(_ transform: @escaping @Sendable (Value) throws -> Future<New>) -> Future<New> {
        self.continueOnSuccessWithTask(on: .immediate, transform)
    }

    /// This future with its value discarded.
    public func asVoid() -> Future<Void> {
        self.map { _ in () }
    }
}

/// A flag set once, from any thread: that a cancellation was requested.
final class CancellationFlag: Sendable {
    private let storage = Atomic<Bool>(false)
    func set() { self.storage.store(true, ordering: .releasing) }
    var isSet: Bool { self.storage.load(ordering: .acquiring) }
}
