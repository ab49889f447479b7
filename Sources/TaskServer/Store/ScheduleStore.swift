import TaskCore
import TaskGraph

/// Where cron schedules (SPEC §8) are kept, with what each has fired: the store's part of them.
///
/// The scheduler (`Scheduler`) holds every schedule in memory — they are few (at most
/// `Scheduler.maxSchedules`), unlike jobs — and writes each change through. A fire is recorded in
/// two steps that make it happen at most once: the job it starts carries an idempotency key made
/// from the schedule and the fire time (`Scheduler.fireKey`), so a second insert of the same fire
/// finds the first job; then `recordFire` moves the schedule's `lastFireAt` past it.
public protocol ScheduleStore: Sendable {
    /// Creates or replaces a schedule; completes once durable.
    func putSchedule(_ schedule: StoredSchedule) -> Future<Void>
    /// Removes a schedule; `false` when there was none.
    func deleteSchedule(_ id: String) -> Future<Bool>
    /// Every schedule kept (read at start-up).
    func storedSchedules() -> Future<[StoredSchedule]>
    /// Records that the schedule fired at `at` (the fire time) with job `jobID` (nil: the fire
    /// was skipped by its overlap rule); `at` nil: a manual run (`trigger`) started `jobID`, the
    /// run the next fire's overlap rule looks at, whichever server fires. Completes once durable.
    func recordFire(_ id: String, at: Timestamp?, jobID: String?) -> Future<Void>
    /// Schedule `id` as kept now (a cluster's servers read what another one changed).
    func storedSchedule(_ id: String) -> Future<StoredSchedule?>
}

extension ScheduleStore {
    /// Reads them all: a store that one server owns alone never needs one.
    public func storedSchedule(_ id: String) -> Future<StoredSchedule?> {
        self.storedSchedules().map { $0.first { $0.id == id } }
    }
}

/// A schedule as the store keeps it: its definition as JSON (`ScheduleDefinition.json`), and what
/// it fired last.
public struct StoredSchedule: Sendable, Equatable {
    public var id: String
    public var definition: JSONValue
    public var createdAt: Timestamp
    public var updatedAt: Timestamp
    /// The latest fire time handled (started or skipped); fires after it are still to come.
    public var lastFireAt: Timestamp?
    /// The job of the latest fire that started one.
    public var lastJobID: String?

    public init(
        id: String,
        definition: JSONValue,
        createdAt: Timestamp,
        updatedAt: Timestamp,
        lastFireAt: Timestamp? = nil,
        lastJobID: String? = nil
    ) {
        self.id = id
        self.definition = definition
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.lastFireAt = lastFireAt
        self.lastJobID = lastJobID
    }
}
