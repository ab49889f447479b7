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

    /// One event of the log. Its JSON is made once, by the first reader that sends it, and shared
    /// by every other: ten server-wide readers cost one encoding per event, not ten.
    final class Entry: Sendable {
        let position: Int
        let run: JobRun
        let event: JobEvent
        let encoded = Mutex<[UInt8]?>(nil)

        init(position: Int, run: JobRun, event: JobEvent) {
            self.position = position
            self.run = run
            self.event = event
        }
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

    /// Entries after `position`, at most `limit`; `gap` when some were already dropped from the
    /// window (continue from `first.position - 1`, i.e. `oldestHeld - 1`).
    func entries(after position: Int, limit: Int) -> (entries: [Entry], gap: Bool) {
        self.state.withLock { state in self.entries(after: position, limit: limit, in: state) }
    }

    /// The position before the oldest entry held (where a reader that fell out of the window resumes).
    var beforeOldest: Int { self.state.withLock { ($0.entries.first?.position ?? $0.next) - 1 } }

    private func entries(after position: Int, limit: Int, in state: State) -> (entries: [Entry], gap: Bool) {
        guard let first = state.entries.first else { return ([], position < state.next - 1) }
        let gap = position < first.position - 1
        let start = max(0, position - first.position + 1)
        guard start < state.entries.count else { return ([], gap) }
        var end = min(state.entries.count, start + limit)
        // Only events their store committed, in order: the log stops at the first one that is
        // not yet (`JobRun.markDurable` wakes the readers when it is).
        for offset in start..<end {
            let entry = state.entries[state.entries.index(state.entries.startIndex, offsetBy: offset)]
            if entry.event.seq > entry.run.lastVisibleSeq {
                end = offset
                break
            }
        }
        guard start < end else { return ([], gap) }
        let from = state.entries.index(state.entries.startIndex, offsetBy: start)
        let to = state.entries.index(state.entries.startIndex, offsetBy: end)
        return (Array(state.entries[from..<to]), gap)
    }

    /// Wakes the waiting readers (a run's events became visible).
    func wake() {
        let waiters: [Promise<Void>] = self.state.withLock { state in
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.trySucceed(()) }
    }

    /// Completes when a visible entry after `position` exists (or a reader fell out of the window),
    /// or after `timeout`; a wake-up may also come early, for another job's events.
    func waitForEntries(after position: Int, timeout: Duration) -> Future<Void> {
        let promise = Promise<Void>()
        let ready = self.state.withLock { state -> Bool in
            let (entries, gap) = self.entries(after: position, limit: 1, in: state)
            if gap || !entries.isEmpty { return true }
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
        if let encoded = entry.encoded.withLock({ $0 }) { return encoded }
        let bytes = self.encode(entry)
        entry.encoded.withLock { $0 = bytes }
        return bytes
    }

    private func encode(_ entry: Entry) -> [UInt8] {
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

    /// Sends what is visible after `position`; with nothing to send, waits for more, and writes a
    /// keep-alive comment once the stream has been idle for `keepAlive` (`idleSince`).
    func pump(after position: Int, idleSince: UInt64 = monotonicNanoseconds()) {
        if self.writer.isFinished { return }
        let (entries, gap) = self.log.entries(after: position, limit: JobEventStream.chunkEvents)
        var bytes: [UInt8] = []
        var next = position
        if gap {
            next = self.log.beforeOldest
            ServerSentEvents.append(
                id: self.log.cursor(max(0, next)),
                event: "stream.reset",
                data: Array(#"{"reason":"events after this cursor are no longer held; reload and continue"}"#.utf8),
                to: &bytes
            )
        }
        for entry in entries {
            ServerSentEvents.append(
                id: self.log.cursor(entry.position),
                event: entry.event.type.rawValue,
                data: self.log.json(entry),
                to: &bytes
            )
            next = entry.position
        }
        if !bytes.isEmpty {
            self.send(bytes, then: next)
            return
        }
        let idle = Duration.nanoseconds(Int64(monotonicNanoseconds() &- idleSince))
        if idle >= self.keepAlive {
            self.send(ServerSentEvents.keepAlive, then: position)
            return
        }
        self.log.waitForEntries(after: position, timeout: self.keepAlive - idle).whenComplete { _ in
            self.pump(after: position, idleSince: idleSince)
        }
    }

    private func send(_ bytes: [UInt8], then position: Int) {
        self.writer.write(bytes).whenComplete { outcome in
            if outcome.value != nil { self.pump(after: position) }
        }
    }
}
