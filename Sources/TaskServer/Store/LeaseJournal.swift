import TaskCore
import TaskGraph

/// Where worker leases (SPEC §6) are kept across restarts: the store's part of the protocol.
///
/// A lease is written before its claim is answered, and removed when it ends; after a restart the
/// server reads the leases back and each carries on when its job resumes. Leases are stored by a
/// one-way hash of their id (the id is a capability and stays with the worker). A store shared by
/// several servers (PostgreSQL) keeps a removed lease's hash as ended until its job is deleted, so
/// that a call on it is `409 lease.gone` through any server; it is never read back as a lease.
public protocol LeaseJournal: Sendable {
    /// Completes once `leases` are durable (at once for a store that keeps nothing).
    func recordLeases(_ leases: [StoredLease]) -> Future<Void>
    /// Forgets the leases with these hashes, which ended (written with the next commit):
    /// `storedLeases` never returns them again.
    func removeLeases(_ hashes: [String])
    /// Every lease stored before this process started.
    func storedLeases() -> Future<[StoredLease]>
    /// The stored leases of these jobs (a takeover carries a dead server's leases on).
    func storedLeases(ofJobs ids: [String]) -> Future<[StoredLease]>
}

extension LeaseJournal {
    public func storedLeases(ofJobs ids: [String]) -> Future<[StoredLease]> {
        let wanted = Set(ids)
        return self.storedLeases().map { $0.filter { wanted.contains($0.jobID) } }
    }
}

/// A lease as the store keeps it.
public struct StoredLease: Sendable, Equatable {
    /// `LeaseID.hash` of the lease id.
    public var hash: String
    public var jobID: String
    public var taskID: String
    public var executor: String
    public var workerId: String
    public var attempt: Int
    public var heartbeatTimeoutMs: Int
    public var claimedAt: Timestamp

    public init(
        hash: String,
        jobID: String,
        taskID: String,
        executor: String,
        workerId: String,
        attempt: Int,
        heartbeatTimeoutMs: Int,
        claimedAt: Timestamp
    ) {
        self.hash = hash
        self.jobID = jobID
        self.taskID = taskID
        self.executor = executor
        self.workerId = workerId
        self.attempt = attempt
        self.heartbeatTimeoutMs = heartbeatTimeoutMs
        self.claimedAt = claimedAt
    }
}
