import TaskCore

/// A held place under a concurrency key (SPEC §8); `release()` gives it back, later calls do
/// nothing.
public protocol HeldKey: Sendable {
    func release()
}

extension ConcurrencyLimiter.Permit: HeldKey {}

/// Concurrency keys held for several engines at once — the servers of a cluster (SPEC §9) — in
/// place of the engine's own `ConcurrencyLimiter`: at most `max` holders of a key on all of them.
/// Every request is answered by a store, so none is granted inside the call.
public protocol SharedConcurrencyKeys: Sendable {
    /// A place under `key` for `holder` (`jobID` for a job's key, `jobID/taskID` for a task's):
    /// once fewer than `max` hold it. A holder that held the key before (its job ran elsewhere
    /// until it was taken over) gets its place back. If `token` is cancelled while the request
    /// waits, the future is cancelled.
    func acquire(
        key: String,
        max: Int,
        priority: Int,
        holder: String,
        jobID: String,
        cancellationToken token: CancellationToken?
    ) -> Future<any HeldKey>

    /// Keys with a holder or a waiter on this engine, and how many.
    var statistics: ConcurrencyLimiter.Statistics { get }
}
