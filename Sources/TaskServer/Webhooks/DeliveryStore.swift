import TaskCore
import TaskGraph

/// Where webhook deliveries live: the outbox, a part of the job repository.
///
/// New deliveries are committed with the events that cause them (`JournalBatch.deliveries`). The
/// dispatcher claims the due ones (`claimDue`) and reports every attempt with `update` (the whole
/// delivery, its new attempt appended, its state and next attempt time set), which also releases
/// the claim. A claim does not outlive the process that made it. Deleting a job deletes its
/// deliveries.
public protocol DeliveryStore: Sendable {
    /// Claims up to `limit` pending deliveries due at `now` that nobody holds, the earliest first,
    /// and tells when the earliest pending one not yet due falls due; completes once the claim is
    /// durable.
    func claimDue(at now: Timestamp, limit: Int) -> Future<(deliveries: [Delivery], next: Timestamp?)>
    /// Replaces the stored delivery with the same id (after each attempt) and releases its claim;
    /// completes once durable. Unknown ids are ignored.
    func update(_ delivery: Delivery) -> Future<Void>
    /// The deliveries of one job, ordered by `seq`, then id.
    func deliveries(jobID: String) -> Future<[Delivery]>
}
