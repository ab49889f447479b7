import CPostgres

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One libpq connection, used by one thread at a time (the repository's writer, or a reader
/// that borrowed it): blocking calls, on threads of the store's own, never on an event loop.
///
/// Why libpq and not postgres-nio (issue #30 has the figures): libpq is PostgreSQL's own client,
/// already on every machine that has `psql`, and costs no build time; it implements every
/// connection setting users know (`sslmode` and the certificate options, `passfile` and
/// `~/.pgpass`, `PGHOST`-style environment, several hosts, `target_session_attrs`) exactly as
/// PostgreSQL documents them. The store writes from one thread with group commit, as the SQLite
/// store does, so an async client would only add a bridge.
///
/// Every statement but the simple `execute` is prepared once per connection (by its text) and
/// sent with binary parameters; results come back in binary (`PostgresRows`).
// @unchecked Sendable: a connection is used by one thread at a time — the writer's only on the
// writer thread, a reader's by the reader that took it from the pool until it gives it back.
final class PostgresConnection: @unchecked Sendable {
    private let handle: OpaquePointer
    /// Prepared statements of this connection, by their SQL.
    private var statements: [String: String] = [:]

    /// Connects with `settings`; throws a `PostgresError` whose message never contains the password.
    /// `extra`: libpq settings of this connection (before `dbname`: the URL's own win).
    init(_ settings: PostgresSettings, extra: [(String, String)] = []) throws {
        var keywords = ["connect_timeout", "application_name"] + extra.map(\.0) + ["dbname"]
        var values = [String(settings.connectTimeoutSeconds), "taskserver"] + extra.map(\.1) + [settings.url]
        // After `dbname`: a password read from a file replaces one in the URL.
        if let password = settings.password {
            keywords.append("password")
            values.append(password)
        }
        let handle = Self.withCStrings(keywords) { keywordPointers in
            Self.withCStrings(values) { valuePointers in
                PQconnectdbParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let handle else { throw PostgresError(message: "out of memory", connectionLost: true) }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = settings.redact(String(cString: PQerrorMessage(handle)))
            PQfinish(handle)
            throw PostgresError(message: message, connectionLost: true)
        }
        cpostgres_silence_notices(handle)
        self.handle = handle
        // Plans for the values at hand, not a generic plan cached at the first executions: one
        // made while the tables were small (a new database) scans them whole, and stays cached
        // as they grow (measured: the UPDATE of the jobs that ended took 3.8 ms per commit, 0.4 ms with this).
        try self.execute("SET plan_cache_mode = force_custom_plan")
    }

    deinit { PQfinish(self.handle) }

    /// How long a transaction of this server's writes may idle before PostgreSQL ends it
    /// (`endIdleTransactions`), in milliseconds: below the 3.5 s after which a server that cannot
    /// renew stops acting, and the 5 s lease.
    static let idleTransactionLimitMilliseconds = 2000

    /// Makes PostgreSQL end this connection's transaction (and its session) once it idles inside
    /// it for `idleTransactionLimitMilliseconds` — its client cut off mid-transaction by a network
    /// partition, or stopped. A server's write transactions open with its fence, which holds the
    /// server's `servers` row (`FOR SHARE`) until they end, and a takeover skips locked rows: one
    /// cut off mid-way kept that server's jobs from every other server until TCP gave up, minutes
    /// later (the cluster test's partition, when the cut fell inside a commit). The server sends
    /// each transaction whole, so one never idles that long while its client runs.
    func endIdleTransactions() throws {
        try self.execute("SET idle_in_transaction_session_timeout = \(Self.idleTransactionLimitMilliseconds)")
    }

    /// Whether the connection is still usable (false once the server or the network dropped it).
    var isUsable: Bool { PQstatus(self.handle) == CONNECTION_OK }

    /// The server's version number (e.g. 150018).
    var serverVersion: Int { Int(PQserverVersion(self.handle)) }

    /// Runs `sql` (one or several statements, no parameters) with the simple protocol.
    func execute(_ sql: String) throws {
        let result = PQexec(self.handle, sql)
        try self.check(result, sql: sql).close()
    }

    /// Runs `sql` with `values` bound to `$1…`, prepared once per connection; rows in binary.
    @discardableResult
    func query(_ sql: String, _ values: [PostgresValue?] = []) throws -> PostgresRows {
        let name = try self.prepare(sql, values)
        let encoded = values.map { $0?.encoded }
        var lengths = encoded.map { Int32($0?.bytes.count ?? 0) }
        var formats = [Int32](repeating: 1, count: encoded.count)
        let result = Self.withParameterPointers(encoded) { pointers in
            PQexecPrepared(self.handle, name, Int32(encoded.count), pointers, &lengths, &formats, 1)
        }
        return try self.check(result, sql: sql)
    }

    /// A statement of a pipeline.
    struct Statement {
        var sql: String
        var values: [PostgresValue?] = []
    }

    /// Sends `statements` in one round trip (libpq's pipeline mode) and returns their rows in
    /// order. Throws the first statement's error: the statements after it were not run, and an
    /// explicit transaction among them is left failed (roll it back).
    ///
    /// The connection is non-blocking meanwhile and the thread waits in `poll` for the socket, so
    /// that a large batch never deadlocks with the server (each side blocked writing to the other).
    func pipeline(_ statements: [Statement]) throws -> [PostgresRows] {
        let names = try statements.map { try self.prepare($0.sql, $0.values) }
        guard PQsetnonblocking(self.handle, 1) == 0, PQenterPipelineMode(self.handle) == 1 else {
            throw self.connectionError("cannot enter pipeline mode")
        }
        defer {
            PQexitPipelineMode(self.handle)
            PQsetnonblocking(self.handle, 0)
        }
        for (statement, name) in zip(statements, names) {
            let encoded = statement.values.map { $0?.encoded }
            var lengths = encoded.map { Int32($0?.bytes.count ?? 0) }
            var formats = [Int32](repeating: 1, count: encoded.count)
            let sent = Self.withParameterPointers(encoded) { pointers in
                PQsendQueryPrepared(self.handle, name, Int32(encoded.count), pointers, &lengths, &formats, 1)
            }
            guard sent == 1 else { throw self.connectionError("cannot send a statement") }
            try self.flush()
        }
        guard PQpipelineSync(self.handle) == 1 else { throw self.connectionError("cannot send a sync") }
        try self.flush()
        var rows: [PostgresRows] = []
        var firstError: (any Error)?
        for statement in statements {
            guard let result = try self.nextResult() else { throw self.connectionError("a result is missing") }
            let status = PQresultStatus(result)
            if status == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                rows.append(PostgresRows(nil))
            } else {
                do {
                    rows.append(try self.check(result, sql: statement.sql))
                } catch {
                    if firstError == nil { firstError = error }
                    rows.append(PostgresRows(nil))
                }
            }
            // Each statement's results end with a null result.
            if let extra = try self.nextResult() { PQclear(extra) }
        }
        guard let sync = try self.nextResult() else { throw self.connectionError("the sync is missing") }
        let synced = PQresultStatus(sync) == PGRES_PIPELINE_SYNC
        PQclear(sync)
        guard synced else { throw self.connectionError("the pipeline did not end with its sync") }
        if let firstError { throw firstError }
        return rows
    }

    /// How long a pipeline waits for the socket before it takes the connection for lost.
    static let socketTimeoutMilliseconds: Int32 = 60_000

    /// Sends what libpq has buffered, reading meanwhile what the server sends back.
    private func flush() throws {
        while true {
            let flushed = PQflush(self.handle)
            if flushed == 0 { return }
            guard flushed == 1 else { throw self.connectionError("cannot send") }
            try self.waitForSocket(events: Int16(POLLIN | POLLOUT))
            guard PQconsumeInput(self.handle) == 1 else { throw self.connectionError("cannot read") }
        }
    }

    /// The next result of a pipeline, once it has arrived (nil: the end of a statement's results).
    private func nextResult() throws -> OpaquePointer? {
        while PQisBusy(self.handle) == 1 {
            try self.waitForSocket(events: Int16(POLLIN))
            guard PQconsumeInput(self.handle) == 1 else { throw self.connectionError("cannot read") }
        }
        return PQgetResult(self.handle)
    }

    private func waitForSocket(events: Int16) throws {
        var descriptor = pollfd(fd: PQsocket(self.handle), events: events, revents: 0)
        let ready = poll(&descriptor, 1, Self.socketTimeoutMilliseconds)
        if ready < 0, errno == EINTR { return }
        guard ready > 0 else {
            throw PostgresError(message: "no answer from the database in 60 s", connectionLost: true)
        }
    }

    private func connectionError(_ what: String) -> PostgresError {
        let detail = String(cString: PQerrorMessage(self.handle)).trimmingTrailingNewlines
        return PostgresError(message: detail.isEmpty ? what : "\(what): \(detail)", connectionLost: true)
    }

    /// The connection's socket (to wait on it with another descriptor, `LISTEN`).
    var socket: Int32 { PQsocket(self.handle) }

    /// Reads what the server sent (after the socket was readable) and returns the notifications
    /// (`LISTEN`) received so far, on this call or during earlier statements.
    func notifications(read: Bool) throws -> [(channel: String, payload: String)] {
        if read { guard PQconsumeInput(self.handle) == 1 else { throw self.connectionError("cannot read") } }
        var received: [(channel: String, payload: String)] = []
        while let notification = PQnotifies(self.handle) {
            received.append(
                (String(cString: notification.pointee.relname), String(cString: notification.pointee.extra))
            )
            PQfreemem(notification)
        }
        return received
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    func transaction<R>(_ body: () throws -> R) throws -> R {
        try self.execute("BEGIN")
        do {
            let value = try body()
            try self.execute("COMMIT")
            return value
        } catch {
            if self.isUsable { try? self.execute("ROLLBACK") }
            throw error
        }
    }

    private func prepare(_ sql: String, _ values: [PostgresValue?]) throws -> String {
        if let name = self.statements[sql] { return name }
        let name = "s\(self.statements.count)"
        // Types from the values (a NULL leaves its type to the statement's casts).
        let types = values.map { $0?.encoded.type ?? 0 }
        let result = PQprepare(self.handle, name, sql, Int32(types.count), types)
        try self.check(result, sql: sql).close()
        self.statements[sql] = name
        return name
    }

    private func check(_ result: OpaquePointer?, sql: String) throws -> PostgresRows {
        guard let result else {
            throw PostgresError(message: String(cString: PQerrorMessage(self.handle)), connectionLost: !self.isUsable)
        }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let message = String(cString: PQresultErrorMessage(result)).trimmingTrailingNewlines
            PQclear(result)
            // A statement of a connection that has just dropped fails with a "fatal" result.
            throw PostgresError(
                sqlState: state,
                message: message.isEmpty ? String(cString: PQerrorMessage(self.handle)) : message,
                connectionLost: !self.isUsable,
                statement: String(sql.prefix(120))
            )
        }
        return PostgresRows(result)
    }

    private static func withCStrings<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        defer { for pointer in pointers { free(pointer) } }
        pointers.append(nil)
        return body(pointers.map { UnsafePointer($0) })
    }

    private static func withParameterPointers<R>(
        _ values: [(type: UInt32, bytes: [UInt8])?],
        _ body: ([UnsafePointer<CChar>?]) -> R
    ) -> R {
        // Each parameter's bytes in one allocation, pointed into (NULL for a NULL parameter).
        let total = values.reduce(0) { $0 + ($1?.bytes.count ?? 0) + 1 }
        let storage = UnsafeMutablePointer<CChar>.allocate(capacity: max(total, 1))
        defer { storage.deallocate() }
        var pointers: [UnsafePointer<CChar>?] = []
        pointers.reserveCapacity(values.count)
        var offset = 0
        for value in values {
            guard let value else {
                pointers.append(nil)
                continue
            }
            value.bytes.withUnsafeBytes { bytes in
                if let base = bytes.baseAddress {
                    UnsafeMutableRawPointer(storage + offset).copyMemory(from: base, byteCount: bytes.count)
                }
            }
            pointers.append(UnsafePointer(storage + offset))
            offset += value.bytes.count + 1
        }
        return body(pointers)
    }
}

/// A query's rows, read in PostgreSQL's binary format; freed when closed or released.
final class PostgresRows {
    private var result: OpaquePointer?

    /// `result` nil: no rows (a statement of a pipeline that did not run).
    init(_ result: OpaquePointer?) { self.result = result }

    deinit { self.close() }

    func close() {
        if let result { PQclear(result) }
        self.result = nil
    }

    var count: Int { self.result.map { Int(PQntuples($0)) } ?? 0 }

    /// Rows a command changed (`UPDATE`, `DELETE`, `INSERT`).
    var affected: Int { self.result.map { Int(String(cString: PQcmdTuples($0))) ?? 0 } ?? 0 }

    func isNull(_ row: Int, _ column: Int) -> Bool { PQgetisnull(self.result, Int32(row), Int32(column)) != 0 }

    /// A `bigint`, `integer`, `smallint` or `boolean` column.
    func int(_ row: Int, _ column: Int) -> Int64 {
        let length = Int(PQgetlength(self.result, Int32(row), Int32(column)))
        guard let value = PQgetvalue(self.result, Int32(row), Int32(column)) else { return 0 }
        var number: Int64 = 0
        for index in 0..<length { number = number << 8 | Int64(UInt8(bitPattern: value[index])) }
        // Sign-extend the narrower integers.
        guard length > 0, length < 8 else { return number }
        let unused = Int64(64 - 8 * length)
        return (number << unused) >> unused
    }

    /// A `text` column (or a `bytea` read as UTF-8).
    func text(_ row: Int, _ column: Int) -> String {
        self.withBytes(row, column) { String(decoding: $0, as: UTF8.self) }
    }

    func withBytes<R>(_ row: Int, _ column: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let length = Int(PQgetlength(self.result, Int32(row), Int32(column)))
        guard let value = PQgetvalue(self.result, Int32(row), Int32(column)), length > 0 else {
            return try body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
        return try body(UnsafeRawBufferPointer(start: value, count: length))
    }
}

extension PostgresRows {
    /// Row `index`, read by column.
    func row(_ index: Int) -> PostgresRow { PostgresRow(rows: self, index: index) }

    /// Every row, each read with `body`.
    func map<T>(_ body: (PostgresRow) throws -> T) rethrows -> [T] {
        try (0..<self.count).map { try body(self.row($0)) }
    }
}

/// One row of a result.
struct PostgresRow: StoreRow {
    let rows: PostgresRows
    let index: Int

    func isNull(_ column: Int) -> Bool { self.rows.isNull(self.index, column) }
    func int(_ column: Int) -> Int64 { self.rows.int(self.index, column) }
    func text(_ column: Int) -> String { self.rows.text(self.index, column) }
    func withBytes<R>(_ column: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try self.rows.withBytes(self.index, column, body)
    }
}

/// A statement parameter, sent in PostgreSQL's binary format with its type.
enum PostgresValue: Sendable {
    case int(Int64)
    case text(String)
    case bytes([UInt8])
    case intArray([Int64?])
    case textArray([String?])
    case bytesArray([[UInt8]?])

    // Type OIDs (`pg_type`).
    static let int8: UInt32 = 20
    static let text: UInt32 = 25
    static let bytea: UInt32 = 17

    var encoded: (type: UInt32, bytes: [UInt8]) {
        switch self {
        case .int(let value): (Self.int8, Self.bigEndian(value))
        case .text(let value): (Self.text, Array(value.utf8))
        case .bytes(let value): (Self.bytea, value)
        case .intArray(let values): (1016, Self.array(Self.int8, values.map { $0.map(Self.bigEndian) }))
        case .textArray(let values): (1009, Self.array(Self.text, values.map { $0.map { Array($0.utf8) } }))
        case .bytesArray(let values): (1001, Self.array(Self.bytea, values))
        }
    }

    private static func bigEndian(_ value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    private static func bigEndian(_ value: Int32) -> [UInt8] {
        (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) }
    }

    /// A one-dimensional array: dimensions, a has-NULL flag, the element type, then each element
    /// as a length (-1: NULL) and its bytes.
    private static func array(_ element: UInt32, _ values: [[UInt8]?]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20 + values.reduce(0) { $0 + 4 + ($1?.count ?? 0) })
        let hasNull = values.contains { $0 == nil }
        bytes += Self.bigEndian(Int32(values.isEmpty ? 0 : 1))
        bytes += Self.bigEndian(Int32(hasNull ? 1 : 0))
        bytes += Self.bigEndian(Int32(bitPattern: element))
        if !values.isEmpty {
            bytes += Self.bigEndian(Int32(values.count))
            bytes += Self.bigEndian(Int32(1))
        }
        for value in values {
            guard let value else {
                bytes += Self.bigEndian(Int32(-1))
                continue
            }
            bytes += Self.bigEndian(Int32(value.count))
            bytes += value
        }
        return bytes
    }
}

/// What went wrong talking to PostgreSQL.
struct PostgresError: Error, CustomStringConvertible {
    /// The SQLSTATE code, when the server answered with an error.
    var sqlState: String?
    var message: String
    /// The connection is gone (the server stopped, the network failed): reconnect and retry.
    var connectionLost: Bool
    /// The start of the statement that failed.
    var statement: String?

    init(sqlState: String? = nil, message: String, connectionLost: Bool, statement: String? = nil) {
        self.sqlState = sqlState
        self.message = message
        self.connectionLost = connectionLost
        self.statement = statement
    }

    /// A write transaction of a server whose jobs another server took over (`taskserver_fence`).
    var isFenced: Bool { self.sqlState == "TSF01" }

    var description: String {
        var text = self.message
        if let sqlState { text += " (SQLSTATE \(sqlState))" }
        if let statement { text += " in: \(statement)" }
        return text
    }
}

extension String {
    var trimmingTrailingNewlines: String {
        var text = self
        while text.last == "\n" { text.removeLast() }
        return text
    }
}
