import CSQLite
import Synchronization

/// A failed SQLite call, with SQLite's own message.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var message: String
    public var description: String { "SQLite error \(self.code): \(self.message)" }
}

/// One SQLite connection: a thin layer over the C API (Debian's libsqlite3), just what the store
/// uses — execute, prepared statements with typed binds and columns, transactions.
///
/// Why the C API and not a wrapper library: measured here (FIELD-NOTES) it inserts 560k–640k
/// rows/s and adds ~7 s to a clean build, against 240k–400k and ~35 s for GRDB and 6k–8k for
/// sqlite-nio; the store needs only prepared statements on threads it already owns.
// @unchecked Sendable: a connection is used by one thread at a time — the writer's only through the
// store's one-thread writer pool, each reader's while checked out of the reader stack (see
// `SQLiteJobRepository`). SQLite itself is built thread-safe (serialized) on Debian.
final class SQLiteConnection: @unchecked Sendable {
    let handle: OpaquePointer
    private var statements: [String: SQLiteStatement] = [:]

    init(path: String, readOnly: Bool = false) throws(SQLiteError) {
        var db: OpaquePointer?
        let flags = readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        let status = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, nil)
        guard status == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open \(path)"
            if let db { sqlite3_close_v2(db) }
            throw SQLiteError(code: status, message: message)
        }
        self.handle = db
        sqlite3_extended_result_codes(db, 1)
        // A writer holding the lock for a moment (a checkpoint) must not fail readers.
        sqlite3_busy_timeout(db, 5000)
    }

    deinit {
        self.statements.removeAll()
        self.prepared.removeAll()
        sqlite3_close_v2(self.handle)
    }

    var errorMessage: String { String(cString: sqlite3_errmsg(self.handle)) }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { Int(sqlite3_changes(self.handle)) }

    /// Runs one or more statements without results.
    func execute(_ sql: String) throws(SQLiteError) {
        var error: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(self.handle, sql, nil, nil, &error)
        if status != SQLITE_OK {
            let message = error.map { String(cString: $0) } ?? self.errorMessage
            sqlite3_free(error)
            throw SQLiteError(code: status, message: message)
        }
    }

    /// A prepared statement for `sql`, cached per connection unless `cached` is false (reset and
    /// unbound on return).
    func statement(_ sql: String, cached: Bool = true) throws(SQLiteError) -> SQLiteStatement {
        if let statement = self.statements[sql] {
            statement.reset()
            return statement
        }
        var raw: OpaquePointer?
        let status = sqlite3_prepare_v3(self.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard status == SQLITE_OK, let raw else {
            throw SQLiteError(code: status, message: "\(self.errorMessage) in: \(sql)")
        }
        let statement = SQLiteStatement(raw, connection: self)
        if cached { self.statements[sql] = statement }
        return statement
    }

    private var prepared: [UInt: SQLiteStatement] = [:]

    /// A prepared statement for a literal `sql`, cached by the literal's address (no hashing of
    /// the text on the hot path).
    func prepared(_ sql: StaticString) throws(SQLiteError) -> SQLiteStatement {
        let key = UInt(bitPattern: sql.utf8Start)
        if let statement = self.prepared[key] {
            statement.reset()
            return statement
        }
        let text = sql.withUTF8Buffer { String(decoding: $0, as: UTF8.self) }
        let statement = try self.statement(text, cached: false)
        self.prepared[key] = statement
        return statement
    }

    /// Runs `body` in a write transaction (`BEGIN IMMEDIATE`), committing when it returns and
    /// rolling back when it throws.
    func transaction<R>(_ body: () throws -> R) throws -> R {
        try self.execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try self.execute("COMMIT")
            return result
        } catch {
            try? self.execute("ROLLBACK")
            throw error
        }
    }

    /// The first column of the first row of `sql` as an integer.
    func scalar(_ sql: String) throws(SQLiteError) -> Int64? {
        let statement = try self.statement(sql)
        defer { statement.reset() }
        return try statement.step() ? statement.int(0) : nil
    }

    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(self.handle) }

    /// Stops this connection from checkpointing by itself after its commits, and has it report
    /// the WAL's size in frames to `size` after each commit instead (`sqlite3_wal_hook`, which
    /// replaces the automatic checkpoint). `size` must outlive the connection.
    func reportWALSize(to size: WALSize) {
        sqlite3_wal_hook(
            self.handle,
            { context, _, _, frames in
                Unmanaged<WALSize>.fromOpaque(context!).takeUnretainedValue().frames.store(frames, ordering: .relaxed)
                return SQLITE_OK
            },
            Unmanaged.passUnretained(size).toOpaque()
        )
    }

    /// A passive checkpoint (`sqlite3_wal_checkpoint_v2`): copies what it can of the WAL into the
    /// database file without waiting for, or blocking, readers and the writer. `true` when every
    /// frame was copied (the next write transaction may then restart the WAL from its start).
    @discardableResult
    func checkpoint() throws(SQLiteError) -> Bool {
        var frames: Int32 = 0
        var copied: Int32 = 0
        let status = sqlite3_wal_checkpoint_v2(self.handle, nil, SQLITE_CHECKPOINT_PASSIVE, &frames, &copied)
        if status == SQLITE_BUSY { return false }
        guard status == SQLITE_OK else { throw SQLiteError(code: status, message: self.errorMessage) }
        return frames == copied
    }
}

/// The size of a connection's WAL in frames, as of its last commit (`reportWALSize`).
final class WALSize: Sendable {
    let frames = Atomic<Int32>(0)
}

/// A prepared statement. Bind indexes start at 1 and columns at 0, as in SQLite.
final class SQLiteStatement {
    private let raw: OpaquePointer
    private unowned let connection: SQLiteConnection

    init(_ raw: OpaquePointer, connection: SQLiteConnection) {
        self.raw = raw
        self.connection = connection
    }

    deinit { sqlite3_finalize(self.raw) }

    func reset() {
        sqlite3_reset(self.raw)
        sqlite3_clear_bindings(self.raw)
    }

    /// Binds `values` to parameters 1, 2, … (nil binds NULL).
    @discardableResult
    func bind(_ values: SQLiteValue?...) throws(SQLiteError) -> SQLiteStatement {
        for (offset, value) in values.enumerated() { try self.bind(value, at: Int32(offset + 1)) }
        return self
    }

    func bind(_ value: SQLiteValue?, at index: Int32) throws(SQLiteError) {
        let status: Int32
        switch value {
        case nil: status = sqlite3_bind_null(self.raw, index)
        case .int(let int): status = sqlite3_bind_int64(self.raw, index, int)
        case .text(let text):
            status =
                text.utf8.withContiguousStorageIfAvailable { bytes in
                    bytes.withMemoryRebound(to: CChar.self) {
                        csqlite_bind_text(self.raw, index, $0.baseAddress, Int32($0.count))
                    }
                }
                ?? {
                    var copy = text
                    return copy.withUTF8 { bytes in
                        bytes.withMemoryRebound(to: CChar.self) {
                            csqlite_bind_text(self.raw, index, $0.baseAddress, Int32($0.count))
                        }
                    }
                }()
        case .bytes(let bytes):
            status = bytes.withUnsafeBytes {
                csqlite_bind_text(self.raw, index, $0.baseAddress?.assumingMemoryBound(to: CChar.self), Int32($0.count))
            }
        }
        guard status == SQLITE_OK else { throw SQLiteError(code: status, message: self.connection.errorMessage) }
    }

    /// Advances to the next row: `true` when there is one, `false` when done.
    @discardableResult
    func step() throws(SQLiteError) -> Bool {
        let status = sqlite3_step(self.raw)
        switch status {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw SQLiteError(code: status, message: self.connection.errorMessage)
        }
    }

    /// Runs a statement that returns no rows.
    func run() throws(SQLiteError) {
        while try self.step() {}
    }
}

/// A statement's current row (after `step()` answered `true`).
extension SQLiteStatement: StoreRow {
    func isNull(_ column: Int) -> Bool { sqlite3_column_type(self.raw, Int32(column)) == SQLITE_NULL }

    func int(_ column: Int) -> Int64 { sqlite3_column_int64(self.raw, Int32(column)) }

    func text(_ column: Int) -> String {
        guard let pointer = sqlite3_column_text(self.raw, Int32(column)) else { return "" }
        let count = Int(sqlite3_column_bytes(self.raw, Int32(column)))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    func withBytes<R>(_ column: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let pointer = sqlite3_column_blob(self.raw, Int32(column))
        let count = Int(sqlite3_column_bytes(self.raw, Int32(column)))
        return try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

/// A value to bind.
enum SQLiteValue {
    case int(Int64)
    case text(String)
    /// UTF-8 text given as bytes (stored as TEXT).
    case bytes([UInt8])
}

extension SQLiteValue: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral {
    init(integerLiteral value: Int64) { self = .int(value) }
    init(stringLiteral value: String) { self = .text(value) }
}
