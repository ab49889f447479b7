import TaskCore
import TaskGraph

/// One row of a query's result, read by column number (from 0): what a SQLite statement on its
/// current row and a PostgreSQL result's row have in common. The durable stores keep the same
/// records in the same columns, so each record is rebuilt from a row by one piece of code
/// (`StoredRecords+Rows.swift`), whichever database the row came from.
protocol StoreRow {
    func isNull(_ column: Int) -> Bool
    /// An integer column (a PostgreSQL `boolean` reads 0 or 1).
    func int(_ column: Int) -> Int64
    func text(_ column: Int) -> String
    /// The column's bytes, handed to `body` without a copy (valid only inside it).
    func withBytes<R>(_ column: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension StoreRow {
    func optionalInt(_ column: Int) -> Int64? { self.isNull(column) ? nil : self.int(column) }

    func optionalText(_ column: Int) -> String? { self.isNull(column) ? nil : self.text(column) }

    func bool(_ column: Int) -> Bool { self.int(column) != 0 }

    func bytes(_ column: Int) -> [UInt8] { self.withBytes(column) { Array($0) } }

    /// A time stored as Unix milliseconds.
    func timestamp(_ column: Int) -> Timestamp { Timestamp(milliseconds: self.int(column)) }

    func optionalTimestamp(_ column: Int) -> Timestamp? { self.optionalInt(column).map(Timestamp.init(milliseconds:)) }

    /// A JSON column, parsed with the stored records' limits.
    func json(_ column: Int) throws -> JSONValue {
        try self.withBytes(column) { try JSONParser.parse($0, limits: StoredRecords.limits) }
    }

    func optionalJSON(_ column: Int) throws -> JSONValue? {
        // Not `isNull ? nil : json`: `nil` would read as JSON null (`JSONValue` is nil-literal
        // expressible), not as no value.
        guard !self.isNull(column) else { return Optional<JSONValue>.none }
        return try self.json(column)
    }

    /// A task error stored as JSON.
    func optionalError(_ column: Int) throws -> TaskError? {
        try self.optionalJSON(column).flatMap(TaskError.init(json:))
    }
}
