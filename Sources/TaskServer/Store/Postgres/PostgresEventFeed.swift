import Synchronization
import TaskCore
import TaskGraph

/// The server-wide feed (SPEC §7 `GET /v1/events`) of the servers sharing one PostgreSQL database
/// (SPEC §9): every server reads the same entries at the same positions, so a cursor taken from
/// one server means the same on every other — and after a restart.
///
/// - **Writing** (`PostgresJobRepository.feedStatement`): a commit whose journal has `job.*` events
///   adds one row of them, numbered from `feed_head`, which it updates last before committing. A
///   commit holds the head's row lock from there to its end, so positions are given in commit
///   order, and a reader never sees a position without every earlier one: no gap, and no entry
///   ever appears behind a cursor a reader was given.
/// - **Reading**: each server keeps the latest `FeedWindow.capacity` entries, read at start. Its
///   own commits join them as they commit when nothing came between (one server: never a read);
///   otherwise, and on another server's `ended` notification, and every 200–300 ms while a reader
///   waits (never while none does), it reads the rows after its latest.
///
/// Cursors are `pg.<position>`; another feed's cursor is stale.
final class PostgresEventFeed: EventFeed {
    /// One row of `feed`: its first position and its entries (type and stored JSON), in order.
    struct Row: Sendable {
        let first: Int
        let entries: [(type: String, body: [UInt8])]
    }

    /// Reads at most `limit` rows after position `after` (a row boundary).
    typealias Read = @Sendable (_ after: Int, _ limit: Int) -> Future<[Row]>

    static let rowsPerRead = 200
    private let window = Mutex(FeedWindow())
    /// The repository's reader (`attach`); none: nothing is read.
    private let reader = Mutex<Read?>(nil)
    private let reading = Mutex<(running: Bool, again: Bool, ticking: Bool)>((false, false, false))

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

    func publish(jobID: String, events: some Collection<JobEvent>, job: JobSnapshot) {
        // Held already: the writer hands its rows over as it commits them (`committed`).
    }

    /// This server committed `entries` at positions from `first`: held at once when they follow
    /// the latest held; otherwise other servers committed in between, and the rows are read.
    func committed(first: Int, _ entries: [(type: String, body: [UInt8])]) {
        let waiters = self.window.withLock { window -> [Promise<Void>]? in
            guard first == window.next else { return nil }
            Self.append([Row(first: first, entries: entries)], to: &window, cursor: self.cursor)
            return window.takeWaiters()
        }
        guard let waiters else { return self.poll() }
        for waiter in waiters { waiter.trySucceed(()) }
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
        FeedWindow.wait(in: self.window, after: position, timeout: timeout) { self.tick() }
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
        let after = self.latest
        let read = self.reader.withLock { $0 } ?? { _, _ in Future(value: []) }
        read(after, Self.rowsPerRead).whenComplete { outcome in
            let rows = outcome.value ?? []
            let waiters = self.window.withLock { window -> [Promise<Void>] in
                Self.append(rows, to: &window, cursor: self.cursor)
                return rows.isEmpty ? [] : window.takeWaiters()
            }
            for waiter in waiters { waiter.trySucceed(()) }
            let again = self.reading.withLock { reading -> Bool in
                reading.running = false
                return reading.again || rows.count == Self.rowsPerRead
            }
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
                    FeedEntry(position: position, cursor: cursor(position), type: entry.type, body: entry.body)
                )
            }
        }
    }

    /// The rows of `feed` after `after`, at most `limit`.
    static func rows(_ db: PostgresConnection, after: Int, limit: Int) throws -> [Row] {
        let rows = try db.query(
            "SELECT first_position, entries FROM feed WHERE first_position > $1 ORDER BY first_position LIMIT $2",
            [.int(Int64(after)), .int(Int64(limit))]
        )
        return (0..<rows.count).map { row in
            Row(first: Int(rows.int(row, 0)), entries: rows.withBytes(row, 1) { Self.entries($0) })
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

    /// A row's entries: lines of type, a tab, and the entry's JSON.
    private static func entries(_ bytes: UnsafeRawBufferPointer) -> [(type: String, body: [UInt8])] {
        var entries: [(type: String, body: [UInt8])] = []
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            guard let tab = line.firstIndex(of: UInt8(ascii: "\t")) else { continue }
            entries.append((String(decoding: line[line.startIndex..<tab], as: UTF8.self), Array(line[(tab + 1)...])))
        }
        return entries
    }
}
