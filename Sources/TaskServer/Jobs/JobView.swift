import TaskCore
import TaskGraph

/// A job as the API reads it: one this server runs (a `JobRun`, live) or one read from the
/// repository (a `StoredJob`: a finished job, or — in a cluster — one another node runs).
///
/// Reads only: every change goes through `JobService`.
public protocol JobView: Sendable {
    var id: String { get }
    var snapshot: JobSnapshot { get }
    /// Every node record, in registration order.
    var nodes: [NodeRecord] { get }
    func node(_ id: String) -> NodeRecord?
    /// The events with `seq > after` that readers may see, at most `limit`.
    func events(after: Int, limit: Int) -> [JobEvent]
    /// The same events, each with its JSON bytes (a live job encodes each event once for all
    /// its readers).
    func encodedEvents(after: Int, limit: Int) -> [(event: JobEvent, json: [UInt8])]
    /// Whether the job ended and readers can see its every event.
    var isTerminalAndVisible: Bool { get }
    /// The seq of the latest event readers may see (0 before any).
    var lastVisibleSeq: Int { get }
    /// Completes when an event with `seq > after` is visible, or after `timeout`.
    func waitForEvents(after: Int, timeout: Duration) -> Future<Void>
    /// Completes when the job is terminal and its terminal event visible, or after `timeout`.
    func waitForTerminal(timeout: Duration) -> Future<Void>
}

extension JobRun: JobView {}

extension StoredJob: JobView {
    public func node(_ id: String) -> NodeRecord? { self.nodes.first { $0.id == id } }

    public func events(after: Int, limit: Int) -> [JobEvent] {
        guard let first = self.events.first else { return [] }
        let start = max(0, after - first.seq + 1)
        guard start < self.events.count else { return [] }
        return Array(self.events[start..<min(self.events.count, start + max(0, limit))])
    }

    public func encodedEvents(after: Int, limit: Int) -> [(event: JobEvent, json: [UInt8])] {
        self.events(after: after, limit: limit).map { ($0, $0.json.jsonBytes) }
    }

    public var isTerminalAndVisible: Bool { self.state.isTerminal }

    public var lastVisibleSeq: Int { self.events.last?.seq ?? 0 }

    /// A stored record does not change under its reader: with events after `after` the wait ends
    /// at once, else it lasts its timeout (as a live job's does once it ended).
    public func waitForEvents(after: Int, timeout: Duration) -> Future<Void> {
        if (self.events.last?.seq ?? 0) > after { return Future(value: ()) }
        return Self.expiry(after: timeout)
    }

    public func waitForTerminal(timeout: Duration) -> Future<Void> {
        if self.state.isTerminal { return Future(value: ()) }
        return Self.expiry(after: timeout)
    }

    private static func expiry(after timeout: Duration) -> Future<Void> {
        let promise = Promise<Void>()
        TimerQueue.shared.schedule(after: timeout) { promise.trySucceed(()) }
        return promise.future
    }
}
