import TaskCore

/// A request that changed a job (a completion, a cancellation, a redrive) is answered once the
/// change is committed (SPEC §6). While the store cannot commit — the database away, a disk full,
/// a commit refused — the change waits in the journal for the next commit that succeeds, and the
/// request gets `503 store.unavailable` after `bound`: an answer, and no claim that the change is
/// durable. A retry may then find it done (a task completed: `409`; a job submitted with an
/// `Idempotency-Key`: `200` with the job).
enum DurableWait {
    /// Far past any commit's time under load (milliseconds), well within a client's patience.
    static let bound: Duration = .seconds(10)

    /// `wait`, or `StoreError.notYetDurable` once `bound` passes first.
    static func bounded<Value: Sendable>(_ wait: Future<Value>, clock: any ServerClock) -> Future<Value> {
        if wait.isCompleted { return wait }
        let promise = Promise<Value>()
        let timer = clock.schedule(after: Self.bound) { _ = promise.tryFail(StoreError.notYetDurable) }
        wait.whenComplete { outcome in
            clock.cancel(timer)
            _ = promise.tryComplete(with: outcome)
        }
        return promise.future
    }
}
