import Dispatch
import Logging
import Synchronization
import TestSupport
import Testing

@testable import TaskCore
@testable import TaskGraph
@testable import TaskServer

/// Two servers on one PostgreSQL schema (SPEC §9), at the repository seam: ownership, takeover
/// and the fence, with the real database. (The whole cluster, nodes killed and frozen, is
/// `scripts/cluster-test.py`.)
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ClusterFencingTests {
    typealias Records = RepositoryConformanceTests

    static func open(_ settings: PostgresSettings, _ name: String) throws -> PostgresJobRepository {
        var options = PostgresJobRepository.Options()
        options.nodeName = name
        return try PostgresJobRepository(settings: settings, options: options, logger: Records.Subject.logger)
    }

    /// Servers started together on an empty database (a cluster's first start): every one
    /// migrates or finds the migrations done, none fails.
    @Test func serversStartingTogetherOnAnEmptySchemaMigrateOnce() throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let connections = try (0..<4).map { _ in try PostgresConnection(settings) }
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: connections.count) { index in
            do {
                try PostgresSchema.migrate(connections[index])
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        let applied = try connections[0].query("SELECT count(*) FROM taskserver_migrations").int(0, 0)
        #expect(applied == Int64(PostgresSchema.migrations.count))
    }

    /// A migrated schema has exactly the tables, columns and functions `verify` checks for; one
    /// changed by hand afterwards (a table or a column dropped) is refused at start, naming what
    /// is missing (the command line turns it into exit 64 naming `--database`).
    @Test func aSchemaMissingATableOrColumnIsRefusedAtStart() throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let connection = try PostgresConnection(settings)
        try PostgresSchema.migrate(connection)
        try PostgresSchema.verify(connection)
        let rows = try connection.query(
            """
            SELECT table_name::text, string_agg(column_name::text, ' ' ORDER BY ordinal_position)
            FROM information_schema.columns WHERE table_schema = current_schema() AND table_name <> 'taskserver_migrations'
            GROUP BY table_name
            """
        )
        var made: [String: String] = [:]
        for row in 0..<rows.count { made[rows.text(row, 0)] = rows.text(row, 1) }
        var listed: [String: String] = [:]
        for (table, columns) in PostgresSchema.tables { listed[table] = columns.joined(separator: " ") }
        #expect(made == listed, "PostgresSchema.tables is what the migrations make")

        try connection.execute("DROP TABLE schedules; ALTER TABLE events DROP COLUMN events")
        #expect {
            try PostgresSchema.verify(connection)
        } throws: { error in
            let text = "\(error)"
            return text.contains("table schedules") && text.contains("column events.events")
                && text.contains("--database")
        }
        #expect(throws: PostgresSchemaError.self) { try ClusterFencingTests.open(settings, "a") }
    }

    @Test func aServerWhoseJobsWereTakenOverCanWriteNothingMore() throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let a = try Self.open(settings, "a")
        let b = try Self.open(settings, "b")
        defer {
            try? a.close().wait()
            try? b.close().wait()
        }
        let key = try Records.insert(a, Records.record("j"))
        a.append(Records.started("j", key: key))
        try a.flush().wait()
        // b claims nothing a (alive) owns.
        #expect(try b.claimUnfinished(excluding: []).wait().isEmpty)

        // a's lease ended and b took it over (what b's heartbeat does to a row past its lease).
        let admin = try PostgresConnection(settings)
        try admin.query("DELETE FROM servers WHERE id = 'a'")
        let claimed = try b.claimUnfinished(excluding: []).wait()
        #expect(claimed.map(\.id) == ["j"])
        #expect(claimed.first?.events.map(\.seq) == [1, 2, 3])

        // a's late writes are refused by the database: its journal, and new jobs.
        let late = Records.Committed()
        var ended = Records.ended("j", key: key, result: 1)
        ended.committed = late.listener
        a.append(ended)
        // Refused with the commit it closes (writeFailed), or done after it: either way, waits.
        _ = try? a.flush().wait()
        #expect(late.value.withLock { $0 } == false)
        #expect(throws: StoreError.writeFailed) { try a.insert(Records.record("k")).wait() }
        let told = a.membership.isFenced
        #expect(told, "the membership is told, to register again")
        #expect(try b.job("j").wait()?.state == .running, "the refused end is not stored")
        #expect(try admin.query("SELECT owner FROM jobs WHERE id = 'j'").text(0, 0) == "b")

        // b, the owner now, writes.
        let owned = Records.Committed()
        var end = Records.ended("j", key: key, result: 1)
        end.committed = owned.listener
        b.append(end)
        try b.flush().wait()
        #expect(owned.value.withLock { $0 } == true)
        #expect(try b.job("j").wait()?.state == .succeeded)
    }

    @Test func aServerRestartedUnderItsNameTakesItsJobsAtOnceAndFencesItsPredecessor() throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let first = try Self.open(settings, "a")
        let other = try Self.open(settings, "b")
        defer { try? other.close().wait() }
        let key = try Records.insert(first, Records.record("j"))
        first.append(Records.started("j", key: key))
        try first.flush().wait()
        // Same name: no lease to wait for; the predecessor's token is void from now on.
        let next = try Self.open(settings, "a")
        defer { try? next.close().wait() }
        #expect(try other.claimUnfinished(excluding: []).wait().isEmpty)
        #expect(try next.claimUnfinished(excluding: []).wait().map(\.id) == ["j"])
        #expect(throws: StoreError.writeFailed) { try first.insert(Records.record("k")).wait() }
        try? first.close().wait()
    }
}
