/// Why a store could not do what it was asked, in store terms.
///
/// The HTTP layer decides how each answers a client (`HTTP/HTTPResponseError.swift`); the store never
/// speaks HTTP, so another store (PostgreSQL) is an addition behind the same seam.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case busy
        case writeFailed
        case readFailed
        case unavailable
        case ownerUnavailable
        case notYetDurable
    }

    private let code: Code

    private init(_ code: Code) { self.code = code }

    /// The store is behind on writes and refuses new work rather than queue it without bound.
    public static let busy = StoreError(.busy)
    /// A transaction failed and rolled back: nothing it carried is stored.
    public static let writeFailed = StoreError(.writeFailed)
    /// A read failed (the cause is logged by the store).
    public static let readFailed = StoreError(.readFailed)
    /// The database cannot be reached (PostgreSQL restarting, the network down): nothing was
    /// written; the store reconnects by itself.
    public static let unavailable = StoreError(.unavailable)
    /// A command for a job another server runs had no answer in time (that server died, and the
    /// job is not taken over yet).
    public static let ownerUnavailable = StoreError(.ownerUnavailable)
    /// A change is not committed yet, after `DurableWait.bound`: the store cannot commit now (the
    /// database away, a disk full, a commit refused). It is kept, and commits once the store can.
    public static let notYetDurable = StoreError(.notYetDurable)

    /// A short, stable name, safe as a log or metric label.
    public var description: String {
        switch self.code {
        case .busy: "store.busy"
        case .writeFailed: "store.writeFailed"
        case .readFailed: "store.readFailed"
        case .unavailable: "store.unavailable"
        case .ownerUnavailable: "store.ownerUnavailable"
        case .notYetDurable: "store.notYetDurable"
        }
    }
}
