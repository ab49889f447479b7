/// The producer side of a `Future` — Bolts' `TaskCompletionSource`.
///
/// Whoever owns the promise completes its future once: `succeed`, `fail` or `cancel` when a second
/// completion would be a bug, or `trySucceed` / `tryFail` / `tryCancel` when several parties race to
/// complete it and the first one wins (they return whether they did).
///
/// ```swift
/// let promise = Promise<Data>()
/// download(url) { data, error in
///     if let error { promise.fail(error) } else { promise.succeed(data!) }
/// }
/// return promise.future
/// ```
public struct Promise<Value: Sendable>: Sendable {
    /// The future this promise completes.
    public let future: Future<Value>

    /// A promise with a pending future.
    public init() {
        self.future = Future()
    }

    // MARK: - Completing once

    /// Completes the future with `value`.
    ///
    /// - Precondition: the future is not yet complete. Completing twice is a programmer error and
    ///   stops the process with a message naming the promise and both outcomes, in every build
    ///   configuration; use `trySucceed` where a race between completers is expected.
    public func succeed(_ value: Value, file: StaticString = #fileID, line: UInt = #line) {
        self.complete(with: .success(value), file: file, line: line)
    }

    /// Completes the future with `error`. Same precondition as `succeed(_:)`.
    public func fail(_ error: any Error, file: StaticString = #fileID, line: UInt = #line) {
        self.complete(with: .failure(error), file: file, line: line)
    }

    /// Cancels the future. Same precondition as `succeed(_:)`.
    public func cancel(file: StaticString = #fileID, line: UInt = #line) {
        self.complete(with: .cancelled, file: file, line: line)
    }

    /// Completes the future with `outcome`. Same precondition as `succeed(_:)`.
    public func complete(with outcome: Outcome<Value>, file: StaticString = #fileID, line: UInt = #line) {
        guard self.future.tryComplete(outcome) else {
            // fatalError, not preconditionFailure: an optimized build drops preconditionFailure's message.
            fatalError(
                "Promise<\(Value.self)> completed twice: it already holds \(self.future.outcome.map { "\($0)" } ?? "?"), "
                    + "now \(outcome). Use trySucceed/tryFail/tryCancel when several completers race.",
                file: file,
                line: line
            )
        }
    }

    // MARK: - First completion wins

    /// Completes the future with `value` unless it is already complete; returns whether it did.
    @discardableResult
    public func trySucceed(_ value: Value) -> Bool { self.future.tryComplete(.success(value)) }

    /// Fails the future with `error` unless it is already complete; returns whether it did.
    @discardableResult
    public func tryFail(_ error: any Error) -> Bool { self.future.tryComplete(.failure(error)) }

    /// Cancels the future unless it is already complete; returns whether it did.
    @discardableResult
    public func tryCancel() -> Bool { self.future.tryComplete(.cancelled) }

    /// Completes the future with `outcome` unless it is already complete; returns whether it did.
    @discardableResult
    public func tryComplete(with outcome: Outcome<Value>) -> Bool { self.future.tryComplete(outcome) }

    /// Completes the future with the outcome of `other` once that completes (first completion wins).
    public func completeWith(_ other: Future<Value>) {
        let future = self.future
        other.whenComplete { outcome in future.tryComplete(outcome) }
    }
}
