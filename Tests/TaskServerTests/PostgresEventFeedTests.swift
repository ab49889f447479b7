import Synchronization
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// How a `feed` row keeps its entries (`PostgresEventFeed.line`, `entries`): read back as written.
struct PostgresEventFeedTests {
    @Test func entriesAreReadBackAsWritten() throws {
        let events = [
            JobEvent(seq: 1, type: .jobCreated, time: Timestamp(milliseconds: 1_000)),
            JobEvent(
                seq: 7,
                type: .jobFailed,
                time: Timestamp(milliseconds: 2_000),
                data: ["error": ["code": "x.y", "message": "a\ttab and a\nnewline"]]
            ),
        ]
        var bytes: [UInt8] = []
        for (index, event) in events.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: "\n")) }
            PostgresEventFeed.line(jobID: "job\(index)", event, to: &bytes)
        }
        let read = try bytes.withUnsafeBytes { try PostgresEventFeed.entries($0) }
        #expect(read.map(\.jobID) == ["job0", "job1"])
        #expect(read.map(\.event) == events)
    }
}

/// The feed exactly once: a commit whose answer was lost with the connection is sent again, and
/// what it stored the first time adds no second feed row (a real PostgreSQL).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct PostgresFeedOnceTests {
    typealias Records = RepositoryConformanceTests

    /// `batch` with its job for the feed: its `job.*` events become feed entries.
    static func fed(_ batch: JournalBatch) -> JournalBatch {
        var batch = batch
        var progress = JobProgress()
        progress.total = 1
        batch.feedJob = JobSnapshot(
            id: batch.id,
            name: "job \(batch.id)",
            state: .running,
            input: ["n": 1],
            labels: [:],
            createdAt: Records.time(0),
            startedAt: Records.time(2),
            progress: progress,
            lastEventSeq: batch.lastSeq
        )
        return batch
    }

    @Test func aCommitSentAgainAfterItsAnswerWasLostAddsNoSecondFeedRow() throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let repository = try ClusterFencingTests.open(settings, "a")
        defer { try? repository.close().wait() }
        let admin = try PostgresConnection(settings)
        let key = try Records.insert(repository, Records.record("j"))
        let started = Self.fed(Records.started("j", key: key))
        repository.append(started)
        try repository.flush().wait()
        #expect(try admin.query("SELECT count(*) FROM feed").int(0, 0) == 1)

        // Its answer lost with the connection (`connectionLost` keeps it as unsure), the batch is
        // sent again, with the next one of the same job queued behind it.
        let told = Records.Committed()
        var ended = Self.fed(Records.ended("j", key: key, result: 1))
        ended.committed = told.listener
        repository.queue.withLock { $0.unsure = [.journal(started)] }
        repository.append(ended)
        try repository.flush().wait()

        #expect(told.value.withLock { $0 } == true)
        let rows = try admin.query("SELECT first_position, count FROM feed ORDER BY first_position")
        #expect(rows.count == 2, "one row for the start, one for the end: none repeated")
        #expect(try admin.query("SELECT last FROM feed_head").int(0, 0) == 3, "job.created, job.started, job.succeeded")
        let events = try admin.query("SELECT seq FROM events ORDER BY seq")
        #expect((0..<events.count).map { events.int($0, 0) } == [1, 4], "the end's events are kept, not merged away")
        #expect(try repository.job("j").wait()?.state == .succeeded)
    }

    /// Sent again but never stored the first time (the connection broke before the commit): its
    /// feed row is added once, then.
    @Test func anUnsureCommitThatWasNotStoredIsFedOnce() throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let repository = try ClusterFencingTests.open(settings, "a")
        defer { try? repository.close().wait() }
        let admin = try PostgresConnection(settings)
        let key = try Records.insert(repository, Records.record("j"))
        repository.queue.withLock { $0.unsure = [.journal(Self.fed(Records.started("j", key: key)))] }
        try repository.flush().wait()
        #expect(try admin.query("SELECT count(*) FROM feed").int(0, 0) == 1)
        #expect(try admin.query("SELECT count(*) FROM events").int(0, 0) == 1)
    }
}
