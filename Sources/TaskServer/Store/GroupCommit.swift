import TaskCore
import TaskGraph

// Group commit, as the durable repositories (SQLite, PostgreSQL) share it: every change is queued
// as a `StoreWrite`; one writer thread takes everything queued, plans it (`CommitPlan`) and commits
// it in one transaction, then completes the waiting futures. What differs between the stores is
// only how a plan becomes statements.

/// A change queued for the writer.
enum StoreWrite {
    case insert(NewJobRecord, Promise<InsertOutcome>)
    case journal(JournalBatch)
    case cancelRequested(String, Promise<Void>)
    case reopen(String, Timestamp, Promise<StoredJob?>)
    case claimSleeping(Timestamp, Int, Promise<[StoredJob]>)
    case putSchedule(StoredSchedule, Promise<Void>)
    case deleteSchedule(String, Promise<Bool>)
    case recordFire(String, Timestamp?, String?, Promise<Void>)
    case putDefinition(String, JSONValue, Timestamp, Promise<DefinitionPut>)
    case retireDefinition(String, Timestamp, Promise<Bool>)
    case delete(String, Promise<DeleteResult>)
    case flush(Promise<Void>)
    case expire(before: Timestamp)
    case updateDelivery(Delivery, Promise<Void>)
    case claimDeliveries(Timestamp, Int, Promise<(deliveries: [Delivery], next: Timestamp?)>)
    case addLeases([StoredLease], Promise<Void>)
    case removeLeases([String])

    /// Fails the write's future (its transaction rolled back); nil for a write nobody waits for.
    func fail(_ error: any Error) -> (@Sendable () -> Void)? {
        switch self {
        case .insert(_, let promise): return { promise.fail(error) }
        case .journal(let batch):
            guard let listener = batch.committed else { return nil }
            return { listener(false) }
        case .delete(_, let promise): return { promise.fail(error) }
        case .flush(let promise): return { promise.fail(error) }
        case .addLeases(_, let promise): return { promise.fail(error) }
        case .cancelRequested(_, let promise): return { promise.fail(error) }
        case .reopen(_, _, let promise): return { promise.fail(error) }
        case .claimSleeping(_, _, let promise): return { promise.fail(error) }
        case .putSchedule(_, let promise): return { promise.fail(error) }
        case .deleteSchedule(_, let promise): return { promise.fail(error) }
        case .recordFire(_, _, _, let promise): return { promise.fail(error) }
        case .putDefinition(_, _, _, let promise): return { promise.fail(error) }
        case .retireDefinition(_, _, let promise): return { promise.fail(error) }
        case .updateDelivery(_, let promise): return { promise.fail(error) }
        case .claimDeliveries(_, _, let promise): return { promise.fail(error) }
        case .expire, .removeLeases: return nil
        }
    }
}

/// A store whose changes go through one writer (`StoreWrite`s, group-committed).
protocol GroupCommitting: AnyObject {
    /// Queues `write`; false when `refuseWhenFull` and the queue is full (nothing queued).
    @discardableResult
    func enqueue(_ write: StoreWrite, refuseWhenFull: Bool) -> Bool
}

extension GroupCommitting {
    /// Queues the write `make` builds around a promise, and answers with its future.
    func queued<T>(_ make: (Promise<T>) -> StoreWrite) -> Future<T> {
        let promise = Promise<T>()
        self.enqueue(make(promise), refuseWhenFull: false)
        return promise.future
    }
}

extension StoreWrite {
    /// Whether a commit that did not store this write keeps it for the next one — the journal
    /// (its events are what a restart recovers from) and chores nobody waits for — rather than
    /// failing it: what a request waits for fails, so that its client gets an answer.
    var isKeptForRetry: Bool {
        switch self {
        case .journal, .removeLeases, .expire: true
        default: false
        }
    }
}

/// The writes waiting for the writer, and whether it is at work.
struct StoreWriteQueue {
    var items: [StoreWrite] = []
    /// Writes of a commit whose answer was lost with the connection (PostgreSQL): it may have been
    /// stored. They are sent again alone, before `items`, so that the commit that re-sends them
    /// can tell, entry by entry, what is stored already (`take`).
    var unsure: [StoreWrite] = []
    var draining = false

    /// Queues `write` unless `refuseWhenFull` and `limit` writes wait already; `start`: the writer
    /// is idle and must be started (it is "draining" from now on).
    mutating func add(_ write: StoreWrite, refuseWhenFull: Bool, limit: Int) -> (accepted: Bool, start: Bool) {
        if refuseWhenFull, self.items.count >= limit { return (false, false) }
        self.items.append(write)
        if self.draining { return (true, false) }
        self.draining = true
        return (true, true)
    }

    /// Up to `limit` writes, oldest first; empty (and the writer idle) when none is left. The
    /// `unsure` writes come first and alone (`unsure` true): merged with later writes of the same
    /// jobs, a journal entry would no longer match the rows it may have stored.
    mutating func take(_ limit: Int = 4096) -> (writes: [StoreWrite], unsure: Bool) {
        if !self.unsure.isEmpty {
            defer { self.unsure = [] }
            return (self.unsure, true)
        }
        return (self.takeItems(limit), false)
    }

    private mutating func takeItems(_ limit: Int) -> [StoreWrite] {
        if self.items.isEmpty {
            self.draining = false
            return []
        }
        let take = min(self.items.count, limit)
        if take == self.items.count {
            defer { self.items = [] }
            return self.items
        }
        defer { self.items.removeFirst(take) }
        return Array(self.items[0..<take])
    }
}

/// A commit's steps in order, and the journal entries they name.
struct CommitPlan {
    /// One step of a commit, its rows already encoded.
    enum Step {
        case insert(NewJob)
        /// The index of a journal entry in `entries`.
        case journal(Int)
        case write(StoreWrite)
    }

    /// A job to insert, with the position it will have (SQLite gives positions when planning;
    /// PostgreSQL takes them from its sequence, and this one is 0).
    struct NewJob {
        let job: NewJobRecord
        let position: Int64
        /// `labels` as a JSON object, nil when none.
        let labels: [UInt8]?
        let promise: Promise<InsertOutcome>
    }

    var steps: [Step] = []
    var entries: [JournalEntry] = []

    /// `batch` made ready for a connection: positions given to new jobs (`position`), each job's
    /// batches of the commit merged into one journal entry (at its first write: nothing else in a
    /// commit depends on a job's later events).
    init(_ batch: [StoreWrite], position: () -> Int64) {
        self.steps.reserveCapacity(batch.count)
        var journals: [JobKey: Int] = [:]
        for write in batch {
            switch write {
            case .insert(let job, let promise):
                let labels = job.labels.isEmpty ? nil : StoredRecords.encodeLabels(job.labels)
                self.steps.append(.insert(NewJob(job: job, position: position(), labels: labels, promise: promise)))
            case .journal(let journal):
                if let index = journals[journal.key] {
                    self.entries[index].merge(journal)
                } else {
                    journals[journal.key] = self.entries.count
                    self.steps.append(.journal(self.entries.count))
                    self.entries.append(JournalEntry(journal))
                }
            default:
                self.steps.append(.write(write))
            }
        }
    }

    /// The futures to fail when the plan's transaction rolled back.
    func failures(_ error: any Error) -> [@Sendable () -> Void] {
        var failures: [@Sendable () -> Void] = []
        for step in self.steps {
            switch step {
            case .insert(let job): failures.append { job.promise.fail(error) }
            case .journal(let index):
                for listener in self.entries[index].committed { failures.append { listener(false) } }
            case .write(let write): if let fail = write.fail(error) { failures.append(fail) }
            }
        }
        return failures
    }
}

/// One job's journal for one commit: its events (one row), and the node and job rows they change.
struct JournalEntry {
    let id: String
    let position: Int64
    let firstSeq: Int
    var lastSeq: Int
    var events: [JobEvent]
    /// Node rows to upsert (a job still running after this commit), in the order of their
    /// batches: a later row of the same node overwrites an earlier one.
    var nodes: [(ordinal: Int, record: NodeRecord)] = []
    /// `job.started` is in this commit and the job goes on.
    var startedAt: Timestamp?
    /// The job ended in this commit.
    var ended: EndedJob?
    var deliveries: [Delivery] = []
    /// The `job.*` events for the server-wide feed the repository keeps (`JournalBatch.feedJob`),
    /// each with the job as its batch left it.
    var feed: [(event: JobEvent, job: FeedJob)] = []
    var committed: [@Sendable (Bool) -> Void] = []
    /// How many batches were merged into this entry.
    var batches = 1

    init(_ batch: JournalBatch) {
        self.id = batch.id
        self.position = batch.key
        self.firstSeq = batch.events.first?.seq ?? 0
        self.lastSeq = batch.lastSeq
        self.events = batch.events
        self.merge(batch, events: false)
    }

    /// Adds a later batch of the same job: its rows replace the earlier ones.
    mutating func merge(_ batch: JournalBatch, events: Bool = true) {
        if events {
            self.events += batch.events
            self.lastSeq = batch.lastSeq
            self.batches += 1
        }
        if self.nodes.isEmpty { self.nodes = batch.nodes } else { self.nodes += batch.nodes }
        if let startedAt = batch.startedAt { self.startedAt = startedAt }
        if let ended = batch.ended { self.ended = ended }
        self.deliveries += batch.deliveries
        if let job = batch.feedJob {
            let shared = FeedJob(job)
            for event in batch.events where event.type.isJobEvent { self.feed.append((event, shared)) }
        }
        if let committed = batch.committed { self.committed.append(committed) }
    }

    /// The node rows to write, one per node, the latest (batches merged into one commit may name
    /// a node twice); none for a job that ended (its records go into its own row).
    var latestNodes: [(ordinal: Int, record: NodeRecord)] {
        guard self.ended == nil else { return [] }
        if self.batches == 1 { return self.nodes }
        var written = Set<Int>()
        return self.nodes.reversed().filter { written.insert($0.ordinal).inserted }
    }

    /// The record of the job that ended in this entry, as reads find it from now on.
    var finishedRecord: StoredJob? {
        guard let ended = self.ended else { return nil }
        let snapshot = ended.snapshot
        return StoredJob(
            id: self.id,
            key: self.position,
            name: snapshot.name,
            labels: snapshot.labels,
            input: snapshot.input,
            document: nil,
            state: snapshot.state,
            result: snapshot.result,
            error: snapshot.error,
            createdAt: snapshot.createdAt,
            startedAt: snapshot.startedAt,
            finishedAt: snapshot.finishedAt,
            runAt: snapshot.runAt,
            priority: snapshot.priority,
            definition: snapshot.definition,
            nodes: ended.nodes,
            events: ended.events
        )
    }
}

/// The records of recently finished jobs (fast reads of jobs that just ended), and the number of
/// jobs stored.
struct FinishedJobCache {
    var finished: [String: StoredJob] = [:]
    /// Ids in the order they were cached; the oldest leave the cache first.
    var order: [String] = []
    var orderHead = 0
    var count = 0
    /// Counts deletes and invalidations: a record read from the store is cached only if none
    /// happened while it was read (else a read racing a delete, or a redrive through another
    /// server, would put a stale record back).
    var deletes: UInt64 = 0

    /// Keeps `jobs`, then returns the oldest beyond `limit` (to be freed outside the lock).
    mutating func add(_ jobs: [StoredJob], limit: Int, ifNoDeleteSince deletes: UInt64? = nil) -> [StoredJob] {
        if let deletes, self.deletes != deletes { return [] }
        for job in jobs where self.finished.updateValue(job, forKey: job.id) == nil { self.order.append(job.id) }
        let excess = self.order.count - self.orderHead - limit
        guard excess > 0 else { return [] }
        var evicted: [StoredJob] = []
        evicted.reserveCapacity(excess)
        for id in self.order[self.orderHead..<(self.orderHead + excess)] {
            if let old = self.finished.removeValue(forKey: id) { evicted.append(old) }
        }
        self.orderHead += excess
        if self.orderHead > 4096, self.orderHead * 2 > self.order.count {
            self.order.removeFirst(self.orderHead)
            self.orderHead = 0
        }
        return evicted
    }

    /// Drops the records of `ids` (nil: every record), which changed elsewhere; returns them (to
    /// be freed outside the lock).
    mutating func invalidate(_ ids: [String]?) -> [StoredJob] {
        self.deletes &+= 1
        guard let ids else {
            defer {
                self.finished = [:]
                self.order = []
                self.orderHead = 0
            }
            return Array(self.finished.values)
        }
        return ids.compactMap { self.finished.removeValue(forKey: $0) }
    }
}
