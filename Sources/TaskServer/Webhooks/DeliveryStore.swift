import Synchronization
import TaskCore
import TaskGraph

/// Where webhook deliveries live: the outbox.
///
/// The planner's deliveries are `add`ed before they are dispatched; the dispatcher reports every
/// attempt with `update` (the whole delivery, its new attempt appended, its state and next
/// attempt time set). A durable store records both before returning, so that `pending()` at
/// start-up returns exactly what still has to be sent.
public protocol DeliveryStore: Sendable {
    /// Records new pending deliveries. An id that is already stored is ignored (planning the same
    /// event twice must not deliver it twice).
    func add(_ deliveries: [Delivery])
    /// Replaces the stored delivery with the same id (after each attempt). Unknown ids are ignored.
    func update(_ delivery: Delivery)
    /// The deliveries of one job, ordered by `seq`, then id (a future: a durable store reads them
    /// from disk, never on an event loop).
    func deliveries(jobID: String) -> Future<[Delivery]>
    /// Every delivery still `pending` (to resume them at start-up).
    func pending() -> [Delivery]
    /// Forgets the deliveries of a deleted job.
    func remove(jobID: String)
}

/// Keeps deliveries in memory (`--memory`): gone when the process stops, like the jobs.
public final class MemoryDeliveryStore: DeliveryStore {
    private struct State {
        var byJob: [String: [Delivery]] = [:]
        /// Where each id sits: its job and index in that job's list.
        var index: [String: (jobID: String, position: Int)] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    public func add(_ deliveries: [Delivery]) {
        self.state.withLock { state in
            for delivery in deliveries where state.index[delivery.id] == nil {
                // Appended in place (a copied-out list would make each add O(deliveries of the job)).
                state.index[delivery.id] = (delivery.jobID, state.byJob[delivery.jobID]?.count ?? 0)
                state.byJob[delivery.jobID, default: []].append(delivery)
            }
        }
    }

    public func update(_ delivery: Delivery) {
        self.state.withLock { state in
            guard let place = state.index[delivery.id], place.jobID == delivery.jobID else { return }
            state.byJob[place.jobID]?[place.position] = delivery
        }
    }

    public func deliveries(jobID: String) -> Future<[Delivery]> {
        Future(value: self.deliveryList(jobID: jobID))
    }

    func deliveryList(jobID: String) -> [Delivery] {
        let list = self.state.withLock { $0.byJob[jobID] ?? [] }
        return list.sorted { ($0.seq, $0.id) < ($1.seq, $1.id) }
    }

    public func pending() -> [Delivery] {
        self.state.withLock { state in state.byJob.values.flatMap { $0.filter { $0.state == .pending } } }
    }

    public func remove(jobID: String) {
        self.state.withLock { state in
            for delivery in state.byJob.removeValue(forKey: jobID) ?? [] { state.index[delivery.id] = nil }
        }
    }
}
