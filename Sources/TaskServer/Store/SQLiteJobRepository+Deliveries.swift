import Logging
import NIOCore
import Synchronization
import TaskCore
import TaskGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The webhook outbox: deliveries are rows written in the same transaction as the events they
// announce, so a delivery is never sent for an event that is not stored, nor lost after a crash.

extension SQLiteJobRepository {

    /// Records an attempt and releases the claim. If the process dies before the commit, the
    /// delivery is still `pending` on disk and is sent again after the restart (at least once).
    public func update(_ delivery: Delivery) -> Future<Void> {
        self.queued { .updateDelivery(delivery, $0) }
    }

    /// Claimed by the writer, in a transaction: no two claims take the same delivery.
    public func claimDue(at now: Timestamp, limit: Int) -> Future<(deliveries: [Delivery], next: Timestamp?)> {
        self.queued { .claimDeliveries(now, limit, $0) }
    }

    /// Selects and claims (under the writer's transaction) up to `limit` due deliveries.
    func writeClaim(at now: Timestamp, limit: Int) throws -> (deliveries: [Delivery], next: Timestamp?) {
        let db = self.writer
        // Through the partial index `deliveries_due` (schema 6).
        let rows = try db.prepared(
            "SELECT id, job_id, seq, event_type, url, headers, secret, body, state, attempts, next_attempt_at, retry, created_at FROM deliveries WHERE state = 'pending' AND claimed = 0 AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?"
        ).bind(.int(now.milliseconds), .int(Int64(limit)))
        var found: [Delivery] = []
        var ids: [String] = []
        while try rows.step() {
            ids.append(rows.text(0))
            if let delivery = try StoredRecords.delivery(rows) { found.append(delivery) }
        }
        rows.reset()
        let claim = try db.prepared("UPDATE deliveries SET claimed = 1 WHERE id = ?")
        for id in ids {
            try claim.bind(.text(id)).run()
            claim.reset()
        }
        let next = try db.prepared(
            "SELECT min(next_attempt_at) FROM deliveries WHERE state = 'pending' AND claimed = 0 AND next_attempt_at > ?"
        ).bind(.int(now.milliseconds))
        var nextDue: Timestamp?
        if try next.step(), !next.isNull(0) { nextDue = Timestamp(milliseconds: next.int(0)) }
        next.reset()
        return (found, nextDue)
    }

    public func deliveries(jobID: String) -> Future<[Delivery]> {
        self.read { db in
            let rows = try db.prepared(
                "SELECT id, job_id, seq, event_type, url, headers, secret, body, state, attempts, next_attempt_at, retry, created_at FROM deliveries WHERE job_id = ? ORDER BY seq, id"
            ).bind(.text(jobID))
            var found: [Delivery] = []
            while try rows.step() { if let delivery = try StoredRecords.delivery(rows) { found.append(delivery) } }
            rows.reset()
            return found
        }
    }

    func writeDelivery(_ delivery: Delivery) throws {
        let columns = StoredRecords.deliveryColumns(delivery)
        try self.writer.prepared(
            """
            INSERT OR IGNORE INTO deliveries (id, job_id, seq, event_type, url, headers, secret, body, state, attempts, next_attempt_at, retry, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        ).bind(
            .text(delivery.id),
            .text(delivery.jobID),
            .int(Int64(delivery.seq)),
            .text(delivery.eventType.rawValue),
            .text(delivery.url),
            .text(columns.headers),
            .text(delivery.secret.storageText),
            .bytes(delivery.body),
            .text(delivery.state.rawValue),
            .text(columns.attempts),
            .int(delivery.nextAttemptAt.milliseconds),
            .text(columns.retry),
            .int(delivery.createdAt.milliseconds)
        ).run()
    }
}
