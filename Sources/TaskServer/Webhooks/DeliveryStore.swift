import TaskCore
import TaskGraph

/// Where webhook deliveries live: the outbox, a part of the job repository.
///
/// New deliveries are committed with the events that cause them (`JournalBatch.deliveries`); the
/// dispatcher reports every attempt with `update` (the whole delivery, its new attempt appended,
/// its state and next attempt time set), so `pending()` returns exactly what still has to be sent.
/// Deleting a job deletes its deliveries.
public protocol DeliveryStore: Sendable {
    /// Replaces the stored delivery with the same id (after each attempt). Unknown ids are ignored.
    func update(_ delivery: Delivery)
    /// The deliveries of one job, ordered by `seq`, then id.
    func deliveries(jobID: String) -> Future<[Delivery]>
    /// Every delivery still `pending`, the earliest due first (to resume them at start-up).
    func pending() -> Future<[Delivery]>
}
