import NIOCore
import Synchronization
import TaskCore
import TaskGraph

/// Every job's committed `job.*` events, in one ordered feed with server-wide cursors (SPEC §7
/// `GET /v1/events`): what the dashboard's live list and other server-wide readers follow.
///
/// The job service publishes a job's events once they are committed, each with the job as it was
/// then; the feed holds values (ids, events, snapshots, their encoded bytes), never a live job.
/// `InProcessEventFeed` is this process's feed; with PostgreSQL the feed is a table every server
/// of a cluster reads (`PostgresEventFeed`), and a cursor means the same on every server.
public protocol EventFeed: Sendable {
    /// Adds committed `events` of job `jobID` (its `job.*` events only are kept), with the job as
    /// it was when they were committed, and wakes the readers.
    func publish(jobID: String, events: ArraySlice<JobEvent>, job: JobSnapshot)
    /// Where a reader's cursor starts: now (no cursor), after a position, or stale.
    func start(_ cursor: String?) -> FeedStart
    /// The position of the latest entry (0 before any).
    var latest: Int { get }
    /// The position before the oldest entry held (where a reader that fell behind resumes).
    var beforeOldest: Int { get }
    /// Entries after `position`, at most `limit`; `gap` when some after it are no longer held.
    func entries(after position: Int, limit: Int) -> (entries: [FeedEntry], gap: Bool)
    /// Completes when an entry after `position` exists (or a reader fell out of the window), or
    /// after `timeout`; a wake-up may come early.
    func waitForEntries(after position: Int, timeout: Duration) -> Future<Void>
    /// The cursor of `position`.
    func cursor(_ position: Int) -> String
    /// Completes once the feed holds what was committed before the call (a feed read from a store
    /// may have let its window fall behind while nobody read it).
    func refresh() -> Future<Void>
}

extension EventFeed {
    public func refresh() -> Future<Void> { Future(value: ()) }
}

/// Where a reader of the feed starts.
public enum FeedStart: Equatable, Sendable {
    case now
    case after(Int)
    /// A cursor of another process, or malformed: everything held is newer than it.
    case stale
}

/// One event of the feed: its place, its job's id, the event, and the job as it was when the event
/// was committed (shared by the entries published together; none when a feed read the entry back
/// from its store after the job was deleted). A class, so that a reader copies a reference, not the
/// fields; its JSON and its stream frame are made once, by the first reader that needs them, and
/// shared by every other.
public final class FeedEntry: Sendable {
    let position: Int
    /// The entry's cursor (the feed's format: `EventFeed.cursor`).
    let cursor: String
    let jobID: String
    let event: JobEvent
    let job: FeedJob?
    private let encoded = Mutex<(json: [UInt8]?, frame: [UInt8]?)>((nil, nil))

    init(position: Int, cursor: String, jobID: String, event: JobEvent, job: FeedJob?) {
        self.position = position
        self.cursor = cursor
        self.jobID = jobID
        self.event = event
        self.job = job
    }

    /// The entry as JSON: the event, its job's id and cursor, and the job as it was (as list views
    /// show it: without input and result).
    var json: [UInt8] {
        if let json = self.encoded.withLock({ $0.json }) { return json }
        var json = JSONWriter(capacity: 512)
        json.beginObject()
        json.key("cursor")
        json.string(self.cursor)
        json.key("jobId")
        json.string(self.jobID)
        json.key("seq")
        json.int(self.event.seq)
        json.key("type")
        json.string(self.event.type.rawValue)
        json.key("time")
        json.timestamp(self.event.time)
        if let data = self.event.data {
            json.key("data")
            json.value(data)
        }
        if let job = self.job {
            json.key("job")
            job.snapshot.write(to: &json, includePayloads: false)
        }
        json.endObject()
        let bytes = json.bytes
        self.encoded.withLock { $0.json = bytes }
        return bytes
    }

    /// The entry as a server-sent event (`id` its cursor).
    var frame: [UInt8] {
        if let frame = self.encoded.withLock({ $0.frame }) { return frame }
        var frame: [UInt8] = []
        ServerSentEvents.append(id: self.cursor, event: self.event.type.rawValue, data: self.json, to: &frame)
        self.encoded.withLock { $0.frame = frame }
        return frame
    }
}

extension FeedEntry {
    /// What an entry is made of, before it has a place: its job's id, the event, the job.
    typealias Parts = (jobID: String, event: JobEvent, job: FeedJob?)
}

/// The job of the entries published together: one object per publication, none per entry.
public final class FeedJob: Sendable {
    let snapshot: JobSnapshot

    init(_ snapshot: JobSnapshot) { self.snapshot = snapshot }
}

/// The latest `capacity` entries of a feed, in position order with no gap, and the readers
/// waiting for the next: what both feeds hold, under their lock.
struct FeedWindow {
    static let capacity = 10_000

    var entries = CircularBuffer<FeedEntry>()
    /// The position of the next entry.
    var next = 1
    var waiters: [Promise<Void>] = []

    /// Appends `entry` (at `next`), dropping the oldest past the capacity.
    mutating func append(_ entry: FeedEntry) {
        self.entries.append(entry)
        self.next = entry.position + 1
        if self.entries.count > Self.capacity { self.entries.removeFirst() }
    }

    /// The waiters to wake, taken.
    mutating func takeWaiters() -> [Promise<Void>] {
        defer { self.waiters = [] }
        return self.waiters
    }

    var latest: Int { self.next - 1 }

    var beforeOldest: Int { (self.entries.first?.position ?? self.next) - 1 }

    func entries(after position: Int, limit: Int) -> (entries: [FeedEntry], gap: Bool) {
        guard let first = self.entries.first else { return ([], position < self.next - 1) }
        let gap = position < first.position - 1
        let start = max(0, position - first.position + 1)
        guard start < self.entries.count else { return ([], gap) }
        let end = min(self.entries.count, start + limit)
        let from = self.entries.index(self.entries.startIndex, offsetBy: start)
        let to = self.entries.index(self.entries.startIndex, offsetBy: end)
        return (Array(self.entries[from..<to]), gap)
    }

    /// Completes when `window` has an entry after `position` (or a reader fell out of it), or
    /// after `timeout`; `waiting` is told when the reader starts waiting.
    static func wait(
        in window: borrowing Mutex<FeedWindow>,
        after position: Int,
        timeout: Duration,
        waiting: () -> Void = {}
    ) -> Future<Void> {
        let promise = Promise<Void>()
        let ready = window.withLock { window -> Bool in
            let (entries, gap) = window.entries(after: position, limit: 1)
            if gap || !entries.isEmpty { return true }
            window.waiters.append(promise)
            return false
        }
        if ready { return Future(value: ()) }
        waiting()
        let timer = TimerQueue.shared.schedule(after: timeout) { promise.trySucceed(()) }
        promise.future.whenComplete { _ in TimerQueue.shared.cancel(timer) }
        return promise.future
    }
}

/// The feed of one process: a bounded window of the latest `FeedWindow.capacity` entries.
///
/// Cursors are `<boot>.<n>`: `n` counts from 1 in this process and `boot` names the process (its
/// start time), so a cursor from before a restart is recognised as stale rather than misread.
public final class InProcessEventFeed: EventFeed {
    public init() {}

    private let window = Mutex(FeedWindow())
    /// This process's part of every cursor.
    let boot = String(UInt64(Timestamp.now().milliseconds), radix: 36)

    public func publish(jobID: String, events: ArraySlice<JobEvent>, job: JobSnapshot) {
        let shared = FeedJob(job)
        let waiters: [Promise<Void>] = self.window.withLock { window in
            for event in events where event.type.isJobEvent {
                let position = window.next
                window.append(
                    FeedEntry(
                        position: position,
                        cursor: self.cursor(position),
                        jobID: jobID,
                        event: event,
                        job: shared
                    )
                )
            }
            return window.takeWaiters()
        }
        for waiter in waiters { waiter.trySucceed(()) }
    }

    public func cursor(_ position: Int) -> String { "\(self.boot).\(position)" }

    public func start(_ cursor: String?) -> FeedStart {
        guard let cursor else { return .now }
        let parts = cursor.split(separator: ".", maxSplits: 1)
        guard parts.count == 2, parts[0] == self.boot, let position = Int(parts[1]), position >= 0 else {
            return .stale
        }
        return .after(position)
    }

    public var latest: Int { self.window.withLock { $0.latest } }

    public var beforeOldest: Int { self.window.withLock { $0.beforeOldest } }

    public func entries(after position: Int, limit: Int) -> (entries: [FeedEntry], gap: Bool) {
        self.window.withLock { $0.entries(after: position, limit: limit) }
    }

    public func waitForEntries(after position: Int, timeout: Duration) -> Future<Void> {
        FeedWindow.wait(in: self.window, after: position, timeout: timeout)
    }
}
