import NIOCore
import TaskCore
import TaskGraph

/// Where job records live: the seam between the job service and persistence.
///
/// A repository speaks in records and values only: it never holds, builds or hands out a live
/// `JobRun` — `JobService` owns those — and it never speaks HTTP (`StoreError` says what went
/// wrong in store terms). `MemoryJobRepository` (`--memory`) and `SQLiteJobRepository` (the
/// default) implement it today; a PostgreSQL repository is another implementation of the same
/// protocol, checked by the same conformance suite (`RepositoryConformanceTests`).
///
/// - **Writes** are acknowledged by futures that complete once the write is durable: `insert` is
///   the promise behind a `201`, `append`'s batch says when its events are committed (`committed`),
///   so "this job's seq N is durable" is a per-job fact, never a store-wide flush.
/// - **Reads** return futures (a durable repository reads on threads of its own; event loops never
///   wait for a disk).
/// - **Recovery** is `claimUnfinished`: the unfinished jobs that no live owner holds, callable at
///   any time — at start-up on one node, and in a cluster whenever an owner's lease ends.
public protocol JobRepository: AnyObject, LeaseJournal, DeliveryStore, ScheduleStore, DefinitionStore {
    /// Whether records outlive the process. The service gates readers on commits only then
    /// (`Engine.eventsAwaitDurability`), and sends running jobs' progress only then.
    var isDurable: Bool { get }
    /// Whether the store can take writes now (false while a database server is away); `/readyz`
    /// answers 503 while it is false.
    var isAvailable: Bool { get }
    /// The servers sharing this store, when several may (PostgreSQL); nil when this server owns
    /// every job (memory, SQLite).
    var cluster: (any Cluster)? { get }
    /// Concurrency keys held for every server sharing the store (PostgreSQL); nil: each engine
    /// keeps its own (memory, SQLite: one server).
    var sharedKeys: (any SharedConcurrencyKeys)? { get }
    /// The server-wide feed this store keeps for every server sharing it (PostgreSQL), filled by
    /// its commits (`JournalBatch.feedJob`); nil when the process keeps its own.
    var eventFeed: (any EventFeed)? { get }
    /// Records a new job. With an idempotency key seen before it returns that job's id
    /// (`.existing`) when the body hash matches, and `.mismatch` when it does not.
    func insert(_ job: NewJobRecord) -> Future<InsertOutcome>
    /// Journals a batch of one job's events, in seq order after the batches before it, with the
    /// node and job rows they change and the webhook deliveries they cause (all committed
    /// together). Not awaited: `batch.committed` is told how it went.
    func append(_ batch: JournalBatch)
    /// Records that a cancellation of job `id` was requested, so that whoever resumes it carries
    /// the cancellation on; completes once durable.
    func requestCancel(_ id: String) -> Future<Void>
    /// The stored record of job `id`, or nil.
    func job(_ id: String) -> Future<StoredJob?>
    /// Jobs newest first, filtered, one page at a time; items show the jobs as stored.
    func list(_ query: JobQuery) -> Future<JobPage>
    /// Removes a finished job with everything recorded about it (`.notTerminal` while the stored
    /// record says it runs).
    func delete(_ id: String) -> Future<DeleteResult>
    /// Turns a failed or cancelled job back into an unfinished one for a redrive, and returns its
    /// record as it was (to run again from); nil when the job is not there or not failed or
    /// cancelled any more (a concurrent redrive or delete got there first). The caller owns the
    /// job from then on, as after `claimUnfinished`; its node records are kept as node rows, so
    /// that a crash before the redriven job ends resumes it like any unfinished job. A job that
    /// never started (cancelled before its time) is stored as started at `now`: a running job has
    /// a start time on every server that reads its row.
    func reopen(_ id: String, startingAt now: Timestamp) -> Future<StoredJob?>
    /// The unfinished jobs whose ids are not in `live` (oldest first), now owned by the caller:
    /// each with what it needs to resume (its document, node records, events). Sleeping jobs
    /// (delayed and not started, see `sleepingJobs`) are not among them.
    func claimUnfinished(excluding live: Set<String>) -> Future<[StoredJob]>
    /// Takes the *sleeping* jobs — delayed (SPEC §8 `runAt` / `delayMs`), inserted with
    /// `NewJobRecord.sleeps`, owned by no one — due at or before `through`, in start-time order,
    /// at most `limit`, each with its document and `runAt`. They become unfinished jobs the
    /// caller owns (after a restart `claimUnfinished` returns them, not started); each is taken
    /// once. The repository keeps an index of start times, so sleeping jobs cost disk, not
    /// memory: the service takes the ones falling due shortly (`DelayedStarts`). A cancellation
    /// requested for a sleeping job (`requestCancel`) also makes it an unfinished job.
    func claimSleeping(through: Timestamp, limit: Int) -> Future<[StoredJob]>
    /// The number of jobs held.
    func count() -> Future<Int>
    /// Writes what is queued and releases files and threads; completes when done.
    @discardableResult
    func close() -> Future<Void>
}

extension JobRepository {
    public var isAvailable: Bool { true }
    public var cluster: (any Cluster)? { nil }
    public var sharedKeys: (any SharedConcurrencyKeys)? { nil }
    public var eventFeed: (any EventFeed)? { nil }
}

/// The repository's key of a job's record (SQLite: `jobs.position`), given by `insert`.
public typealias JobKey = Int64

/// A new job as the repository records it.
public struct NewJobRecord: Sendable {
    public var id: String
    public var name: String?
    public var labels: [String: String]
    public var createdAt: Timestamp
    /// The request body as submitted: what a restart (or another node) rebuilds the job from.
    public var document: ByteBuffer
    public var idempotency: IdempotencyKey?
    /// When a delayed job starts; nil: at once.
    public var runAt: Timestamp?
    /// 0…9 (SPEC §8).
    public var priority = JobSpec.defaultPriority
    /// The definition version it was started from (issue #45): kept in columns of its own, so
    /// lists show it and filter by it without reading documents.
    public var definition: DefinitionRef?
    /// The job sleeps (owned by no one until `claimSleeping` takes it) rather than being owned by
    /// the caller from the start: the service holds only jobs due shortly.
    public var sleeps = false
    /// The decoded job, for a repository that keeps records in memory and never needs to decode
    /// `document` again (`MemoryJobRepository`); a durable one ignores it.
    public var spec: JobSpec?

    public init(
        id: String,
        name: String?,
        labels: [String: String],
        createdAt: Timestamp,
        document: ByteBuffer,
        idempotency: IdempotencyKey?,
        runAt: Timestamp? = nil,
        spec: JobSpec? = nil
    ) {
        self.id = id
        self.name = name
        self.labels = labels
        self.createdAt = createdAt
        self.document = document
        self.idempotency = idempotency
        self.runAt = runAt
        self.spec = spec
    }
}

public enum InsertOutcome: Sendable, Equatable {
    case inserted(JobKey)
    /// The idempotency key names this earlier job.
    case existing(id: String)
    case mismatch
}

/// An `Idempotency-Key` header with a hash of the request body it came with.
public struct IdempotencyKey: Sendable, Hashable {
    public var key: String
    public var bodyHash: UInt64
    public init(key: String, bodyHash: UInt64) {
        self.key = key
        self.bodyHash = bodyHash
    }
}

/// One job's new events with everything they change, as one unit of the journal.
public struct JournalBatch: Sendable {
    public var id: String
    public var key: JobKey
    /// Contiguous, in seq order (empty for a repository that is not durable: it keeps a job's
    /// events with its end, `EndedJob.events`).
    public var events: [JobEvent]
    /// The node rows these events change, as the events say (registration ordinal and record);
    /// empty for a repository that is not durable.
    public var nodes: [(ordinal: Int, record: NodeRecord)] = []
    /// When the job started, if `job.started` is among the events.
    public var startedAt: Timestamp?
    /// The job's end, if its terminal event is among the events.
    public var ended: EndedJob?
    /// Webhook deliveries the events cause (`WebhookPlanner`), committed with them.
    public var deliveries: [Delivery] = []
    /// The job as it was, for the server-wide feed the repository keeps (`eventFeed`), when the
    /// events include `job.*` events; nil otherwise.
    public var feedJob: JobSnapshot?
    /// Told once, after the batch is committed (`true`) or lost with a failed commit (`false`).
    public var committed: (@Sendable (_ durable: Bool) -> Void)?

    public init(id: String, key: JobKey, events: [JobEvent]) {
        self.id = id
        self.key = key
        self.events = events
    }

    /// The seq of the last event of the batch.
    public var lastSeq: Int { self.events.last?.seq ?? 0 }
}

/// A job's end, as its record keeps it.
public struct EndedJob: Sendable {
    public var snapshot: JobSnapshot
    /// Every node record, in registration order.
    public var nodes: [NodeRecord]
    /// Every event of the job (a repository that journals each batch already has them).
    public var events: [JobEvent]

    public init(snapshot: JobSnapshot, nodes: [NodeRecord], events: [JobEvent]) {
        self.snapshot = snapshot
        self.nodes = nodes
        self.events = events
    }
}

/// A job as a repository returns it: finished, or unfinished with what it needs to resume.
public struct StoredJob: Sendable {
    public var id: String
    public var key: JobKey
    public var name: String?
    public var labels: [String: String]
    /// The job's input, as submitted.
    public var input: JSONValue
    /// The request body it was submitted with: what an unfinished job resumes from (nil for a
    /// finished job's cached record, or when the repository kept `spec` instead).
    public var document: JSONValue?
    /// The decoded job, when the repository kept it (`NewJobRecord.spec`).
    public var spec: JobSpec?
    public var state: JobState
    public var result: JSONValue?
    public var error: TaskError?
    public var createdAt: Timestamp
    public var startedAt: Timestamp?
    public var finishedAt: Timestamp?
    public var cancelRequested: Bool
    /// When a delayed job starts (or started).
    public var runAt: Timestamp?
    /// 0…9 (SPEC §8).
    public var priority: Int
    /// The definition version it was started from (issue #45).
    public var definition: DefinitionRef?
    /// Node records: every node of a finished job in registration order; the stored rows of an
    /// unfinished one.
    public var nodes: [NodeRecord]
    public var events: [JobEvent]

    public init(
        id: String,
        key: JobKey,
        name: String?,
        labels: [String: String],
        input: JSONValue,
        document: JSONValue?,
        spec: JobSpec? = nil,
        state: JobState,
        result: JSONValue? = nil,
        error: TaskError? = nil,
        createdAt: Timestamp,
        startedAt: Timestamp? = nil,
        finishedAt: Timestamp? = nil,
        cancelRequested: Bool = false,
        runAt: Timestamp? = nil,
        priority: Int = JobSpec.defaultPriority,
        definition: DefinitionRef? = nil,
        nodes: [NodeRecord] = [],
        events: [JobEvent] = []
    ) {
        self.priority = priority
        self.definition = definition
        self.id = id
        self.key = key
        self.name = name
        self.labels = labels
        self.input = input
        self.document = document
        self.spec = spec
        self.state = state
        self.result = result
        self.error = error
        self.createdAt = createdAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.cancelRequested = cancelRequested
        self.runAt = runAt
        self.nodes = nodes
        self.events = events
    }

    /// The job as `GET /v1/jobs/{id}` shows it.
    public var snapshot: JobSnapshot {
        var progress = JobProgress()
        for node in self.nodes where node.isTask {
            progress.total += 1
            progress.add(node.state, 1)
        }
        return JobSnapshot(
            id: self.id,
            name: self.name,
            state: self.state,
            input: self.input,
            result: self.result,
            error: self.error,
            labels: self.labels,
            createdAt: self.createdAt,
            startedAt: self.startedAt,
            finishedAt: self.finishedAt,
            progress: progress,
            lastEventSeq: self.events.last?.seq ?? 0,
            runAt: self.runAt,
            priority: self.priority,
            definition: self.definition
        )
    }
}

public enum DeleteResult: Sendable, Equatable {
    case deleted
    case notFound
    case notTerminal
}

/// A page request of `GET /v1/jobs`.
public struct JobQuery: Sendable {
    public var state: JobState?
    /// Labels the jobs must all carry.
    public var labels: [(key: String, value: String)]
    /// Only jobs started from this definition (any version).
    public var definition: String?
    /// Only jobs created in [`createdAfter`, `createdBefore`) (either bound optional).
    public var createdAfter: Timestamp?
    public var createdBefore: Timestamp?
    /// Only jobs that finished in [`finishedAfter`, `finishedBefore`) (either bound optional; a job
    /// that has not finished matches neither).
    public var finishedAfter: Timestamp?
    public var finishedBefore: Timestamp?
    public var limit: Int
    /// Return only jobs older than this position (from a previous page's cursor).
    public var before: UInt64?

    public init(
        state: JobState? = nil,
        labels: [(key: String, value: String)] = [],
        definition: String? = nil,
        limit: Int = 50,
        before: UInt64? = nil
    ) {
        self.state = state
        self.labels = labels
        self.definition = definition
        self.limit = limit
        self.before = before
    }
}

extension JobQuery {
    /// The time filters as SQL conditions on `jobs` columns: (column, operator, bound).
    var timeBounds: [(column: String, comparison: String, time: Timestamp)] {
        var bounds: [(String, String, Timestamp)] = []
        if let time = self.createdAfter { bounds.append(("created_at", ">=", time)) }
        if let time = self.createdBefore { bounds.append(("created_at", "<", time)) }
        if let time = self.finishedAfter { bounds.append(("finished_at", ">=", time)) }
        if let time = self.finishedBefore { bounds.append(("finished_at", "<", time)) }
        return bounds
    }
}

public struct JobPage: Sendable {
    public var items: [JobSnapshot]
    /// The position to continue from, when there may be more.
    public var next: UInt64?

    public init(items: [JobSnapshot], next: UInt64?) {
        self.items = items
        self.next = next
    }
}

/// FNV-1a, 64 bits: a stable hash of request bodies for idempotency checks (stable across
/// processes, unlike `Hasher`, so a durable store can keep it).
public func fnv1a64(_ bytes: some Sequence<UInt8>) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in bytes {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01B3
    }
    return hash
}
