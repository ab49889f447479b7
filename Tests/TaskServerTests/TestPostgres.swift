import Foundation
import Synchronization
import TestSupport

@testable import TaskServer

/// The real PostgreSQL 15 server the PostgreSQL store's tests use (no mocks): the one named by
/// `TASKSERVER_TEST_DATABASE_URL` (`make test` and CI start one with `scripts/postgres.sh`), or
/// else one this process starts itself with that script in a fixed temporary directory (left
/// running for the next run; `scripts/postgres.sh stop /tmp/taskserver-test-postgres` stops it).
/// Each test gets a schema of its own, so tests run in parallel without seeing each other's rows.
enum TestPostgres {
    static let url: String = {
        if let url = ProcessInfo.processInfo.environment["TASKSERVER_TEST_DATABASE_URL"], !url.isEmpty { return url }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/postgres.sh").path
        // The script's first line is the URL. (popen, not Foundation's Process: the server the
        // script starts outlives it, and reading a Process's pipe to its end hung here.)
        guard let pipe = popen("/bin/bash '\(script)' start /tmp/taskserver-test-postgres", "r") else {
            fatalError("cannot run \(script)")
        }
        var line = [CChar](repeating: 0, count: 1024)
        let read = fgets(&line, Int32(line.count), pipe) != nil
        let status = pclose(pipe)
        guard read, status == 0 else {
            fatalError("scripts/postgres.sh start failed (\(status)): is postgresql-15 installed?")
        }
        return String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }()

    private static let schemas = Atomic(0)

    /// Settings for a new, empty schema of the test database.
    static func freshSchema() throws -> PostgresSettings {
        let name =
            "t\(getpid())_\(Self.schemas.wrappingAdd(1, ordering: .relaxed).newValue)_\(UInt32.random(in: 0...UInt32.max))"
        let admin = try PostgresConnection(try PostgresSettings(url: Self.url))
        try admin.execute("DROP SCHEMA IF EXISTS \(name) CASCADE; CREATE SCHEMA \(name)")
        let separator = Self.url.contains("?") ? "&" : "?"
        return try PostgresSettings(url: Self.url + separator + "options=-csearch_path%3D\(name)")
    }

    /// Drops the schema of `settings` (made by `freshSchema`) with everything in it.
    static func drop(_ settings: PostgresSettings) {
        guard let range = settings.url.firstRange(of: "search_path%3D") else { return }
        let name = settings.url[range.upperBound...]
        guard let admin = try? PostgresConnection(try PostgresSettings(url: Self.url)) else { return }
        try? admin.execute("DROP SCHEMA IF EXISTS \(name) CASCADE")
    }
}

extension TestServer {
    /// A server of a cluster on `settings`' schema, named `name` (SPEC §9).
    static func node(
        _ settings: PostgresSettings,
        _ name: String,
        clock: any ServerClock = SystemClock(),
        _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        try await TestServer.start(clock: clock) { configuration in
            configuration.database = settings
            configuration.nodeName = name
            configure(&configuration)
        }
    }
}
