import Synchronization
import TaskCore
import TaskGraph

/// The server-wide feed (SPEC §7 `GET /v1/events`) of the servers sharing one PostgreSQL database
/// (SPEC §9): every server reads the same entries at the same positions, so a cursor taken from
/// one server means the same on every other — and after a restart.
///
/// - **Writing** (`PostgresJobRepository.feedStatement`): a commit whose journal has `job.*` events
///   adds one row of them (the events only, a line each), numbered from `feed_head`, which it
///   updates last before committing. A commit holds the head's row lock from there to its end, so
///   positions are given in commit order, and a reader never sees a position without every earlier
///   one: no gap, and no entry ever appears behind a cursor a reader was given.
/// - **Reading**: each server keeps the latest `FeedWindow.capacity` entries, read at start. Its
///   own commits join them as they commit when nothing came between (one server: never a read),
///   with the job as the commit left it. When other servers' rows came between, or on another
///   server's `ended` notification, it reads the rows after its latest — at once if a reader
///   waits, else when the next reader comes (`refresh`): a server nobody reads the feed on reads
///   no other server's rows. While a reader waits it also reads every 200–300 ms. Rows read carry
///   their jobs as they are then (their rows, as list views show them).
///
/// Cursors are `pg.<position>`; another feed's cursor is stale.
final class PostgresEventFeed: EventFeed {
    /// One row of `feed`: its first position and its entries, in order.
    struct Row: Sendable {
        let first: Int
        let entries: [FeedEntry.Parts]
    }

    /// Reads at most `limit` rows after position `after` (a row boundary).
    typealias Read = @Sendable (_ after: Int, _ limit: Int) -> Future<[Row]>

    static let rowsPerRead = 200
    private let window = Mutex(FeedWindow())
    /// The repository's reader (`attach`); none: nothing is read.
    private let reader = Mutex<Read?>(nil)
    private let reading = Mutex(Reading())
    /// Set when rows were committed that the window does not hold and no reader waited for them:
    /// the next reader reads them first (`refresh`), so a server nobody reads the feed on reads
    /// no other server's rows.
    private let stale = Atomic(false)

    private struct Reading {
        var running = false
        var again = false
        var ticking = false
        /// Completed when a read ends with nothing more to read.
        var refreshed: [Promise<Void>] = []
    }

    /// A feed whose latest position is `last`, holding `rows` (the newest ones).
    init(last: Int, rows: [Row]) {
        self.window.withLock { window in
            window.next = rows.first?.first ?? last + 1
            Self.append(rows, to: &window, cursor: self.cursor)
            if window.next < last + 1 {
                // Rows missing up to the head (deleted meanwhile): the window starts after it.
                window.entries.removeAll()
                window.next = last + 1
            }
        }
    }

    /// Reads newer rows with `read` from now on.
    func attach(_ read: @escaping Read) { self.reader.withLock { $0 = read } }

    func publish(jobID: String, events: ArraySlice<JobEvent>, job: JobSnapshot) {
        // Held already: the writer hands its rows over as it commits them (`committed`).
    }

    /// This server committed `entries` at positions from `first`: held at once when they follow
    /// the latest held; otherwise other servers committed in between, and the rows are read.
    func committed(first: Int, _ entries: [FeedEntry.Parts]) {
        let waiters = self.window.withLock { window -> [Promise<Void>]? in
            guard first == window.next else { return nil }
            Self.append([Row(first: first, entries: entries)], to: &window, cursor: self.cursor)
            return window.takeWaiters()
        }
        guard let waiters else { return self.fellBehind() }
        for waiter in waiters { waiter.trySucceed(()) }
    }

    /// Rows were committed that the window does not hold: read now if a reader waits, else when
    /// the next one comes.
    func fellBehind() {
        self.stale.store(true, ordering: .sequentiallyConsistent)
        if self.window.withLock({ !$0.waiters.isEmpty }) { self.poll() }
    }

    func refresh() -> Future<Void> {
        guard self.stale.load(ordering: .sequentiallyConsistent) else { return Future(value: ()) }
        let promise = Promise<Void>()
        self.reading.withLock { $0.refreshed.append(promise) }
        self.poll()
        return promise.future
    }

    func cursor(_ position: Int) -> String { "pg.\(position)" }

    func start(_ cursor: String?) -> FeedStart {
        guard let cursor else { return .now }
        guard cursor.hasPrefix("pg."), let position = Int(cursor.dropFirst(3)), position >= 0 else { return .stale }
        return .after(position)
    }

    var latest: Int { self.window.withLock { $0.latest } }

    var beforeOldest: Int { self.window.withLock { $0.beforeOldest } }

    func entries(after position: Int, limit: Int) -> (entries: [FeedEntry], gap: Bool) {
        self.window.withLock { $0.entries(after: position, limit: limit) }
    }

    func waitForEntries(after position: Int, timeout: Duration) -> Future<Void> {
        FeedWindow.wait(in: self.window, after: position, timeout: timeout) {
            if self.stale.load(ordering: .sequentiallyConsistent) { self.poll() }
            self.tick()
        }
    }

    /// Reads the rows after the latest held (one read at a time; a call meanwhile reads again
    /// after it).
    func poll() {
        let start = self.reading.withLock { reading -> Bool in
            if reading.running {
                reading.again = true
                return false
            }
            reading.running = true
            reading.again = false
            return true
        }
        guard start else { return }
        // What becomes stale from here on is read by this read or flagged again.
        self.stale.store(false, ordering: .sequentiallyConsistent)
        let after = self.latest
        let read = self.reader.withLock { $0 } ?? { _, _ in Future(value: []) }
        read(after, Self.rowsPerRead).whenComplete { outcome in
            let rows = outcome.value ?? []
            let waiters = self.window.withLock { window -> [Promise<Void>] in
                Self.append(rows, to: &window, cursor: self.cursor)
                return rows.isEmpty ? [] : window.takeWaiters()
            }
            for waiter in waiters { waiter.trySucceed(()) }
            if outcome.value == nil { self.stale.store(true, ordering: .sequentiallyConsistent) }
            let (again, refreshed) = self.reading.withLock { reading -> (Bool, [Promise<Void>]) in
                reading.running = false
                let again = outcome.value != nil && (reading.again || rows.count == Self.rowsPerRead)
                if again { return (true, []) }
                defer { reading.refreshed = [] }
                return (false, reading.refreshed)
            }
            for promise in refreshed { promise.trySucceed(()) }
            if again { self.poll() }
        }
    }

    /// While readers wait: a read every 200–300 ms (the fallback for wake-ups that never come).
    private func tick() {
        guard !self.reading.withLock({ $0.ticking }) else { return }
        self.reading.withLock { $0.ticking = true }
        let delay = Duration.milliseconds(Int.random(in: 200...300))
        TimerQueue.shared.schedule(after: delay) { [weak self] in
            guard let self else { return }
            self.reading.withLock { $0.ticking = false }
            self.poll()
            let waiting = self.window.withLock { window -> Bool in
                window.waiters.removeAll { $0.future.isCompleted }
                return !window.waiters.isEmpty
            }
            if waiting { self.tick() }
        }
    }

    /// Appends the entries of `rows` after the window's latest; a row past it (rows deleted by
    /// retention while this server fell behind) starts the window again there.
    private static func append(_ rows: [Row], to window: inout FeedWindow, cursor: (Int) -> String) {
        for row in rows {
            if row.first > window.next { window.entries.removeAll() }
            for (offset, entry) in row.entries.enumerated() {
                let position = row.first + offset
                if position < window.next && !window.entries.isEmpty { continue }
                window.append(
                    FeedEntry(
                        position: position,
                        cursor: cursor(position),
                        jobID: entry.jobID,
                        event: entry.event,
                        job: entry.job
                    )
                )
            }
        }
    }

    /// The rows of `feed` after `after`, at most `limit`, with their jobs as their rows say now.
    static func rows(_ db: PostgresConnection, after: Int, limit: Int) throws -> [Row] {
        let rows = try db.query(
            "SELECT first_position, entries FROM feed WHERE first_position > $1 ORDER BY first_position LIMIT $2",
            [.int(Int64(after)), .int(Int64(limit))]
        )
        var lines: [(first: Int, entries: [(jobID: String, event: JobEvent)])] = []
        for row in 0..<rows.count {
            lines.append((Int(rows.int(row, 0)), try rows.withBytes(row, 1) { try Self.entries($0) }))
        }
        let ids = Set(lines.flatMap { $0.entries.map(\.jobID) })
        var jobs: [String: FeedJob] = [:]
        if !ids.isEmpty {
            let found = try db.query(
                "SELECT \(StoredRecords.listColumns) FROM jobs WHERE id = ANY($1::text[])",
                [.textArray(Array(ids))]
            )
            for job in try found.map(StoredRecords.snapshot) { jobs[job.id] = FeedJob(job) }
        }
        return lines.map { line in
            Row(first: line.first, entries: line.entries.map { ($0.jobID, $0.event, jobs[$0.jobID]) })
        }
    }

    /// The latest position, and the rows of the newest `FeedWindow.capacity` positions.
    static func newest(_ db: PostgresConnection) throws -> (last: Int, rows: [Row]) {
        let last = Int(try db.query("SELECT last FROM feed_head").int(0, 0))
        var rows: [Row] = []
        var after = max(0, last - FeedWindow.capacity)
        // The row holding `after + 1` may start before it.
        let holding = try db.query(
            "SELECT coalesce(max(first_position), 0) FROM feed WHERE first_position <= $1",
            [.int(Int64(after + 1))]
        )
        after = max(0, Int(holding.int(0, 0)) - 1)
        while true {
            let page = try Self.rows(db, after: after, limit: 1000)
            rows += page
            guard page.count == 1000, let next = page.last else { break }
            after = next.first
        }
        return (last, rows)
    }

    /// An entry as a row keeps it: the job's id, the event's seq, type and time (milliseconds), and
    /// its data as JSON (nothing when none), separated by tabs (JSON escapes its own).
    static func line(jobID: String, _ event: JobEvent, to line: inout [UInt8]) {
        let tab = UInt8(ascii: "\t")
        line += Array(jobID.utf8)
        line.append(tab)
        line += Array(String(event.seq).utf8)
        line.append(tab)
        line += Array(event.type.rawValue.utf8)
        line.append(tab)
        line += Array(String(event.time.milliseconds).utf8)
        line.append(tab)
        if let data = event.data { line += Array(data.jsonString.utf8) }
    }

    /// A row's entries, from its lines (`line`).
    static func entries(_ bytes: UnsafeRawBufferPointer) throws -> [(jobID: String, event: JobEvent)] {
        var entries: [(jobID: String, event: JobEvent)] = []
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            let fields = line.split(separator: UInt8(ascii: "\t"), maxSplits: 4, omittingEmptySubsequences: false)
            guard fields.count == 5, let seq = Int(String(decoding: fields[1], as: UTF8.self)),
                let type = JobEventType(rawValue: String(decoding: fields[2], as: UTF8.self)),
                let time = Int64(String(decoding: fields[3], as: UTF8.self))
            else { continue }
            // (Typed: JSONValue takes `nil` as its own null.)
            let data: JSONValue? =
                fields[4].isEmpty ? .none : try JSONParser.parse(Array(fields[4]), limits: StoredRecords.limits)
            entries.append(
                (
                    String(decoding: fields[0], as: UTF8.self),
                    JobEvent(seq: seq, type: type, time: Timestamp(milliseconds: time), data: data)
                )
            )
        }
        return entries
    }
}
