import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Every job's `job.*` events in one ordered log (SPEC §7 `GET /v1/events`): a bounded window of
/// the latest `capacity` entries, each with a server-wide cursor, and waiters for what comes next.
///
/// Cursors are `<boot>.<n>`: `n` counts from 1 in this process and `boot` names the process (its
/// start time), so a cursor from before a restart is recognised as stale rather than misread.
public final class ServerEventLog: JobObserver {
    public static let capacity = 10_000

    struct Entry: Sendable {
        let position: Int
        let run: JobRun
        let event: JobEvent
    }

    private struct State {
        var entries = CircularBuffer<Entry>()
        var next = 1
        var waiters: [Promise<Void>] = []
    }

    private let state = Mutex(State())
    /// This process's part of every cursor.
    let boot = String(UInt64(Timestamp.now().milliseconds), radix: 36)

    public init() {}

    public func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        // Most batches hold task events only.
        guard events.contains(where: { $0.type.isJobEvent }) else { return }
        let waiters: [Promise<Void>] = self.state.withLock { state in
            for event in events where event.type.isJobEvent {
                state.entries.append(Entry(position: state.next, run: run, event: event))
                state.next += 1
                if state.entries.count > Self.capacity { state.entries.removeFirst() }
            }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.trySucceed(()) }
    }

    func cursor(_ position: Int) -> String { "\(self.boot).\(position)" }

    /// The position a client's cursor names: nil for none (start from now), `.stale` for one of
    /// another process or one malformed.
    enum Start: Equatable {
        case now
        case after(Int)
        case stale
    }

    func start(_ cursor: String?) -> Start {
        guard let cursor else { return .now }
        let parts = cursor.split(separator: ".", maxSplits: 1)
        guard parts.count == 2, parts[0] == self.boot, let position = Int(parts[1]), position >= 0 else {
            return .stale
        }
        return .after(position)
    }

    /// The position of the latest entry (0 before any).
    var latest: Int { self.state.withLock { $0.next - 1 } }

    /// Entries after `position`, at most `limit`; `gap` when some were already dropped from the window.
    func entries(after position: Int, limit: Int) -> (entries: [Entry], gap: Bool) {
        self.state.withLock { state in
            guard let first = state.entries.first else { return ([], position < state.next - 1) }
            let gap = position < first.position - 1
            let start = max(0, position - first.position + 1)
            guard start < state.entries.count else { return ([], gap) }
            let end = min(state.entries.count, start + limit)
            let from = state.entries.index(state.entries.startIndex, offsetBy: start)
            let to = state.entries.index(state.entries.startIndex, offsetBy: end)
            return (Array(state.entries[from..<to]), gap)
        }
    }

    /// Completes when an entry after `position` exists, or after `timeout`.
    func waitForEntries(after position: Int, timeout: Duration) -> Future<Void> {
        let promise = Promise<Void>()
        let ready = self.state.withLock { state -> Bool in
            if state.next - 1 > position { return true }
            state.waiters.append(promise)
            return false
        }
        if ready { return Future(value: ()) }
        let timer = TimerQueue.shared.schedule(after: timeout) { promise.trySucceed(()) }
        promise.future.whenComplete { _ in TimerQueue.shared.cancel(timer) }
        return promise.future
    }

    /// An entry as its JSON: the event, its job's id and cursor, and the job as it is now (as list
    /// views show it: without input and result).
    func json(_ entry: Entry) -> [UInt8] {
        var json = JSONWriter(capacity: 512)
        json.beginObject()
        json.key("cursor")
        json.string(self.cursor(entry.position))
        json.key("jobId")
        json.string(entry.run.id)
        json.key("seq")
        json.int(entry.event.seq)
        json.key("type")
        json.string(entry.event.type.rawValue)
        json.key("time")
        json.timestamp(entry.event.time)
        if let data = entry.event.data {
            json.key("data")
            json.value(data)
        }
        json.key("job")
        entry.run.snapshot.write(to: &json, includePayloads: false)
        json.endObject()
        return json.bytes
    }
}

/// Streams the server's `job.*` events (SPEC §7) from a cursor on, live, with keep-alive comments,
/// until the server drains. A reader that falls out of the window is told (`stream.reset`) and
/// continues from the oldest entry held.
struct ServerEventStream: Sendable {
    let log: ServerEventLog
    let writer: StreamWriter
    let keepAlive: Duration

    func pump(after position: Int) {
        if self.writer.isFinished { return }
        let (entries, gap) = self.log.entries(after: position, limit: JobEventStream.chunkEvents)
        var bytes: [UInt8] = []
        if gap {
            ServerSentEvents.append(
                id: self.log.cursor(max(0, (entries.first?.position ?? 1) - 1)),
                event: "stream.reset",
                data: Array(#"{"reason":"events after this cursor are no longer held; reload and continue"}"#.utf8),
                to: &bytes
            )
        }
        guard let last = entries.last else {
            if !bytes.isEmpty {
                self.send(bytes, then: self.log.latest)
                return
            }
            self.log.waitForEntries(after: position, timeout: self.keepAlive).whenComplete { _ in
                if self.writer.isFinished { return }
                if self.log.latest > position {
                    self.pump(after: position)
                } else {
                    self.send(ServerSentEvents.keepAlive, then: position)
                }
            }
            return
        }
        for entry in entries {
            ServerSentEvents.append(
                id: self.log.cursor(entry.position),
                event: entry.event.type.rawValue,
                data: self.log.json(entry),
                to: &bytes
            )
        }
        self.send(bytes, then: last.position)
    }

    private func send(_ bytes: [UInt8], then position: Int) {
        self.writer.write(bytes).whenComplete { outcome in
            if outcome.value != nil { self.pump(after: position) }
        }
    }
}
