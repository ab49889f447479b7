import NIOCore
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// The in-memory store (`--memory`) stays bounded: finished jobs are evicted oldest-finished first
/// past a cap or a retention period; running jobs never are.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct MemoryJobStoreTests {
    /// Inserts and runs `job` to its end (or, with `wait: false`, only starts it).
    static func submit(
        _ job: JSONValue,
        id: String,
        engine: Engine,
        store: MemoryJobStore,
        key: String? = nil,
        wait: Bool = true
    ) throws -> JobRun {
        let run = engine.makeRun(id: id, spec: try engine.decoder.decodeJob(job))
        let idempotency = key.map { IdempotencyKey(key: $0, bodyHash: 1) }
        guard case .inserted = try store.insert(run, document: ByteBuffer(), idempotency: idempotency).wait() else {
            Issue.record("\(id) was not inserted")
            return run
        }
        run.start()
        if wait { try run.waitForTerminal(timeout: .seconds(10)).wait() }
        return run
    }

    static func ids(_ store: MemoryJobStore) throws -> [String] {
        try store.list(JobQuery(limit: 1000)).wait().items.map(\.id)
    }

    @Test func finishedJobsPastTheCapAreEvictedOldestFirstButRunningOnesStay() throws {
        let engine = Engine()
        let store = MemoryJobStore(maxFinishedJobs: 3)
        engine.addObserver(store)
        let waiting = try Self.submit(Jobs.await(), id: "waiting", engine: engine, store: store, wait: false)
        for index in 1...5 {
            _ = try Self.submit(
                Jobs.value(.int(index)),
                id: "j\(index)",
                engine: engine,
                store: store,
                key: "k\(index)"
            )
        }
        #expect(try Self.ids(store) == ["j5", "j4", "j3", "waiting"])
        #expect(try store.run("j1").wait() == nil)
        #expect(try store.run("waiting").wait() === waiting)
        #expect(store.count == 4)
        // An evicted job's idempotency key is free again; a kept one still answers.
        let again = engine.makeRun(id: "again", spec: try engine.decoder.decodeJob(Jobs.value(1)))
        let freed = try store.insert(again, document: ByteBuffer(), idempotency: IdempotencyKey(key: "k1", bodyHash: 1))
            .wait()
        guard case .inserted = freed else {
            Issue.record("k1 should be free, got \(freed)")
            return
        }
        let repeatOfKept = engine.makeRun(id: "x", spec: try engine.decoder.decodeJob(Jobs.value(1)))
        let kept = try store.insert(
            repeatOfKept,
            document: ByteBuffer(),
            idempotency: IdempotencyKey(key: "k5", bodyHash: 1)
        ).wait()
        guard case .existing(let existing) = kept else {
            Issue.record("k5 should answer j5, got \(kept)")
            return
        }
        #expect(existing.id == "j5")
    }

    @Test func idsThisServerIssuesAndAnyOtherIdsAreFoundByTheirExactString() throws {
        let engine = Engine()
        let store = MemoryJobStore(maxFinishedJobs: 100)
        engine.addObserver(store)
        let issued = (0..<20).map { _ in JobID.make() }
        // Look-alikes (another case, one character more or less), ids of 31 and 32 bytes (the
        // longest kept inline, the shortest kept as a string), a long one, an empty one.
        let others = [
            issued[0].uppercased(), String(issued[0].dropLast()), issued[0] + "0", "8" + issued[0].dropFirst(),
            String(repeating: "a", count: 31), String(repeating: "a", count: 32), String(repeating: "é", count: 40),
            "job", "",
        ]
        for id in issued + others { _ = try Self.submit(Jobs.value(.string(id)), id: id, engine: engine, store: store) }
        for id in issued + others {
            let run = try store.run(id).wait()
            #expect(run?.id == id, "\(id)")
        }
        #expect(try store.run(String(repeating: "a", count: 30)).wait() == nil)
        #expect(try store.run(String(repeating: "a", count: 33)).wait() == nil)
        #expect(store.count == issued.count + others.count)
        #expect(try store.delete(issued[3]).wait() == .deleted)
        #expect(try store.run(issued[3]).wait() == nil)
        #expect(try store.run(issued[3].uppercased()).wait() == nil)
    }

    @Test func finishedJobsOlderThanTheRetentionAreEvictedAsOthersFinish() throws {
        let engine = Engine()
        let store = MemoryJobStore(retention: .milliseconds(200))
        engine.addObserver(store)
        _ = try Self.submit(Jobs.value(1), id: "old", engine: engine, store: store)
        #expect(try Self.ids(store) == ["old"])
        try Future<Void>.delay(.milliseconds(300)).wait()
        _ = try Self.submit(Jobs.value(2), id: "new", engine: engine, store: store)
        #expect(try Self.ids(store) == ["new"])
    }

    @Test func manyEvictionsKeepTheListingInOrderAndCompactIt() throws {
        let engine = Engine()
        let store = MemoryJobStore(maxFinishedJobs: 10)
        engine.addObserver(store)
        for index in 0..<500 {
            _ = try Self.submit(Jobs.value(.int(index)), id: "j\(index)", engine: engine, store: store)
        }
        #expect(try Self.ids(store) == (490..<500).reversed().map { "j\($0)" })
        #expect(store.count == 10)
        #expect(store.orderCount < 40)
    }
}
