import Foundation
import TaskCore
import TestSupport
import Testing

@testable import TaskServer

/// A write transaction cut off mid-way (a network partition between a server and PostgreSQL)
/// holds its server's fence — `FOR SHARE` on its `servers` row — and a takeover skips locked
/// rows: PostgreSQL must end it, or no other server takes that server's jobs over until TCP gives
/// up (`PostgresConnection.endIdleTransactions`).
struct PostgresIdleTransactionTests {
    @Test func aTransactionLeftIdleReleasesItsLocksWithinTheLimit() throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let admin = try PostgresConnection(settings)
        try admin.execute("CREATE TABLE servers (id text PRIMARY KEY); INSERT INTO servers VALUES ('n1')")
        let cutOff = try PostgresConnection(settings)
        try cutOff.endIdleTransactions()
        try cutOff.execute("BEGIN")
        _ = try cutOff.query("SELECT 1 FROM servers WHERE id = 'n1' FOR SHARE")
        let reap = "SELECT id FROM servers FOR UPDATE SKIP LOCKED"
        #expect(try admin.query(reap).count == 0, "held while the transaction lives")
        // The client says nothing more (cut off): PostgreSQL ends the transaction.
        let started = ContinuousClock.now
        while try admin.query(reap).count == 0, ContinuousClock.now - started < .seconds(10) {
            Thread.sleep(forTimeInterval: 0.1)
        }
        let waited = ContinuousClock.now - started
        #expect(try admin.query(reap).count == 1, "released once the transaction idled past the limit")
        #expect(waited >= .milliseconds(PostgresConnection.idleTransactionLimitMilliseconds - 200), "\(waited)")
        #expect(throws: PostgresError.self) { try cutOff.execute("COMMIT") }
    }

    @Test func theWritersConnectionEndsIdleTransactions() async throws {
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        let server = try await TestServer.start { $0.database = settings }
        let repository = try #require(server.app.repository as? PostgresJobRepository)
        let promise = Promise<String>()
        repository.writerPool.execute {
            do {
                guard let connection = repository.writer.connection else { throw StoreError.unavailable }
                promise.succeed(try connection.query("SHOW idle_in_transaction_session_timeout").text(0, 0))
            } catch {
                promise.fail(error)
            }
        }
        #expect(try await promise.future.value == "2s")
        await server.stop()
    }
}
