import TaskGraph

/// The in-memory outbox glue: plans each job's new events, stores the deliveries, dispatches them.
///
/// A durable store plans inside the transaction that journals the events instead (so an event and
/// its deliveries are recorded together) and dispatches after commit; it conforms to
/// `WebhookJournaling`, and `Application` then installs no `WebhookObserver`.
public final class WebhookObserver: JobObserver {
    let planner: WebhookPlanner
    let store: any DeliveryStore
    let dispatcher: WebhookDispatcher

    public init(planner: WebhookPlanner, store: any DeliveryStore, dispatcher: WebhookDispatcher) {
        self.planner = planner
        self.store = store
        self.dispatcher = dispatcher
    }

    public func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        let deliveries = self.planner.plan(run, events: events)
        guard !deliveries.isEmpty else { return }
        self.store.add(deliveries)
        self.dispatcher.dispatch(deliveries)
    }
}

/// A job store that records webhook deliveries itself, in the same transaction as the events that
/// cause them (`planner.plan` inside the journal transaction, `dispatcher.dispatch` after commit).
///
/// `Application` calls `attachWebhooks` once, before any job runs, and installs no
/// `WebhookObserver` for such a store.
public protocol WebhookJournaling: Sendable {
    func attachWebhooks(planner: WebhookPlanner, deliveries: any DeliveryStore, dispatcher: WebhookDispatcher)
}
