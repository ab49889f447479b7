import TaskCore

/// A held place under a concurrency key (SPEC §8); `release()` gives it back, later calls do
/// nothing.
public protocol HeldKey: Sendable {
    func release()

    /// Lets go of the place on this engine without giving it back: its run was given up and the
    /// engine that takes the job over takes the place up under the same holder (a cluster's
    /// takeover, SPEC §9). Until then nobody else gets it — the given-up attempt may still run
    /// (an external worker does not know). Later calls of either method do nothing.
    func forget()

    /// Whether the place may be given back only once its holder's end is durable. A place shared
    /// with other engines (a cluster's slot) is: a crash must never free a slot whose holder's end
    /// the engine that takes the job over would not see. One engine's own places are not: its
    /// limiter lives and dies with the runs it serves.
    var releasesOnceDurable: Bool { get }
}

extension ConcurrencyLimiter.Permit: HeldKey {
    /// One engine's keys: nobody takes a given-up run over, so the place is given back.
    public func forget() { self.release() }

    public var releasesOnceDurable: Bool { false }
}

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
