import Logging
import NIOCore
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// The in-memory repository (`--memory`) stays bounded: finished jobs are evicted oldest-finished
/// first past a cap or a retention period; running jobs never are.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct MemoryJobRepositoryTests {
    /// A job service on a memory repository.
    static func service(_ repository: MemoryJobRepository) -> JobService {
        JobService(
            engine: Engine(),
            repository: repository,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        )
    }

    /// Submits `job` under `id` and runs it to its end (or, with `wait: false`, only starts it).
    @discardableResult
    static func submit(
        _ job: JSONValue,
        id: String,
        service: JobService,
        key: String? = nil,
        wait: Bool = true
    ) throws -> JobService.Submitted {
        let spec = try service.engine.decoder.decodeJob(job)
        let idempotency = key.map { IdempotencyKey(key: $0, bodyHash: 1) }
        let submitted = try service.submit(spec, document: ByteBuffer(), idempotency: idempotency, id: id).wait()
        if wait, case .created(let run) = submitted { try run.waitForTerminal(timeout: .seconds(10)).wait() }
        return submitted
    }

    static func ids(_ service: JobService) throws -> [String] {
        try service.list(JobQuery(limit: 1000)).wait().items.map(\.id)
    }

    @Test func finishedJobsPastTheCapAreEvictedOldestFirstButRunningOnesStay() throws {
        let repository = MemoryJobRepository(maxFinishedJobs: 3)
        let service = Self.service(repository)
        defer { service.engine.shutdown() }
        guard case .created(let waiting) = try Self.submit(Jobs.await(), id: "waiting", service: service, wait: false)
        else {
            Issue.record("waiting was not created")
            return
        }
        for index in 1...5 {
            try Self.submit(Jobs.value(.int(index)), id: "j\(index)", service: service, key: "k\(index)")
        }
        #expect(try Self.ids(service) == ["j5", "j4", "j3", "waiting"])
        #expect(try service.job("j1").wait() == nil)
        #expect(try service.job("waiting").wait() as? JobRun === waiting)
        #expect(try repository.count().wait() == 4)
        // An evicted job's idempotency key is free again; a kept one still answers.
        let freed = try Self.submit(Jobs.value(1), id: "again", service: service, key: "k1")
        guard case .created = freed else {
            Issue.record("k1 should be free, got \(freed)")
            return
        }
        let kept = try Self.submit(Jobs.value(1), id: "x", service: service, key: "k5")
        guard case .existing(let existing) = kept else {
            Issue.record("k5 should answer j5, got \(kept)")
            return
        }
        #expect(existing.id == "j5")
        #expect(existing.snapshot.result == 5)
    }

    @Test func idsThisServerIssuesAndAnyOtherIdsAreFoundByTheirExactString() throws {
        let repository = MemoryJobRepository(maxFinishedJobs: 100)
        let service = Self.service(repository)
        defer { service.engine.shutdown() }
        let issued = (0..<20).map { _ in JobID.make() }
        // Look-alikes (another case, one character more or less), ids of 31 and 32 bytes (the
        // longest kept inline, the shortest kept as a string), a long one, an empty one.
        let others = [
            issued[0].uppercased(), String(issued[0].dropLast()), issued[0] + "0", "8" + issued[0].dropFirst(),
            String(repeating: "a", count: 31), String(repeating: "a", count: 32), String(repeating: "é", count: 40),
            "job", "",
        ]
        for id in issued + others { try Self.submit(Jobs.value(.string(id)), id: id, service: service) }
        for id in issued + others {
            let job = try service.job(id).wait()
            #expect(job?.id == id, "\(id)")
            #expect(job?.snapshot.result == .string(id), "\(id)")
        }
        #expect(try service.job(String(repeating: "a", count: 30)).wait() == nil)
        #expect(try service.job(String(repeating: "a", count: 33)).wait() == nil)
        #expect(try repository.count().wait() == issued.count + others.count)
        #expect(try service.delete(issued[3]).wait() == .deleted)
        #expect(try service.job(issued[3]).wait() == nil)
        #expect(try service.job(issued[3].uppercased()).wait() == nil)
    }

    @Test func finishedJobsOlderThanTheRetentionAreEvictedAsOthersFinish() throws {
        let service = Self.service(MemoryJobRepository(retention: .milliseconds(200)))
        defer { service.engine.shutdown() }
        try Self.submit(Jobs.value(1), id: "old", service: service)
        #expect(try Self.ids(service) == ["old"])
        try Future<Void>.delay(.milliseconds(300)).wait()
        try Self.submit(Jobs.value(2), id: "new", service: service)
        #expect(try Self.ids(service) == ["new"])
    }

    @Test func manyEvictionsKeepTheListingInOrderAndCompactIt() throws {
        let repository = MemoryJobRepository(maxFinishedJobs: 10)
        let service = Self.service(repository)
        defer { service.engine.shutdown() }
        for index in 0..<500 { try Self.submit(Jobs.value(.int(index)), id: "j\(index)", service: service) }
        #expect(try Self.ids(service) == (490..<500).reversed().map { "j\($0)" })
        #expect(try repository.count().wait() == 10)
        #expect(repository.orderCount < 40)
    }
}
