// MARK: - Delays and timeouts

extension Future where Value == Void {
    /// A future that succeeds after `duration`, or is cancelled as soon as `token` is — without
    /// holding a thread while it waits (Bolts' `taskWithDelay:cancellationToken:`).
    public static func delay(_ duration: Duration, token: CancellationToken? = nil) -> Future<Void> {
        let promise = Promise<Void>()
        let timer = TimerQueue.shared.schedule(after: duration) { promise.trySucceed(()) }
        if let token {
            let registration = token.register {
                TimerQueue.shared.cancel(timer)
                promise.tryCancel()
            }
            // Once the delay ends either way, the token no longer needs the handler.
            promise.future.whenComplete { _ in registration.dispose() }
        }
        return promise.future
    }
}

extension Future {
    /// This future's outcome, or a failure with `TimeoutError` if it has not completed within
    /// `duration`. The original future is left running (cancel it through its own token).
    public func timeout(_ duration: Duration) -> Future<Value> {
        if self.isCompleted { return self }
        let promise = Promise<Value>()
        let timer = TimerQueue.shared.schedule(after: duration) {
            promise.tryFail(TimeoutError(duration: duration))
        }
        self.whenComplete { outcome in
            TimerQueue.shared.cancel(timer)
            promise.tryComplete(with: outcome)
        }
        return promise.future
    }
}
