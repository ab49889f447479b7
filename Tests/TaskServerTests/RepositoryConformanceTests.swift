import Foundation
import Logging
import NIOCore
import Synchronization
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// What every `JobRepository` must do, asked of each one in the same words: records and values
/// in, the same records and values out. A new repository (PostgreSQL) joins by adding a case to
/// `RepositoryKind`.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct RepositoryConformanceTests {
    enum RepositoryKind: String, CaseIterable, CustomTestStringConvertible {
        case memory
        case sqlite
        case postgres

        var testDescription: String { self.rawValue }
    }

    /// A repository of `kind` under test, and how to reopen what it keeps (a durable one: the file
    /// as a SIGKILL would leave it after everything queued was committed).
    final class Subject: Sendable {
        let kind: RepositoryKind
        let repository: any JobRepository
        let path: String?
        let postgres: PostgresSettings?

        init(_ kind: RepositoryKind) throws {
            self.kind = kind
            switch kind {
            case .memory:
                self.path = nil
                self.postgres = nil
                self.repository = MemoryJobRepository()
            case .sqlite:
                let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
                self.path = path
                self.postgres = nil
                self.repository = try SQLiteJobRepository(path: path, logger: Self.logger)
            case .postgres:
                let settings = try TestPostgres.freshSchema()
                self.path = nil
                self.postgres = settings
                self.repository = try PostgresJobRepository(settings: settings, logger: Self.logger)
            }
        }

        static let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

        /// Waits until everything queued is committed.
        func settle() throws {
            if let sqlite = self.repository as? SQLiteJobRepository { try sqlite.flush().wait() }
            if let postgres = self.repository as? PostgresJobRepository { try postgres.flush().wait() }
        }

        /// A repository opened on a copy of what this one keeps (nil for one that keeps nothing).
        func crashImage() throws -> (any JobRepository)? {
            if let postgres = self.postgres {
                // The database as the killed process left it, opened by the next one.
                try self.settle()
                return try PostgresJobRepository(settings: postgres, logger: Self.logger)
            }
            guard let path = self.path else { return nil }
            try self.settle()
            let copy = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            if FileManager.default.fileExists(atPath: path + "-wal") {
                try FileManager.default.copyItem(atPath: path + "-wal", toPath: copy + "-wal")
            }
            return try SQLiteJobRepository(path: copy, logger: Self.logger)
        }

        func close() {
            try? self.repository.close().wait()
            if let postgres = self.postgres { TestPostgres.drop(postgres) }
        }
    }

    // MARK: - Records for the tests

    /// Decodes the records' documents (a memory repository keeps the decoded job).
    static let engine = Engine(configuration: EngineConfiguration(executors: ["default": 1]))

    static let t0 = Timestamp(milliseconds: 1_790_000_000_000)

    static func time(_ offset: Int64) -> Timestamp { Timestamp(milliseconds: t0.milliseconds + offset) }

    static func record(
        _ id: String,
        labels: [String: String] = [:],
        key: String? = nil,
        hash: UInt64 = 1,
        input: JSONValue = ["n": 1]
    ) -> NewJobRecord {
        let document: JSONValue = ["input": input, "graph": ["type": "task", "id": "t", "action": "value"]]
        var buffer = ByteBuffer()
        buffer.writeBytes(document.jsonBytes)
        return NewJobRecord(
            id: id,
            name: "job \(id)",
            labels: labels,
            createdAt: Self.time(0),
            document: buffer,
            idempotency: key.map { IdempotencyKey(key: $0, bodyHash: hash) },
            spec: try? Self.engine.decoder.decodeJob(document)
        )
    }

    static func event(_ seq: Int, _ type: JobEventType, task: String? = nil, data: JSONValue? = nil) -> JobEvent {
        JobEvent(seq: seq, type: type, time: Self.time(Int64(seq)), taskId: task, data: data)
    }

    static func node(_ state: NodeState, attempts: Int = 1, result: JSONValue? = nil) -> NodeRecord {
        NodeRecord(
            id: "t",
            type: "task",
            action: "value",
            executor: "default",
            state: state,
            attempts: attempts,
            result: result,
            startedAt: Self.time(2),
            finishedAt: state.isTerminal ? Self.time(3) : nil
        )
    }

    /// Tells whether (and how) a batch was committed.
    final class Committed: Sendable {
        let value = Mutex<Bool?>(nil)
        var listener: @Sendable (Bool) -> Void { { durable in self.value.withLock { $0 = durable } } }
    }

    /// The batch that starts job `id`: created, started, its task started (a running node row).
    static func started(_ id: String, key: JobKey, committed: Committed? = nil) -> JournalBatch {
        var batch = JournalBatch(
            id: id,
            key: key,
            events: [Self.event(1, .jobCreated), Self.event(2, .jobStarted), Self.event(3, .taskStarted, task: "t")]
        )
        batch.startedAt = Self.time(2)
        batch.nodes = [(0, Self.node(.running))]
        batch.committed = committed?.listener
        return batch
    }

    /// The batch that ends job `id` (started by `started`) with `result`.
    static func ended(_ id: String, key: JobKey, result: JSONValue, deliveries: [Delivery] = []) -> JournalBatch {
        let events = [Self.event(4, .taskSucceeded, task: "t"), Self.event(5, .jobSucceeded)]
        var batch = JournalBatch(id: id, key: key, events: events)
        var progress = JobProgress()
        progress.total = 1
        progress.succeeded = 1
        batch.ended = EndedJob(
            snapshot: JobSnapshot(
                id: id,
                name: "job \(id)",
                state: .succeeded,
                input: ["n": 1],
                result: result,
                labels: [:],
                createdAt: Self.time(0),
                startedAt: Self.time(2),
                finishedAt: Self.time(5),
                progress: progress,
                lastEventSeq: 5
            ),
            nodes: [Self.node(.succeeded, result: result)],
            events: Self.started(id, key: key).events + events
        )
        batch.deliveries = deliveries
        return batch
    }

    static func delivery(_ jobID: String, seq: Int, state: DeliveryState = .pending) -> Delivery {
        Delivery(
            id: "msg_\(jobID)_\(seq)",
            jobID: jobID,
            seq: seq,
            eventType: .jobSucceeded,
            url: "http://127.0.0.1:9/hook",
            body: Array(#"{"type":"job.succeeded"}"#.utf8),
            state: state,
            nextAttemptAt: Self.time(5),
            retry: RetrySpec(maxAttempts: 3, delayMs: 10, backoff: 2, maxDelayMs: nil, jitter: false),
            createdAt: Self.time(5)
        )
    }

    static func insert(_ repository: any JobRepository, _ record: NewJobRecord) throws -> JobKey {
        guard case .inserted(let key) = try repository.insert(record).wait() else {
            Issue.record("\(record.id) was not inserted")
            return 0
        }
        return key
    }

    /// Inserts `id` and runs it to its end in two batches.
    static func finish(_ repository: any JobRepository, _ id: String, result: JSONValue = 7) throws -> JobKey {
        let key = try Self.insert(repository, Self.record(id))
        repository.append(Self.started(id, key: key))
        repository.append(Self.ended(id, key: key, result: result))
        return key
    }

    // MARK: - The contract

    @Test(arguments: RepositoryKind.allCases)
    func insertRecordsAJobAndIdempotencyKeysAnswerWithIt(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        let key = try Self.insert(repository, Self.record("a", labels: ["team": "data"], key: "k", hash: 11))
        #expect(try repository.insert(Self.record("b", key: "k", hash: 11)).wait() == .existing(id: "a"))
        #expect(try repository.insert(Self.record("c", key: "k", hash: 12)).wait() == .mismatch)
        let other = try Self.insert(repository, Self.record("d", key: "other", hash: 11))
        #expect(other != key)
        let stored = try #require(try repository.job("a").wait())
        #expect(stored.id == "a" && stored.key == key && stored.state == .pending)
        #expect(stored.name == "job a" && stored.labels == ["team": "data"] && stored.input == ["n": 1])
        #expect(stored.createdAt == Self.time(0))
        #expect(try repository.job("b").wait() == nil)
        #expect(try repository.job("c").wait() == nil)
        #expect(try repository.count().wait() == 2)
    }

    /// Definitions (issue #45): versions made only by a change, pinned versions readable after
    /// retirement, pages by name, and — for a durable store — all of it after a crash.
    @Test(arguments: RepositoryKind.allCases)
    func definitionsKeepEveryVersionAndTheLatestOfEachName(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        let one: JSONValue = ["graph": ["type": "task", "action": "value"], "description": "a"]
        let two: JSONValue = ["graph": ["type": "task", "action": "value"], "description": "b"]
        guard case .created(let first) = try repository.putDefinition("d", body: one, at: Self.time(1)).wait() else {
            Issue.record("the first put made no version")
            return
        }
        #expect(first == StoredDefinition(name: "d", version: 1, body: one, createdAt: Self.time(1), latest: 1))
        let reordered: JSONValue = ["description": "a", "graph": ["action": "value", "type": "task"]]
        #expect(try repository.putDefinition("d", body: reordered, at: Self.time(2)).wait() == .unchanged(first))
        // Two changes queued together (one commit on a durable store) make two versions.
        let second = repository.putDefinition("d", body: two, at: Self.time(3))
        let third = repository.putDefinition("d", body: one, at: Self.time(4))
        guard case .created(let v2) = try second.wait(), case .created(let v3) = try third.wait() else {
            Issue.record("changes made no versions")
            return
        }
        #expect(v2.version == 2 && v3.version == 3 && v3.body == one)
        _ = try repository.putDefinition("b", body: two, at: Self.time(5)).wait()
        _ = try repository.putDefinition("c", body: two, at: Self.time(5)).wait()

        func check(_ repository: any JobRepository) throws {
            #expect(try repository.storedDefinition("d", version: nil).wait()?.version == 3)
            #expect(try repository.storedDefinition("d", version: 2).wait()?.body == two)
            #expect(try repository.storedDefinition("d", version: 2).wait()?.latest == 3)
            #expect(try repository.storedDefinition("d", version: 4).wait() == nil)
            #expect(try repository.storedDefinition("x", version: nil).wait() == nil)
            #expect(try repository.storedDefinitions(limit: 10, after: "c").wait().map(\.name) == ["d"])
            #expect(
                try repository.storedDefinitionVersions("d", limit: 2, before: nil).wait().map(\.version) == [3, 2]
            )
            #expect(try repository.storedDefinitionVersions("d", limit: 5, before: 2).wait().map(\.version) == [1])
        }
        try check(repository)
        #expect(try repository.storedDefinitions(limit: 2, after: nil).wait().map(\.name) == ["b", "c"])

        #expect(try repository.retireDefinition("c", at: Self.time(6)).wait())
        #expect(try repository.retireDefinition("c", at: Self.time(7)).wait() == false)
        #expect(try repository.retireDefinition("nope", at: Self.time(7)).wait() == false)
        #expect(try repository.storedDefinition("c", version: nil).wait() == nil)
        #expect(try repository.storedDefinition("c", version: 1).wait()?.retiredAt == Self.time(6))
        #expect(try repository.storedDefinitions(limit: 10, after: nil).wait().map(\.name) == ["b", "d"])
        // The same body again brings the name back without a version.
        guard case .unchanged(let back) = try repository.putDefinition("c", body: two, at: Self.time(8)).wait() else {
            Issue.record("an unchanged body made a version")
            return
        }
        #expect(back.version == 1 && back.retiredAt == nil)
        #expect(try repository.storedDefinitions(limit: 10, after: nil).wait().map(\.name) == ["b", "c", "d"])
        _ = try repository.retireDefinition("b", at: Self.time(9)).wait()
        // Last: a PostgreSQL image is a new server on the same schema, which fences this one.
        if let image = try subject.crashImage() {
            try check(image)
            #expect(try image.storedDefinition("b", version: nil).wait() == nil)
            #expect(try image.storedDefinition("b", version: 1).wait()?.retiredAt == Self.time(9))
            try? image.close().wait()
        }
    }

    /// Inserts with one idempotency key, sent together (so that a durable repository commits them
    /// in one transaction): the first is inserted, the others answer with it.
    @Test(arguments: RepositoryKind.allCases)
    func anIdempotencyKeyRepeatedWithinOneCommitAnswersWithTheFirstJob(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        let first = repository.insert(Self.record("a", key: "same", hash: 5))
        let again = repository.insert(Self.record("b", key: "same", hash: 5))
        let other = repository.insert(Self.record("c", key: "same", hash: 6))
        guard case .inserted = try first.wait() else {
            Issue.record("the first insert was not inserted")
            return
        }
        #expect(try again.wait() == .existing(id: "a"))
        #expect(try other.wait() == .mismatch)
        #expect(try repository.count().wait() == 1)
    }

    @Test(arguments: RepositoryKind.allCases)
    func aFinishedJobReadsBackAsItEndedWithEveryEventInOrder(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        let key = try Self.insert(repository, Self.record("a"))
        let started = Committed()
        repository.append(Self.started("a", key: key, committed: started))
        var end = Self.ended("a", key: key, result: ["ok": true])
        let ended = Committed()
        end.committed = ended.listener
        repository.append(end)
        try subject.settle()
        #expect(started.value.withLock { $0 } == true)
        #expect(ended.value.withLock { $0 } == true)
        for reader in [repository, try subject.crashImage()].compactMap({ $0 }) {
            let job = try #require(try reader.job("a").wait())
            #expect(job.state == .succeeded)
            #expect(job.result == ["ok": true])
            #expect(job.startedAt == Self.time(2) && job.finishedAt == Self.time(5))
            #expect(job.events.map(\.seq) == [1, 2, 3, 4, 5])
            #expect(job.events.map(\.type) == [.jobCreated, .jobStarted, .taskStarted, .taskSucceeded, .jobSucceeded])
            #expect(job.nodes == [Self.node(.succeeded, result: ["ok": true])])
            #expect(job.snapshot.progress.succeeded == 1 && job.snapshot.lastEventSeq == 5)
            if reader !== repository { try reader.close().wait() }
        }
    }

    @Test(arguments: RepositoryKind.allCases)
    func listsPageNewestFirstAndFilterByStateAndLabels(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        for index in 0..<5 {
            let id = "j\(index)"
            let key = try Self.insert(repository, Self.record(id, labels: ["parity": index % 2 == 0 ? "even" : "odd"]))
            if index != 3 {
                repository.append(Self.started(id, key: key))
                repository.append(Self.ended(id, key: key, result: .int(index)))
            }
        }
        try subject.settle()
        var seen: [String] = []
        var cursor: UInt64?
        var pages = 0
        repeat {
            let page = try repository.list(JobQuery(limit: 2, before: cursor)).wait()
            seen += page.items.map(\.id)
            cursor = page.next
            pages += 1
        } while cursor != nil && pages < 10
        #expect(seen == ["j4", "j3", "j2", "j1", "j0"])
        #expect(pages == 3)
        let even = try repository.list(JobQuery(labels: [("parity", "even")])).wait()
        #expect(even.items.map(\.id) == ["j4", "j2", "j0"] && even.next == nil)
        let succeeded = try repository.list(JobQuery(state: .succeeded, labels: [("parity", "odd")])).wait()
        #expect(succeeded.items.map(\.id) == ["j1"])
        #expect(succeeded.items.first?.progress.succeeded == 1)
        let pending = try repository.list(JobQuery(state: .pending)).wait()
        #expect(pending.items.map(\.id) == ["j3"])
    }

    @Test(arguments: RepositoryKind.allCases)
    func deliveriesAreCommittedWithTheirEventsAndUpdated(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        let key = try Self.insert(repository, Self.record("a"))
        repository.append(Self.started("a", key: key))
        repository.append(
            Self.ended("a", key: key, result: 1, deliveries: [Self.delivery("a", seq: 5), Self.delivery("a", seq: 4)])
        )
        try subject.settle()
        #expect(try repository.deliveries(jobID: "a").wait().map(\.seq) == [4, 5])
        var delivered = Self.delivery("a", seq: 4, state: .delivered)
        delivered.attempts = [DeliveryAttempt(at: Self.time(6), status: 204, durationMs: 3)]
        try repository.update(delivered).wait()
        let after = try repository.deliveries(jobID: "a").wait()
        #expect(after.first == delivered)
        // A claim takes the pending ones whose time has come, earliest first, each once.
        var later = Self.delivery("b", seq: 6)
        later.nextAttemptAt = Self.time(60_000)
        let keyB = try Self.insert(repository, Self.record("b"))
        var batch = Self.started("b", key: keyB)
        batch.deliveries = [later]
        repository.append(batch)
        try subject.settle()
        #expect(try repository.claimDue(at: Self.time(4), limit: 10).wait().deliveries.isEmpty, "not due yet")
        let first = try repository.claimDue(at: Self.time(10), limit: 10).wait()
        #expect(first.deliveries.map(\.id) == ["msg_a_5"])
        #expect(first.next == Self.time(60_000), "when the next pending one falls due")
        #expect(try repository.claimDue(at: Self.time(10), limit: 10).wait().deliveries.isEmpty, "claimed once")
        // A claim does not outlive its process: a restart finds it pending and unclaimed. (The
        // restarted process goes on: under the same server name, it fences the one it replaces.)
        let image = try subject.crashImage()
        defer { try? image?.close().wait() }
        if let image {
            #expect(try image.claimDue(at: Self.time(10), limit: 10).wait().deliveries.map(\.id) == ["msg_a_5"])
        }
        let current = image ?? repository
        // The attempt's outcome releases the claim: a retry is claimed again when it falls due.
        var retry = first.deliveries[0]
        retry.attempts = [DeliveryAttempt(at: Self.time(10), status: 500, durationMs: 2)]
        retry.nextAttemptAt = Self.time(30_000)
        try current.update(retry).wait()
        let next = try current.claimDue(at: Self.time(20_000), limit: 10).wait()
        #expect(next.deliveries.isEmpty && next.next == Self.time(30_000))
        let both = try current.claimDue(at: Self.time(60_000), limit: 1).wait()
        #expect(both.deliveries.map(\.id) == ["msg_a_5"], "at most the limit, earliest first")
        #expect(try current.claimDue(at: Self.time(60_000), limit: 10).wait().deliveries.map(\.id) == ["msg_b_6"])
    }

    @Test(arguments: RepositoryKind.allCases)
    func leasesAreKeptWhereJobsAreDurable(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        let lease = StoredLease(
            hash: LeaseID.hash("lease-1"),
            jobID: "a",
            taskID: "t",
            executor: "images",
            workerId: "w1",
            attempt: 1,
            heartbeatTimeoutMs: 30_000,
            claimedAt: Self.time(1)
        )
        var other = lease
        other.hash = "h2"
        other.jobID = "b"
        try repository.recordLeases([lease, other]).wait()
        repository.removeLeases(["h2"])
        try subject.settle()
        let image = try subject.crashImage()
        defer { try? image?.close().wait() }
        // A repository that keeps nothing across restarts keeps no lease either (its worker hub does).
        #expect(try (image ?? repository).storedLeases().wait() == (repository.isDurable ? [lease] : []))
    }

    @Test(arguments: RepositoryKind.allCases)
    func unfinishedJobsAreClaimedOnceWithWhatTheyNeedToResume(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        _ = try Self.finish(repository, "done")
        let key = try Self.insert(repository, Self.record("running", input: ["n": 2]))
        repository.append(Self.started("running", key: key))
        _ = try Self.insert(repository, Self.record("waiting"))
        try repository.requestCancel("waiting").wait()
        try subject.settle()
        let claimer = try subject.crashImage() ?? repository
        defer { if claimer !== repository { try? claimer.close().wait() } }
        let claimed = try claimer.claimUnfinished(excluding: []).wait()
        #expect(claimed.map(\.id) == ["running", "waiting"])
        let running = claimed[0]
        #expect(running.state == .running && running.startedAt == Self.time(2) && !running.cancelRequested)
        #expect(running.nodes == [Self.node(.running)] || !claimer.isDurable)
        #expect(running.events.map(\.seq) == [1, 2, 3] || !claimer.isDurable)
        #expect(running.input == ["n": 2])
        // What it resumes from: the document it was submitted with, or the decoded job.
        #expect(running.document?["input"] == ["n": 2] || running.spec?.input == ["n": 2])
        #expect(claimed[1].cancelRequested)
        #expect(try claimer.claimUnfinished(excluding: ["running"]).wait().map(\.id) == ["waiting"])
        #expect(try claimer.claimUnfinished(excluding: ["running", "waiting"]).wait().isEmpty)
    }

    @Test(arguments: RepositoryKind.allCases)
    func onlyFinishedJobsAreDeletedWithEverythingRecordedAboutThem(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        let running = try Self.insert(repository, Self.record(JobID.make()))
        let id = JobID.make()
        let key = try Self.insert(repository, Self.record(id))
        repository.append(Self.started(id, key: key))
        repository.append(Self.ended(id, key: key, result: 1, deliveries: [Self.delivery(id, seq: 5)]))
        try subject.settle()
        let runningID = try #require(try repository.claimUnfinished(excluding: []).wait().first?.id)
        #expect(running != key)
        #expect(try repository.delete(runningID).wait() == .notTerminal)
        #expect(try repository.delete(id).wait() == .deleted)
        #expect(try repository.job(id).wait() == nil)
        #expect(try repository.deliveries(jobID: id).wait().isEmpty)
        #expect(try repository.delete(id).wait() == .notFound)
        #expect(try repository.delete(JobID.make()).wait() == .notFound)
        // A late batch of a deleted job does not bring it back.
        repository.append(Self.ended(id, key: key, result: 2))
        try subject.settle()
        #expect(try repository.job(id).wait() == nil)
        #expect(try repository.count().wait() == 1)
    }

    @Test(arguments: RepositoryKind.allCases)
    func acknowledgementsFollowTheCommit(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        // Another connection sees what an acknowledged write wrote, at the moment it is acknowledged.
        let observe: @Sendable (String) -> Int64? = { sql in
            if let settings = subject.postgres {
                guard let db = try? PostgresConnection(settings), let rows = try? db.query(sql) else { return nil }
                return rows.int(0, 0)
            }
            guard let path = subject.path, let db = try? SQLiteConnection(path: path) else { return nil }
            return try? db.scalar(sql)
        }
        let key = try Self.insert(repository, Self.record("a"))
        if repository.isDurable { #expect(observe("SELECT count(*) FROM jobs WHERE id = 'a'") == 1) }
        let seen = Mutex<(durable: Bool, rows: Int64?)?>(nil)
        var batch = Self.started("a", key: key)
        let done = Promise<Void>()
        batch.committed = { durable in
            seen.withLock { $0 = (durable, observe("SELECT count(*) FROM events WHERE job = \(key)")) }
            done.succeed(())
        }
        repository.append(batch)
        try done.future.wait()
        #expect(seen.withLock { $0?.durable } == true)
        if repository.isDurable { #expect(seen.withLock { $0?.rows } == 1) }
        try repository.requestCancel("a").wait()
        if repository.isDurable {
            #expect(observe("SELECT CASE WHEN cancel_requested THEN 1 ELSE 0 END FROM jobs WHERE id = 'a'") == 1)
        }
    }

    /// Delayed starts (SPEC §8): sleeping jobs are kept out of recovery, listed as pending with
    /// their start time, and taken once each, in start order, by `claimSleeping`; a taken job is an
    /// unfinished one (a crash hands it to recovery); a cancellation wakes a sleeping job.
    @Test(arguments: RepositoryKind.allCases)
    func sleepingJobsAreTakenOnceInStartOrder(_ kind: RepositoryKind) throws {
        let subject = try Subject(kind)
        defer { subject.close() }
        let repository = subject.repository
        func delayed(_ id: String, at offset: Int64, sleeps: Bool = true) throws {
            var record = Self.record(id, labels: ["kind": "delayed"])
            record.runAt = Self.time(offset)
            record.sleeps = sleeps
            _ = try Self.insert(repository, record)
        }
        try delayed("late", at: 3_000)
        try delayed("first", at: 1_000)
        try delayed("second", at: 2_000)
        try delayed("held", at: 500, sleeps: false)
        _ = try Self.insert(repository, Self.record("now"))
        try subject.settle()

        #expect(try repository.claimUnfinished(excluding: []).wait().map(\.id).sorted() == ["held", "now"])
        let pending = try repository.list(JobQuery(state: .pending, labels: [("kind", "delayed")])).wait()
        #expect(pending.items.map(\.id) == ["held", "second", "first", "late"])
        #expect(pending.items.map(\.state) == [.pending, .pending, .pending, .pending])
        #expect(pending.items.first { $0.id == "late" }?.runAt == Self.time(3_000))
        #expect(try repository.job("first").wait()?.snapshot.runAt == Self.time(1_000))
        #expect(try repository.job("first").wait()?.state == .pending)

        #expect(try repository.claimSleeping(through: Self.time(999), limit: 10).wait().isEmpty)
        let taken = try repository.claimSleeping(through: Self.time(2_000), limit: 1).wait()
        #expect(taken.map(\.id) == ["first"])
        #expect(taken.first?.runAt == Self.time(1_000) && taken.first?.state == .pending)
        #expect(taken.first?.document?["input"] == ["n": 1] || taken.first?.spec?.input == ["n": 1])
        #expect(try repository.claimSleeping(through: Self.time(2_000), limit: 10).wait().map(\.id) == ["second"])
        #expect(try repository.claimSleeping(through: Self.time(2_000), limit: 10).wait().isEmpty)
        try subject.settle()
        // Taken: unfinished jobs of their taker, which a restart resumes (not started yet). The
        // restarted process goes on from there.
        func expectTaken(by reader: any JobRepository) throws {
            let unfinished = try reader.claimUnfinished(excluding: ["now"]).wait()
            #expect(unfinished.map(\.id).sorted() == ["first", "held", "second"])
            #expect(unfinished.allSatisfy { $0.startedAt == nil && $0.runAt != nil })
        }
        try expectTaken(by: repository)
        let image = try subject.crashImage()
        defer { try? image?.close().wait() }
        if let image { try expectTaken(by: image) }
        let current = image ?? repository
        // A cancellation wakes a sleeping job: recovery resumes it (to end it), no claim takes it.
        try current.requestCancel("late").wait()
        #expect(try current.claimSleeping(through: Self.time(10_000), limit: 10).wait().isEmpty)
        let woken = try current.claimUnfinished(excluding: ["now", "first", "second", "held"]).wait()
        #expect(woken.map(\.id) == ["late"] && woken.first?.cancelRequested == true)
    }
}
