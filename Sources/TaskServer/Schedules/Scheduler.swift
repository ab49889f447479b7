import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore
import TaskGraph
import TaskSchedule

/// Fires cron schedules (SPEC §8): owns every schedule of this server, in memory (they are few:
/// at most `maxSchedules`), written through to the store (`ScheduleStore`).
///
/// - **When**: each schedule's next fire comes from `CronSchedule` (cronie's rules, the same code
///   as the preview); one clock timer is armed for the earliest, and a fire starts its job through
///   `JobService.submit` like any client's.
/// - **At most once per fire time**, also across restarts and SIGKILL: the job of a fire carries
///   the idempotency key `fireKey(id, time)`, so inserting it again finds the first; then the
///   store records the fire (`recordFire`), and fire times up to it are never looked at again.
/// - **Overlap**: a fire while the schedule's previous run is unfinished is skipped (`skip`, the
///   default), starts beside it (`allow`), or cancels it first (`cancelPrevious`). A schedule's
///   fires are handled one at a time, in order.
/// - **Catch-up** after downtime: the fire times missed since the last one recorded are dropped
///   (`none`), the latest fires once (`last`, the default), or each fires (`all`, at most
///   `maxCatchUp`, the latest ones).
/// - A paused schedule does not fire; resumed, it goes on from then (no catch-up of the pause).
///   `trigger` starts a run at once whatever the schedule's state (a manual run, no overlap rule).
/// - **In a cluster** (SPEC §9) every server keeps every schedule (each answers the API), but only
///   the leader (`ClusterScheduleObserver.clusterLeadership`) arms the timer. A change made through
///   any server, and each fire, is committed and announced (`clusterSchedulesChanged`): the others
///   read that schedule again. A server that becomes the leader reads them all and fires what was
///   missed since each one's last recorded fire, by its catch-up rule — as after a restart. The
///   announcement takes a moment, so a request for a schedule this server does not hold reads it
///   from the store first, and a list reads them all (read-your-writes through any server, as
///   for jobs).
public final class Scheduler: Sendable {
    public static let maxSchedules = 10_000
    public static let maxCatchUp = 100

    struct Entry {
        var definition: ScheduleDefinition
        var createdAt: Timestamp
        var updatedAt: Timestamp
        var lastFireAt: Timestamp?
        var lastJobID: String?
        /// Fire times due and not handled yet, oldest first.
        var due: [Timestamp] = []
        /// The next fire time not yet due (nil: paused, or the expression fires no more).
        var next: Timestamp?
        /// A fire of this schedule is being handled.
        var firing = false
        /// After a failed fire: not tried again before this (Unix milliseconds).
        var holdUntil: Int64 = 0

        var stored: StoredSchedule {
            StoredSchedule(
                id: self.definition.id,
                definition: self.definition.json,
                createdAt: self.createdAt,
                updatedAt: self.updatedAt,
                lastFireAt: self.lastFireAt,
                lastJobID: self.lastJobID
            )
        }
    }

    private struct State {
        var entries = Table()
        var timer: ClockTimer?
        var timerAt: Int64 = .max
        var running = false
        /// This server fires the schedules: always alone, in a cluster while it is the leader.
        var leading: Bool
        /// Numbers the store reads of other servers' changes and this server's own changes.
        var epoch = 0
        /// Schedules this server created, changed or deleted, with the `epoch` of the change: a
        /// read sent before it does not undo it.
        var changedHere: [String: Int] = [:]
        /// The last read of other servers' changes (`readInOrder`).
        var reads = Future<Void>(value: ())
        /// Schedules this server changed whose write to the store has not ended (how many such
        /// writes): a read may predate their commit, so it leaves them as they are.
        var writing: [String: Int] = [:]

        mutating func changed(_ id: String) {
            self.epoch += 1
            self.changedHere[id] = self.epoch
        }

        /// Schedule `id` changed here, and its write to the store starts.
        mutating func writes(_ id: String) {
            self.changed(id)
            self.writing[id, default: 0] += 1
        }

        /// The write of schedule `id` ended: reads sent from now on see it, and those sent before
        /// do not undo it.
        mutating func wrote(_ id: String) {
            self.changed(id)
            if let count = self.writing[id], count > 1 { self.writing[id] = count - 1 } else { self.writing[id] = nil }
        }

        /// Takes `fresh` (read as read number `issued`; schedule `only`, or all when nil) as the
        /// store's: combined with this server's entry by `combine`, a schedule missing from the
        /// read removed; but a schedule this server changed after the read was sent, or is
        /// writing, is kept, and so is one being fired (its end records it).
        mutating func take(
            _ fresh: [Entry],
            only: String?,
            issued: Int,
            combine: (Entry?, Entry) -> Entry
        ) {
            let changedHere = self.changedHere
            let writing = self.writing
            let newer = { (id: String) in (changedHere[id] ?? 0) > issued || writing[id] != nil }
            let read = Set(fresh.map(\.definition.id))
            for id in only.map({ [$0] }) ?? Array(self.entries.ids)
            where !read.contains(id) && !newer(id) && self.entries[id]?.firing != true {
                self.entries[id] = nil
            }
            for entry in fresh where !newer(entry.definition.id) {
                let current = self.entries[entry.definition.id]
                if current?.firing == true { continue }
                self.entries[entry.definition.id] = combine(current, entry)
            }
            self.changedHere = changedHere.filter { id, epoch in epoch > issued || (only != nil && id != only) }
        }
    }

    let jobs: JobService
    /// Resolves the jobs that name a workflow definition, at each fire.
    let definitions: Definitions
    let store: any ScheduleStore
    let clock: any ServerClock
    let logger: Logger
    let cluster: (any Cluster)?
    private let state: Mutex<State>

    init(
        jobs: JobService,
        definitions: Definitions,
        store: any ScheduleStore,
        cluster: (any Cluster)?,
        clock: any ServerClock,
        logger: Logger
    ) {
        self.jobs = jobs
        self.definitions = definitions
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self.logger = logger
        self.state = Mutex(State(leading: cluster == nil))
    }

    /// The idempotency key of the job a fire at `time` starts. It holds a space, which no
    /// client's `Idempotency-Key` may (visible ASCII only: `JobsAPI.isIdempotencyKey`), so no
    /// client's job can take a fire's place and silence it.
    static func fireKey(_ id: String, _ time: Timestamp) -> IdempotencyKey {
        let key = "taskserver-schedule \(id)@\(time.milliseconds)"
        return IdempotencyKey(key: key, bodyHash: fnv1a64(key.utf8))
    }

    static func date(_ time: Timestamp) -> Date { Date(timeIntervalSince1970: Double(time.milliseconds) / 1000) }
    static func timestamp(_ date: Date) -> Timestamp {
        Timestamp(milliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
    }

    /// The first fire time strictly after `time`.
    static func next(_ definition: ScheduleDefinition, after time: Timestamp) -> Timestamp? {
        definition.schedule.nextFire(after: Self.date(time)).map(Self.timestamp)
    }

    // MARK: - Starting and stopping

    /// Reads the stored schedules, works out what each missed while the server was down, and
    /// starts firing.
    func start() async throws {
        let entries = self.entries(try await self.store.storedSchedules().value)
        self.state.withLock { state in
            state.entries = Table(entries)
            state.running = true
        }
        self.cluster?.observeSchedules(ScheduleLink(self))
        self.armTimer()
    }

    /// Entries for `stored`, each with the fires it missed since its last recorded one.
    private func entries(_ stored: [StoredSchedule]) -> [String: Entry] {
        let now = self.clock.now()
        var entries: [String: Entry] = [:]
        for schedule in stored {
            guard var entry = self.entry(schedule) else { continue }
            if !entry.definition.paused {
                entry.due = Self.missed(entry.definition, since: schedule.lastFireAt ?? schedule.createdAt, now: now)
                entry.next = Self.next(entry.definition, after: now)
            }
            entries[schedule.id] = entry
        }
        return entries
    }

    /// `schedule` as an entry with nothing due (nil: its definition no longer reads).
    private func entry(_ schedule: StoredSchedule) -> Entry? {
        do {
            return Entry(
                definition: try ScheduleDefinition(
                    schedule.definition,
                    id: schedule.id,
                    decoder: self.jobs.engine.decoder
                ),
                createdAt: schedule.createdAt,
                updatedAt: schedule.updatedAt,
                lastFireAt: schedule.lastFireAt,
                lastJobID: schedule.lastJobID
            )
        } catch {
            self.logger.error(
                "a stored schedule no longer reads; it does not fire",
                metadata: ["schedule.id": "\(schedule.id)", "error": "\(error.detail)"]
            )
            return nil
        }
    }

    // MARK: - In a cluster

    /// Becomes the server that fires (reading every schedule again: what the previous leader
    /// recorded, and the fires missed since), or stops firing.
    func setLeading(_ leading: Bool) {
        let (changed, timer) = self.state.withLock { state -> (Bool, ClockTimer?) in
            guard state.leading != leading else { return (false, nil) }
            state.leading = leading
            defer {
                state.timer = nil
                state.timerAt = .max
            }
            return (true, state.timer)
        }
        guard changed else { return }
        if let timer { self.clock.cancel(timer) }
        guard leading else { return }
        self.logger.notice("this server fires the schedules now")
        self.readInOrder(self.store.storedSchedules) { outcome, issued in
            guard case .success(let stored) = outcome else {
                // Tried again at the next heartbeat.
                self.logger.error(
                    "could not read the schedules to fire them",
                    metadata: ["error": "\(outcome.error.map { "\($0)" } ?? "cancelled")"]
                )
                self.state.withLock { $0.leading = false }
                return
            }
            let fresh = self.entries(stored)
            self.state.withLock { state in
                guard state.leading else { return }
                state.take(Array(fresh.values), only: nil, issued: issued) { _, fresh in fresh }
            }
            self.armTimer()
        }
    }

    /// Reads schedule `id` again (nil: all of them) after another server changed it.
    func refresh(_ id: String?) {
        self.reread(id).whenComplete { outcome in
            guard case .success = outcome else {
                self.logger.warning("could not read the schedules another server changed")
                return
            }
        }
    }

    /// Reads schedule `id` (nil: all of them) from the store and takes what it holds over this
    /// server's entries (`State.take`, `merged`): what a notification of another server's change
    /// does, and what a request does for a schedule this server does not hold. Completes once
    /// taken; fails when the store could not be read.
    private func reread(_ id: String?) -> Future<Void> {
        let taken = Promise<Void>()
        let read: @Sendable () -> Future<[StoredSchedule]> = {
            if let id {
                self.store.storedSchedule(id).map { $0.map { [$0] } ?? [] }
            } else {
                self.store.storedSchedules()
            }
        }
        self.readInOrder(read) { outcome, issued in
            guard case .success(let stored) = outcome else {
                taken.complete(with: outcome.map { _ in () })
                return
            }
            let now = self.clock.now()
            let held = self.state.withLock { $0.entries }
            let fresh = stored.compactMap { self.entry($0, reusing: held[$0.id]) }
            self.state.withLock { state in
                state.take(fresh, only: id, issued: issued) { current, entry in
                    Self.merged(current, entry, now: now)
                }
            }
            self.armTimer()
            taken.succeed(())
        }
        return taken.future
    }

    /// `schedule` as an entry with nothing due, with the definition of `held` (this server's
    /// entry) when the stored one is the same: a list in a cluster reads every schedule, and
    /// decoding each one's job again would cost more than the read.
    private func entry(_ schedule: StoredSchedule, reusing held: Entry?) -> Entry? {
        guard let held, held.definition.json == schedule.definition else { return self.entry(schedule) }
        return Entry(
            definition: held.definition,
            createdAt: schedule.createdAt,
            updatedAt: schedule.updatedAt,
            lastFireAt: schedule.lastFireAt,
            lastJobID: schedule.lastJobID
        )
    }

    /// Whether schedule `id` is read from the store before a request for it is answered: in a
    /// cluster, one this server does not hold may have been created through another server an
    /// instant ago, its announcement still on its way. Alone, this server holds every schedule.
    private func mayBeElsewhere(_ id: String) -> Bool {
        self.cluster != nil && ScheduleDefinition.isValidID(id) && self.state.withLock { $0.entries[id] == nil }
    }

    /// `read` over `current` (this server's entry): a schedule whose timing did not change keeps
    /// what it has due, less the fires recorded since; a new or re-timed one fires from now on (as
    /// when created or updated through this server).
    private static func merged(_ current: Entry?, _ read: Entry, now: Timestamp) -> Entry {
        var entry = read
        if let current,
            (current.definition.cron, current.definition.timezone, current.definition.paused)
                == (entry.definition.cron, entry.definition.timezone, entry.definition.paused)
        {
            entry.lastFireAt = [current.lastFireAt, entry.lastFireAt].compactMap { $0 }.max()
            entry.lastJobID = entry.lastJobID ?? current.lastJobID
            entry.due = current.due.filter { time in entry.lastFireAt.map { time > $0 } ?? true }
            entry.next = current.next
            entry.firing = current.firing
            entry.holdUntil = current.holdUntil
        } else if !entry.definition.paused {
            entry.next = Self.next(entry.definition, after: now)
        }
        return entry
    }

    /// Runs the store reads of other servers' changes one after another, each applied before the
    /// next is sent, so that an older read never overwrites a newer one; `apply` gets the read's
    /// number (`State.take` keeps what this server changed after it).
    private func readInOrder(
        _ read: @escaping @Sendable () -> Future<[StoredSchedule]>,
        apply: @escaping @Sendable (Outcome<[StoredSchedule]>, Int) -> Void
    ) {
        let done = Promise<Void>()
        let previous = self.state.withLock { state -> Future<Void> in
            defer { state.reads = done.future }
            return state.reads
        }
        previous.whenComplete { _ in
            let issued = self.state.withLock { state -> Int in
                state.epoch += 1
                return state.epoch
            }
            read().whenComplete { outcome in
                apply(outcome, issued)
                done.succeed(())
            }
        }
    }

    /// The fire times missed in (`since`, `now`] that `catchUp` says to fire.
    static func missed(_ definition: ScheduleDefinition, since: Timestamp, now: Timestamp) -> [Timestamp] {
        guard definition.catchUp != .none else { return [] }
        var times: [Timestamp] = []
        var cursor = since
        while let time = Self.next(definition, after: cursor), time <= now {
            times.append(time)
            if times.count > Self.maxCatchUp { times.removeFirst() }
            cursor = time
        }
        return definition.catchUp == .last ? Array(times.suffix(1)) : times
    }

    /// Stops firing (shutdown).
    func stop() {
        let timer = self.state.withLock { state -> ClockTimer? in
            state.running = false
            defer { state.timer = nil }
            return state.timer
        }
        if let timer { self.clock.cancel(timer) }
    }

    // MARK: - Reading

    /// The schedule `id` as the API shows it (nil: none). In a cluster, one this server does not
    /// hold is answered as the store holds it (unless this server is deleting it); the entry
    /// comes with the announcement, as before, so that reads of absent ids never queue in
    /// `readInOrder`.
    func schedule(_ id: String) -> Future<JSONValue?> {
        guard self.mayBeElsewhere(id) else { return Future(value: self.representation(id)) }
        return self.store.storedSchedule(id).map { stored -> JSONValue? in
            if let held = self.representation(id) { return held }
            guard let stored, self.state.withLock({ $0.writing[id] == nil }) else { return nil }
            return self.entry(stored).map { self.representation($0) }
        }
    }

    /// The schedule `id` as the API shows it, as this server holds it.
    func representation(_ id: String) -> JSONValue? {
        self.state.withLock { $0.entries[id] }.map { self.representation($0) }
    }

    /// A page of the schedules, by id: at most `limit` whose ids come after `after`; `next` is
    /// the last of them when more follow (the `after` of the next page).
    struct Page {
        var items: [JSONValue]
        var next: String?
    }

    /// A page of the schedules, by id. In a cluster, as the store holds them (one created or
    /// deleted through another server an instant ago too), but those this server is writing as
    /// it holds them; while the store cannot be read, those this server holds. The read is the
    /// answer's only: the entries change with the announcements, as before (reads of every list
    /// in `readInOrder` would queue behind one another).
    func listed(limit: Int, after: String?) -> Future<Page> {
        guard self.cluster != nil else { return Future(value: self.list(limit: limit, after: after)) }
        return self.store.storedSchedules().continueWith(on: .immediate) { read -> Page in
            guard case .success(let stored)? = read.outcome else { return self.list(limit: limit, after: after) }
            let (held, writing) = self.state.withLock { state in (state.entries, state.writing) }
            var entries: [String: Entry] = [:]
            for schedule in stored where writing[schedule.id] == nil {
                entries[schedule.id] = self.entry(schedule, reusing: held[schedule.id])
            }
            for id in writing.keys { entries[id] = held[id] }
            return self.page(entries.values, limit: limit, after: after)
        }
    }

    /// A page of the schedules this server holds, by id.
    func list(limit: Int, after: String?) -> Page {
        self.page(self.state.withLock { $0.entries.values }, limit: limit, after: after)
    }

    private func page(_ entries: some Collection<Entry>, limit: Int, after: String?) -> Page {
        var selected = entries.filter { entry in after.map { entry.definition.id > $0 } ?? true }
        selected.sort { $0.definition.id < $1.definition.id }
        let page = selected.prefix(limit)
        return Page(
            items: page.map { self.representation($0) },
            next: selected.count > limit ? page.last?.definition.id : nil
        )
    }

    var count: Int { self.state.withLock { $0.entries.count } }

    /// Whether this server fires the schedules (alone, or the cluster's leader).
    var isLeading: Bool { self.state.withLock { $0.leading } }

    private func representation(_ entry: Entry) -> JSONValue {
        guard case .object(var object) = entry.definition.json else { return .null }
        object["createdAt"] = .string(entry.createdAt.rfc3339)
        object["updatedAt"] = .string(entry.updatedAt.rfc3339)
        if let lastFireAt = entry.lastFireAt { object["lastFireAt"] = .string(Self.format(lastFireAt)) }
        if let lastJobID = entry.lastJobID { object["lastJobId"] = .string(lastJobID) }
        var runs: [JSONValue] = []
        if !entry.definition.paused {
            let times = entry.definition.schedule.nextFires(after: Self.date(self.clock.now()), count: 5)
            runs = times.map { .string(SchedulePreview.format($0)) }
        }
        object["nextRuns"] = .array(runs)
        return .object(object)
    }

    /// A fire time as shown: UTC, whole seconds.
    static func format(_ time: Timestamp) -> String { SchedulePreview.format(Self.date(time)) }

    // MARK: - Changing

    enum Change: Sendable {
        case done(JSONValue)
        case notFound
        case exists
        case full
    }

    /// Adds a schedule; it fires from now on. (In a cluster, one with this id created through
    /// another server an instant ago is read first: it exists.)
    func create(_ definition: ScheduleDefinition) -> Future<Change> {
        guard self.mayBeElsewhere(definition.id) else { return self.add(definition) }
        return self.reread(definition.id).flatMap { self.add(definition) }
    }

    private func add(_ definition: ScheduleDefinition) -> Future<Change> {
        let now = self.clock.now()
        let added = self.state.withLock { state -> Change? in
            if state.entries[definition.id] != nil { return .exists }
            if state.entries.count >= Self.maxSchedules { return .full }
            var entry = Entry(definition: definition, createdAt: now, updatedAt: now)
            entry.next = definition.paused ? nil : Self.next(definition, after: now)
            state.entries[definition.id] = entry
            state.writes(definition.id)
            return nil
        }
        if let added { return Future(value: added) }
        return self.persist(definition.id)
    }

    /// Changes a schedule (`patch` over its definition); a new timing counts from now.
    func update(_ id: String, patch: JSONValue) throws(HTTPProblem) -> Future<Change> {
        guard self.mayBeElsewhere(id) else { return try self.change(id, patch: patch) }
        return self.reread(id).flatMap { try self.change(id, patch: patch) }
    }

    private func change(_ id: String, patch: JSONValue) throws(HTTPProblem) -> Future<Change> {
        guard let current = self.state.withLock({ $0.entries[id] }) else { return Future(value: .notFound) }
        let definition = try current.definition.patched(patch, decoder: self.jobs.engine.decoder)
        let now = self.clock.now()
        let found = self.state.withLock { state -> Bool in
            guard var entry = state.entries[id] else { return false }
            let timing = (entry.definition.cron, entry.definition.timezone, entry.definition.paused)
            entry.definition = definition
            entry.updatedAt = now
            if timing != (definition.cron, definition.timezone, definition.paused) {
                entry.due = []
                entry.next = definition.paused ? nil : Self.next(definition, after: now)
            }
            state.entries[id] = entry
            state.writes(id)
            return true
        }
        guard found else { return Future(value: .notFound) }
        return self.persist(id)
    }

    /// Writes schedule `id` through (its change marked `State.writes`), re-arms the timer and
    /// answers with it.
    private func persist(_ id: String) -> Future<Change> {
        guard let entry = self.state.withLock({ $0.entries[id] }) else {
            self.state.withLock { $0.wrote(id) }
            return Future(value: .notFound)
        }
        return self.store.putSchedule(entry.stored).continueWith(on: .immediate) { written -> Change in
            self.state.withLock { $0.wrote(id) }
            try written.outcome!.get()
            self.armTimer()
            return self.representation(id).map(Change.done) ?? .notFound
        }
    }

    /// Removes a schedule (its jobs stay). In a cluster, one this server does not hold is deleted
    /// from the store all the same: another server may have created it an instant ago.
    func delete(_ id: String) -> Future<Bool> {
        let elsewhere = self.cluster != nil && ScheduleDefinition.isValidID(id)
        let removed = self.state.withLock { state -> Bool? in
            let removed = state.entries[id] != nil
            state.entries[id] = nil
            guard removed || elsewhere else {
                state.changed(id)
                return nil
            }
            state.writes(id)
            return removed
        }
        guard let removed else { return Future(value: false) }
        return self.store.deleteSchedule(id).continueWith(on: .immediate) { deleted -> Bool in
            self.state.withLock { $0.wrote(id) }
            let stored = try deleted.outcome!.get()
            return removed || stored
        }
    }

    /// Starts a run of schedule `id` now (a manual run: no overlap rule, paused or not).
    /// `trace`: the span of the request that triggers it (issue #46).
    func trigger(_ id: String, trace: SpanContext? = nil) -> Future<JobService.Submitted?> {
        guard self.mayBeElsewhere(id) else { return self.triggerHeld(id, trace: trace) }
        return self.reread(id).flatMap { self.triggerHeld(id, trace: trace) }
    }

    /// The run is recorded as the schedule's last before the trigger answers: the next fire's
    /// overlap rule sees it on whichever server fires (`handle` reads it back in a cluster).
    private func triggerHeld(_ id: String, trace: SpanContext?) -> Future<JobService.Submitted?> {
        guard let entry = self.state.withLock({ $0.entries[id] }) else { return Future(value: nil) }
        return self.submitJob(of: entry, idempotency: nil, trace: trace).flatMap {
            submitted -> Future<JobService.Submitted?> in
            guard case .created(let run) = submitted else { return Future(value: submitted) }
            self.state.withLock { $0.entries[id]?.lastJobID = run.id }
            return self.store.recordFire(id, at: nil, jobID: run.id).continueWith(on: .immediate) { recorded in
                if case .failure(let error) = recorded.outcome {
                    // The run started: answered as started; only the overlap rule on another
                    // server may not know of it.
                    self.logger.warning(
                        "a manual run of a schedule could not be recorded as its last run",
                        metadata: ["schedule.id": "\(id)", "job.id": "\(run.id)", "error": "\(error)"]
                    )
                }
                return submitted
            }
        }
    }

    // MARK: - Firing

    /// Arms the timer for the earliest fire (due now, or the next one).
    private func armTimer() {
        let now = self.clock.now().milliseconds
        let replaced: ClockTimer? = self.state.withLock { state in
            guard state.running, state.leading else { return nil }
            let earliest = state.entries.earliest()
            guard earliest < state.timerAt else { return nil }
            let replaced = state.timer
            state.timerAt = earliest
            state.timer = self.clock.schedule(after: .milliseconds(max(0, earliest - now))) { [weak self] in
                self?.fire()
            }
            return replaced
        }
        if let replaced { self.clock.cancel(replaced) }
    }

    /// Handles the fires due now: one per schedule at a time, in order. The schedules due come
    /// off the table's heap a chunk at a time, and each chunk's jobs start before the next chunk
    /// is looked at: the first job of a minute's fires does not wait for the others.
    private func fire() {
        self.state.withLock { state in
            state.timer = nil
            state.timerAt = .max
        }
        while true {
            let now = self.clock.now()
            let fires: [(Entry, Timestamp)] = self.state.withLock { state in
                guard state.leading else { return [] }
                var fires: [(Entry, Timestamp)] = []
                while fires.count < Self.fireChunk, let id = state.entries.popDue(now: now.milliseconds) {
                    // Due: not firing, past any hold, with a fire due or its next one come.
                    guard var entry = state.entries[id] else { continue }
                    while let next = entry.next, next <= now {
                        entry.due.append(next)
                        entry.next = Self.next(entry.definition, after: next)
                    }
                    if !entry.due.isEmpty {
                        let time = entry.due.removeFirst()
                        entry.firing = true
                        fires.append((entry, time))
                    }
                    state.entries[id] = entry
                }
                return fires
            }
            if fires.isEmpty { break }
            for (entry, time) in fires { self.handle(entry, at: time) }
        }
        self.armTimer()
    }

    /// How many fires `fire` takes off the heap before it starts their jobs.
    static let fireChunk = 64

    /// One fire of `entry` at `time`: the overlap rule, the job, then the record of the fire.
    private func handle(_ entry: Entry, at time: Timestamp) {
        let id = entry.definition.id
        self.lastRun(of: entry).flatMap { lastJobID -> Future<(any JobView)?> in
            lastJobID.map { self.jobs.job($0) } ?? Future(value: nil)
        }.flatMap { previous -> Future<String?> in
            let running = previous.map { !$0.snapshot.state.isTerminal } ?? false
            switch (entry.definition.overlap, running) {
            case (.skip, true):
                return Future(value: nil)
            case (.cancelPrevious, true):
                return self.jobs.cancel(previous!.id).flatMap { _ in self.submit(entry, at: time) }
            default:
                return self.submit(entry, at: time)
            }
        }.flatMap { jobID -> Future<Void> in
            self.state.withLock { state in
                state.entries[id]?.lastFireAt = time
                if let jobID { state.entries[id]?.lastJobID = jobID }
            }
            return self.store.recordFire(id, at: time, jobID: jobID)
        }.whenComplete { outcome in
            if case .failure(let error) = outcome {
                self.logger.error(
                    "a schedule's fire failed; it is tried again",
                    metadata: ["schedule.id": "\(id)", "fire": "\(Self.format(time))", "error": "\(error)"]
                )
                let retry = self.clock.now().milliseconds + 1000
                self.state.withLock { state in
                    state.entries[id]?.due.insert(time, at: 0)
                    state.entries[id]?.holdUntil = retry
                }
            }
            self.state.withLock { $0.entries[id]?.firing = false }
            self.armTimer()
        }
    }

    /// The schedule's last run, for the overlap rule: in a cluster as stored (a manual run through
    /// another server is recorded there, not in this server's memory); this server's otherwise.
    private func lastRun(of entry: Entry) -> Future<String?> {
        guard self.cluster != nil, entry.definition.overlap != .allow else { return Future(value: entry.lastJobID) }
        return self.store.storedSchedule(entry.definition.id).map { stored in stored?.lastJobID ?? entry.lastJobID }
    }

    /// Submits the job of a fire at `time`; its id (the earlier job's, if this fire started one).
    private func submit(_ entry: Entry, at time: Timestamp) -> Future<String?> {
        let key = Self.fireKey(entry.definition.id, time)
        return self.submitJob(of: entry, idempotency: key).continueWithTask(on: .immediate) { done in
            // A definition that no longer starts with this job (retired, or its new version's
            // schema refuses the input) will not start on the next try either: the fire starts
            // nothing, as the overlap rule's skip, and says why.
            if case .failure(let problem as HTTPProblem)? = done.outcome, problem.status == .unprocessableEntity {
                self.logger.warning(
                    "a fire's definition does not start; the fire starts nothing",
                    metadata: [
                        "schedule": "\(entry.definition.id)", "fireAt": "\(time.rfc3339)",
                        "problem": "\(problem.detail)",
                    ]
                )
                return Future(value: nil)
            }
            return done.map { submitted -> String? in
                switch submitted {
                case .created(let run): return run.id
                case .existing(let job): return job.id
                case .mismatch:
                    // Another body under this fire's key: not this schedule's job (a fire key stored by
                    // an older version, whose keys a client could send). The fire starts nothing.
                    self.logger.warning(
                        "a fire's job key is taken by another job; the fire starts nothing",
                        metadata: ["schedule": "\(entry.definition.id)", "fireAt": "\(time.rfc3339)"]
                    )
                    return nil
                }
            }
        }
    }

    /// Submits the job of `entry`'s definition (labelled with the schedule). A job that names a
    /// workflow definition is resolved now: the fire runs the latest version (or the pinned one).
    /// A fire's job begins a trace of its own; a trigger's descends from the request (`trace`).
    private func submitJob(
        of entry: Entry,
        idempotency: IdempotencyKey?,
        trace: SpanContext? = nil
    ) -> Future<JobService.Submitted> {
        guard let spec = entry.definition.spec else {
            return self.definitions.job(entry.definition.labelledJob).flatMap { spec, document in
                self.jobs.submit(spec, document: ByteBuffer(bytes: document), idempotency: idempotency, trace: trace)
            }
        }
        var buffer = ByteBuffer()
        buffer.writeBytes(entry.definition.document)
        return self.jobs.submit(spec, document: buffer, idempotency: idempotency, trace: trace)
    }
}

/// The scheduler as its cluster's observer, held weakly: the cluster lives in the store, which the
/// scheduler holds.
final class ScheduleLink: ClusterScheduleObserver {
    private weak let scheduler: Scheduler?

    init(_ scheduler: Scheduler) { self.scheduler = scheduler }

    func clusterLeadership(_ leading: Bool) { self.scheduler?.setLeading(leading) }
    func clusterSchedulesChanged(_ id: String?) { self.scheduler?.refresh(id) }
}
