import Logging
import Synchronization
import TaskCore
import TaskGraph

/// Concurrency keys (SPEC §8) for every server sharing one PostgreSQL database (SPEC §9): at
/// most `max` holders of a key on all servers together, counted as filled slots.
///
/// - **Slots.** A holder takes a row of `key_slots` — `(key, slot)` with `slot` in `0..<max` is
///   the primary key — with `taskserver_take_slot`, which tries the free slots one `INSERT … ON
///   CONFLICT DO NOTHING` at a time: two servers racing for the last slot cannot both take it.
///   Holders are named by their job (a job-level key) or job and task (an attempt's key).
/// - **A slot belongs to its holder, not to a server.** A job taken over by another server runs
///   its task again under the same holder name and takes its slot up (the row's token becomes the
///   new registration's). A release deletes the row only under the token it was taken with and
///   only while that registration is live: a server whose jobs were taken over frees nothing
///   (its work may still run), and neither does one that gave its jobs up (`forget()`: the given
///   up attempt's worker may still run), so a dead server's slots free only when its jobs are
///   taken up.
///   A run gives a slot back once its holder's end is durable (`releasesOnceDurable`, waited
///   for per run, not by a store-wide flush): a crash never frees a slot whose holder's end the
///   server taking the job over would not see. A job's end, in the transaction that records it,
///   deletes every slot of the job — the net under a release lost with a crash.
/// - **Waiting.** Each server keeps one line per key (by priority, then arrival); only its head
///   asks the database. A head refused a slot marks the key waited for (`key_waiters`); a release
///   of such a key sends `freed <key>`, and every server with a line for it asks again at once —
///   and every 500 ms while it waits, should a notification be lost. Across servers the heads
///   make one line: a refused head records its priority and since when it waits, and a take
///   yields a free slot to a live server's head waiting ahead of it (a higher priority, or as
///   high and longer) and wakes that server (`taskserver_take_slot`, migration 10).
/// - **Batches.** Every request queued while the previous batch ran goes in one pipelined round
///   trip (releases first, then takes), on a connection and thread of their own.
final class PostgresKeySlots: SharedConcurrencyKeys {
    /// A held slot; `release()` gives it back (also on deinit, as a safety net).
    final class Held: HeldKey {
        let key: String
        let slot: Int64
        let token: Int64
        /// This taking of the slot (`Request.grant`): a release frees the slot only while it is
        /// still this taking's, not one by a later attempt of the same holder that took it up.
        let grant: Int64
        private weak let slots: PostgresKeySlots?
        private let released = Atomic(false)

        init(key: String, slot: Int64, token: Int64, grant: Int64, slots: PostgresKeySlots) {
            self.key = key
            self.slot = slot
            self.token = token
            self.grant = grant
            self.slots = slots
        }

        func release() {
            guard !self.released.exchange(true, ordering: .acquiringAndReleasing) else { return }
            self.slots?.release(self)
        }

        func forget() {
            guard !self.released.exchange(true, ordering: .acquiringAndReleasing) else { return }
            self.slots?.forget(self)
        }

        /// Another server may take the job over: its end must be durable before the slot frees.
        var releasesOnceDurable: Bool { true }

        deinit { self.release() }
    }

    /// A slot to give back: `Held`'s fields.
    private struct Release {
        let key: String
        let slot: Int64
        let token: Int64
        let grant: Int64
    }

    private struct Request {
        let id: UInt64
        let key: String
        let max: Int
        let priority: Int
        let holder: String
        let jobID: String
        /// Since when it waits (this server's clock, ms): its place among other servers' heads.
        let since: Int64
        /// Names this taking in its row (random).
        let grant = Int64.random(in: 1...Int64.max)
        let promise: Promise<any HeldKey>
    }

    /// One key's line on this server: `head` asks the database; the others wait behind it.
    private struct Line {
        var head: Request?
        var waiters = PriorityFIFO<Request>()
        /// The head's request is in a batch (or queued for one).
        var asking = false
        /// The head was refused: it asks again when the key is freed, or on the retry timer.
        var blocked = false
        /// Some head of this line was refused: the key has a `key_waiters` row of this server.
        var waited = false
        /// A slot of the key was freed while the head's request was on its way: a refusal may
        /// predate the release, so the head asks again at once instead of waiting (a lost wake-up
        /// left heads waiting for the 500 ms retry while their keys were free).
        var freedWhileAsking = false
        var isEmpty: Bool { self.head == nil && self.waiters.isEmpty }
    }

    private struct State {
        var lines: [String: Line] = [:]
        var takes: [Request] = []
        /// Requests that joined a line: a holder taking its slot up (its job was taken over) must
        /// not wait behind the waiters its slot holds back.
        var adopts: [Request] = []
        var releases: [Release] = []
        /// Keys whose line emptied after waiting: their `key_waiters` row goes.
        var unwaits: [String] = []
        var cancelled: Set<UInt64> = []
        var draining = false
        var retryArmed = false
        var nextID: UInt64 = 0
        var holders = 0
    }

    private let state = Mutex(State())
    private let settings: PostgresSettings
    private let nodeName: String
    /// The registration's fencing token now.
    private let token: @Sendable () -> Int64
    private let clock: any ServerClock
    private let logger: Logger
    private let thread = WorkerPool(name: "pg-keys", size: 1)
    /// Touched by `thread` only.
    private nonisolated(unsafe) var connection: PostgresConnection?

    init(
        settings: PostgresSettings,
        nodeName: String,
        token: @escaping @Sendable () -> Int64,
        clock: any ServerClock,
        logger: Logger
    ) {
        self.settings = settings
        self.nodeName = nodeName
        self.token = token
        self.clock = clock
        self.logger = logger
    }

    func close() { self.thread.shutdown() }

    var statistics: ConcurrencyLimiter.Statistics {
        self.state.withLock { state in
            var waiting = 0
            for line in state.lines.values { waiting += line.waiters.count + (line.head == nil ? 0 : 1) }
            return ConcurrencyLimiter.Statistics(keys: state.lines.count, holders: state.holders, waiting: waiting)
        }
    }

    func acquire(
        key: String,
        max: Int,
        priority: Int,
        holder: String,
        jobID: String,
        cancellationToken token: CancellationToken?
    ) -> Future<any HeldKey> {
        if token?.isCancellationRequested == true { return .cancelled() }
        let promise = Promise<any HeldKey>()
        let (id, start) = self.state.withLock { state -> (UInt64, Bool) in
            state.nextID += 1
            let request = Request(
                id: state.nextID,
                key: key,
                max: Swift.max(1, max),
                priority: priority,
                holder: holder,
                jobID: jobID,
                since: self.clock.now().milliseconds,
                promise: promise
            )
            if state.lines[key]?.head == nil {
                state.lines[key, default: Line()].head = request
                state.lines[key]!.asking = true
                state.takes.append(request)
                return (request.id, Self.startDraining(&state))
            }
            state.lines[key]!.waiters.append(request, priority: priority)
            state.adopts.append(request)
            return (request.id, Self.startDraining(&state))
        }
        if start { self.thread.execute { self.drain() } }
        if let token {
            let registration = token.register { [weak self] in self?.cancel(id, key: key, priority: priority) }
            promise.future.whenComplete { _ in registration.dispose() }
        }
        return promise.future
    }

    /// A waiter that left: out of its line, or (asking now) given back as soon as it is granted.
    private func cancel(_ id: UInt64, key: String, priority: Int) {
        let removed: Promise<any HeldKey>? = self.state.withLock { state in
            guard var line = state.lines[key] else { return nil }
            var removed: Promise<any HeldKey>?
            if line.head?.id == id {
                if line.asking {
                    state.cancelled.insert(id)
                } else {
                    removed = line.head?.promise
                    line.head = line.waiters.popFirst()
                    line.blocked = false
                    if line.head != nil {
                        line.asking = true
                        state.takes.append(line.head!)
                    }
                }
            } else {
                _ = line.waiters.removeFirst(priority: priority) { request in
                    if request.id == id { removed = request.promise }
                    return request.id == id
                }
            }
            if line.isEmpty {
                state.lines[key] = nil
                if line.waited { state.unwaits.append(key) }
            } else {
                state.lines[key] = line
            }
            return removed
        }
        removed?.tryCancel()
        self.kick()
    }

    private func release(_ held: Held) {
        self.state.withLock { state in
            state.holders -= 1
            // The slot as a value: `held` may be going away (a release from its deinit).
            state.releases.append(Release(key: held.key, slot: held.slot, token: held.token, grant: held.grant))
            // Its own release may let its own line in: asked again with the batch that frees it.
            _ = Self.freed(held.key, in: &state)
        }
        self.kick()
    }

    /// A slot whose run was given up: its row stays, for the server that takes the job over.
    private func forget(_ held: Held) {
        self.state.withLock { $0.holders -= 1 }
    }

    /// Another server freed a slot of `key` (`freed` notification): this server's line asks again.
    func freed(_ key: String) {
        let asked = self.state.withLock { state in Self.freed(key, in: &state) }
        if asked { self.kick() }
    }

    /// A slot of `key` was freed: a blocked head asks again; one asking now is told to, should it
    /// be refused. True when a request was queued.
    private static func freed(_ key: String, in state: inout State) -> Bool {
        guard var line = state.lines[key], let head = line.head else { return false }
        if line.asking {
            line.freedWhileAsking = true
            state.lines[key] = line
            return false
        }
        guard line.blocked else { return false }
        line.blocked = false
        line.asking = true
        state.lines[key] = line
        state.takes.append(head)
        return true
    }

    /// Starts the thread on what is queued, unless it is at work already.
    private func kick() {
        let start = self.state.withLock { state in
            state.takes.isEmpty && state.adopts.isEmpty && state.releases.isEmpty && state.unwaits.isEmpty
                ? false : Self.startDraining(&state)
        }
        if start { self.thread.execute { self.drain() } }
    }

    private static func startDraining(_ state: inout State) -> Bool {
        if state.draining { return false }
        state.draining = true
        return true
    }

    // MARK: - The thread

    private func drain() {
        while true {
            let (takes, adopts, releases, unwaits) = self.state.withLock { state in
                defer {
                    state.takes = []
                    state.adopts = []
                    state.releases = []
                    state.unwaits = []
                }
                if state.takes.isEmpty && state.adopts.isEmpty && state.releases.isEmpty && state.unwaits.isEmpty {
                    state.draining = false
                }
                return (state.takes, state.adopts, state.releases, state.unwaits)
            }
            if takes.isEmpty && adopts.isEmpty && releases.isEmpty && unwaits.isEmpty { return }
            guard self.run(takes, adopts, releases, unwaits) else {
                // Refused, or the database away: everything is sent again in 250 ms.
                self.state.withLock { state in
                    state.takes = takes + state.takes
                    state.adopts = adopts + state.adopts
                    state.releases = releases + state.releases
                    state.unwaits = unwaits + state.unwaits
                    state.draining = false
                }
                _ = self.clock.schedule(after: .milliseconds(250)) { [weak self] in self?.kick() }
                return
            }
        }
    }

    /// One round trip; false when the connection broke (nothing of it happened, or all of it did:
    /// it is sent again, and every statement of it may be repeated).
    private func run(
        _ takes: [Request],
        _ adopts: [Request],
        _ releases: [Release],
        _ unwaits: [String]
    ) -> Bool {
        let token = self.token()
        // In key order: two servers' batches that want the same keys then wait for each other's
        // inserts in one order, never in a cycle (a deadlock held both servers' fences — and
        // their heartbeats — for PostgreSQL's deadlock_timeout, and chains of them made a lease
        // run out under load).
        let takes = takes.sorted { $0.key < $1.key }
        // The releases commit in a transaction of their own that does not wait for the WAL flush
        // (`synchronous_commit = off`): one fsync less per batch. A release lost with a database
        // crash only keeps its slot until its job's end, whose (synchronous) commit deletes every
        // slot of the job — never more than `max` holders. A take that a release let in is
        // committed synchronously, and PostgreSQL flushes the WAL in order: a durable take is
        // never left holding a slot whose release was lost.
        var releasing: [PostgresConnection.Statement] = []
        var statements: [PostgresConnection.Statement] = []
        if !releases.isEmpty {
            releasing.append(
                .init(
                    sql: """
                        WITH gone AS (
                            DELETE FROM key_slots s
                            USING unnest($1::text[], $2::bigint[], $3::bigint[], $5::bigint[]) AS u(key, slot, token, grant_id)
                            WHERE s.key = u.key AND s.slot = u.slot AND s.token = u.token AND s.grant_id = u.grant_id
                                AND EXISTS (SELECT 1 FROM servers WHERE id = $4 AND servers.token = u.token)
                            RETURNING s.key)
                        SELECT pg_notify(taskserver_channel(), 'freed ' || g.key) FROM (SELECT DISTINCT key FROM gone) g
                        WHERE EXISTS (SELECT 1 FROM key_waiters w WHERE w.key = g.key)
                        """,
                    values: [
                        .textArray(releases.map(\.key)), .intArray(releases.map(\.slot)),
                        .intArray(releases.map(\.token)), .text(self.nodeName), .intArray(releases.map(\.grant)),
                    ]
                )
            )
        }
        if !unwaits.isEmpty {
            statements.append(
                .init(
                    sql: "DELETE FROM key_waiters WHERE server = $1 AND key = ANY($2::text[])",
                    values: [.text(self.nodeName), .textArray(unwaits)]
                )
            )
        }
        if !adopts.isEmpty {
            // A slot its holder held before (its job ran elsewhere until taken over), taken up.
            statements.append(
                .init(
                    sql: """
                        UPDATE key_slots s SET token = $3, grant_id = u.grant_id
                        FROM unnest($1::text[], $2::text[], $5::bigint[]) AS u(key, holder, grant_id)
                        WHERE s.key = u.key AND s.holder = u.holder
                            AND EXISTS (SELECT 1 FROM servers WHERE id = $4 AND servers.token = $3)
                        RETURNING s.key, s.holder, s.slot
                        """,
                    values: [
                        .textArray(adopts.map(\.key)), .textArray(adopts.map(\.holder)), .int(token),
                        .text(self.nodeName), .intArray(adopts.map(\.grant)),
                    ]
                )
            )
        }
        for take in takes {
            statements.append(
                .init(
                    sql: "SELECT taskserver_take_slot($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    values: [
                        .text(take.key), .int(Int64(take.max)), .text(take.holder), .text(take.jobID), .int(token),
                        .text(self.nodeName), .int(take.grant), .int(Int64(take.priority)), .int(take.since),
                    ]
                )
            )
        }
        let rows: [PostgresRows]
        do {
            if self.connection == nil {
                let connection = try PostgresConnection(self.settings)
                // A batch holds this server's fence (`FOR SHARE` on its `servers` row), which the
                // heartbeat's renewal waits for: a take waiting on another server's insert of the
                // same slot gives up after a second and is sent again, so that the renewal never
                // waits longer.
                try connection.execute("SET lock_timeout = 1000")
                try connection.endIdleTransactions()
                self.connection = connection
            }
            var pipeline: [PostgresConnection.Statement] = []
            if !releasing.isEmpty {
                pipeline += [.init(sql: "BEGIN"), .init(sql: "SET LOCAL synchronous_commit = off")]
                pipeline += releasing + [.init(sql: "COMMIT")]
            }
            if !statements.isEmpty { pipeline += [.init(sql: "BEGIN")] + statements + [.init(sql: "COMMIT")] }
            rows = try self.connection!.pipeline(pipeline)
        } catch let error as PostgresError where !error.connectionLost {
            try? self.connection?.execute("ROLLBACK")
            // Refused by the fence (this server registers again: its jobs were taken over, or its
            // lease ran out), or another error: sent again shortly, under the registration's token
            // then. The requests of runs given up meanwhile leave with their runs' cancellation.
            if error.sqlState == "55P03" || error.sqlState == "40P01" {
                self.logger.debug(
                    "concurrency keys: a batch waited too long on another server's",
                    metadata: ["error": "\(error)"]
                )
            } else if !error.isFenced {
                self.logger.warning("concurrency keys: a batch failed", metadata: ["error": "\(error)"])
            }
            return false
        } catch {
            self.logger.debug("concurrency keys: the database is away", metadata: ["error": "\(error)"])
            self.connection = nil
            return false
        }
        // Past the releases' transaction (BEGIN, SET, the release, COMMIT), BEGIN and the unwait.
        var first = (releasing.isEmpty ? 0 : 4) + 1 + (unwaits.isEmpty ? 0 : 1)
        if !adopts.isEmpty {
            let adopted = rows[first]
            var slotsByHolder: [String: Int64] = [:]
            for row in 0..<adopted.count {
                slotsByHolder[adopted.text(row, 0) + "\u{0}" + adopted.text(row, 1)] = adopted.int(row, 2)
            }
            self.adopted(adopts, slotsByHolder: slotsByHolder, token: token)
            first += 1
        }
        let slots: [Int64?] = takes.indices.map { index in
            let result = rows[first + index]
            return result.count > 0 && !result.isNull(0, 0) ? result.int(0, 0) : nil
        }
        self.answer(takes, slots: slots, token: token)
        return true
    }

    /// Grants the heads that got a slot (then asks for the next in their lines), blocks the others.
    private func answer(_ takes: [Request], slots: [Int64?], token: Int64) {
        var granted: [(Request, Held)] = []
        var cancelledRequests: [Promise<any HeldKey>] = []
        var giveBack: [Held] = []
        let armRetry = self.state.withLock { state -> Bool in
            for (take, slot) in zip(takes, slots) {
                guard var line = state.lines[take.key], line.head?.id == take.id else {
                    // Cancelled and gone from its line meanwhile.
                    if let slot {
                        state.holders += 1
                        giveBack.append(Held(key: take.key, slot: slot, token: token, grant: take.grant, slots: self))
                    }
                    continue
                }
                line.asking = false
                let freedMeanwhile = line.freedWhileAsking
                line.freedWhileAsking = false
                if let slot {
                    state.holders += 1
                    let held = Held(key: take.key, slot: slot, token: token, grant: take.grant, slots: self)
                    if state.cancelled.remove(take.id) != nil {
                        giveBack.append(held)
                    } else {
                        granted.append((take, held))
                    }
                    line.head = line.waiters.popFirst()
                    line.blocked = false
                } else if state.cancelled.remove(take.id) != nil {
                    cancelledRequests.append(take.promise)
                    line.head = line.waiters.popFirst()
                    line.blocked = false
                } else {
                    // Refused: it waits for a `freed` — unless one came while it asked.
                    line.blocked = !freedMeanwhile
                    line.waited = true
                }
                if let head = line.head, !line.blocked {
                    line.asking = true
                    state.takes.append(head)
                }
                if line.isEmpty {
                    state.lines[take.key] = nil
                    // Refused before: its waiting mark goes.
                    if line.waited { state.unwaits.append(take.key) }
                } else {
                    state.lines[take.key] = line
                }
            }
            let blocked = state.lines.values.contains { $0.blocked }
            guard blocked, !state.retryArmed else { return false }
            state.retryArmed = true
            return true
        }
        for (take, held) in granted { take.promise.succeed(held) }
        for promise in cancelledRequests { promise.tryCancel() }
        for held in giveBack { held.release() }
        if armRetry {
            _ = self.clock.schedule(after: .milliseconds(500)) { [weak self] in self?.retryBlocked() }
        }
    }

    /// Grants the waiters whose holders held a slot already, out of their lines.
    private func adopted(_ adopts: [Request], slotsByHolder: [String: Int64], token: Int64) {
        guard !slotsByHolder.isEmpty else { return }
        var granted: [(Request, Held)] = []
        self.state.withLock { state in
            for request in adopts {
                guard let slot = slotsByHolder[request.key + "\u{0}" + request.holder],
                    var line = state.lines[request.key]
                else { continue }
                // Not in the line any more: granted, cancelled, or its head (whose take takes it up).
                guard line.waiters.removeFirst(priority: request.priority, where: { $0.id == request.id }) else {
                    continue
                }
                state.lines[request.key] = line
                state.holders += 1
                granted.append(
                    (request, Held(key: request.key, slot: slot, token: token, grant: request.grant, slots: self))
                )
            }
        }
        for (request, held) in granted {
            if !request.promise.trySucceed(held) { held.release() }
        }
    }

    /// Every blocked head asks again (a `freed` notification may have been lost).
    private func retryBlocked() {
        self.state.withLock { state in
            state.retryArmed = false
            for key in state.lines.keys {
                guard var line = state.lines[key], line.blocked, let head = line.head else { continue }
                line.blocked = false
                line.asking = true
                state.lines[key] = line
                state.takes.append(head)
            }
        }
        self.kick()
    }
}
