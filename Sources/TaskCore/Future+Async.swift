import Synchronization

// MARK: - Swift concurrency bridges

extension Future {
    /// The future's value, awaited without blocking a thread.
    ///
    /// Throws the future's error, or `CancellationError` if the future was cancelled. Unlike NIO's
    /// `get()`, it honours task cancellation: when the awaiting task is cancelled, it stops waiting
    /// and throws `CancellationError` at once (the future itself is left alone — other parties may
    /// still be waiting on it).
    public var value: Value {
        get async throws {
            if let outcome = self.outcome { return try outcome.get() }
            let resumed = Resumed<Value>()
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                    if resumed.install(continuation) == false { return }
                    self.whenComplete { outcome in
                        resumed.resume(with: Result { try outcome.get() })
                    }
                }
            } onCancel: {
                resumed.resume(with: .failure(CancellationError()))
            }
        }
    }

    /// A future completed by an `async` operation run in a new Swift task; a thrown
    /// `CancellationError` cancels it. Cancelling `token` cancels the task; with `token` already
    /// cancelled, the operation never runs and the future is cancelled at once (as Bolts checks
    /// a continuation's token before running it).
    public convenience init(
        cancellationToken token: CancellationToken? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) {
        self.init()
        if token?.isCancellationRequested == true {
            self.tryComplete(.cancelled)
            return
        }
        let task = Task {
            let outcome: Outcome<Value>
            do { outcome = .success(try await operation()) } catch is CancellationError { outcome = .cancelled } catch {
                outcome = .failure(error)
            }
            self.tryComplete(outcome)
        }
        if let token {
            let registration = token.register { task.cancel() }
            self.whenComplete { _ in registration.dispose() }
        }
    }

    /// Blocks the calling thread until the future completes and returns its value (or throws).
    ///
    /// For tests and command-line tools only: never call it on an event loop or a pool thread.
    @available(*, noasync, message: "use `try await future.value` in async code")
    public func wait() throws -> Value {
        if let outcome = self.outcome { return try outcome.get() }
        let lock = ConditionLock()
        let box = Mutex<Outcome<Value>?>(nil)
        self.whenComplete { outcome in
            lock.withLock {
                box.withLock { $0 = outcome }
                lock.signal()
            }
        }
        lock.lock()
        while box.withLock({ $0 }) == nil { lock.wait() }
        lock.unlock()
        return try box.withLock { $0! }.get()
    }
}

/// Resumes a checked continuation exactly once, whichever of completion and task cancellation
/// comes first — including cancellation that arrives before the continuation is installed.
private final class Resumed<Value: Sendable>: Sendable {
    private enum State {
        case idle
        case waiting(CheckedContinuation<Value, any Error>)
        case early(Result<Value, any Error>)
        case done
    }

    private let state = Mutex(State.idle)

    /// Installs the continuation; returns `false` (having resumed it) if a result already arrived.
    func install(_ continuation: CheckedContinuation<Value, any Error>) -> Bool {
        let early: Result<Value, any Error>? = self.state.withLock { state in
            if case .early(let result) = state {
                state = .done
                return result
            }
            state = .waiting(continuation)
            return nil
        }
        if let early {
            continuation.resume(with: early)
            return false
        }
        return true
    }

    func resume(with result: Result<Value, any Error>) {
        let continuation: CheckedContinuation<Value, any Error>? = self.state.withLock { state in
            switch state {
            case .idle:
                state = .early(result)
                return nil
            case .waiting(let continuation):
                state = .done
                return continuation
            case .early, .done:
                return nil
            }
        }
        continuation?.resume(with: result)
    }
}
