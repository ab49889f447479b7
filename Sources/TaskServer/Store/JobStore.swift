import NIOCore
import TaskCore
import TaskGraph

/// Where jobs live: the seam between the API and persistence.
///
/// `MemoryJobStore` (`--memory`) keeps every `JobRun` in memory; `SQLiteJobStore` (the default)
/// records each job before `insert` completes — so a `201` is only sent for a durable job — and
/// journals every event as the job runs. Reads that may touch the disk return futures: the API
/// calls them on event loops, which never wait for a disk.
public protocol JobStore: LeaseJournal {
    /// Records a new job (`document` is the request body as submitted, kept to rebuild the job after
    /// a restart). With an idempotency key already seen, it returns the earlier job (`.existing`)
    /// when the body hash matches and `.mismatch` when it does not.
    func insert(_ run: JobRun, document: ByteBuffer, idempotency: IdempotencyKey?) -> Future<InsertResult>
    /// The job with `id`, or nil.
    func run(_ id: String) -> Future<JobRun?>
    /// Jobs newest first, filtered, one page at a time.
    func list(_ query: JobQuery) -> Future<JobPage>
    /// Removes a finished job with everything recorded about it.
    func delete(_ id: String) -> Future<DeleteResult>
    /// Completes when every change observed so far is durable (after a cancel or a completion,
    /// before answering it).
    func flush() -> Future<Void>
    /// Records that a cancellation of `run` was requested, so a restart carries it on.
    func noteCancelRequested(_ run: JobRun)
    /// Jobs that were unfinished when the process last stopped, rebuilt and ready to `start()`.
    func recoverUnfinished() throws -> [JobRun]
    /// The number of jobs held.
    var count: Int { get }
    /// Writes what is queued and closes files; completes when done.
    @discardableResult
    func close() -> Future<Void>
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

public enum InsertResult: Sendable {
    case inserted
    case existing(JobRun)
    case mismatch
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
    public var limit: Int
    /// Return only jobs older than this position (from a previous page's cursor).
    public var before: UInt64?

    public init(
        state: JobState? = nil,
        labels: [(key: String, value: String)] = [],
        limit: Int = 50,
        before: UInt64? = nil
    ) {
        self.state = state
        self.labels = labels
        self.limit = limit
        self.before = before
    }
}

public struct JobPage: Sendable {
    public var items: [JobSnapshot]
    /// The position to continue from, when there may be more.
    public var next: UInt64?
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
